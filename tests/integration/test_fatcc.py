"""The cosmocc stand-in honours cosmocc's fat-driver contract, with the real gcc and aarch64 gcc."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import lief
import pytest

from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR, runnable_argv

COSMOCC = str(SHIM_DIR / "bin" / "cosmocc")
COSMOCXX = str(SHIM_DIR / "bin" / "cosmoc++")
AR = str(SHIM_DIR / "bin" / "ar.ape")  # shebang-less, as an APE: started through sh (runnable_argv)


def run(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(runnable_argv(list(argv)), cwd=cwd, capture_output=True, text=True)


def machine(path: Path) -> lief.ELF.ARCH:
    return lief.ELF.parse(str(path)).header.machine_type


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_compile_writes_x86_64_object_and_aarch64_twin(tmp_path: Path) -> None:
    write(tmp_path / "foo.c", "int foo(void) { return 42; }\n")
    proc = run(COSMOCC, "-O2", "-c", "-o", "obj/foo.o", "foo.c", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert machine(tmp_path / "obj/foo.o") == lief.ELF.ARCH.X86_64
    assert machine(tmp_path / "obj/.aarch64/foo.o") == lief.ELF.ARCH.AARCH64


def test_without_output_the_object_lands_in_the_current_directory(tmp_path: Path) -> None:
    write(tmp_path / "src/bar.c", "int bar;\n")
    assert run(COSMOCC, "-c", "src/bar.c", cwd=tmp_path).returncode == 0
    assert (tmp_path / "bar.o").is_file() and (tmp_path / ".aarch64/bar.o").is_file()


def test_dep_files_follow_cosmocc_names(tmp_path: Path) -> None:
    write(tmp_path / "inc.h", "#define N 1\n")
    write(tmp_path / "a.c", '#include "inc.h"\nint a = N;\n')
    assert run(COSMOCC, "-MMD", "-MF", "d/a.o.dep", "-c", "-o", "o/a.o", "a.c", cwd=tmp_path).returncode == 0
    assert "inc.h" in (tmp_path / "d/a.o.dep").read_text()
    assert "inc.h" in (tmp_path / "d/.aarch64/a.o.dep").read_text()
    assert run(COSMOCC, "-MMD", "-c", "-o", "p/a.o", "a.c", cwd=tmp_path).returncode == 0
    assert (tmp_path / "p/a.o.d").is_file() and (tmp_path / "p/.aarch64/a.o.d").is_file()


def test_per_arch_flags_reach_one_compiler_and_cosmo_macros_are_defined(tmp_path: Path) -> None:
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
    proc = run(COSMOCC, "-mcosmo", "-Xx86_64-DONLY_X86", "-Xaarch64-DONLY_ARM", "-c", "-o", "arch.o", "arch.c",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_an_aarch64_only_failure_is_reported_and_fails(tmp_path: Path) -> None:
    write(tmp_path / "half.c", "#ifdef __aarch64__\n#error no\n#endif\nint x;\n")
    proc = run(COSMOCC, "-c", "-o", "half.o", "half.c", cwd=tmp_path)
    assert proc.returncode != 0
    assert "x86_64 succeeded but aarch64 failed to build object" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["-shared", "-o", "x.so", "x.c"], "-shared"),
    (["-S", "x.c"], "-S"),
    (["-march=native", "-c", "x.c"], "-march=native"),
    (["-c", "-DA=a b", "x.c"], "contains a space"),
    (["-c", "x.s"], "x.s"),
    (["-o", "prog", "lib.so"], "lib.so"),
])
def test_refusals_match_cosmocc(tmp_path: Path, args: list[str], message: str) -> None:
    write(tmp_path / "x.c", "int x;\n")
    proc = run(COSMOCC, *args, cwd=tmp_path)
    assert proc.returncode == 1
    assert message in proc.stderr and "fatal error" in proc.stderr


def test_tmpdir_with_a_space_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "x.c", "int x;\n")
    proc = subprocess.run([COSMOCC, "-c", "x.c"], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, TMPDIR=str(tmp_path / "a b")))
    assert proc.returncode == 1 and "TMPDIR" in proc.stderr


def test_preprocessing_uses_the_x86_64_compiler_only(tmp_path: Path) -> None:
    write(tmp_path / "p.c", "ARCH __x86_64__ X86FLAG\n")
    proc = run(COSMOCC, "-E", "-Xx86_64-DX86FLAG=yes", "-Xaarch64-DX86FLAG=no", "p.c", cwd=tmp_path)
    assert proc.returncode == 0
    assert "ARCH 1 yes" in proc.stdout


def test_link_needs_every_twin_and_writes_both_elfs(tmp_path: Path) -> None:
    write(tmp_path / "main.c", '#include <stdio.h>\nint lib(void);\nint main(void) { printf("%d\\n", lib()); }\n')
    write(tmp_path / "lib.c", "int lib(void) { return 7; }\n")
    for name in ("main", "lib"):
        assert run(COSMOCC, "-c", "-o", f"o/{name}.o", f"{name}.c", cwd=tmp_path).returncode == 0
    assert run(AR, "rcsD", "o/lib.a", "o/lib.o", cwd=tmp_path).returncode == 0
    assert run(AR, "rcsD", "o/.aarch64/lib.a", "o/.aarch64/lib.o", cwd=tmp_path).returncode == 0
    proc = run(COSMOCC, "-o", "o/prog", "o/main.o", "o/lib.a", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert machine(tmp_path / "o/prog.com.dbg") == lief.ELF.ARCH.X86_64
    assert machine(tmp_path / "o/prog.aarch64.elf") == lief.ELF.ARCH.AARCH64
    assert run(str(tmp_path / "o/prog"), cwd=tmp_path).stdout == "7\n"
    (tmp_path / "o/.aarch64/main.o").unlink()
    proc = run(COSMOCC, "-o", "o/prog2", "o/main.o", "o/lib.a", cwd=tmp_path)
    assert proc.returncode == 1 and "missing concomitant o/.aarch64/main.o" in proc.stderr


def test_aarch64_archive_uses_the_aarch64_archiver(tmp_path: Path) -> None:
    write(tmp_path / "s.c", "int sym_in_archive(void) { return 1; }\n")
    assert run(COSMOCC, "-c", "-o", "s.o", "s.c", cwd=tmp_path).returncode == 0
    assert run(AR, "rcsD", ".aarch64/s.a", ".aarch64/s.o", cwd=tmp_path).returncode == 0
    index = run("aarch64-linux-gnu-nm", "--print-armap", ".aarch64/s.a", cwd=tmp_path).stdout
    assert "sym_in_archive in s.o" in index
