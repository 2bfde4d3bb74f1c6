"""cosmocc's fat-driver contract, checked on the stand-in (gcc and aarch64 gcc) and, where OPENCOTI_REAL_COSMOCC
names one, on a real cosmocc: the same assertions hold for both, so the fast tiers test what the real driver does."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import lief
import pytest

from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR, runnable_argv
from opencoti_build.tree.portcosmo import lower_switches

from real_cosmocc import real_cosmocc, skip_line


@dataclass(frozen=True)
class Driver:
    cc: str
    ar: str  # shebang-less in both, as an APE: started through sh (runnable_argv)


@pytest.fixture(params=["stand-in", "cosmocc"])
def driver(request: pytest.FixtureRequest) -> Driver:
    if request.param == "stand-in":
        bin_dir = SHIM_DIR / "bin"
    else:
        root = real_cosmocc()
        if root is None:
            pytest.skip(skip_line())
        bin_dir = root / "bin"
    return Driver(str(bin_dir / "cosmocc"), str(bin_dir / "ar.ape"))


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(runnable_argv(list(argv)), cwd=cwd, capture_output=True, text=True)


def machine(path: Path) -> lief.ELF.ARCH:
    return lief.ELF.parse(str(path)).header.machine_type


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_compile_writes_x86_64_object_and_aarch64_twin(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "foo.c", "int foo(void) { return 42; }\n")
    proc = run(driver.cc, "-O2", "-c", "-o", "obj/foo.o", "foo.c", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert machine(tmp_path / "obj/foo.o") == lief.ELF.ARCH.X86_64
    assert machine(tmp_path / "obj/.aarch64/foo.o") == lief.ELF.ARCH.AARCH64


def test_without_output_the_object_lands_in_the_current_directory(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "src/bar.c", "int bar;\n")
    assert run(driver.cc, "-c", "src/bar.c", cwd=tmp_path).returncode == 0
    assert (tmp_path / "bar.o").is_file() and (tmp_path / ".aarch64/bar.o").is_file()


def test_dep_files_follow_cosmocc_names(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "inc.h", "#define N 1\n")
    write(tmp_path / "a.c", '#include "inc.h"\nint a = N;\n')
    assert run(driver.cc, "-MMD", "-MF", "d/a.o.dep", "-c", "-o", "o/a.o", "a.c", cwd=tmp_path).returncode == 0
    assert "inc.h" in (tmp_path / "d/a.o.dep").read_text()
    assert "inc.h" in (tmp_path / "d/.aarch64/a.o.dep").read_text()
    assert run(driver.cc, "-MMD", "-c", "-o", "p/a.o", "a.c", cwd=tmp_path).returncode == 0
    assert (tmp_path / "p/a.o.d").is_file() and (tmp_path / "p/.aarch64/a.o.d").is_file()


def test_per_arch_flags_reach_one_compiler_and_cosmo_macros_are_defined(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "arch.c", """
#if !defined(__COSMOPOLITAN__) || !defined(__COSMOCC__) || !defined(__FATCOSMOCC__) || !defined(_COSMO_SOURCE)
#error cosmocc macros missing
#endif
#if defined(__x86_64__) && (!defined(ONLY_X86) || defined(ONLY_ARM))
#error x86-64 got the wrong per-arch flags
#endif
#if defined(__aarch64__) && (!defined(ONLY_ARM) || defined(ONLY_X86))
#error aarch64 got the wrong per-arch flags
#endif
int ok;
""")
    proc = run(driver.cc, "-mcosmo", "-Xx86_64-DONLY_X86", "-Xaarch64-DONLY_ARM", "-c", "-o", "arch.o", "arch.c",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_a_cosmopolitan_compile_is_no_linux_compile(tmp_path: Path, driver: Driver) -> None:
    """cosmocc's normalize.inc undefines the Linux macros: `#ifdef __linux__` code is not compiled, on either half."""
    write(tmp_path / "os.c", "#if defined(__linux__) || defined(__linux) || defined(linux) || defined(__gnu_linux__)\n"
                             "#error a Linux compile\n#endif\nint ok;\n")
    proc = run(driver.cc, "-c", "-o", "os.o", "os.c", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


ERRNO_PROGRAM = """#include <errno.h>
#include <stdio.h>
static const char *d(int r) {
    switch (r) {
    case EINVAL: return "inval";
    case ENOMEM: break;
    default: return "other";
    }
    return "nomem";
}
int main(void) { int v[] = {EINVAL, ENOMEM, EPERM, 0}; for (int i = 0; i < 4; i++) puts(d(v[i])); return 0; }
"""


def test_a_switch_over_errno_values_lowered_as_portcosmo_does_compiles_and_keeps_its_meaning(
        tmp_path: Path, driver: Driver) -> None:
    """cosmopolitan's errno values are no constants: the original needs -fportcosmo (which the real driver's stock
    compilers lack), the lowered copy the build compiles instead (opencoti_build.tree.portcosmo) does not."""
    write(tmp_path / "original.c", ERRNO_PROGRAM)
    write(tmp_path / "lowered.c", lower_switches(ERRNO_PROGRAM, cxx=False))
    proc = run(driver.cc, "-O2", "-o", "lowered", "lowered.c", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert run(str(tmp_path / "lowered"), cwd=tmp_path).stdout == "inval\nnomem\nother\nother\n"
    original = run(driver.cc, "-c", "-o", "original.o", "original.c", cwd=tmp_path)
    assert (original.returncode == 0) == (driver.cc.startswith(str(SHIM_DIR))), original.stderr  # glibc's are constants


def test_an_aarch64_only_failure_is_reported_and_fails(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "half.c", "#ifdef __aarch64__\n#error no\n#endif\nint x;\n")
    proc = run(driver.cc, "-c", "-o", "half.o", "half.c", cwd=tmp_path)
    assert proc.returncode != 0
    assert "x86_64 succeeded but aarch64 failed to build object" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["-shared", "-o", "x.so", "x.c"], "-shared"),
    (["-S", "x.c"], "-S"),
    (["-march=native", "-c", "x.c"], "-march=native"),
    (["-c", "-DA=a b", "x.c"], "arguments containing spaces unsupported"),
    (["-c", "x.s"], "x.s"),
    (["-o", "prog", "lib.so"], "lib.so"),
])
def test_refusals_match_cosmocc(tmp_path: Path, driver: Driver, args: list[str], message: str) -> None:
    write(tmp_path / "x.c", "int x;\n")
    proc = run(driver.cc, *args, cwd=tmp_path)
    assert proc.returncode == 1
    assert message in proc.stderr and "fatal error" in proc.stderr


def test_tmpdir_with_a_space_is_refused(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "x.c", "int x;\n")
    proc = subprocess.run([driver.cc, "-c", "x.c"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmp_path / "a b")))
    assert proc.returncode == 1 and "TMPDIR" in proc.stderr


def test_preprocessing_sees_neither_architecture(tmp_path: Path, driver: Driver) -> None:
    """-E runs the x86-64 compiler without its CPU and Linux macros and without either arch's -X flags."""
    write(tmp_path / "p.c", "ARCH __x86_64__ __linux__ X86FLAG COMMON\n")
    proc = run(driver.cc, "-E", "-DCOMMON=both", "-Xx86_64-DX86FLAG=yes", "-Xaarch64-DX86FLAG=no", "p.c", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ARCH __x86_64__ __linux__ X86FLAG both" in proc.stdout


def test_link_needs_every_twin_and_writes_both_elfs(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "main.c", '#include <stdio.h>\nint lib(void);\nint main(void) { printf("%d\\n", lib()); }\n')
    write(tmp_path / "lib.c", "int lib(void) { return 7; }\n")
    for name in ("main", "lib"):
        assert run(driver.cc, "-c", "-o", f"o/{name}.o", f"{name}.c", cwd=tmp_path).returncode == 0
    assert run(driver.ar, "rcsD", "o/lib.a", "o/lib.o", cwd=tmp_path).returncode == 0
    assert run(driver.ar, "rcsD", "o/.aarch64/lib.a", "o/.aarch64/lib.o", cwd=tmp_path).returncode == 0
    proc = run(driver.cc, "-o", "o/prog", "o/main.o", "o/lib.a", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert machine(tmp_path / "o/prog.com.dbg") == lief.ELF.ARCH.X86_64
    assert machine(tmp_path / "o/prog.aarch64.elf") == lief.ELF.ARCH.AARCH64
    assert run(str(tmp_path / "o/prog"), cwd=tmp_path).stdout == "7\n"
    (tmp_path / "o/.aarch64/main.o").unlink()
    proc = run(driver.cc, "-o", "o/prog2", "o/main.o", "o/lib.a", cwd=tmp_path)
    assert proc.returncode == 1 and "o/main.o: linker input missing concomitant o/.aarch64/main.o file" in proc.stderr


def test_aarch64_archive_uses_the_aarch64_archiver(tmp_path: Path, driver: Driver) -> None:
    write(tmp_path / "s.c", "int sym_in_archive(void) { return 1; }\n")
    assert run(driver.cc, "-c", "-o", "s.o", "s.c", cwd=tmp_path).returncode == 0
    assert run(driver.ar, "rcsD", ".aarch64/s.a", ".aarch64/s.o", cwd=tmp_path).returncode == 0
    index = run("aarch64-linux-gnu-nm", "--print-armap", ".aarch64/s.a", cwd=tmp_path).stdout
    assert "sym_in_archive in s.o" in index
