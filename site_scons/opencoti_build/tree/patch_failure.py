"""What a patch of the series that ``git apply`` refused says: one line naming the patch and, where git names the
file and line that failed, the hunk as the patch numbers it (opencoti_build.tree.patch_series applies them)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


class PatchFile(Protocol):
    """A patch of a series (patch_series.Patch)."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> Path: ...
    @property
    def series(self) -> str: ...


def message(patch: PatchFile, status: int, stderr: str) -> str:
    """The one-line message for a patch ``git apply`` refused with ``status`` and ``stderr``."""
    if "No valid patches in input" in stderr:
        return (f"patch {patch.series}/{patch.name} is not a patch (no diff in it); the tree was reset to "
                f"pristine, regenerate {patch.path} with `git format-patch` or remove it")
    errors = [line[len("error: "):] for line in stderr.splitlines() if line.startswith("error: ")]
    where = errors[0] if errors else stderr.strip() or f"git apply exit status {status}"
    for error in errors:
        failed = re.fullmatch(r"patch failed: (.+):(\d+)", error)
        if failed:
            where = f"{failed.group(1)} {hunk(patch.path, failed.group(1), int(failed.group(2)))} does not apply"
            break
    return (f"patch {patch.series}/{patch.name} failed: {where}; the tree was reset to pristine, "
            f"rebase the patch on the vendored tree and apply again")


def hunk(patch: Path, failed_file: str, old_line: int) -> str:
    """``hunk #N (@@ … @@)`` of ``patch`` for ``failed_file`` starting at ``old_line``, as git reports it."""
    text = patch.read_text(encoding="utf-8", errors="replace").splitlines()
    names: tuple[str, ...] = ()
    number = 0
    for i, line in enumerate(text):
        # A file header is a ---/+++ pair; a lone "--- " is a removed line that began with "-- ".
        if line.startswith("--- ") and i + 1 < len(text) and text[i + 1].startswith("+++ "):
            names = (_strip_p1(line), _strip_p1(text[i + 1]))
            number = 0
        elif match := _HUNK.match(line):
            number += 1
            if failed_file in names and int(match.group(1)) == old_line:
                return f"hunk #{number} ({line.split(' @@')[0]} @@)"
    return f"the hunk at line {old_line}"


def _strip_p1(header: str) -> str:
    name = header[4:].split("\t")[0].strip()
    return name.split("/", 1)[1] if "/" in name else name
