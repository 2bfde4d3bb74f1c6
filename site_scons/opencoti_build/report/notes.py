"""Lines a build says once per configuration, not every run: the toolchain it compiles with, the web UI it leaves out,
a GPU toolchain that is missing or cannot build everything (said by opencoti_scons.progress.BuildRun: note, warn).

Each note has a topic; the line last said for each topic is kept in ``BUILD_DIR/notes-said.json``. A note is said
when its line differs from the one kept (the first build, a changed COSMOCC, a tree that gained its UI assets), or
always with ``VERBOSE=1``; otherwise it stays quiet, so a build that changes nothing prints only its summary.
Nothing here is an input of the build: a lost or unreadable file only means the notes are said again.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from opencoti_build import tempfiles

FILE_NAME = "notes-said.json"


class Notes:
    """The notes of one run: which to say, and what to keep for the next run (:meth:`save`)."""

    def __init__(self, path: Path | None, always: bool = False) -> None:
        self.path = path  # None: nothing kept (a dry run writes nothing; `-h` reads no SConscript)
        self.always = always
        self.said = _load(path) if path is not None and not always else {}
        self._changed = False

    def should_say(self, topic: str, line: str | None) -> bool:
        """Whether ``line`` is news for ``topic``; it is remembered as said either way. None: the topic has nothing
        to say this run (the web UI is in), so its line is news again the next time it has one."""
        if line is None:
            self._changed |= self.said.pop(topic, None) is not None
            return False
        if self.said.get(topic) == line:
            return self.always
        self.said[topic] = line
        self._changed = True
        return True

    def save(self) -> None:
        """Keep what was said (by rename: a killed run leaves the last whole file); a write that fails is dropped."""
        if self.path is None or not self._changed:
            return
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tempfiles.remove_stale(self.path.parent, self.path.name)  # what a run killed while writing it left
            fd, tmp = tempfiles.create(self.path)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(self.said, fh, sort_keys=True)
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)
        self._changed = False


def _load(path: Path) -> dict[str, str]:
    try:
        said = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(said, dict):
        return {}
    return {k: v for k, v in said.items() if isinstance(k, str) and isinstance(v, str)}
