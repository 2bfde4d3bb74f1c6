"""The last line of every build: what its steps did, in words scripts and IDEs can read.

``N compiled, M from cache, K up to date in T s`` (``, P packaged``, ``, I installed`` and ``, F failed`` before
``in`` when there are any). A step is one action writing files (a fat compile and its twin are one step, as are a
link and its ELFs); "compiled" counts every step that ran its command to make something (compiles, archives, links,
generators), "packaged" the PACKAGE, MANIFEST and PROVENANCE steps, "installed" the INSTALL copies and the
~/.llamafile mirror (steps counted so are marked: opencoti_scons.progress.count_as), "from cache" the steps
CacheDir restored, "up to date" those that needed nothing. The compile database's own rewrite is not a step of the
build and is not counted.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, fields


@dataclass
class Tally:
    """Counters that threads add to (SCons's worker threads retrieve and push; tasks finish on the main one):
    a subclass declares them as int fields."""

    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False, kw_only=True)

    def add(self, kind: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, kind, getattr(self, kind) + n)

    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name != "lock")


PACKAGED = "packaged"  # what a step that writes an artifact, its manifest, SBOM or Statement counts as
INSTALLED = "installed"  # what a copy to where the result is used (INSTALL, the ~/.llamafile mirror) counts as


@dataclass
class Counts(Tally):
    compiled: int = 0
    cached: int = 0
    current: int = 0
    failed: int = 0
    packaged: int = 0
    installed: int = 0


def line(counts: Counts, seconds: float) -> str:
    text = f"{counts.compiled} compiled, {counts.cached} from cache, {counts.current} up to date"
    if counts.packaged:
        text += f", {counts.packaged} packaged"
    if counts.installed:
        text += f", {counts.installed} installed"
    if counts.failed:
        text += f", {counts.failed} failed"
    return f"{text} in {seconds:.1f} s"


def dry_line(counts: Counts) -> str:
    """The last line of ``scons -n``: what a build would do; no step ran, nothing was written."""
    text = f"would compile {counts.compiled}, restore {counts.cached} from cache, {counts.current} up to date"
    if counts.packaged:
        text += f", package {counts.packaged}"
    if counts.installed:
        text += f", install {counts.installed}"
    return f"{text} (dry run: nothing was written)"


PROGRESS = re.compile(r"^\[\d+/\d+\] ")  # the prefix site_tools/build_summary gives each step's line


def unprefixed(text: str) -> list[str]:
    """The lines of a build's output with the ``[n/N] `` progress prefix removed (for parsers of step lines)."""
    return [PROGRESS.sub("", line) for line in text.splitlines()]


def progress(text: str) -> list[tuple[int, int]]:
    """Every (n, N) a build's output shows, in order."""
    return [(int(n), int(total)) for n, total in re.findall(r"^\[(\d+)/(\d+)\] ", text, re.M)]


def parse(text: str) -> dict[str, int] | None:
    """The numbers of the last summary line in ``text`` (None when there is none), for tests and scripts."""
    found = re.findall(r"^(\d+) compiled, (\d+) from cache, (\d+) up to date(?:, (\d+) packaged)?(?:, (\d+) installed)?"
                       r"(?:, (\d+) failed)? in [0-9.]+ s$", text, re.M)
    if not found:
        return None
    compiled, cached, current, packaged, installed, failed = found[-1]
    return {"compiled": int(compiled), "cached": int(cached), "current": int(current), "failed": int(failed or 0),
            "packaged": int(packaged or 0), "installed": int(installed or 0)}
