"""patch_series: reset, llamafile's own patch step, the opencoti series, the guard and the record."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from opencoti_build.tree import patch_series

from vendored_tree import DEFAULT_OUTER, diff, file_protocol_env, git, lines, make_tree, snapshot

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


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def test_apply_and_reset_say_what_they_did_in_one_line(tree, series, record):
    src = tree.resolve()

    applied = patch_series.apply(tree, series, record)
    unchanged = patch_series.apply(tree, series, record)
    reset = patch_series.reset(tree, record)

    assert applied.summary == (f"apply: {src} reset to {_head(tree)[:12]}, 1 llamafile + 2 opencoti patches, "
                               f"6 files changed")
    assert unchanged.summary == f"apply: {src} already carries its series (3 patch(es)); nothing to do"
    assert reset.summary == f"reset: {src} restored to pristine {_head(tree)[:12]}"


def test_forced_applies_and_resets_count_what_they_discarded(tree, series, record):
    src = tree.resolve()
    (tree / "llamafile/main.c").write_text("hand edit\n")
    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)
    assert str(refusal.value).startswith(f"apply would discard 1 change(s) in {src} that no apply made: ")

    assert patch_series.apply(tree, series, record, force=True).summary.endswith(
        "6 files changed; discarded 1 foreign change(s) (FORCE=1)")
    (tree / "llamafile/main.c").write_text("hand edit\n")
    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.reset(tree, record)
    assert str(refusal.value).startswith(f"reset would discard 1 change(s) in {src} that no apply made: ")
    assert patch_series.reset(tree, record, force=True).summary == (
        f"reset: {src} restored to pristine {_head(tree)[:12]}, discarding 1 foreign change(s) (FORCE=1)")


def test_a_plain_build_names_five_foreign_changes_then_counts_the_rest(tree, series, record):
    for n in range(6):
        (tree / f"llamafile/new{n}.c").write_text("int untracked;\n")

    outcome = patch_series.apply_if_safe(tree, series, record)

    names = ", ".join(f"llamafile/new{n}.c" for n in range(5))
    assert outcome.summary == (f"warning: building {tree.resolve()} as it is, with 6 change(s) no apply made ({names} "
                               f"and 1 more); `scons apply` (FORCE=1 to discard them) restores the series")


def test_reset_of_a_tree_never_applied_needs_no_record(tree, record):
    assert patch_series.reset(tree, record).action == "reset"
    assert not record.exists()


def test_a_record_in_a_new_folder_is_written_canonically(tree, series, tmp_path):
    record = tmp_path / "state" / "vendors" / "applied-series.json"

    patch_series.apply(tree, series, record)

    text = record.read_text()  # sorted keys, one-space indent: the same apply writes the same bytes
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
    assert "\n \"files\": {\n" in text and not (record.parent / "applied-series.json.tmp").exists()


def test_the_state_digest_follows_the_patched_bytes_not_the_checkout(tmp_path, tree, series, record):
    patch_series.apply(tree, series, record)
    clone, clone_record = tmp_path / "clone", tmp_path / "clone.json"
    git(tmp_path, "clone", "-q", str(tree), str(clone))
    patch_series.apply(clone, series, clone_record)
    same = patch_series.read_record(clone_record)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "0001-outer.patch").write_text(diff("llamafile/main.c", MAIN_OLD, MAIN_OLD.replace("6\n", "6 v2\n", 1)))
    (v2 / "0002-submodules.patch").write_text((series / "0002-submodules.patch").read_text())
    patch_series.apply(clone, v2, clone_record)
    other = patch_series.read_record(clone_record)

    first = patch_series.read_record(record)
    assert first["stateSha256"] == same["stateSha256"] != other["stateSha256"]
    assert sorted(first["files"]) == sorted(other["files"])  # the same files, one of them other bytes


def test_a_patch_may_delete_a_tracked_file(tree, series, record):
    (series / "0003-delete.patch").write_text(
        "diff --git a/llama.cpp/ggml/src/ggml.h b/llama.cpp/ggml/src/ggml.h\ndeleted file mode 100644\n"
        "--- a/llama.cpp/ggml/src/ggml.h\n+++ /dev/null\n"
        + "@@ -1,12 +0,0 @@\n" + "".join(f"-{line}\n" for line in lines("ggml header").splitlines()))

    patch_series.apply(tree, series, record)

    assert not (tree / "llama.cpp/ggml/src/ggml.h").exists()
    assert patch_series.read_record(record)["files"]["llama.cpp/ggml/src/ggml.h"] is None
    assert patch_series.apply(tree, series, record).action == "unchanged"


def test_a_tracked_file_deleted_by_hand_is_a_foreign_change(tree, series, record):
    patch_series.apply(tree, series, record)
    (tree / "llamafile/version.h").unlink()

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)

    assert refusal.value.changes == ["llamafile/version.h"]


@pytest.mark.parametrize("edit", ["longer, mtime kept", "same size, new mtime"])
def test_an_edit_is_seen_whatever_stat_field_it_leaves_alone(tree, series, record, edit):
    patch_series.apply(tree, series, record)
    main = tree / "llamafile/main.c"
    mtime = main.stat().st_mtime_ns
    if edit == "longer, mtime kept":
        main.write_text(MAIN_NEW + "/* more */\n")
        os.utime(main, ns=(mtime, mtime))
    else:
        main.write_text(MAIN_NEW.replace("opencoti", "OPENCOTI"))
        os.utime(main, ns=(mtime + 10**9, mtime + 10**9))

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)

    assert refusal.value.changes == ["llamafile/main.c"]


def test_a_rerun_hashes_only_the_files_whose_stat_moved(tree, series, record, monkeypatch):
    patch_series.apply(tree, series, record)
    hashed: list[bytes] = []
    real = patch_series._sha256
    monkeypatch.setattr(patch_series, "_sha256", lambda data: hashed.append(data) or real(data))
    patches = {p.read_bytes() for p in series.iterdir()}

    assert patch_series.apply(tree, series, record).action == "unchanged"
    assert set(hashed) == patches  # the series, never the tree's files
    hashed.clear()
    os.utime(tree / "llamafile/main.c", ns=(1, 1))
    assert patch_series.apply(tree, series, record).action == "unchanged"
    assert set(hashed) - patches == {MAIN_NEW.encode()}
    hashed.clear()
    patch_series.reset(tree, record)
    assert hashed == [MAIN_NEW.encode()]  # the record vouches for the other five by their stat


def test_a_checkout_is_not_vouched_for_by_another_checkouts_record(tmp_path, tree, series, record):
    patch_series.apply(tree, series, record)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--recurse-submodules", str(tree), str(clone))
    (clone / "llamafile/main.c").write_text(MAIN_NEW)  # by hand, equal to what the series makes in `tree`

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(clone, series, record)

    assert refusal.value.changes == ["llamafile/main.c"]


def test_untracked_files_in_new_folders_are_seen_and_discarded_in_every_repository(tree, series, record):
    patch_series.apply(tree, series, record)
    for rel in ("llamafile/new/deeper/a.c", "llama.cpp/tools/new/b.c", "llama.cpp/vendor/mini/new/c.h"):
        (tree / rel).parent.mkdir(parents=True)
        (tree / rel).write_text("untracked\n")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)
    assert refusal.value.changes == ["llama.cpp/tools/new/b.c", "llama.cpp/vendor/mini/new/c.h",
                                     "llamafile/new/deeper/a.c"]

    patch_series.apply(tree, series, record, force=True)

    assert not any((tree / top).exists() for top in ("llamafile/new", "llama.cpp/tools", "llama.cpp/vendor/mini/new"))
    assert patch_series.apply(tree, series, record).action == "unchanged"


def test_a_staged_rename_is_both_of_its_paths(tree, series, record):
    git(tree, "mv", "llamafile/version.h", "llamafile/moved.h")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)

    assert refusal.value.changes == ["llamafile/moved.h", "llamafile/version.h"]


def test_an_untracked_repository_is_left_alone_and_files_after_it_still_count(tree, series, record):
    nested = tree / "llamafile/a-repo"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "work.c").write_text("mine\n")
    (tree / "llamafile/z.c").write_text("untracked\n")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)
    assert refusal.value.changes == ["llamafile/z.c"]

    patch_series.apply(tree, series, record, force=True)
    assert (nested / "work.c").exists() and not (tree / "llamafile/z.c").exists()


def test_links_are_compared_by_target_and_kept_as_links(tree, series, record):
    (series / "0003-link.patch").write_text(
        "diff --git a/llamafile/link b/llamafile/link\nnew file mode 120000\n--- /dev/null\n+++ b/llamafile/link\n"
        "@@ -0,0 +1 @@\n+no-such-target\n\\ No newline at end of file\n")
    patch_series.apply(tree, series, record)
    link = tree / "llamafile/link"
    assert os.readlink(link) == "no-such-target"
    os.utime(link, ns=(1, 10**9), follow_symlinks=False)
    patch_series.apply(tree, series, record, force=True)  # the stat moved: hashed again, same target
    (series / "0001-outer.patch").write_text(diff("llamafile/main.c", MAIN_OLD, MAIN_OLD + "/* v2 */\n"))

    patch_series.apply(tree, series, record)  # re-applies: the link comes back byte-identical

    assert os.lstat(link).st_mtime_ns == 10**9
    files = patch_series.read_record(record)["files"]
    assert {rel: os.lstat(tree / rel).st_mtime_ns for rel, e in files.items() if e} == {
        rel: e["mtimeNs"] for rel, e in files.items() if e}
    os.symlink("elsewhere", tree / "llamafile/dangling")
    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)
    assert refusal.value.changes == ["llamafile/dangling"]


def test_a_name_that_is_no_utf8_is_a_foreign_change_like_any_other(tree, series, record):
    name = os.fsdecode(b"llamafile/caf\xe9.c")
    (tree / name).write_text("untracked\n")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)
    assert refusal.value.changes == [name] and "llamafile/caf\\xe9.c" in str(refusal.value)

    patch_series.apply(tree, series, record, force=True)
    assert not (tree / name).exists()


def test_a_hooks_git_environment_does_not_redirect_the_apply(tmp_path, tree, series, record, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git/index"))

    assert patch_series.apply(tree, series, record).action == "applied"

    assert (tree / "llamafile/main.c").read_text() == MAIN_NEW
    assert sorted(p.name for p in other.iterdir()) == [".git"]


def test_a_failing_git_is_named_with_its_first_message_or_status(tree):
    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series._git(tree, "show", "no-such-ref")
    assert str(failure.value) == (f"git show failed in {tree}: fatal: ambiguous argument 'no-such-ref': unknown "
                                  f"revision or path not in the working tree.")
    with pytest.raises(patch_series.SeriesError) as failure:  # git echoes the argument's bytes: not UTF-8
        patch_series._git(tree, "show", os.fsdecode(b"no-\xff-ref"))
    assert str(failure.value).startswith(f"git show failed in {tree}: fatal: ambiguous argument 'no-\ufffd-ref'")
    (tree / "llamafile/main.c").write_text("edit\n")
    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series._git(tree, "diff", "--quiet")  # differences: status 1, nothing on stderr
    assert str(failure.value) == f"git diff failed in {tree}: exit status 1"


def test_a_folder_whose_git_points_nowhere_is_no_checkout(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".git").write_text(f"gitdir: {tmp_path / 'gone'}\n")
    assert not patch_series.is_checkout(broken)


def test_a_non_patch_in_llamafiles_own_series_is_named(tree, series, record):
    (tree / "llama.cpp.patches/patches/README.patch").write_text("how these patches were made\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "notes")

    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series.apply(tree, series, record)

    assert str(failure.value) == (
        "patch llamafile/README.patch is not a patch (no diff in it); the tree was reset to pristine, regenerate "
        f"{tree.resolve() / 'llama.cpp.patches/patches/README.patch'} with `git format-patch` or remove it")
    assert _clean(tree) and not record.exists()


def test_llamafile_files_overwrite_create_folders_and_skip_dot_entries(tmp_path, monkeypatch, series, record):
    extra = {
        "llama.cpp.patches/llamafile-files/ggml/src/ggml.h": "// llamafile's own ggml.h\n",
        "llama.cpp.patches/llamafile-files/tools/server/public/index.html": "<html></html>\n",
        "llama.cpp.patches/llamafile-files/.editorconfig": "root = true\n",
    }
    file_protocol_env(monkeypatch)
    tree = make_tree(tmp_path / "t", outer={**DEFAULT_OUTER, **extra})

    patch_series.apply(tree, series, record)

    assert (tree / "llama.cpp/ggml/src/ggml.h").read_text() == "// llamafile's own ggml.h\n"
    assert (tree / "llama.cpp/tools/server/public/index.html").read_text() == "<html></html>\n"
    assert not (tree / "llama.cpp/.editorconfig").exists()


def test_an_apply_whose_cleanup_fails_leaves_a_record_that_owns_every_change(tree, series, record, monkeypatch):
    def interrupted(src):
        raise KeyboardInterrupt

    def reset_once(src, real=patch_series._reset, calls=[]):
        calls.append(src)
        if len(calls) > 1:
            raise patch_series.SeriesError("git reset failed")
        real(src)

    monkeypatch.setattr(patch_series, "_copy_llamafile_files", interrupted)
    monkeypatch.setattr(patch_series, "_reset", reset_once)
    with pytest.raises(patch_series.SeriesError, match="git reset failed"):
        patch_series.apply(tree, series, record)
    monkeypatch.undo()

    assert json.loads(record.read_text()) == {"format": 1, "state": "applying", "source": str(tree.resolve())}
    (tree / "llamafile/main.c").write_text("half written\n")
    assert patch_series.apply(tree, series, record).action == "applied"
    assert (tree / "llamafile/main.c").read_text() == MAIN_NEW


def test_a_moved_submodule_names_both_commits(tree, series, record):
    patch_series.apply(tree, series, record)
    sub = tree / "llama.cpp"
    recorded = _head(sub)
    git(sub, "stash", "-q", "--include-untracked")
    git(sub, "commit", "-q", "--allow-empty", "-m", "mine")

    with pytest.raises(patch_series.ForeignChanges) as refusal:
        patch_series.apply(tree, series, record)

    assert f"llama.cpp (checked out at {_head(sub)[:12]}, recorded {recorded[:12]})" in refusal.value.changes
