"""Observing a full run: every path it stats, opens, lists or runs, and what it prints while reading
(:class:`Recorder`, :func:`start`, :func:`reading_done`)."""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from opencoti_build.incremental.null_build.check import CarryOver
from opencoti_build.incremental.null_build.record import Record, Signature, environment, signature, under

_NOT_OBSERVED = ("/proc/", "/dev/", "/sys/")
_PYCACHE = f"{os.sep}__pycache__"


def _git_files(argv: Sequence[str], cwd: str) -> list[str]:
    """The files whose change changes what ``git -C repo ...`` answers about HEAD and the index."""
    repo = cwd
    if "-C" in argv[:-1]:
        repo = os.path.join(cwd, argv[argv.index("-C") + 1])
    git = os.path.join(repo, ".git")
    files = [git, os.path.join(git, "HEAD"), os.path.join(git, "index"), os.path.join(git, "packed-refs")]
    try:
        with open(os.path.join(git, "HEAD"), encoding="utf-8") as head:
            first = head.readline().strip()
        if first.startswith("ref: "):
            files.append(os.path.join(git, first[5:]))
    except OSError:
        pass
    return files



class _Tee:
    """A text stream that writes through and keeps a copy of what was written."""

    def __init__(self, stream: TextIO, number: int, kept: list[tuple[int, str]]) -> None:
        self._stream, self._number, self._kept = stream, number, kept

    def write(self, text: str) -> int:
        self._kept.append((self._number, text))
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)



@dataclass
class Recorder:
    """Observes a full run (see the module docstring) and writes its record when it ends well."""

    record_path: str
    args: list[str]
    cwd: str
    environ: dict[str, str]
    interpreter: str
    ignored: tuple[str, ...]  # path prefixes never recorded (scratch, the cache, the lock, the record)
    outputs: tuple[str, ...]  # path prefixes the build writes: recorded as they are at the end
    first: dict[str, Signature] = field(default_factory=dict)
    listed: set[str] = field(default_factory=set)
    read_phase: list[tuple[int, str]] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    ok: bool = True
    reading_done: bool = False
    used: set[str] = field(default_factory=set)  # opened, listed or run while reading
    reading: set[str] = field(default_factory=set)
    reading_found: set[str] = field(default_factory=set)
    carried: set[str] = field(default_factory=set)  # build-phase paths taken over from the last record
    kept_reading: set[str] = field(default_factory=set)  # the last record's reading, taken over
    memo: dict[str, str] = field(default_factory=dict)
    build_ended: bool = False  # SCons wrote its sconsign: the build phase ran to its end
    _busy: threading.local = field(default_factory=threading.local)

    def locate(self, ignored: Iterable[str], outputs: Iterable[str], present: Iterable[str]) -> None:
        """Paths under ``ignored`` are never recorded; those under ``outputs`` are recorded as they end up;
        ``present`` must exist (SCons' sconsign: every run rewrites it, `scons -q` included, and what it
        holds only changes when a run rebuilds a target, whose own stat then changes)."""
        self.present = list(present)
        self.ignored = (*self.ignored, *ignored, *self.present)
        self.outputs = tuple(outputs)
        for path in [p for p in self.first if under(p, self.ignored)]:
            del self.first[path]
        self._busy.on = True  # listing again is not the build's reading
        try:
            for path in self.listed:  # listed before the outputs were known: list again without them
                self.first[path] = signature(path, True, self.hidden)
        finally:
            self._busy.on = False

    def seed(self, record: Record, carry: CarryOver) -> None:
        """Keep what ``record`` holds: this run skips work whose observations it would repeat (the scans
        SCons' implicit cache saves, the expansions a memo saves), yet its record must vouch for as much."""
        for path, sig in carry.now.items():
            self.first.setdefault(path, sig)
        self.listed |= record.listed
        self.carried = set(carry.now) - record.reading - record.reading_found
        self.kept_reading = record.reading & carry.now.keys()

    @property
    def hidden(self) -> tuple[str, ...]:
        return self.ignored + self.outputs

    def observe(self, path: Any, listed: bool = False, used: bool = False) -> None:
        """Note ``path``'s signature when first seen; ``used``: opened or run (its content matters)."""
        if getattr(self._busy, "on", False):
            return
        try:
            name = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return  # an fd, or a path that is not one
        if name in self.first and not listed and (not used or self.reading_done):
            return  # seen before, and nothing more to note (most of the build's stats: the decider's)
        if under(name, self.ignored) or name.startswith(_NOT_OBSERVED) or _PYCACHE in name:
            return  # bytecode caches follow their .py files, which are recorded
        if (used or listed) and not self.reading_done:
            self.used.add(name)
        if name in self.first and (not listed or name in self.listed):
            return
        self._busy.on = True
        try:
            if listed:
                self.listed.add(name)
                self.first[name] = signature(name, True, self.hidden)
            else:
                self.first.setdefault(name, signature(name, name in self.listed, self.hidden))
        finally:
            self._busy.on = False

    def audit(self, event: str, args: tuple) -> None:
        if event == "open":
            if args[0] is not None and not isinstance(args[0], int):
                self.observe(args[0], used=True)
        elif event in ("os.listdir", "os.scandir"):
            self.observe(args[0] if args and args[0] is not None else ".", listed=True)
        elif event == "subprocess.Popen":
            self._ran(args[0], args[1], args[2])

    def _ran(self, executable: Any, argv: Any, cwd: Any) -> None:
        if isinstance(argv, (str, bytes)):
            argv = [argv]
        argv = [os.fsdecode(a) for a in argv] if argv else []
        program = os.fsdecode(executable) if executable else (argv[0] if argv else "")
        if not program:
            return
        self._busy.on = True
        try:
            import shutil

            found = shutil.which(program) if os.sep not in program else program
        finally:
            self._busy.on = False
        if found:
            self.observe(found, used=True)
        if os.path.basename(program) == "git":
            for path in _git_files(argv, os.fsdecode(cwd) if cwd else os.getcwd()):
                self.observe(path, used=True)

    def reading_changed(self) -> str | None:
        """After :func:`reading_done`: what the reading used that differs now, in words (None: nothing), as
        :func:`~opencoti_build.incremental.null_build.check.carry_over` judges a record's reading: what it read,
        listed or ran must be as it was, what it only stat'ed must still be there as the same kind of thing."""
        self._busy.on = True
        try:
            for path in sorted(self.reading):
                if signature(path, path in self.listed, self.hidden) != self.first[path]:
                    return f"{path} changed"
            for path in sorted(self.reading_found):
                now, seen = signature(path, path in self.listed, self.hidden), self.first[path]
                if (now is None) != (seen is None) or (now is not None and seen is not None and now[0] != seen[0]):
                    return f"{path} appeared, vanished or changed kind"
        finally:
            self._busy.on = False
        return None

    def retake(self, paths: Iterable[str], known: Mapping[str, Signature]) -> None:
        """Count ``paths`` as first seen now: the build forgot what it knew of them (a graph read ahead of its
        build), so the build phase reads them afresh. ``known``: signatures just taken (a carry-over's)."""
        self._busy.on = True
        try:
            for path in paths:
                self.first[path] = known[path] if path in known else signature(path, path in self.listed, self.hidden)
        finally:
            self._busy.on = False

    def finish(self, failed: bool, steps: int) -> None:
        """Write the record, or remove a stale one, once the run is over (``steps``: the summary's count).

        A run refused while reading (bad input) leaves the record alone: it wrote nothing, and anything a
        read-time step changed (an apply) changes stats the record holds."""
        if not self.reading_done:
            return
        try:
            os.unlink(self.record_path)
        except OSError:
            pass
        if not (self.ok and self.build_ended and not failed):
            return
        code: set[str] = {os.path.abspath(file) for m in list(sys.modules.values())
                          if (file := getattr(m, "__file__", None))}
        for source in code:
            self.observe(source)
        paths: dict[str, Signature] = {}
        for path, seen in self.first.items():
            now = signature(path, path in self.listed, self.hidden)
            if now != seen and not under(path, self.outputs):
                return  # read, then changed while this run was going: it may have used the old one
            paths[path] = now
        Record(self.args, self.cwd, self.environ, self.interpreter, paths, self.listed, self.present, self.hidden,
               self.read_phase, steps, (self.reading | code) & paths.keys(),
               (self.reading_found - code) & paths.keys(), self.memo).dump(self.record_path)



def start(record_path: str, args: Sequence[str], running: str) -> Recorder:
    """Begin observing this run (once per process). The caller names the build's directories with
    :meth:`Recorder.locate` as soon as it knows them, ends reading with :func:`reading_done`, and has the
    build's end call :meth:`Recorder.finish` (site_tools/null_build_record.py)."""
    recorder = Recorder(record_path, list(args), os.getcwd(), environment(os.environ), running, (record_path,), ())
    real_stat, real_lstat = os.stat, os.lstat

    def observed_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if not kwargs.get("dir_fd") and not isinstance(path, int):
            recorder.observe(path)
        return real_stat(path, *args, **kwargs)

    def observed_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if not kwargs.get("dir_fd") and not isinstance(path, int):
            recorder.observe(path)
        return real_lstat(path, *args, **kwargs)

    os.stat, os.lstat = observed_stat, observed_lstat
    sys.addaudithook(recorder.audit)  # audit hooks cannot be removed: this process records until it exits
    sys.stdout = _Tee(sys.stdout, 1, recorder.read_phase)
    sys.stderr = _Tee(sys.stderr, 2, recorder.read_phase)
    return recorder



def unrecorded(stream: TextIO) -> TextIO:
    """``stream`` without the recorder's copy: for lines a null build must not replay (notes said once)."""
    return stream._stream if isinstance(stream, _Tee) else stream


def reading_done(recorder: Recorder) -> None:
    """The SConscripts are read: stop keeping the output (what follows is the build's)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Tee):
            setattr(sys, name, stream._stream)
    for path in set(recorder.first) - recorder.carried:
        sig = recorder.first[path]
        if path in recorder.used or path in recorder.kept_reading or (sig is not None and sig[0] != "d" and sig[5] & 0o111):
            recorder.reading.add(path)  # read, listed, run, or a program a probe may run: its content counts
        else:
            recorder.reading_found.add(path)  # only stat'ed (a listed source that must exist): whether it is there
    recorder.reading_done = True

