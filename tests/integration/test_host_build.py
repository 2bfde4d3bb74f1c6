"""The host build of the miniature tree: real fat compiles, twins, runs, and the SCons graph."""
from __future__ import annotations

import filecmp
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import lief

from opencoti_build.report import summary

from fat_support import compiler_dependencies, recorded_dependencies
from scons_runs import MINI_TREE, MINI_VERSION, PROJECT, compiled, scons, scons_command

BINARY = "out/o/llamafile/llamafile"


def objects(build: Path) -> list[Path]:
    return sorted(p for p in (build / "out/o").rglob("*.o") if ".aarch64" not in p.parts)


def twin(path: Path) -> Path:
    return path.parent / ".aarch64" / path.name


def test_every_object_has_an_aarch64_twin(built_mini: Path) -> None:
    objs = objects(built_mini)
    assert len(objs) >= 30
    for obj in objs:
        assert lief.ELF.parse(str(obj)).header.machine_type == lief.ELF.ARCH.X86_64, obj
        assert lief.ELF.parse(str(twin(obj))).header.machine_type == lief.ELF.ARCH.AARCH64, obj
    # ggml.c beside ggml.cpp: the extension stays in the object name, so they cannot collide
    src = built_mini / "out/o/llama.cpp/ggml/src"
    assert (src / "ggml.c.o").is_file() and (src / "ggml.cpp.o").is_file()


def test_the_program_runs_on_both_architectures(built_mini: Path) -> None:
    binary = built_mini / BINARY
    assert subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout == "llamafile v0.10.3\n"
    arm = Path(str(binary) + ".aarch64.elf")
    assert lief.ELF.parse(str(arm)).header.machine_type == lief.ELF.ARCH.AARCH64
    out = subprocess.run(["qemu-aarch64", str(arm)], capture_output=True, text=True, timeout=60).stdout
    assert out == "llama ggml 1, sgemm 1 2 3 4, keyword(1)\n"  # the arm82 TinyBLAS kernel ran
    # build-info.cpp is generated from the tree's template, reproducibly (no clock), as upstream's BUILD.mk values
    info = subprocess.run([str(binary), "--build-info"], capture_output=True, text=True).stdout
    assert info == "build 0 (unknown) with cosmocc for cosmopolitan\n"
    served = subprocess.run([str(binary), "--server", "-m", "m.gguf", "--slot-initial-ctx", "4096"],
                            capture_output=True, text=True).stdout
    assert "initial=4096" in served


def test_variant_kernels_get_their_own_target_arch(built_mini: Path) -> None:
    # The fixture's variant kernels #error unless their ISA macros are defined, and the dispatcher
    # #errors if they are: that the build succeeded proves the flags; the entries show them.
    flags = {Path(e["file"]).name: e["arguments"] for e in fat_entries(built_mini)}
    assert "-mavx512bf16" in flags["tinyblas_cpu_sgemm_amd_zen4.cpp"]
    assert "-mtune=znver3" in flags["tinyblas_cpu_sgemm_amd_zen4.cpp"]  # appended to the build's TARGET_ARCH
    assert "-mavx2" in flags["tinyblas_cpu_sgemm_amd_avx2.cpp"]
    assert not any(a.startswith("-mavx") for a in flags["sgemm.cpp"])


def test_null_build_compiles_nothing(built_mini: Path) -> None:
    proc = scons(f"SRC={MINI_TREE}", build=built_mini)
    assert compiled(proc) == []
    # only the summary: the toolchain line was said by the build that first used it (tests/integration/test_newcomer.py)
    # (the fixture's other runs rewrote the compile database: its line is a step's, not a message)
    said = [line for line in proc.stdout.splitlines() if not line.startswith("COMPILEDB ")]
    assert said == [f"0 compiled, 0 from cache, {summary.parse(proc.stdout)['current']} up to date in "
                    f"{proc.stdout.split(' in ')[-1].strip()}"]


def fat_entries(build: Path) -> list[dict]:
    """compile_commands.json entries of the host's fat objects (GPU backends add their own)."""
    scons(f"SRC={MINI_TREE}", "compiledb", build=build)
    entries = json.loads((build / "compile_commands.json").read_text())
    return [e for e in entries if e["output"].startswith(str(build / "out/o") + "/")]


def test_scons_records_exactly_the_headers_gcc_reports(built_mini: Path) -> None:
    entries = fat_entries(built_mini)
    assert len(entries) == len(objects(built_mini))
    compared = 0
    for entry in entries:
        recorded = recorded_dependencies(built_mini / "out", Path(entry["output"]))
        # -MM leaves out headers found through -isystem; SCons tracks those too (-M's view).
        assert compiler_dependencies(entry, "-MM", MINI_TREE) <= recorded, entry["file"]
        assert recorded == compiler_dependencies(entry, "-M", MINI_TREE), entry["file"]
        compared += bool(recorded)
    assert compared >= 25


def test_compile_commands_are_the_x86_64_half_and_compile_as_they_are(built_mini: Path) -> None:
    for entry in fat_entries(built_mini):
        argv = entry["arguments"]
        assert argv[0] in ("gcc", "g++") and not any(a.startswith(("-Xx86_64", "-Xaarch64")) for a in argv)
        assert "-mtune=znver3" in argv and "-D__COSMOPOLITAN__" in argv
        check = argv[: argv.index("-c")] + ["-fsyntax-only", entry["file"]]
        assert subprocess.run(check, cwd=entry["directory"]).returncode == 0, entry["file"]


def test_header_edit_recompiles_exactly_its_dependents(tree: Path, tmp_path: Path) -> None:
    build = tmp_path / "b"
    scons(f"SRC={tree}", "CACHE_DIR=", build=build)
    header = tree / "llama.cpp/ggml/src/ggml-cpu/vec.h"
    header.touch()
    assert compiled(scons(f"SRC={tree}", "CACHE_DIR=", build=build)) == []  # same bytes: nothing
    header.write_text(header.read_text() + "#define OPENCOTI_EDITED 1\n")  # code: a comment compiles nothing
    rebuilt = compiled(scons(f"SRC={tree}", "CACHE_DIR=", build=build))
    o = str(build / "out/o/llama.cpp/ggml/src/ggml-cpu")
    assert rebuilt == [f"{o}/ggml-cpu.c.o", f"{o}/vec.cpp.o"]
    for obj in rebuilt:
        assert twin(Path(obj)).stat().st_mtime_ns >= header.stat().st_mtime_ns


def test_an_aarch64_only_edit_relinks_the_aarch64_program(tree: Path, tmp_path: Path) -> None:
    build = tmp_path / "b"
    scons(f"SRC={tree}", "CACHE_DIR=", build=build)
    obj = build / "out/o/llamafile/main.cpp.o"
    x86_before = obj.read_bytes()
    main = tree / "llamafile/main.cpp"
    # appended, so the x86-64 half compiles to the same bytes: only the .aarch64 twin changes
    main.write_text(main.read_text() + '#ifdef __aarch64__\n__attribute__((constructor)) static void arm_only() '
                    '{ puts("arm-only edit"); }\n#endif\n')
    proc = scons(f"SRC={tree}", "CACHE_DIR=", build=build)
    assert compiled(proc) == [str(obj)] and obj.read_bytes() == x86_before
    arm = subprocess.run(["qemu-aarch64", str(build / BINARY) + ".aarch64.elf"], capture_output=True, text=True,
                         timeout=60).stdout
    assert arm.splitlines()[0] == "arm-only edit", proc.stdout
    x86 = subprocess.run([str(build / BINARY)], capture_output=True, text=True).stdout
    assert "arm-only edit" not in x86


def test_inc_fragment_edit_recompiles_its_includer(tree: Path, tmp_path: Path) -> None:
    build = tmp_path / "b"
    scons(f"SRC={tree}", "CACHE_DIR=", build=build)
    inc = tree / "llama.cpp/ggml/src/ggml-cpu/unary-ops.inc"
    inc.write_text(inc.read_text() + "UNARY_OP(sq, x * x)\n")
    assert compiled(scons(f"SRC={tree}", "CACHE_DIR=", build=build)) == [
        str(build / "out/o/llama.cpp/ggml/src/ggml-cpu/ops.cpp.o")]


def test_changing_one_groups_flags_recompiles_that_group_only(tree: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(  # not .venv: scripts/install-deps' Python
        "build", "dist", ".opencoti", ".git", "tests", "__pycache__", "vendors", ".venv", ".*_cache"))
    shutil.copytree(PROJECT / "vendors", project / "vendors", ignore=shutil.ignore_patterns("sources", "dist"))
    build = tmp_path / "b"
    scons(f"SRC={tree}", "CACHE_DIR=", build=build, project=project)
    description = project / "site_scons/opencoti_build/tree/sources.py"
    text = description.read_text()
    marker = 'name="common",'
    assert marker in text
    description.write_text(text.replace(marker, marker + ' flags=("-fopenmp", "-DCOMMON_TUNED"),', 1)
                           .replace('    defines=LLAMA_DEFINES + ("LLAMA_USE_HTTPLIB",),\n    flags=("-fopenmp",),\n'
                                    '    per_file=(\n        FileFlags(f"{LLAMA}/common/arg.cpp"',
                                    '    defines=LLAMA_DEFINES + ("LLAMA_USE_HTTPLIB",),\n    per_file=(\n'
                                    '        FileFlags(f"{LLAMA}/common/arg.cpp"', 1))
    rebuilt = compiled(scons(f"SRC={tree}", "CACHE_DIR=", build=build, project=project))
    common = build / "out/o/llama.cpp/common"
    # the group's TUs, its generated build-info.cpp among them, and nothing else
    assert rebuilt == sorted([str(common / f"{n}.cpp.o") for n in ("arg", "common", "log")]
                             + [str(build / "out/o/gen/build-info.cpp.o")])


def test_warm_cache_restores_every_twin_with_zero_compiles(tmp_path: Path) -> None:
    build = tmp_path / "b"
    first = scons(f"SRC={MINI_TREE}", build=build)
    assert compiled(first)
    shutil.rmtree(build / "out")  # wipe the build output, keep the cache
    again = scons(f"SRC={MINI_TREE}", build=build)
    assert compiled(again) == []
    restored = [line for line in summary.unprefixed(again.stdout) if line.startswith("CACHED ")]
    assert len(restored) == len(set(restored))  # one line per step: a pair is one
    for obj in objects(build):
        assert f"CACHED {obj} (+ .aarch64)" in restored
        assert lief.ELF.parse(str(twin(obj))).header.machine_type == lief.ELF.ARCH.AARCH64
    assert subprocess.run([str(build / BINARY), "--version"], capture_output=True).returncode == 0


def test_cache_debug_logs_every_lookup_and_push_in_scons_format(tmp_path: Path) -> None:
    build, cold_log, warm_log = tmp_path / "b", tmp_path / "cold.log", tmp_path / "warm.log"
    scons(f"SRC={MINI_TREE}", f"--cache-debug={cold_log}", build=build)
    entries = {p.name for p in (build / "cache").rglob("*") if p.is_file() and p.name != "config"}
    pushed = re.findall(r"^CachePush\((.+)\):  pushing to (\w+)$", cold_log.read_text(), re.M)
    assert len(pushed) == len(entries) >= 99 and {key for _, key in pushed} == entries
    assert len(re.findall(r"^CacheRetrieve\(.+\):  \w+ not in cache$", cold_log.read_text(), re.M)) >= 50
    assert all(line.startswith("requests: ") for line in cold_log.read_text().splitlines()[1::2])

    shutil.rmtree(build / "out")
    scons(f"SRC={MINI_TREE}", f"--cache-debug={warm_log}", build=build)
    retrieved = dict(re.findall(r"^CacheRetrieve\((.+)\):  retrieving from (\w+)$", warm_log.read_text(), re.M))
    assert retrieved == dict(pushed)  # every target, twins included, under the key it was pushed with
    assert "CachePush" not in warm_log.read_text()


def test_cache_disable_option_compiles_without_the_cache(tmp_path: Path) -> None:
    build = tmp_path / "b"
    scons(f"SRC={MINI_TREE}", build=build)
    shutil.rmtree(build / "out")
    again = scons(f"SRC={MINI_TREE}", "--cache-disable", build=build)
    assert len(compiled(again)) == len(objects(build))


def test_two_clean_builds_are_byte_identical(built_mini: Path, tmp_path: Path) -> None:
    other = tmp_path / "b"
    scons(f"SRC={MINI_TREE}", "CACHE_DIR=", build=other, env_extra={"SOURCE_DATE_EPOCH": "0"})
    outputs = [p.relative_to(built_mini) for p in (built_mini / "out/o").rglob("*") if p.is_file()]
    assert len(outputs) > 60
    differing = [str(p) for p in outputs if not filecmp.cmp(built_mini / p, other / p, shallow=False)]
    assert differing == []


def test_an_error_in_one_architecture_leaves_neither_half(tree: Path, tmp_path: Path) -> None:
    build = tmp_path / "b"
    source = tree / "llama.cpp/src/llama-vocab.cpp"
    scons(f"SRC={tree}", "CACHE_DIR=", build=build)
    source.write_text("#ifdef __aarch64__\n#error broken on arm\n#endif\n" + source.read_text())
    proc = scons(f"SRC={tree}", "CACHE_DIR=", build=build, check=False)
    assert proc.returncode != 0
    assert "x86_64 succeeded but aarch64 failed to build object" in proc.stderr
    obj = build / "out/o/llama.cpp/src/llama-vocab.cpp.o"
    assert not obj.exists() and not twin(obj).exists()


def test_src_with_shell_metacharacters_builds(tmp_path: Path) -> None:
    odd = tmp_path / "tree;&(x)'\"|<>"
    shutil.copytree(MINI_TREE, odd)
    scons(f"SRC={odd}", "CACHE_DIR=", build=tmp_path / "b")
    binary = tmp_path / "b" / BINARY
    assert subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout == f"llamafile v{MINI_VERSION}\n"
    arm = subprocess.run(["qemu-aarch64", f"{binary}.aarch64.elf"], capture_output=True, text=True, timeout=60).stdout
    assert arm == "llama ggml 1, sgemm 1 2 3 4, keyword(1)\n"


def test_src_with_a_space_is_refused_in_one_line(tmp_path: Path) -> None:
    spaced = tmp_path / "my tree"
    shutil.copytree(MINI_TREE, spaced)
    proc = scons(f"SRC={spaced}", build=tmp_path / "b", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"scons: error: SRC path {spaced} contains a space, which cosmocc refuses in any argument; "
        "move the tree or reach it through a symlink without spaces"]


def test_missing_source_tree_says_where_it_looked_and_how_to_fix(tmp_path: Path) -> None:
    proc = scons(f"SRC={tmp_path / 'nowhere'}", build=tmp_path / "b", check=False)
    assert proc.returncode == 2
    assert f"no llamafile source tree at {tmp_path / 'nowhere'}" in proc.stderr
    assert "SRC=" in proc.stderr


def test_unknown_variable_is_an_error(tmp_path: Path) -> None:
    proc = scons(f"SRC={MINI_TREE}", "CUDA_ARCH=80", build=tmp_path / "b", check=False)
    assert proc.returncode == 2
    assert "unknown variable CUDA_ARCH=80" in proc.stderr


def test_help_lists_targets_and_variables_with_defaults(tmp_path: Path) -> None:
    out = scons("-h", build=tmp_path / "b").stdout
    for word in ("compiledb", "package", "backends", "apply", "SRC", "COSMOCC", "CACHE_DIR", "CUDA_ARCHS", "MODEL"):
        assert word in out
    assert "default: .opencoti/cache" in out


def test_the_default_environment_probes_for_no_tools(tmp_path: Path) -> None:
    """SConstruct resolves paths through SCons's default environment (Dir, File, Alias, Value) and creates it with no
    tools: SCons's default tool list would search PATH for compilers, linkers and archivers in every run."""
    argv, env = scons_command("-h", build=tmp_path / "b")
    report = ("import atexit, sys; from SCons.Script import DefaultEnvironment; import SCons.Script.Main; "
              "atexit.register(lambda: print('default tools:', DefaultEnvironment()['TOOLS'])); "
              "sys.argv[0] = 'scons'; SCons.Script.Main.main()")
    proc = subprocess.run([sys.executable, "-c", report, *argv[3:]], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "default tools: []"


def test_cosmocc_dir_is_used_when_given_and_checked(tmp_path: Path) -> None:
    from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR

    fake = tmp_path / "cosmocc"
    shutil.copytree(SHIM_DIR, fake / "site_scons/cosmocc_shim", symlinks=True)
    shutil.copytree(SHIM_DIR.parent / "opencoti_build", fake / "site_scons/opencoti_build")
    toolchain = fake / "site_scons/cosmocc_shim"
    proc = scons(f"SRC={MINI_TREE}", f"COSMOCC={toolchain}", "TARGET_ARCH=-Xx86_64-mtune=generic", "CACHE_DIR=",
                 "VERBOSE=1", build=tmp_path / "b")
    assert f"toolchain: cosmocc at {toolchain}" in proc.stdout
    assert f"{toolchain}/bin/cosmoc++ -mcosmo" in proc.stdout and "-Xx86_64-mtune=generic" in proc.stdout
    bad = scons(f"SRC={MINI_TREE}", f"COSMOCC={tmp_path}", build=tmp_path / "c", check=False)
    assert bad.returncode == 2 and "has no executable bin/cosmocc" in bad.stderr


def test_an_edit_in_the_same_second_as_the_recorded_stamp_is_rebuilt(tree: Path, tmp_path: Path) -> None:
    # SCons' own stamps are whole seconds; the build gives it sub-second mtimes (SConstruct).
    import os

    build = tmp_path / "b"
    header = tree / "llama.cpp/ggml/src/ggml-cpu/vec.h"
    os.utime(header, ns=(1_700_000_000_100_000_000,) * 2)
    scons(f"SRC={tree}", "CACHE_DIR=", build=build)
    header.write_text(header.read_text() + "#define OPENCOTI_EDITED_IN_THE_SAME_SECOND 1\n")
    os.utime(header, ns=(1_700_000_000_900_000_000,) * 2)
    rebuilt = compiled(scons(f"SRC={tree}", "CACHE_DIR=", build=build))
    o = str(build / "out/o/llama.cpp/ggml/src/ggml-cpu")
    assert rebuilt == [f"{o}/ggml-cpu.c.o", f"{o}/vec.cpp.o"]
