"""SHA-256 digests of files the build has just read or written whole, so SCons need not read them again.

The packager reads the model once and writes the artifact once, hashing both as it goes. SCons
would otherwise read both again to sign them (its MD5 content signature, which it records for every
node). A digest is remembered with the file's stat identity as the packager saw it (device, inode,
size, mtime and ctime in ns: the model's while it was read, unchanged from before the read to
after it; the artifact's right after its rename) and is given back only while the file still has
that identity. Any write, truncation, chmod or replacement moves one of them, so a changed file is
hashed again as usual; only a write within the same kernel timestamp tick goes unseen, as it does
for make, Ninja and SCons' own content-timestamp decider.

Signatures given this way read ``sha256:<hex>``: never equal to an MD5 signature, so a comparison
across the two kinds counts as a change (a rebuild), never as a match.

What the packager read as an entry (the model, the DSOs) is remembered with its CRC-32 too, and kept across
runs in ``BUILD_DIR/file-digests.json`` (:meth:`Digests.keep_in`): a repackage whose model did not change
knows the model's local header before its data, so the artifact's SHA-256 is taken as it is written and the
model is read once, not hashed again (formats/zipappend.py). Each such record says whether it was settled: read
a timestamp tick or more after the file's last change (opencoti_build.incremental.timestamps), so that no later
write can keep its stat. Git's racily-clean rule: an unsettled record vouches for nothing in a later run; the
packager hashes the bytes it copies again (a change within that tick is caught there) and :meth:`Digests.known`
does not give it to SCons; a settled one's digests are not computed again.

Two more facts are kept beside that record (``BUILD_DIR/file-facts.json``, rewritten only when one changes), read
by a package run's SConscripts before the first step: the SHA-256 of each file of a tree the provenance Statement
digests (SCons's own package, a source tree that is no git checkout, the toolchains' programs: :meth:`Digests.sha256`,
by stat identity under the same settled rule, and never given to SCons, whose nodes some of those files are), and the
package modules each source file imports, by that file's SHA-256 (:meth:`Digests.imported_names`, for
opencoti_build.incremental.import_closure). Without them a package run read and hashed SCons's 1,500 files and parsed
the packager's 50 modules each time (bench/tuning.md, "Issue 49").
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

from opencoti_build import tempfiles
from opencoti_build.files import Identity, identity
from opencoti_build.incremental import timestamps

PREFIX = "sha256:"
RECORD_NAME = "file-digests.json"
FACTS_NAME = "file-facts.json"  # beside it: the provenance's file digests and the sources' imports
_FORMAT = 2
_FACTS_FORMAT = 1


class Digests:
    """The digests one run knows: path -> (the stat identity it had, its ``sha256:`` signature, an entry's CRC-32,
    whether that stat was settled when read)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Identity, str, int | None, bool]] = {}
        self._record: Path | None = None
        self._unsettled_earlier: set[str] = set()  # loaded from the record, taken within their file's timestamp tick
        self._hashed: dict[str, tuple[Identity, str, bool]] = {}  # a tree's files (provenance): never a signature
        self._imports: dict[str, list[str]] = {}  # a source's SHA-256 -> the package modules it imports
        self._imports_used: set[str] = set()  # looked up this run: the record keeps these (all, when none were)
        self._changed = False  # the entries, since the record was loaded or saved: save() writes only then
        self._facts_changed = False  # the facts (_hashed, _imports), likewise
        self._lock = threading.Lock()  # artifact steps run on several workers

    def remember(self, path: Path | str, st: os.stat_result, sha256: str, crc32: int | None = None,
                 settled: bool = False) -> None:
        """``path`` had the SHA-256 ``sha256`` (and, read as an entry, the CRC-32 ``crc32``) while it had the stat ``st``
        (``settled``: taken a tick or more after its last change, timestamps.settled)."""
        with self._lock:
            self._known[os.path.abspath(path)] = (identity(st), PREFIX + sha256, crc32, settled)
            self._unsettled_earlier.discard(os.path.abspath(path))
            self._changed = True

    def sha256(self, path: Path | str) -> str:
        """The SHA-256 (hex) of the file at ``path`` (a link read through), for a digest of a tree or a program:
        the one a run recorded for its present stat identity when that was settled, else read and hashed now (and
        recorded). Never given to SCons as a node's signature (:meth:`known` does not see these)."""
        path = os.path.abspath(path)
        looked_at = time.time_ns()
        found = self._hashed.get(path)
        if found is not None and found[2] and found[0] == identity(os.stat(path)):
            return found[1]
        before, digest = _hashed_whole(path)
        if before is not None:
            with self._lock:
                self._hashed[path] = (identity(before), digest, timestamps.settled(before, looked_at))
                self._facts_changed = True
        return digest

    def imported_names(self, source_sha256: str) -> list[str] | None:
        """The package modules a source whose SHA-256 is ``source_sha256`` imports, as a run recorded them."""
        with self._lock:
            self._imports_used.add(source_sha256)
            return self._imports.get(source_sha256)

    def remember_imports(self, source_sha256: str, names: list[str]) -> None:
        """Record the package modules a source whose SHA-256 is ``source_sha256`` imports (import_closure)."""
        with self._lock:
            self._imports[source_sha256] = names
            self._imports_used.add(source_sha256)
            self._facts_changed = True

    def entry(self, path: Path | str, st: os.stat_result) -> tuple[str, int, bool] | None:
        """(sha256, crc32, settled) recorded for ``path`` read as an entry, if ``st`` is still the stat it had then."""
        found = self._known.get(os.path.abspath(path))
        if found is None or found[2] is None or found[0] != identity(st):
            return None
        return found[1].removeprefix(PREFIX), found[2], found[3]

    def keep_in(self, record: Path) -> None:
        """Load the entries' digests an earlier run kept in ``record`` (once), and the facts kept beside it
        (:data:`FACTS_NAME`); keep this run's there on :meth:`save`."""
        with self._lock:
            if self._record is not None:
                return
            self._record = record
            self._load_facts(_read_json(record.with_name(FACTS_NAME)))
            data = _read_json(record)
            if data.get("format") != _FORMAT or not isinstance(data.get("files"), dict):
                return  # none yet, unreadable, or of another format: every entry is hashed as it is read
            for path, value in data["files"].items():
                try:
                    (dev, ino, size, mtime, ctime), sha256, crc32, settled = value
                    ident = (int(dev), int(ino), int(size), int(mtime), int(ctime))
                    if path not in self._known:
                        self._known[path] = (ident, PREFIX + str(sha256), int(crc32), settled is True)
                        if settled is not True:
                            self._unsettled_earlier.add(path)
                except (TypeError, ValueError):
                    continue

    def _load_facts(self, data: dict) -> None:
        """The tree files' digests and the sources' imports an earlier run kept (see the module docstring)."""
        if data.get("format") != _FACTS_FORMAT:
            return
        for path, value in (data.get("hashed") or {}).items():
            try:
                (dev, ino, size, mtime, ctime), sha256 = value
                self._hashed.setdefault(path, ((int(dev), int(ino), int(size), int(mtime), int(ctime)), str(sha256),
                                               True))  # only settled ones are kept
            except (TypeError, ValueError):
                continue
        for source, names in (data.get("imports") or {}).items():
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                self._imports.setdefault(source, names)

    def save(self) -> None:
        """Write what changed since the records were loaded or last saved (atomically): the entries' digests whose
        files still have the recorded stat, and the facts (each packaging step saves; the facts, a thousand files'
        digests, change only when those files do)."""
        with self._lock:
            if self._record is None:
                return
            if self._changed:
                files = {}
                for path, (ident, signature, crc32, settled) in sorted(self._known.items()):
                    if crc32 is not None and _still(path, ident):
                        files[path] = [list(ident), signature.removeprefix(PREFIX), crc32, settled]
                if _write_json(self._record, {"format": _FORMAT, "files": files}):
                    self._changed = False
            if self._facts_changed:
                hashed = {path: [list(ident), sha256] for path, (ident, sha256, settled)
                          in sorted(self._hashed.items()) if settled and _still(path, ident)}
                imports = {source: self._imports[source] for source in sorted(self._imports_used or self._imports)}
                if _write_json(self._record.with_name(FACTS_NAME),
                               {"format": _FACTS_FORMAT, "hashed": hashed, "imports": imports}):
                    self._facts_changed = False

    def known(self, path: Path | str) -> str | None:
        """The remembered signature of ``path``, if it still has the stat it had then and an earlier run's record
        of it was settled; else None."""
        entry = self._known.get(os.path.abspath(path))  # (no stat for a file never remembered: every node asks)
        if entry is None or os.path.abspath(path) in self._unsettled_earlier:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return entry[1] if identity(st) == entry[0] else None

    def signature(self, path: Path | str) -> str:
        """``path``'s ``sha256:`` signature: the remembered one, else read and hashed now (and remembered)."""
        found = self.known(path)
        if found is not None:
            return found
        before, digest = _hashed_whole(path)
        if before is not None:
            self.remember(path, before, digest)
        return PREFIX + digest


def _hashed_whole(path: Path | str) -> tuple[os.stat_result | None, str]:
    """(the stat it had, when nothing changed it while it was read, else None; its SHA-256) of the file at ``path``."""
    with open(path, "rb", buffering=0) as f:
        before = os.fstat(f.fileno())
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        unchanged = identity(os.fstat(f.fileno())) == identity(before)
    return (before if unchanged else None), digest


def _read_json(path: Path) -> dict:
    """The JSON object in ``path``; empty when there is none or it cannot be read."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict) -> bool:
    """Replace ``path`` with ``data`` atomically; False when it cannot be written (the next run hashes again)."""
    staged: Path | None = None
    try:  # a run killed while writing leaves a locked temporary the next save sweeps
        tempfiles.remove_stale(path.parent, path.name)
        fd, staged = tempfiles.create(path)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(data, indent=0) + "\n")
        os.replace(staged, path)
        return True
    except OSError:
        if staged is not None:
            staged.unlink(missing_ok=True)
        return False


def _still(path: str, ident: Identity) -> bool:
    """Whether the file at ``path`` still has the stat identity ``ident``."""
    try:
        return identity(os.stat(path)) == ident
    except OSError:
        return False
