"""Whether a run may take the fast path: its arguments, then every recorded path and setting compared; what a
run whose reading is the last one's may carry over (:class:`CarryOver`, :class:`Memo`)."""
from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from opencoti_build.errors import WhyNot
from opencoti_build.incremental.null_build import record as record_mod
from opencoti_build.incremental.null_build.record import Record, Signature, sealed, signature, signed

# Options that change neither what is built nor what is printed about it.
_FREE_OPTIONS = {"-Q", "-s", "--silent", "--quiet", "-k", "--keep-going"}
_WITH_VALUE: dict[str, Callable[[str], bool]] = {"-j": str.isdigit, "--jobs": str.isdigit,
                                                 "-C": bool, "--directory": bool}
# Targets whose runs are never recorded, and why: a run asking for one always takes the full path.
_NEVER_FAST = {
    "verify": "verify reads every artifact whole, each time",
    "install": "install writes outside the build's directories",
}
_NEVER_FAST_VARIABLES = {"TRACE": "TRACE= is written by the build phase, which the fast path skips"}


def eligible(args: Sequence[str]) -> bool:
    """Whether a run with these command-line arguments (after the program name) may take the fast path."""
    return why_never_recorded(args) is None


def why_never_recorded(args: Sequence[str]) -> WhyNot:
    """Why a run with these command-line arguments (after the program name) is never recorded, so never answered
    from a record, in words; None when it may be."""
    value_check: Callable[[str], bool] | None = None
    for arg in args:
        if value_check is not None:
            if not value_check(arg):
                return f"the option value {arg!r}"
            value_check = None
        elif arg in _WITH_VALUE:
            value_check = _WITH_VALUE[arg]
        elif (why := _why_not_option(arg) if arg.startswith("-") else _why_not_argument(arg)) is not None:
            return why
    return None if value_check is None else "an option without its value"


def _why_not_option(arg: str) -> WhyNot:
    """An option with its value attached, if any (-j4, --jobs=4, -Cdir, --directory=dir)."""
    if arg in _FREE_OPTIONS:
        return None
    option, _, value = arg.partition("=") if arg.startswith("--") else (arg[:2], "", arg[2:])
    if option in _WITH_VALUE and value and _WITH_VALUE[option](value):
        return None
    return f"the option {arg} (only -Q, -s, -k, -j N and -C DIR leave a run recordable)"


def _why_not_argument(arg: str) -> WhyNot:
    """A target or a NAME=VALUE variable."""
    name, equals, value = arg.partition("=")
    if not equals:
        return _NEVER_FAST.get(arg)
    return _NEVER_FAST_VARIABLES.get(name) if value else None


def difference(record: Record, args: Sequence[str], cwd: str, environ: Mapping[str, str],
               running: str) -> str | None:
    """The first thing ``record`` depends on that differs now, in words; None when nothing does."""
    return settings_difference(record, args, cwd, environ, running) or paths_difference(record)


def settings_difference(record: Record, args: Sequence[str], cwd: str, environ: Mapping[str, str],
                        running: str) -> str | None:
    """The first of the run's settings (command line, directory, environment, interpreter) that differs."""
    now_args, now = sealed(record.key, args, environ)
    if record.args != now_args:
        return "the command line"
    if record.cwd != cwd:
        return "the working directory"
    if record.environ != now:
        changed = sorted(k for k in set(now) | set(record.environ) if now.get(k) != record.environ.get(k))
        return f"the environment ({', '.join(changed)})"
    if record.interpreter != running:
        return "the Python or SCons running the build"
    return None


def paths_difference(record: Record, only: Collection[str] | None = None) -> str | None:
    """The first recorded path that differs now (of ``only``, when given: what a watcher saw change), else the
    first whose stat the record cannot vouch for (taken within its timestamp tick: it may have changed since and
    kept that stat, so a full run hashes it again), whatever ``only`` says."""
    wanted = None if only is None else set(only)
    for path in record.present:
        if (wanted is None or path in wanted) and not os.path.isfile(path):
            return f"{path} is missing"
    listed, hidden = record.listed, record.hidden
    for path in record.paths if only is None else [p for p in only if p in record.paths]:
        if signature(path, path in listed, hidden) != record.paths[path]:
            return f"{path} changed"
    if record.unsettled:
        return f"{min(record.unsettled)} was stat'ed within its timestamp tick (it may have changed unseen)"
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
    rescanned, as SCons does for any out-of-date target); ``unsettled``: the paths of ``now`` whose stat was
    taken within its timestamp tick."""

    now: dict[str, Signature]
    memo: dict[str, str]
    implicit_cache: bool
    unsettled: frozenset[str] = frozenset()



def carry_over(record: Record, args: Sequence[str], cwd: str, environ: Mapping[str, str], running: str,
               fact_holds: Callable[[str], bool] = lambda path: False) -> CarryOver | None:
    """What this run may reuse from ``record`` (see CarryOver); None when anything the reading used differs:
    the command line, working directory, environment, Python, SCons, the code, a file the SConscripts
    opened or ran (or an executable they looked at: a probe's compiler; unless ``fact_holds`` of it: the reading
    took only a fact from it, which the file still gives, Recorder.derive), a directory they listed, or the
    existence of a file they looked for, or a file they read whose stat the record cannot vouch for. Sources and
    headers may have been edited, outputs rebuilt."""
    now_args, now_environ = sealed(record.key, args, environ)
    if (record.args, record.cwd, record.interpreter) != (now_args, cwd, running):
        return None
    if record.environ != now_environ or record.unsettled & record.reading:
        return None
    now: dict[str, Signature] = {}
    unsettled = set()
    same_search = True
    for path, sig in record.paths.items():
        looked_at = record_mod.now_ns()
        current, settles_at = signed(path, path in record.listed, record.hidden)
        now[path] = current
        if settles_at > looked_at:
            unsettled.add(path)
        if current != sig:
            if path in record.reading and not fact_holds(path):
                return None
            if path in record.reading_found and _kind(current) != _kind(sig):
                return None
            same_search = same_search and _found(current) == _found(sig)
    return CarryOver(now, dict(record.memo), same_search, frozenset(unsettled))



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

