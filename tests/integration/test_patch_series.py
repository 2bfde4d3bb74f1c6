"""patch_series: reset, llamafile's own patch step, the opencoti series, the guard and the record."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencoti_build import patch_series

from vendored_tree import diff, file_protocol_env, git, lines, make_tree, snapshot

MAIN_OLD = lines("main")
MAIN_NEW = MAIN_OLD.replace("main line 6\n", "main line 6\n/* opencoti: 0001 */\n")
GGML_OLD = lines("ggml")
GGML_NEW = GGML_OLD.replace("ggml line 9\n", "ggml line 9 /* opencoti: 0002 */\n")
MINI_NEW = "int mini;\nint opencoti_mini;\n"


@pytest.fixture
def tree(tmp_path: Path, monkeypatch) -> Path:
    file_protocol_env(monkeypatch)
    return make_tree(tmp_path)


@pytest.fixture
def series(tmp_path: Path) -> Path:
    """The two-patch opencoti series: the outer tree, then the submodule and its nested submodule."""
    folder = tmp_path / "series"
    folder.mkdir()
    (folder / "0001-outer.patch").write_text(diff("llamafile/main.c", MAIN_OLD, MAIN_NEW))
    (folder / "0002-submodules.patch").write_text(
        diff("llama.cpp/ggml/src/ggml.c", GGML_OLD, GGML_NEW)
        + diff("llama.cpp/vendor/mini/mini.h", "int mini;\n", MINI_NEW)
    )
    return folder


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "applied-series.json"


def _clean(tree: Path) -> bool:
    return patch_series.tree_state(tree).files == {}


def test_apply_runs_llamafile_step_then_the_opencoti_series(tree, series, record):
    outcome = patch_series.apply(tree, series, record)

    assert outcome.action == "applied"
    assert "1 llamafile + 2 opencoti patches" in outcome.summary
    assert (tree / "llama.cpp/BUILD.mk").read_text() == "# llamafile's build of llama.cpp\n"
    assert (tree / "llama.cpp/common/license.cpp").read_text() == "const char *license;\n"
    assert "// llamafile: signals blocked on the logger thread\n" in (tree / "llama.cpp/common/log.cpp").read_text()
    assert (tree / "llamafile/main.c").read_text() == MAIN_NEW
    assert (tree / "llama.cpp/ggml/src/ggml.c").read_text() == GGML_NEW
    assert (tree / "llama.cpp/vendor/mini/mini.h").read_text() == MINI_NEW


def test_the_record_names_every_patch_commit_and_file(tree, series, record):
    patch_series.apply(tree, series, record)

    recorded = patch_series.read_record(record)
    assert recorded["upstreamCommit"] == git(tree, "rev-parse", "HEAD").strip()
    assert recorded["submodules"] == {
        "llama.cpp": git(tree / "llama.cpp", "rev-parse", "HEAD").strip(),
        "llama.cpp/vendor/mini": git(tree / "llama.cpp/vendor/mini", "rev-parse", "HEAD").strip(),
    }
    assert [(p["series"], p["name"]) for p in recorded["patches"]] == [
        ("llamafile", "common_log.cpp.patch"), ("opencoti", "0001-outer.patch"), ("opencoti", "0002-submodules.patch"),
    ]
    assert recorded["patches"][1]["sha256"] == patch_series.series(series, "opencoti")[0].sha256
    assert sorted(recorded["files"]) == [
        "llama.cpp/BUILD.mk", "llama.cpp/common/license.cpp", "llama.cpp/common/log.cpp",
        "llama.cpp/ggml/src/ggml.c", "llama.cpp/vendor/mini/mini.h", "llamafile/main.c",
    ]
    assert len(recorded["stateSha256"]) == 64


def test_a_second_apply_does_nothing(tree, series, record):
    patch_series.apply(tree, series, record)
    before, record_before = snapshot(tree), record.read_bytes()

    outcome = patch_series.apply(tree, series, record)

    assert outcome.action == "unchanged"
    assert snapshot(tree) == before  # bytes and mtimes
    assert record.read_bytes() == record_before


def test_changing_one_patch_reapplies_and_rewrites_only_what_differs(tree, series, record):
    patch_series.apply(tree, series, record)
    before = snapshot(tree)
    (series / "0001-outer.patch").write_text(diff("llamafile/main.c", MAIN_OLD, MAIN_OLD + "/* v2 */\n"))

    assert patch_series.apply(tree, series, record).action == "applied"

    after = snapshot(tree)
    assert after["llamafile/main.c"][0] == (MAIN_OLD + "/* v2 */\n").encode()
    changed = sorted(rel for rel in after if after[rel] != before.get(rel))
    assert changed == ["llamafile/main.c"]


def test_reapplying_identical_patches_changes_no_file(tree, series, record):
    patch_series.apply(tree, series, record)
    before = snapshot(tree)
    patch = series / "0002-submodules.patch"
    patch.write_text("A commit message git apply skips: new sha256, same result.\n\n" + patch.read_text())

    assert patch_series.apply(tree, series, record).action == "applied"

    assert snapshot(tree) == before
    assert patch_series.read_record(record)["patches"][2]["sha256"] == patch_series.series(series, "opencoti")[1].sha256


def test_a_conflicting_patch_names_patch_file_and_hunk_and_leaves_the_tree_clean(tree, series, record):
    patch_series.apply(tree, series, record)
    # Hunk 1 would apply; hunk 2 expects a line upstream does not have.
    (series / "0003-conflict.patch").write_text("""\
--- a/llama.cpp/ggml/src/ggml.h
+++ b/llama.cpp/ggml/src/ggml.h
@@ -1,2 +1,3 @@
 ggml header line 1
+// fine
 ggml header line 2
@@ -8,3 +9,3 @@
 ggml header line 8
-ggml header line 99
+ggml header line 9b
 ggml header line 10
""")

    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series.apply(tree, series, record)

    assert str(failure.value) == (
        "patch opencoti/0003-conflict.patch failed: llama.cpp/ggml/src/ggml.h hunk #2 (@@ -8,3 +9,3 @@) does not "
        "apply; the tree was reset to pristine, rebase the patch on the vendored tree and apply again")
    assert _clean(tree)
    assert not record.exists()


def test_a_patch_git_refuses_otherwise_is_named_with_gits_first_error(tree, series, record):
    (series / "0003-exists.patch").write_text(  # creates a file the tree already has
        "diff --git a/llamafile/main.c b/llamafile/main.c\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/llamafile/main.c\n@@ -0,0 +1 @@\n+new\n")
    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series.apply(tree, series, record)
    assert str(failure.value) == (
        "patch opencoti/0003-exists.patch failed: llamafile/main.c: already exists in working directory; the tree "
        "was reset to pristine, rebase the patch on the vendored tree and apply again")
    assert _clean(tree) and not record.exists()


def test_a_dirty_tree_is_refused_with_every_change_listed_then_forced(tree, series, record):
    patch_series.apply(tree, series, record)
    (tree / "llama.cpp/common/log.cpp").write_text("hand edit after apply\n")
    (tree / "llamafile/new.c").write_text("int untracked;\n")
    (tree / "llama.cpp.patches/llamafile-files/BUILD.mk").write_text("# outer-vendor edit\n")
    (tree / "o").mkdir()
    (tree / "o/ignored.o").write_text("build output\n")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)

    assert refusal.value.changes == [
        "llama.cpp.patches/llamafile-files/BUILD.mk", "llama.cpp/common/log.cpp", "llamafile/new.c",
    ]
    assert "FORCE=1" in str(refusal.value) and "llamafile/new.c" in str(refusal.value)
    assert (tree / "llama.cpp/common/log.cpp").read_text() == "hand edit after apply\n"  # nothing touched

    outcome = patch_series.apply(tree, series, record, force=True)

    assert "discarded 3 foreign change(s)" in outcome.summary
    assert not (tree / "llamafile/new.c").exists()
    assert (tree / "llama.cpp/BUILD.mk").read_text() == "# llamafile's build of llama.cpp\n"
    assert (tree / "o/ignored.o").exists()  # ignored files are no change of the tree's


def test_a_moved_submodule_is_a_foreign_change(tree, series, record):
    patch_series.apply(tree, series, record)
    sub = tree / "llama.cpp"
    git(sub, "stash", "-q", "--include-untracked")  # a clean submodule, then a commit of the user's on it
    (sub / "mine.txt").write_text("mine\n")
    git(sub, "add", "mine.txt")
    git(sub, "commit", "-qm", "mine")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)

    assert any(change.startswith("llama.cpp (checked out at ") for change in refusal.value.changes)


def test_apply_initialises_the_submodules_of_a_fresh_clone(tmp_path, tree, series, record):
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(tree), str(clone))
    assert not (clone / "llama.cpp/.git").exists()

    patch_series.apply(clone, series, record)

    assert (clone / "llama.cpp/vendor/mini/mini.h").read_text() == MINI_NEW
    assert set(patch_series.read_record(record)["submodules"]) == {"llama.cpp", "llama.cpp/vendor/mini"}


def test_reset_restores_the_pristine_tree_with_the_same_guard(tree, series, record):
    patch_series.apply(tree, series, record)
    (tree / "llamafile/main.c").write_text("hand edit\n")

    with pytest.raises(patch_series.ForeignChanges, match=r"reset would discard 1 change\(s\).*llamafile/main.c"):
        patch_series.reset(tree, record)
    assert patch_series.read_record(record) is not None

    outcome = patch_series.reset(tree, record, force=True)

    assert outcome.action == "reset"
    assert _clean(tree)
    assert (tree / "llamafile/main.c").read_text() == MAIN_OLD
    assert not record.exists()


def test_reset_after_a_clean_apply_needs_no_force(tree, series, record):
    patch_series.apply(tree, series, record)

    patch_series.reset(tree, record)

    assert _clean(tree) and not (tree / "llama.cpp/BUILD.mk").exists()


def test_a_plain_build_keeps_foreign_changes_and_warns(tree, series, record):
    (tree / "llamafile/main.c").write_text("polishing a patch in place\n")

    outcome = patch_series.apply_if_safe(tree, series, record)

    assert outcome.action == "kept"
    assert outcome.summary.startswith("warning: ") and "llamafile/main.c" in outcome.summary
    assert (tree / "llamafile/main.c").read_text() == "polishing a patch in place\n"
    assert not record.exists()


def test_an_interrupted_apply_owns_every_change(tree, series, record):
    patch_series.apply(tree, series, record)
    record.write_text(json.dumps({"format": 1, "state": "applying", "source": str(tree.resolve())}))
    (tree / "llamafile/main.c").write_text("half written\n")

    assert patch_series.read_record(record) is None  # the packager never sees a half record
    assert patch_series.apply(tree, series, record).action == "applied"
    assert (tree / "llamafile/main.c").read_text() == MAIN_NEW


def test_a_tree_that_is_no_checkout_is_refused(tmp_path, series, record):
    plain = tmp_path / "plain"
    plain.mkdir()

    assert not patch_series.is_checkout(plain)
    with pytest.raises(patch_series.SeriesError, match=r"SRC=.*plain is not a git checkout"):
        patch_series.apply(plain, series, record)


def test_a_file_that_is_no_patch_is_refused_before_anything_is_touched(tree, series, record):
    patch_series.apply(tree, series, record)
    before, recorded = snapshot(tree), record.read_text()
    (series / "0003-notes.patch").write_text("remember to rebase this series\n")

    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series.apply(tree, series, record)

    assert str(failure.value) == (f"{series / '0003-notes.patch'} is not a patch (no diff in it); regenerate it with "
                                  f"`git format-patch` or remove it from {series}")
    assert "allow-empty" not in str(failure.value)
    assert snapshot(tree) == before and record.read_text() == recorded


def test_a_missing_series_folder_is_refused_not_dropped(tree, tmp_path, record):
    with pytest.raises(patch_series.SeriesError, match=r"PATCH_SERIES=.*no-series: no such directory"):
        patch_series.apply(tree, tmp_path / "no-series", record)
    assert not record.exists()
