"""`scons apply`, `scons reset`, and the apply a plain build does first, on generated git checkouts."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scons_runs import PROJECT
from vendored_tree import MINI, diff, file_protocol_env, git, make_tree, mini_contents

FATCC = re.compile(r"^(?:\[\d+/\d+\] )?FATCC (\S+\.o) \(\+ \.aarch64\)$", re.M)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch) -> Path:
    """A folder for one test: the record and the opencoti series (empty) live there, not in the checkout."""
    file_protocol_env(monkeypatch)
    (tmp_path / "series").mkdir()
    return tmp_path


def scons(workdir: Path, src: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "SCons", "-C", str(PROJECT), "-Q", "-j2", "COSMOCC=stand-in",
               f"SRC={src}", f"BUILD_DIR={workdir / 'build'}", "CACHE_DIR=", f"COMPILEDB={workdir / 'compile_commands.json'}",
               f"APPLIED_SERIES={workdir / 'applied-series.json'}", f"PATCH_SERIES={workdir / 'series'}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def record(workdir: Path) -> Path:
    return workdir / "applied-series.json"


OUTER, SUB = mini_contents()


def mini_tree(workdir: Path) -> Path:
    """The miniature tree as a checkout (host/SConscript reads it), with a llamafile patch step."""
    log_cpp = SUB["common/log.cpp"]
    return make_tree(workdir, {
        **OUTER,
        "llama.cpp.patches/llamafile-files/BUILD.mk": "# llamafile's build of llama.cpp\n",
        "llama.cpp.patches/patches/common_log.cpp.patch":
            diff("llama.cpp/common/log.cpp", log_cpp, log_cpp + "// llamafile\n"),
    }, SUB)


def test_scons_apply_a_two_patch_series_then_nothing_to_do(workdir):
    tree = mini_tree(workdir)
    main_cpp, arg_cpp = OUTER["llamafile/main.cpp"], SUB["common/arg.cpp"]
    (workdir / "series/0001-main.patch").write_text(
        diff("llamafile/main.cpp", main_cpp, main_cpp + "// opencoti 0001\n"))
    (workdir / "series/0002-arg.patch").write_text(
        diff("llama.cpp/common/arg.cpp", arg_cpp, arg_cpp + "// opencoti 0002\n"))

    first = scons(workdir, tree, "apply")
    second = scons(workdir, tree, "apply")

    assert first.returncode == 0, first.stderr
    assert re.search(r"^apply: .* 1 llamafile \+ 2 opencoti patches", first.stdout, re.M)
    assert (tree / "llama.cpp/BUILD.mk").is_file()
    assert (tree / "llamafile/main.cpp").read_text().endswith("// opencoti 0001\n")
    assert (tree / "llama.cpp/common/arg.cpp").read_text().endswith("// opencoti 0002\n")
    assert [p["name"] for p in json.loads(record(workdir).read_text())["patches"]] == [
        "common_log.cpp.patch", "0001-main.patch", "0002-arg.patch"]
    assert second.returncode == 0, second.stderr
    assert "nothing to do" in second.stdout


def test_scons_apply_refuses_a_dirty_tree_then_force_discards(workdir):
    tree = mini_tree(workdir)
    (tree / "llamafile/main.cpp").write_text("hand edit\n")

    refused = scons(workdir, tree, "apply")

    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0  # one line
    assert refused.stderr.startswith("scons: error: apply: apply would discard 1 change(s)")
    assert "llamafile/main.cpp" in refused.stderr and "FORCE=1" in refused.stderr
    assert (tree / "llamafile/main.cpp").read_text() == "hand edit\n"

    forced = scons(workdir, tree, "apply", "FORCE=1")

    assert forced.returncode == 0, forced.stderr
    assert "discarded 1 foreign change(s)" in forced.stdout
    assert (tree / "llamafile/main.cpp").read_text() == OUTER["llamafile/main.cpp"]


def test_scons_apply_with_a_conflicting_patch_fails_in_one_line_and_leaves_the_tree_clean(workdir):
    tree = mini_tree(workdir)
    (workdir / "series/0001-conflict.patch").write_text(
        "--- a/llama.cpp/ggml/src/ggml.c\n+++ b/llama.cpp/ggml/src/ggml.c\n"
        "@@ -1,2 +1,2 @@\n #include \"ggml-impl.h\"\n-not upstream\n+ours\n")

    failed = scons(workdir, tree, "apply")

    assert failed.returncode == 2
    assert failed.stderr.strip() == (
        "scons: error: apply: patch opencoti/0001-conflict.patch failed: llama.cpp/ggml/src/ggml.c hunk #1 "
        "(@@ -1,2 +1,2 @@) does not apply; the tree was reset to pristine, rebase the patch on the vendored "
        "tree and apply again"
    )
    assert git(tree, "status", "--porcelain") == "" and git(tree / "llama.cpp", "status", "--porcelain") == ""
    assert not record(workdir).exists()


def test_scons_reset_restores_the_pristine_tree_with_the_guard(workdir):
    tree = mini_tree(workdir)
    assert scons(workdir, tree, "apply").returncode == 0
    (tree / "llama.cpp/common/log.cpp").write_text("hand edit\n")

    refused = scons(workdir, tree, "reset")
    forced = scons(workdir, tree, "reset", "FORCE=1")

    assert refused.returncode == 2 and "llama.cpp/common/log.cpp" in refused.stderr
    assert forced.returncode == 0, forced.stderr
    assert re.search(r"^reset: ", forced.stdout, re.M)
    assert git(tree / "llama.cpp", "status", "--porcelain") == "" and not (tree / "llama.cpp/BUILD.mk").exists()
    assert not record(workdir).exists()


def test_a_plain_build_applies_a_never_patched_tree_first_and_never_resets_edits(workdir):
    tree = mini_tree(workdir)
    up_to_date = str(tree / "llamafile/version.h")  # a target that reads every SConscript and compiles nothing

    first = scons(workdir, tree, up_to_date)
    (tree / "llamafile/main.cpp").write_text("polishing a patch in place\n")
    second = scons(workdir, tree, up_to_date)

    assert first.returncode == 0, first.stderr
    assert re.search(r"^apply: ", first.stdout, re.M) and (tree / "llama.cpp/BUILD.mk").is_file()
    assert second.returncode == 0, second.stderr
    assert re.search(r"^warning: building ", second.stdout, re.M) and "llamafile/main.cpp" in second.stdout
    assert (tree / "llamafile/main.cpp").read_text() == "polishing a patch in place\n"


def test_the_fixture_tree_is_left_alone(workdir):
    result = scons(workdir, MINI, str(MINI / "llamafile/version.h"))

    assert result.returncode == 0, result.stderr
    assert "apply" not in result.stdout and "warning" not in result.stdout
    assert not record(workdir).exists()


def test_scons_apply_on_a_tree_that_is_no_checkout_is_one_clear_error(workdir):
    result = scons(workdir, MINI, "apply")

    assert result.returncode == 2
    assert result.stderr.strip() == f"scons: error: apply: SRC={MINI} is not a git checkout; clone llamafile there " \
                                    "(git clone --recurse-submodules) or point SRC at one"


def _objects(build: Path) -> dict[str, int]:
    return {str(p.relative_to(build / "o")): p.stat().st_mtime_ns for p in (build / "o").rglob("*.o")}


def _rebuilt(before: dict[str, int], after: dict[str, int]) -> list[str]:
    return sorted(rel for rel in after if after[rel] != before.get(rel))


def _twins(*sources: str) -> list[str]:
    """Both fat objects (x86-64 and its .aarch64/ twin) of each tree-relative source."""
    return sorted(x for s in sources for x in (f"{s}.o", f"{os.path.dirname(s)}/.aarch64/{os.path.basename(s)}.o"))


def test_changing_one_patch_recompiles_exactly_its_objects_and_identical_reapply_nothing(workdir):
    log_h, ggml_c = SUB["common/log.h"], SUB["ggml/src/ggml.c"]
    header_patch, source_patch = workdir / "series/0001-log-h.patch", workdir / "series/0002-ggml-c.patch"
    # code, not comments: an edit of comments alone compiles nothing (opencoti_scons/code_decider.py)
    header_patch.write_text(diff("llama.cpp/common/log.h", log_h, log_h + "#define OPENCOTI_V1 1\n"))
    source_patch.write_text(diff("llama.cpp/ggml/src/ggml.c", ggml_c, ggml_c + "int opencoti_v1;\n"))
    tree = mini_tree(workdir)
    build = workdir / "build"

    first = scons(workdir, tree)
    assert first.returncode == 0, first.stderr
    assert re.search(r"^apply: ", first.stdout, re.M)  # never patched: applied before the tree was read
    assert "#define OPENCOTI_V1 1" in (tree / "llama.cpp/common/log.h").read_text()

    objects = _objects(build)
    source_patch.write_text(diff("llama.cpp/ggml/src/ggml.c", ggml_c, ggml_c + "int opencoti_v2;\n"))
    source_changed = scons(workdir, tree)
    assert source_changed.returncode == 0, source_changed.stderr
    assert re.search(r"^apply: ", source_changed.stdout, re.M)
    assert FATCC.findall(source_changed.stdout) == [str(build / "o/llama.cpp/ggml/src/ggml.c.o")]
    assert _rebuilt(objects, _objects(build)) == _twins("llama.cpp/ggml/src/ggml.c")

    objects = _objects(build)
    header_patch.write_text(diff("llama.cpp/common/log.h", log_h, log_h + "#define OPENCOTI_V2 1\n"))
    header_changed = scons(workdir, tree)
    assert header_changed.returncode == 0, header_changed.stderr
    assert _rebuilt(objects, _objects(build)) == _twins(
        "llama.cpp/common/arg.cpp", "llama.cpp/common/common.cpp", "llama.cpp/common/log.cpp",
        "llama.cpp/tools/server/server.cpp",
    )

    objects = _objects(build)
    identical = "Same hunks, new words: the patch's sha256 changes, the patched tree does not.\n\n"
    header_patch.write_text(identical + header_patch.read_text())
    reapplied = scons(workdir, tree)
    assert reapplied.returncode == 0, reapplied.stderr
    assert re.search(r"^apply: ", reapplied.stdout, re.M)  # the series changed, so it was applied again
    assert FATCC.findall(reapplied.stdout) == [] and "FATLINK" not in reapplied.stdout
    assert _objects(build) == objects


def test_the_package_manifest_lists_the_recorded_series(workdir):
    tree = mini_tree(workdir)
    dist = workdir / "dist"

    result = scons(workdir, tree, "package", "CPU_ONLY=1", f"DIST_DIR={dist}")

    assert result.returncode == 0, result.stderr
    manifest = json.loads(next((dist / "llamafile").glob("opencoti-llamafile-*.MANIFEST.json")).read_text())
    recorded = json.loads(record(workdir).read_text())
    assert manifest["patches"] == recorded["patches"] == [
        {"name": "common_log.cpp.patch", "series": "llamafile",
         "sha256": hashlib.sha256((tree / "llama.cpp.patches/patches/common_log.cpp.patch").read_bytes()).hexdigest()},
    ]
