"""Observing a full run: every path it stats, opens, lists or runs, and what it prints while reading
(:class:`Recorder`, :func:`start`, :func:`reading_done`)."""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from opencoti_build import streams
from opencoti_build.incremental import private
from opencoti_build.incremental.null_build import record as record_mod
from opencoti_build.incremental.null_build.check import CarryOver
from opencoti_build.incremental.null_build.record import (
    Record,
    Signature,
    environment,
    key_file,
    sealed,
    signature,
    signed,
    under,
)

_NOT_OBSERVED = ("/proc/", "/dev/", "/sys/")
_PYCACHE = f"{os.sep}__pycache__"
SETTLE_WAIT_NS = 100_000_000  # the longest the end of a run waits for its last outputs' timestamp tick to be over


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



@dataclass(frozen=True)
class Fact:
    """What a reading took from a file: ``seen``, which ``take()`` computes from the file as it is (raising when it
    no longer can: the file is then as good as changed)."""

    take: Callable[[], Any]
    seen: Any

    def holds(self) -> bool:
        try:
            return self.take() == self.seen
        except Exception:  # whatever the reading's check raises on bad input: it would not read the same now
            return False


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
    unsettled: set[str] = field(default_factory=set)  # first stat'ed within their timestamp tick
    started_ns: int = 0  # when the run started (its code was imported after): what the code's stat is judged by
    derived: dict[str, Fact] = field(default_factory=dict)  # files the reading took only a fact from (derive)
    rederived: set[str] = field(default_factory=set)  # of those, the ones changed since, their facts the same
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
            self.unsettled.discard(path)
        self._busy.on = True  # listing again is not the build's reading
        try:
            for path in self.listed:  # listed before the outputs were known: list again without them
                self.first[path] = self._sign(path, True)
        finally:
            self._busy.on = False

    def _sign(self, path: str, listed: bool, looked_at: int | None = None) -> Signature:
        """``path``'s signature now, noted as unsettled when its stat was taken within its timestamp tick (judged
        against ``looked_at``, by default the moment before the stat: any earlier one is stricter)."""
        looked_at = record_mod.now_ns() if looked_at is None else looked_at
        sig, settles_at = signed(path, listed, self.hidden)
        if settles_at > looked_at:
            self.unsettled.add(path)
        else:
            self.unsettled.discard(path)
        return sig

    def seed(self, record: Record, carry: CarryOver) -> None:
        """Keep what ``record`` holds: this run skips work whose observations it would repeat (the scans
        SCons' implicit cache saves, the expansions a memo saves), yet its record must vouch for as much."""
        for path, sig in carry.now.items():
            if path not in self.first:
                self.first[path] = sig
                if path in carry.unsettled:
                    self.unsettled.add(path)
        self.listed |= record.listed
        self.carried = set(carry.now) - record.reading - record.reading_found
        self.kept_reading = record.reading & carry.now.keys()

    @property
    def hidden(self) -> tuple[str, ...]:
        return self.ignored + self.outputs

    def observe(self, path: Any, listed: bool = False, used: bool = False, looked_at: int | None = None) -> None:
        """Note ``path``'s signature when first seen; ``used``: opened or run (its content matters); ``looked_at``:
        when it was read, if before now."""
        name = self._to_note(path, listed, used)
        if name is None:
            return
        if (used or listed) and not self.reading_done:
            self.used.add(name)
        if name in self.first and (not listed or name in self.listed):
            return
        self._busy.on = True
        try:
            if listed:
                self.listed.add(name)
                self.first[name] = self._sign(name, True)
            elif name not in self.first:
                self.first[name] = self._sign(name, name in self.listed, looked_at)
        finally:
            self._busy.on = False

    def _to_note(self, path: Any, listed: bool, used: bool) -> str | None:
        """``path`` as the record names it; None when there is nothing to note: the recorder's own look, an fd, a
        path seen before with nothing new (most of the build's stats: the decider's), one never recorded."""
        if getattr(self._busy, "on", False):
            return None
        try:
            name = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return None  # an fd, or a path that is not one
        if name in self.first and not listed and (not used or self.reading_done):
            return None
        if under(name, self.ignored) or name.startswith(_NOT_OBSERVED) or _PYCACHE in name:
            return None  # bytecode caches follow their .py files, which are recorded
        return name

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

    def derive(self, path: Any, fact: Fact) -> None:
        """The reading took only ``fact`` from the file at ``path`` (what its SConscripts checked and kept of a
        prebuilt host or a model): when that file changes and the fact holds again, the reading is as it was
        (:meth:`reading_changed`), and a server's reader may build the request (opencoti_scons/reader.py)."""
        self.derived[os.path.abspath(os.fsdecode(path))] = fact

    def fact_holds(self, path: str) -> bool:
        """Whether the file at ``path`` (changed since the reading) still gives the fact the reading took from it;
        noted in :attr:`rederived` when it does."""
        if path in self.rederived:
            return True  # asked again in the same check (the reading's, then the carried-over record's)
        fact = self.derived.get(path)
        if fact is None or not fact.holds():
            return False
        self.rederived.add(path)
        return True

    def reading_changed(self) -> str | None:
        """After :func:`reading_done`: what the reading used that differs now, in words (None: nothing), as
        :func:`~opencoti_build.incremental.null_build.check.carry_over` judges a record's reading: what it read,
        listed or ran must be as it was (or give the same fact: :meth:`derive`), what it only stat'ed must still be
        there as the same kind of thing."""
        self._busy.on = True
        try:
            for path in sorted(self.reading):
                if signature(path, path in self.listed, self.hidden) != self.first[path] and not self.fact_holds(path):
                    return f"{path} changed"
                if path in self.unsettled and not under(path, self.outputs):  # a build's own: the lock's to guard
                    return f"{path} was stat'ed within its timestamp tick (it may have changed unseen)"
            for path in sorted(self.reading_found):
                now, seen = signature(path, path in self.listed, self.hidden), self.first[path]
                if (now is None) != (seen is None) or (now is not None and seen is not None and now[0] != seen[0]):
                    return f"{path} appeared, vanished or changed kind"
        finally:
            self._busy.on = False
        return None

    def retake(self, paths: Iterable[str], known: Mapping[str, Signature],
               unsettled: Collection[str] = frozenset()) -> None:
        """Count ``paths`` as first seen now: the build forgot what it knew of them (a graph read ahead of its
        build), so the build phase reads them afresh. ``known``: signatures just taken (a carry-over's), of which
        ``unsettled`` were taken within their timestamp tick."""
        self._busy.on = True
        try:
            for path in paths:
                if path in known:
                    self.first[path] = known[path]
                    (self.unsettled.add if path in unsettled else self.unsettled.discard)(path)
                else:
                    self.first[path] = self._sign(path, path in self.listed)
        finally:
            self._busy.on = False

    def finish(self, failed: bool, steps: int, end_lines: Sequence[str] = ()) -> None:
        """Write the record, or remove a stale one, once the run is over (``steps``: the summary's count;
        ``end_lines``: what the run printed before its summary that a null build prints too).

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
            self.observe(source, looked_at=self.started_ns or None)  # imported when the run started, or before
        signed_now = self._signed_at_end()
        if signed_now is None:
            return
        paths, late = signed_now
        unsettled = {p for p in self.unsettled if p in paths and not under(p, self.outputs)} | self._settle(late, paths)
        key = private.key(key_file(self.record_path))
        args, environ = sealed(key, self.args, self.environ)
        Record(args, self.cwd, environ, self.interpreter, paths, self.listed, self.present, self.hidden,
               self.read_phase, steps, (self.reading | code) & paths.keys(),
               (self.reading_found - code) & paths.keys(), self.memo, unsettled, list(end_lines)).dump(self.record_path)

    def _signed_at_end(self) -> tuple[dict[str, Signature], dict[str, int]] | None:
        """Every path seen, signed as it is now, and the outputs whose timestamp tick is not over yet (-> when it
        is); None when an input changed after the run first looked at it (it may have used the old one)."""
        paths: dict[str, Signature] = {}
        late: dict[str, int] = {}
        looked_at = record_mod.now_ns()
        for path, seen in self.first.items():
            now, settles_at = signed(path, path in self.listed, self.hidden)
            if not under(path, self.outputs):
                if now != seen:
                    return None
            elif settles_at > looked_at:
                late[path] = settles_at  # written by this run, as it left them: they count from now, as git's index
            paths[path] = now
        return paths, late

    def _settle(self, late: dict[str, int], paths: dict[str, Signature]) -> set[str]:
        """Outputs whose stat is not settled yet: waited for when their tick ends within SETTLE_WAIT_NS (a jiffy where
        stamps are fine), then signed again (``paths`` updated); those still unsettled after it."""
        if not late:
            return set()
        wait = max(late.values()) - record_mod.now_ns()
        if wait > SETTLE_WAIT_NS:
            return set(late)  # whole-second stamps: the record does not vouch for them, a full run hashes them again
        if wait > 0:
            time.sleep(wait / 1e9)
        looked_at = record_mod.now_ns()
        still = set()
        for path in late:
            now, settles_at = signed(path, path in self.listed, self.hidden)
            if now != paths[path] or settles_at > looked_at:
                paths[path] = now
                still.add(path)
        return still



def start(record_path: str, args: Sequence[str], running: str, started_ns: int = 0) -> Recorder:
    """Begin observing this run (once per process; ``started_ns``: when it started, before the build's code was
    imported). The caller names the build's directories with :meth:`Recorder.locate` as soon as it knows them, ends
    reading with :func:`reading_done`, and has the build's end call :meth:`Recorder.finish`
    (site_tools/null_build_record.py)."""
    recorder = Recorder(record_path, list(args), os.getcwd(), environment(os.environ), running, (record_path,), (),
                        started_ns=started_ns)
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
    streams.replace(stdout=_Tee(sys.stdout, 1, recorder.read_phase), stderr=_Tee(sys.stderr, 2, recorder.read_phase))
    return recorder



def unrecorded(stream: TextIO) -> TextIO:
    """``stream`` without the recorder's copy: for lines a null build must not replay (notes said once)."""
    return stream._stream if isinstance(stream, _Tee) else stream


def reading_done(recorder: Recorder) -> None:
    """The SConscripts are read: stop keeping the output (what follows is the build's)."""
    streams.replace(stdout=unrecorded(sys.stdout), stderr=unrecorded(sys.stderr))
    for path in set(recorder.first) - recorder.carried:
        sig = recorder.first[path]
        if path in recorder.used or path in recorder.kept_reading or (sig is not None and sig[0] != "d" and sig[5] & 0o111):
            recorder.reading.add(path)  # read, listed, run, or a program a probe may run: its content counts
        else:
            recorder.reading_found.add(path)  # only stat'ed (a listed source that must exist): whether it is there
    recorder.reading_done = True

