"""Version and tag parsing (llamafile/version.h, vendors/llamafile/OPENCOTI_TAG), and an artifact's identity."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from opencoti_build.errors import UserError

_VERSION_FIELD = re.compile(r"^\s*#\s*define\s+LLAMAFILE_(MAJOR|MINOR|PATCH)\s+(\d+)\b", re.M)


class VersionError(UserError):
    """A version or tag file is missing or malformed."""


def llamafile_version(source_tree: Path) -> str:
    """``MAJOR.MINOR.PATCH`` from ``<source_tree>/llamafile/version.h``."""
    header = Path(source_tree) / "llamafile" / "version.h"
    try:
        text = header.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise VersionError(f"cannot read {header}: {exc.strerror}; is SRC a llamafile tree?") from exc
    fields = dict(_VERSION_FIELD.findall(text))
    missing = [name for name in ("MAJOR", "MINOR", "PATCH") if name not in fields]
    if missing:
        raise VersionError(f"{header} defines no LLAMAFILE_{missing[0]}; expected '#define LLAMAFILE_{missing[0]} <n>'")
    return f"{int(fields['MAJOR'])}.{int(fields['MINOR'])}.{int(fields['PATCH'])}"


def first_field(text: str) -> str | None:
    """The first whitespace-separated word of the first line that is not blank or a '#' comment.

    The tag file uses the pin file's comment-tolerant format (vendors/pin/embedder.txt).
    """
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            return line.split()[0]
    return None


def opencoti_tag(tag_file: Path) -> str:
    """The cut tag (``c2``, ``c3`` …) from a comment-tolerant tag file."""
    try:
        text = Path(tag_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise VersionError(f"cannot read {tag_file}: {exc.strerror}; create it with one line such as 'c1'") from exc
    tag = first_field(text)
    if tag is None:
        raise VersionError(f"{tag_file} holds no tag; add one line such as 'c1'")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", tag):
        raise VersionError(f"{tag_file}: tag {tag!r} may hold only letters, digits, '.', '_' and '-'")
    return tag


def version_string(llamafile_ver: str, tag: str) -> str:
    return f"opencoti-{llamafile_ver}-{tag}"


def next_tag(tag: str) -> str:
    """The tag to bump to: the trailing number incremented (``c2`` → ``c3``), else ``<tag>.1``."""
    match = re.fullmatch(r"(.*?)(\d+)", tag)
    if match is None:
        return f"{tag}.1"
    return f"{match.group(1)}{int(match.group(2)) + 1}"


@dataclass(frozen=True)
class Identity:
    """Who the artifact is: version, tag, architecture, and the checkout it was built from."""

    llamafile_version: str
    tag: str
    arch: str
    git_commit: str

    @property
    def version_string(self) -> str:
        return version_string(self.llamafile_version, self.tag)
