"""What a newcomer sees first, through the real scons on the miniature tree: a dry run writes nothing and says what
a build would do, a refused build leaves nothing behind, and the toolchain and web-UI lines are said when they change,
not on every run."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from opencoti_build.report import summary

from scons_runs import MINI_TREE, scons

TOOLCHAIN = "toolchain: cosmocc stand-in"
WEBUI = "NOTE: web UI off"


def written(root: Path) -> list[str]:
    """Everything under ``root`` but the HOME the test harness makes for each run."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_relative_to(root / "home"))


def step_lines(proc) -> list[str]:
    return [line.split("] ", 1)[1] for line in proc.stdout.splitlines() if summary.PROGRESS.match(line)]


def said(proc, prefix: str) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith(prefix)]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(MINI_TREE, src)
    return src


def test_a_dry_run_writes_nothing_and_says_what_a_build_would_do(tmp_path: Path, tree: Path) -> None:
    root = tmp_path / "b"
    dry = scons("-n", f"SRC={tree}", build=root)
    assert dry.stdout.splitlines()[-1] == ("would compile 50, restore 0 from cache, 0 up to date "
                                           "(dry run: nothing was written)")
    assert written(root) == []  # no BUILD_DIR, no cache, no lock, no compile database

    cold = scons(f"SRC={tree}", build=root)
    assert summary.parse(cold.stdout)["compiled"] == 50
    source = tree / "llamafile" / "llamafile.c"
    source.write_text(source.read_text() + "\nint dry_run_probe;\n")
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    again = scons("-n", f"SRC={tree}", build=root)
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == before  # nothing written
    # the TU and what is made from it: its archive, the link and the zip store (as `make -n` lists them: a step
    # whose input comes out byte-identical is then found current by the build, never the other way round)
    assert again.stdout.splitlines()[-1] == ("would compile 4, restore 0 from cache, 46 up to date "
                                             "(dry run: nothing was written)")
    built = scons(f"SRC={tree}", build=root)
    assert 1 <= summary.parse(built.stdout)["compiled"] <= 4
    assert set(step_lines(built)) <= set(step_lines(again)) and len(step_lines(again)) == 4


def everything(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root``, directories included, with its type, size and mtime: what a run that writes
    nothing leaves exactly as it was."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in root.rglob("*")}


@pytest.mark.skipif(not (shutil.which("hipcc") or Path("/opt/rocm/bin/hipcc").exists()),
                    reason="the ROCm toolchain's probe is what wrote (hipcc not installed)")
def test_a_dry_run_of_the_backends_writes_nothing_in_a_build_dir_a_run_left(tmp_path: Path, tree: Path) -> None:
    root = tmp_path / "b"
    scons("-c", f"SRC={tree}", build=root)  # BUILD_DIR as any run leaves it: its scratch dir, the signatures, the lock
    assert (root / "out" / "tmp").is_dir()
    before = everything(root)
    dry = scons("-n", f"SRC={tree}", "rocm", build=root)  # probes hipcc: clang -### made BUILD_DIR/tmp/null-*
    assert dry.stdout.splitlines()[-1].endswith("(dry run: nothing was written)"), dry.stdout
    assert everything(root) == before


@pytest.mark.parametrize("args, message", [
    (("SRC={missing}",), "no llamafile source tree at {missing}"),
    (("SRC={tree}", "cuda", "CUDA_ARCHS=sm_bogus"), "CUDA_ARCHS"),
    (("SRC={tree}", "package", "CPU_ONLY=1", "MODEL={missing}.gguf"), "MODEL="),
])
def test_a_refused_build_leaves_nothing_behind(tmp_path: Path, tree: Path, args: tuple[str, ...], message: str) -> None:
    root = tmp_path / "b"
    names = {"missing": str(tmp_path / "nowhere"), "tree": str(tree)}
    proc = scons(*(a.format(**names) for a in args), build=root, check=False)
    assert proc.returncode == 2 and message.format(**names) in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.count("scons: error: ") == 1 and "Traceback" not in proc.stderr
    assert written(root) == []  # not BUILD_DIR/.lock, BUILD_DIR/tmp, nor the cache's config


def test_the_toolchain_and_web_ui_lines_are_said_when_they_change(tmp_path: Path, tree: Path) -> None:
    root = tmp_path / "b"
    first = scons(f"SRC={tree}", build=root)
    assert len(said(first, TOOLCHAIN)) == 1 and len(said(first, WEBUI)) == 1
    null = scons(f"SRC={tree}", build=root)  # the null build's fast path
    (tree / "llamafile" / "llamafile.c").write_text((tree / "llamafile" / "llamafile.c").read_text() + "\nint x1;\n")
    edit = scons(f"SRC={tree}", build=root)  # a full run: reads the SConscripts again
    for proc in (null, edit):
        assert said(proc, TOOLCHAIN) == [] and said(proc, WEBUI) == [], proc.stdout
    assert len(null.stdout.splitlines()) == 1 and summary.parse(null.stdout)["current"] == 50  # only the summary
    verbose = scons(f"SRC={tree}", "VERBOSE=1", build=root)
    assert len(said(verbose, TOOLCHAIN)) == 1 and len(said(verbose, WEBUI)) == 1
    (tree / "llama.cpp/tools/server/public").mkdir(parents=True, exist_ok=True)
    for asset in ("index.html", "bundle.js", "bundle.css", "loading.html"):
        (tree / "llama.cpp/tools/server/public" / asset).write_text(f"<!-- {asset} -->\n")
    ui = scons(f"SRC={tree}", build=root)  # the UI is in now: the toolchain line has not changed
    assert said(ui, TOOLCHAIN) == [] and said(ui, WEBUI) == []
    for asset in ("index.html", "bundle.js", "bundle.css", "loading.html"):
        (tree / "llama.cpp/tools/server/public" / asset).unlink()
    off = scons(f"SRC={tree}", build=root)  # off again: said again
    assert said(off, TOOLCHAIN) == [] and len(said(off, WEBUI)) == 1


def test_a_gpu_toolchain_that_is_missing_or_lacking_is_said_once_per_change(tmp_path: Path, tree: Path) -> None:
    """On a stock machine every run that reads the backends (compiledb, compile FILE=, package) used to repeat the
    same WARN lines: CUDA without a driver stub, a ROCm that cannot build 5 of upstream's targets, a backend with no
    toolchain. They are said as the toolchain line is: once, then when they change or with VERBOSE=1."""
    root = tmp_path / "b"

    def warns(proc) -> list[str]:
        return [line for line in proc.stderr.splitlines() if line.startswith("WARN: ")]

    first = scons(f"SRC={tree}", "compiledb", build=root)
    if shutil.which("hipcc") or Path("/opt/rocm/bin/hipcc").exists():  # Debian's hipcc 5.2 drops gfx942, gfx110x
        assert any(line.startswith("WARN: rocm: skipping gfx") for line in warns(first)), first.stderr
    again = scons(f"SRC={tree}", "compiledb", "--debug=explain", build=root)  # a full reading, not the fast path
    assert warns(again) == [], again.stderr
    verbose = scons(f"SRC={tree}", "compiledb", "VERBOSE=1", build=root)
    assert warns(verbose) == warns(first)
