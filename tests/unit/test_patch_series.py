"""The patch series' messages and patch reading, in-process (the applies themselves run git over real
repositories: tests/integration/test_patch_series.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from opencoti_build.tree import patch_failure, patch_series

PATCH = """From 1 Mon Sep 17 00:00:00 2001
Subject: [PATCH] two files

--- a/llama.cpp/common.h\t2024-01-01 00:00:00
+++ b/llama.cpp/common.h\t2024-01-01 00:00:00
@@ -3,2 +3,3 @@ struct a
 int a;
--- a removed line that began with "-- ", not a header
+int b;
@@ -40,1 +41,2 @@
 x
+y
--- a/README.md
+++ b/README.md
@@ -3,1 +3,2 @@
 z
+w
"""


def test_a_failed_hunk_is_named_by_its_number_within_its_file(tmp_path: Path) -> None:
    patch = tmp_path / "0001-two-files.patch"
    patch.write_text(PATCH)
    assert patch_failure.hunk(patch, "llama.cpp/common.h", 3) == "hunk #1 (@@ -3,2 +3,3 @@)"
    assert patch_failure.hunk(patch, "llama.cpp/common.h", 40) == "hunk #2 (@@ -40,1 +41,2 @@)"
    assert patch_failure.hunk(patch, "README.md", 3) == "hunk #1 (@@ -3,1 +3,2 @@)"  # counted per file
    assert patch_failure.hunk(patch, "README.md", 4) == "the hunk at line 4"
    assert patch_failure.hunk(patch, "other.c", 3) == "the hunk at line 3"


def test_a_patch_ending_in_a_removed_line_is_no_header(tmp_path: Path) -> None:
    patch = tmp_path / "0002-tail.patch"
    patch.write_text("--- a/x.c\n+++ b/x.c\n@@ -1,1 +1,1 @@\n--- old\n")
    assert patch_failure.hunk(patch, "x.c", 1) == "hunk #1 (@@ -1,1 +1,1 @@)"


def test_header_names_lose_their_first_component_and_timestamp() -> None:
    assert patch_failure._strip_p1("--- a/llama.cpp/x.c\t2024-01-01") == "llama.cpp/x.c"
    assert patch_failure._strip_p1("+++ b/with space.c") == "with space.c"
    assert patch_failure._strip_p1("--- /dev/null") == "dev/null"
    assert patch_failure._strip_p1("+++ plain.c") == "plain.c"


def test_foreign_changes_are_named_up_to_twenty_then_counted(tmp_path: Path) -> None:
    few = patch_series.ForeignChanges(tmp_path, "apply", ["a.c", "b.h"])
    assert few.changes == ["a.c", "b.h"]
    assert str(few) == (f"apply would discard 2 change(s) in {tmp_path} that no apply made: a.c, b.h; capture them "
                        f"as a patch under {patch_series.OPENCOTI_PATCHES}/ or pass FORCE=1 to discard them")
    twenty = [f"f{n:02d}.c" for n in range(20)]
    assert f"made: {', '.join(twenty)}; capture" in str(patch_series.ForeignChanges(tmp_path, "reset", twenty))
    many = patch_series.ForeignChanges(tmp_path, "reset", [*twenty, "g.c", "h.c"])
    assert f"22 change(s) in {tmp_path} that no apply made: {', '.join(twenty)} and 2 more; capture" in str(many)


def test_twenty_one_changes_show_twenty_and_count_the_one_more(tmp_path: Path) -> None:
    changes = [f"f{n:02d}.c" for n in range(21)]
    assert f"made: {', '.join(changes[:20])} and 1 more; capture" in str(
        patch_series.ForeignChanges(tmp_path, "apply", changes))


def test_a_name_that_is_no_utf8_is_shown_escaped_not_failing_the_print() -> None:
    undecodable = b"llamafile/caf\xe9.c".decode("utf-8", "surrogateescape")  # how git's path reaches us
    assert patch_series._listing([undecodable, "b.c"], 5) == "llamafile/caf\\xe9.c, b.c"
    assert patch_series._listing(["a", "b", "c"], 2) == "a, b and 1 more"


def test_git_runs_in_the_c_locale_unprompted_and_ignores_a_hooks_repository(monkeypatch) -> None:
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.setenv(name, "/elsewhere")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("OPENCOTI_KEPT", "1")

    env = patch_series._git_env()

    assert not {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"} & set(env)
    assert (env["LC_ALL"], env["GIT_TERMINAL_PROMPT"], env["OPENCOTI_KEPT"]) == ("C", "0", "1")


def _patch(tmp_path: Path, text: str = PATCH) -> patch_series.Patch:
    path = tmp_path / "0001-two-files.patch"
    path.write_text(text)
    return patch_series.Patch(path.name, path, "0" * 64, "opencoti")


def test_a_refused_apply_names_the_hunk_git_could_not_place(tmp_path: Path) -> None:
    patch = _patch(tmp_path)
    stderr = ("error: while searching for:\nint a;\n\nerror: patch failed: llama.cpp/common.h:40\n"
              "error: llama.cpp/common.h: patch does not apply\n")
    assert patch_failure.message(patch, 1, stderr) == (
        "patch opencoti/0001-two-files.patch failed: llama.cpp/common.h hunk #2 (@@ -40,1 +41,2 @@) does not apply; "
        "the tree was reset to pristine, rebase the patch on the vendored tree and apply again")


def test_a_refused_apply_without_a_hunk_names_gits_first_error_else_its_output_else_its_status(tmp_path: Path) -> None:
    patch = _patch(tmp_path)
    tail = "; the tree was reset to pristine, rebase the patch on the vendored tree and apply again"
    first = "error: x.c: already exists in working directory\nerror: y.c: does not exist in index\n"
    assert patch_failure.message(patch, 1, first) == (
        f"patch opencoti/0001-two-files.patch failed: x.c: already exists in working directory{tail}")
    assert patch_failure.message(patch, 128, "fatal: unable to read x.patch\n") == (
        f"patch opencoti/0001-two-files.patch failed: fatal: unable to read x.patch{tail}")
    assert patch_failure.message(patch, 128, "") == (
        f"patch opencoti/0001-two-files.patch failed: git apply exit status 128{tail}")


def test_a_file_git_finds_no_patch_in_is_named_as_such(tmp_path: Path) -> None:
    patch = _patch(tmp_path, "notes\n")
    assert patch_failure.message(patch, 128, "error: No valid patches in input (allow with \"--allow-empty\")\n") == (
        f"patch opencoti/0001-two-files.patch is not a patch (no diff in it); the tree was reset to pristine, "
        f"regenerate {patch.path} with `git format-patch` or remove it")


def test_a_renamed_file_is_found_by_its_new_name(tmp_path: Path) -> None:
    patch = tmp_path / "0003-rename.patch"
    patch.write_text("--- a/llama.cpp/old.c\n+++ b/llama.cpp/new.c\n@@ -5,1 +5,2 @@\n x\n+y\n")
    assert patch_failure.hunk(patch, "llama.cpp/new.c", 5) == "hunk #1 (@@ -5,1 +5,2 @@)"
    assert patch_failure.hunk(patch, "llama.cpp/old.c", 5) == "hunk #1 (@@ -5,1 +5,2 @@)"


def test_hunks_before_any_file_header_belong_to_no_file(tmp_path: Path) -> None:
    patch = tmp_path / "0004-headless.patch"
    patch.write_text("@@ -1,1 +1,2 @@\n x\n+y\n--- a/x.c\n+++ b/x.c\n@@ -7,1 +7,2 @@\n x\n+y\n")
    assert patch_failure.hunk(patch, "x.c", 1) == "the hunk at line 1"
    assert patch_failure.hunk(patch, "x.c", 7) == "hunk #1 (@@ -7,1 +7,2 @@)"


def test_a_trailing_removed_line_ends_the_search_quietly(tmp_path: Path) -> None:
    patch = tmp_path / "0005-tail.patch"
    patch.write_text("--- a/x.c\n+++ b/x.c\n@@ -1,1 +1,1 @@\n--- old\n")
    assert patch_failure.hunk(patch, "x.c", 9) == "the hunk at line 9"  # read to the very last line


def test_a_patch_with_bytes_that_are_no_utf8_is_still_read(tmp_path: Path) -> None:
    patch = tmp_path / "0006-latin1.patch"
    patch.write_bytes(b"--- a/x.c\n+++ b/x.c\n@@ -3,1 +3,2 @@\n /* caf\xe9 */\n+y\n")
    assert patch_failure.hunk(patch, "x.c", 3) == "hunk #1 (@@ -3,1 +3,2 @@)"


@pytest.mark.parametrize("text", ['{"format": 2, "state": "applied"}', '[1, "applied"]', '"applied"'])
def test_a_record_of_another_format_or_shape_is_no_record(tmp_path: Path, text: str) -> None:
    record = tmp_path / "applied-series.json"
    record.write_text(text)
    assert patch_series.read_record(record) is None


def test_an_unreadable_record_is_refused_with_the_fix(tmp_path: Path) -> None:
    record = tmp_path / "applied-series.json"
    record.write_text('{"format": 1, "state": ')
    with pytest.raises(patch_series.SeriesError) as failure:
        patch_series.read_record(record)
    assert str(failure.value).startswith(f"cannot read the apply record {record}: Expecting value")
    assert str(failure.value).endswith("; delete it and apply with FORCE=1")


def test_an_interrupted_record_is_not_read_as_applied(tmp_path: Path) -> None:
    record = tmp_path / "applied-series.json"
    record.write_text('{"format": 1, "state": "applying", "source": "/src"}')
    assert patch_series.read_record(record) is None


def test_a_full_disk_while_writing_the_apply_record_is_one_line_and_keeps_the_last_record(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    record = tmp_path / "applied-series.json"
    patch_series._write(record, {"format": 1, "state": "applied"})
    last = record.read_bytes()

    def full(self: Path, *args, **kwargs) -> None:
        self.write_bytes(b'{"half')  # what a full disk leaves of the temporary
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(patch_series.SeriesError, match=(f"^cannot write the apply record {record}: no space left on "
                                                        "the device .disk full.; free space and run the build again$")):
        patch_series._write(record, {"format": 1, "state": "applying"})
    assert record.read_bytes() == last and sorted(p.name for p in tmp_path.iterdir()) == [record.name]


def test_a_file_edit_that_keeps_size_and_mtime_is_hashed_again(tmp_path: Path) -> None:
    path = tmp_path / "log.cpp"
    path.write_text("one")
    known = patch_series._entry(path, None)
    mtime = path.stat().st_mtime_ns
    path.write_text("two")  # `cp -p` of an edited file: same size, the old mtime back; only the ctime moved
    os.utime(path, ns=(mtime, mtime))
    assert patch_series._entry(path, known)["sha256"] != known["sha256"]
    assert patch_series._entry(path, patch_series._entry(path, None)) == patch_series._entry(path, None)


@pytest.mark.parametrize(("status", "raised"), [(-9, "SIGKILL"), (-15, "SIGTERM"), (-2, None), (130, None)])
def test_a_git_stopped_by_a_signal_says_so_and_ctrl_c_stops_the_build(monkeypatch, status: int,
                                                                      raised: str | None) -> None:
    monkeypatch.setattr(patch_series, "_run_git", lambda repo, *args: (status, "", ""))
    if raised is None:  # Ctrl-C: scons says "Build interrupted." once
        with pytest.raises(KeyboardInterrupt):
            patch_series._git(Path("/src"), "status")
        return
    with pytest.raises(patch_series.SeriesError, match=f"^git status in /src was killed .{raised}.; run the same "
                                                       "command again: the apply record says what is done"):
        patch_series._git(Path("/src"), "status")
