"""The null build's fast path: a run that would find nothing to do exits right after SConstruct starts.

SCons tracks nodes, but reading the SConscripts depends on more: they read files, list directories
(globs, header search paths), run probes (nvcc --version, git), read environment variables and look
for stray DSOs in $HOME. So a successful run records everything it touched, observed where Python
touches the file system: every path it stat'ed (``os.stat``/``os.lstat``: existence checks, SCons'
node stats, ``shutil.which``), opened (audit event ``open``), listed (``os.listdir``/``os.scandir``)
or ran (``subprocess.Popen``, with the git files a ``git -C`` probe reads), every imported module's
file, its command line, working directory and whole environment. The next run compares all of it
first: when nothing differs it prints what the recorded run printed while reading, SCons' "is up to
date" lines and the summary, and exits. Any difference, and any run this cannot vouch for, takes the
full path, which decides exactly as before.

When only the build phase's files changed (an edit of a source or header: nothing the SConscripts read
or listed, no code, no variable), the full run's reading is the recorded one's, so it may reuse what that
reading computed (:class:`Memo`: the compile database's digest) and, while no file a header search
looked at appeared or vanished, the includes SCons scanned (its implicit cache): :func:`carry_over`.
Such a run keeps every recorded path in its own record, since it skips the work that observed them.

Never recorded, so never fast: runs with options other than -Q, -s, -k, -j N; runs asking for
``package`` or ``verify``; runs whose graph holds a step that always runs; failed or interrupted runs; and a run during which
a file it read outside the output directories changed (its stat at the end differs from the first
one seen: it may have been read before the change).

Signatures: a file is (type, size, mtime_ns, ctime_ns, inode), so an edit, a touch, a replacement
or a deletion is seen; a directory is its inode and, when the run listed it, its sorted entry names.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import stat as stat_mod
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

RECORD_NAME = ".null-build"
FORMAT = 2
# Options that change neither what is built nor what is printed about it.
_FREE_OPTIONS = {"-Q", "-s", "--silent", "--quiet", "-k", "--keep-going"}
_WITH_VALUE: dict[str, Callable[[str], bool]] = {"-j": str.isdigit, "--jobs": str.isdigit,
                                                 "-C": bool, "--directory": bool}
_NEVER_FAST = {"package", "verify"}  # their checks read whole artifacts: always the full path
_VOLATILE_ENV = {"_", "OLDPWD"}  # set by the shell per command, read by nothing here
_NOT_OBSERVED = ("/proc/", "/dev/", "/sys/")
_PYCACHE = f"{os.sep}__pycache__"

Signature = tuple | None


def eligible(args: Sequence[str]) -> bool:
    """Whether a run with these command-line arguments (after the program name) may take the fast path."""
    value_check: Callable[[str], bool] | None = None
    for arg in args:
        if value_check is not None:
            if not value_check(arg):
                return False
            value_check = None
            continue
        if arg in _FREE_OPTIONS:
            continue
        if arg in _WITH_VALUE:
            value_check = _WITH_VALUE[arg]
            continue
        option, _, value = arg.partition("=") if arg.startswith("--") else (arg[:2], "", arg[2:])
        if option in _WITH_VALUE and value and _WITH_VALUE[option](value):
            continue  # -j4, --jobs=4, -Cdir, --directory=dir
        if arg.startswith("-"):
            return False
        if "=" not in arg and arg in _NEVER_FAST:
            return False
    return value_check is None


def _listing(path: str, hidden: tuple[str, ...]) -> str | None:
    try:
        names = sorted(n for n in os.listdir(path) if not _under(os.path.join(path, n), hidden))
    except OSError:
        return None
    return hashlib.sha256("\0".join(names).encode(errors="surrogateescape")).hexdigest()


def signature(path: str, listed: bool, hidden: tuple[str, ...] = ()) -> Signature:
    """What must stay the same about ``path``: see the module docstring. A listing leaves out the entries
    under ``hidden`` (the build's own outputs and scratch: a cold build creates them beside its inputs)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    kind = stat_mod.S_IFMT(st.st_mode)
    if kind == stat_mod.S_IFDIR:
        return ("d", st.st_ino, _listing(path, hidden) if listed else None)
    return (kind, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode & 0o7777)


def environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in _VOLATILE_ENV}


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


@dataclass
class Record:
    args: list[str]
    cwd: str
    environ: dict[str, str]
    interpreter: str
    paths: dict[str, Signature]
    listed: set[str]
    present: list[str]  # files that must exist, whatever their stat (SCons' own sconsign)
    hidden: tuple[str, ...]  # outputs and scratch, left out of directory listings
    replay: list[tuple[int, str]]  # (1 stdout | 2 stderr, text), in the order written
    top_targets: list[str]
    steps: int
    reading: set[str] = field(default_factory=set)  # what the SConscripts read, listed or ran, and the code
    reading_found: set[str] = field(default_factory=set)  # what they only stat'ed: its existence counts
    memo: dict[str, str] = field(default_factory=dict)  # what reading computed (see :func:`carry_over`)

    def dump(self, path: str) -> None:
        data = marshal.dumps((FORMAT, self.args, self.cwd, self.environ, self.interpreter, self.paths,
                              sorted(self.listed), self.present, self.hidden, self.replay, self.top_targets,
                              self.steps, sorted(self.reading), sorted(self.reading_found), self.memo))
        staged = f"{path}.{os.getpid()}.tmp"
        with open(staged, "wb") as out:
            out.write(data)
        os.replace(staged, path)

    @classmethod
    def load(cls, path: str) -> Record | None:
        try:
            with open(path, "rb") as handle:
                fields = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        if not isinstance(fields, tuple) or len(fields) != 15 or fields[0] != FORMAT:
            return None
        (_, args, cwd, environ, interpreter, paths, listed, present, hidden, replay, tops, steps, reading,
         reading_found, memo) = fields
        return cls(args, cwd, environ, interpreter, paths, set(listed), present, hidden, replay, tops, steps,
                   set(reading), set(reading_found), memo)


def interpreter(scons_version: str) -> str:
    """What runs the build: the recorded run's and this one's must be the same."""
    return f"{sys.executable} {sys.version} SCons {scons_version}"


def difference(record: Record, args: Sequence[str], cwd: str, environ: Mapping[str, str],
               running: str) -> str | None:
    """The first thing ``record`` depends on that differs now, in words; None when nothing does."""
    if record.args != list(args):
        return "the command line"
    if record.cwd != cwd:
        return "the working directory"
    now = environment(environ)
    if record.environ != now:
        changed = sorted(k for k in set(now) | set(record.environ) if now.get(k) != record.environ.get(k))
        return f"the environment ({', '.join(changed)})"
    if record.interpreter != running:
        return "the Python or SCons running the build"
    for path in record.present:
        if not os.path.isfile(path):
            return f"{path} is missing"
    listed, hidden = record.listed, record.hidden
    for path, sig in record.paths.items():
        if signature(path, path in listed, hidden) != sig:
            return f"{path} changed"
    return None


def _kind(sig: Signature) -> Signature:
    """Whether a path is there, and as what (a file of some type, a directory)."""
    return None if sig is None else sig[:1]


def _found(sig: Signature) -> Signature:
    """What a header search sees of a path: its kind, and a listed directory's entries."""
    return sig if sig is None or sig[0] == "d" else sig[:1]


@dataclass(frozen=True)
class CarryOver:
    """What a run may take from the last record when the SConscripts' reading is the same as then.

    ``now``: every recorded path's signature at the check; ``memo``: what that reading computed
    (:class:`Memo`); ``implicit_cache``: no file the build phase looked at appeared, vanished or
    changed kind and no directory it listed changed, so no header search can find another file than
    before and SCons may reuse the includes it scanned (SCons' implicit cache; a changed file is still
    rescanned, as SCons does for any out-of-date target)."""

    now: dict[str, Signature]
    memo: dict[str, str]
    implicit_cache: bool


def carry_over(record: Record, args: Sequence[str], cwd: str, environ: Mapping[str, str],
               running: str) -> CarryOver | None:
    """What this run may reuse from ``record`` (see CarryOver); None when anything the reading used differs:
    the command line, working directory, environment, Python, SCons, the code, a file the SConscripts
    opened or ran (or an executable they looked at: a probe's compiler), a directory they listed, or the
    existence of a file they looked for. Sources and headers may have been edited, outputs rebuilt."""
    if (record.args, record.cwd, record.interpreter) != (list(args), cwd, running):
        return None
    if record.environ != environment(environ):
        return None
    now: dict[str, Signature] = {}
    same_search = True
    for path, sig in record.paths.items():
        current = now[path] = signature(path, path in record.listed, record.hidden)
        if current != sig:
            if path in record.reading:
                return None
            if path in record.reading_found and _kind(current) != _kind(sig):
                return None
            same_search = same_search and _found(current) == _found(sig)
    return CarryOver(now, dict(record.memo), same_search)


@dataclass
class Memo:
    """Values one run's reading computes from what the record holds (the compile database's digest): those of the
    last run when its reading carried over, and this run's, which its record keeps for the next."""

    carried: dict[str, str] = field(default_factory=dict)  # the last reading's (carry_over), else empty
    kept: dict[str, str] = field(default_factory=dict)  # this reading's: the recorder's memo, when one records

    def remembered(self, key: str) -> str | None:
        """A value this run's reading computed last time, when that reading is known to be the same."""
        return self.carried.get(key)

    def remember(self, key: str, value: str) -> None:
        """Keep ``value`` for the next run's :meth:`remembered`."""
        self.kept[key] = value


def replay(record: Record, quiet: bool, silent: bool, seconds: float) -> None:
    """Print what a full run prints when it finds nothing to do (``seconds``: this run's time so far)."""
    from opencoti_build.report import summary

    streams = {1: sys.stdout, 2: sys.stderr}
    for stream, text in record.replay:
        streams[stream].write(text)
        streams[stream].flush()
    out = sys.stdout
    if not quiet:
        out.write("scons: done reading SConscript files.\nscons: Building targets ...\n")
    if not silent:
        for target in record.top_targets:
            out.write(f"scons: `{target}' is up to date.\n")
    if not quiet:
        out.write("scons: done building targets.\n")
    out.write(summary.line(summary.Counts(current=record.steps), seconds) + "\n")
    out.flush()


def _under(path: str, places: tuple[str, ...]) -> bool:
    """``path`` is one of ``places``, inside one (a directory), or a sibling temporary of one (``name.tmp``)."""
    return any(path == p or path.startswith(p) and path[len(p)] in (os.sep, ".") for p in places)


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
    top_targets: list[str] = field(default_factory=list)
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
        for path in [p for p in self.first if _under(p, self.ignored)]:
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
        if _under(name, self.ignored) or name.startswith(_NOT_OBSERVED) or _PYCACHE in name:
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
            if now != seen and not _under(path, self.outputs):
                return  # read, then changed while this run was going: it may have used the old one
            paths[path] = now
        Record(self.args, self.cwd, self.environ, self.interpreter, paths, self.listed, self.present, self.hidden,
               self.read_phase, self.top_targets, steps, (self.reading | code) & paths.keys(),
               (self.reading_found - code) & paths.keys(), self.memo).dump(self.record_path)


def record_file(build_dir: str) -> str:
    return os.path.join(build_dir, RECORD_NAME)


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
