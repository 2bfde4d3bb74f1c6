"""The patch series' messages and patch reading, in-process (the applies themselves run git over real
repositories: tests/integration/test_patch_series.py)."""
from __future__ import annotations

from pathlib import Path

from opencoti_build import patch_series

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
    assert patch_series._hunk(patch, "llama.cpp/common.h", 3) == "hunk #1 (@@ -3,2 +3,3 @@)"
    assert patch_series._hunk(patch, "llama.cpp/common.h", 40) == "hunk #2 (@@ -40,1 +41,2 @@)"
    assert patch_series._hunk(patch, "README.md", 3) == "hunk #1 (@@ -3,1 +3,2 @@)"  # counted per file
    assert patch_series._hunk(patch, "README.md", 4) == "the hunk at line 4"
    assert patch_series._hunk(patch, "other.c", 3) == "the hunk at line 3"


def test_a_patch_ending_in_a_removed_line_is_no_header(tmp_path: Path) -> None:
    patch = tmp_path / "0002-tail.patch"
    patch.write_text("--- a/x.c\n+++ b/x.c\n@@ -1,1 +1,1 @@\n--- old\n")
    assert patch_series._hunk(patch, "x.c", 1) == "hunk #1 (@@ -1,1 +1,1 @@)"


def test_header_names_lose_their_first_component_and_timestamp() -> None:
    assert patch_series._strip_p1("--- a/llama.cpp/x.c\t2024-01-01") == "llama.cpp/x.c"
    assert patch_series._strip_p1("+++ b/with space.c") == "with space.c"
    assert patch_series._strip_p1("--- /dev/null") == "dev/null"
    assert patch_series._strip_p1("+++ plain.c") == "plain.c"


def test_foreign_changes_are_named_up_to_twenty_then_counted(tmp_path: Path) -> None:
    few = patch_series.ForeignChanges(tmp_path, "apply", ["a.c", "b.h"])
    assert few.changes == ["a.c", "b.h"]
    assert str(few) == (f"apply would discard 2 change(s) in {tmp_path} that no apply made: a.c, b.h; capture them "
                        f"as a patch under {patch_series.OPENCOTI_PATCHES}/ or pass FORCE=1 to discard them")
    twenty = [f"f{n:02d}.c" for n in range(20)]
    assert f"made: {', '.join(twenty)}; capture" in str(patch_series.ForeignChanges(tmp_path, "reset", twenty))
    many = patch_series.ForeignChanges(tmp_path, "reset", [*twenty, "g.c", "h.c"])
    assert f"22 change(s) in {tmp_path} that no apply made: {', '.join(twenty)} and 2 more; capture" in str(many)
