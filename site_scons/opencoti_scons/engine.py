"""The one module that touches SCons internals: every replacement of an SCons function or method, every
private SCons name the build reads, and every module-level switch of SCons's (``-n``, ``-s``, ``--cache-debug``, ...)
the build looks at, is here, gated on the SCons releases it was written against.

SCons offers no public extension point for what these do (its Decider decides from inputs only, ``Progress``
runs before a node is evaluated, not after it is built, and ``SConsign`` has no write hook); each entry of
:data:`PATCHES` says why next to it. A tool asks for a patch by name through :func:`install` with a function
that builds the replacement from the original; the patch is applied once per process (SCons's classes are
process-wide), and only under a supported SCons. What it does is looked up on every call: the replacement receives the
run SConstruct bound last (:func:`bind`) before SCons's own arguments, so a second run in one process is served by its
own objects, never by those of the run that installed the patch. SConstruct calls :func:`require_supported` before
anything else, so another SCons stops with one line instead of misbehaving.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import SCons
import SCons.Action
import SCons.CacheDir
import SCons.dblite
import SCons.Errors
import SCons.Executor
import SCons.Node
import SCons.Node.Alias
import SCons.Node.FS
import SCons.SConsign
import SCons.Script
import SCons.Script.Main
import SCons.Taskmaster
import SCons.Taskmaster.Job
import SCons.Util

from opencoti_build.errors import UserError, WhyNot, fail, interrupted

# Lowest supported release and first unsupported one: every patch below was read against SCons 4.11's sources.
# pyproject.toml's requirement says the same (tests/unit/test_engine.py checks that they agree).
SUPPORTED = ((4, 11), (4, 12))
REQUIREMENT = f"scons>={SUPPORTED[0][0]}.{SUPPORTED[0][1]},<{SUPPORTED[1][0]}.{SUPPORTED[1][1]}"
MARK = "opencoti_patch"  # the attribute an installed patch carries: its PATCHES name
SCONSIGN = ".sconsign"  # BUILD_DIR/.sconsign: SConstruct's SConsignFile, ...
SCONSIGN_DB = SCONSIGN + ".dblite"  # ... and the file SCons's dblite writes for it


class PrivateDblite:
    """SCons's own dblite for ``SConsignFile(name, dbm_module)``, its file the user's alone (0600: it holds every
    command line the build ran; dblite creates it 0666 less the umask)."""

    @staticmethod
    def open(file: str, flag: str = "r", mode: int = 0o600) -> Any:
        return SCons.dblite.open(file, flag, mode & 0o600)


class DryRunDblite:
    """A dry run's signature database (``scons -n``, which writes nothing): the last build's records, read into memory,
    or none. SCons's dblite creates its file when opening one that is absent (``BUILD_DIR/.sconsign.dblite`` in a
    BUILD_DIR that has none yet); this never does, and what a dry run stores stays in memory."""

    class Records(dict):  # dblite's interface as SCons.SConsign uses it
        def sync(self) -> None:
            pass

        def close(self) -> None:
            pass

    @staticmethod
    def open(file: str, flag: str = "r", mode: int = 0o600) -> Any:
        records = DryRunDblite.Records()
        name = file if file.endswith(SCons.dblite.DBLITE_SUFFIX) else file + SCons.dblite.DBLITE_SUFFIX
        if os.path.exists(name):
            records.update(SCons.dblite.open(file, "r", mode).items())
        return records


@dataclass(frozen=True)
class Patch:
    owner: Any       # the SCons class or module whose attribute is replaced
    attribute: str
    why: str         # why no public extension point does the job


PATCHES: dict[str, Patch] = {
    "file stamp": Patch(SCons.Node.FS.Base, "getmtime",
                        "content-timestamp's stamp is a whole-second mtime; the decider has no stamp hook"),
    "file current": Patch(SCons.Node.FS.File, "is_up_to_date",
                          "a Decider sees inputs only; a target changed by hand or by a killed run must rebuild"),
    "file signature": Patch(SCons.Node.FS.File, "get_csig",
                            "no hook lets a file whose SHA-256 the build already has skip SCons's own hashing"),
    "explain": Patch(SCons.Node.Node, "explain",
                     "--debug=explain re-asks the decider out of context; no hook replaces its text"),
    "task prepare": Patch(SCons.Script.Main.BuildTask, "prepare",
                          "Progress runs before evaluation and cannot see a step that always runs"),
    "task execute": Patch(SCons.Script.Main.BuildTask, "execute",
                          "no public hook sees when a step starts and ends, nor in which worker (TRACE=)"),
    "task executed": Patch(SCons.Script.Main.BuildTask, "executed",
                           "no public hook runs after a step finished, with its state (built, cached, current)"),
    "task failed": Patch(SCons.Script.Main.BuildTask, "failed", "no public hook runs when a step failed"),
    "task needs execute": Patch(SCons.Script.Main.BuildTask, "needs_execute",
                                "its `x' is up to date line for each top-level target, which the summary's count "
                                "says, has no option of its own to turn off (-s turns off the step lines too)"),
    "sconsign write": Patch(SCons.SConsign, "write",
                            "whether the build phase ended (SCons wrote its signatures) has no public hook"),
    "sconsign settle": Patch(SCons.SConsign, "write",
                             "no hook runs just before SCons writes its signatures, when the stamps of files the "
                             "run wrote are settled (git's index time); wrapped again by `sconsign write`"),
    "executor cleanup": Patch(SCons.Executor.Executor, "cleanup",
                              "a scan drops every memo of the step's executor, the action signature a build "
                              "server's reader computed ahead too; no hook keeps one"),
}


def version_tuple(version: str) -> tuple[int, ...]:
    """``4.11.1`` -> (4, 11, 1); a suffix such as ``.dev0`` or ``a1`` ends the number it follows."""
    return tuple(int(m.group()) for part in version.split(".")[:3] if (m := re.match(r"\d+", part)))


def why_not_supported(version: str) -> WhyNot:
    """None when SCons ``version`` is supported, else the one line that says which is and how to get it."""
    if SUPPORTED[0] <= version_tuple(version)[:2] < SUPPORTED[1]:
        return None
    return (f"SCons {version} is not supported: this build was written against {REQUIREMENT.removeprefix('scons')}; "
            f"install it with `python3 -m pip install '{REQUIREMENT}'`")


def supported() -> bool:
    """Whether the running SCons is one the patches were written against (a tool's ``exists``)."""
    return why_not_supported(SCons.__version__) is None


def require_supported(version: str = SCons.__version__) -> None:
    """Stop with ``scons: error: <one line>`` (exit 2) under an unsupported SCons."""
    problem = why_not_supported(version)
    if problem:
        fail(problem)


class Bound:
    """The run the installed patches serve: the one pointer from SCons's process-wide classes to a run's objects
    (None before the first :func:`bind`: every patch then does what SCons's original does)."""

    run: Any = None


def bind(run: Any) -> None:
    """Make ``run`` (the run's ``progress.BuildRun``) the one every installed patch serves from here on."""
    Bound.run = run


def _installed(name: str, attribute: Any) -> bool:
    """Whether PATCHES[name] is among the patches wrapped around ``attribute`` (two may replace one attribute)."""
    while attribute is not None:
        if getattr(attribute, MARK, None) == name:
            return True
        attribute = getattr(attribute, "__wrapped__", None) if hasattr(attribute, MARK) else None
    return False


def install(name: str, make: Callable[[Any], Callable[..., Any]], version: str = SCons.__version__) -> bool:
    """Replace the attribute PATCHES[name] names, once per process; False if done before. ``make(original)`` gives
    the replacement, called as ``replacement(run, *args)`` with the bound run (:func:`bind`); with none bound, the
    original is called instead."""
    problem = why_not_supported(version)
    if problem:
        raise UserError(problem)
    patch = PATCHES[name]
    original = getattr(patch.owner, patch.attribute)
    if _installed(name, original):
        return False
    replacement = make(original)

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        run = Bound.run
        return original(*args, **kwargs) if run is None else replacement(run, *args, **kwargs)

    setattr(dispatch, MARK, name)
    dispatch.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(patch.owner, patch.attribute, dispatch)
    return True


def quiet_needs_execute(original: Callable[[Any], bool]) -> Callable[[Any, Any], bool]:
    """BuildTask.needs_execute without its "is up to date" line: SCons's decision, the Taskmaster task's own."""
    def needs_execute(run: Any, task: Any) -> bool:
        return bool(SCons.Taskmaster.OutOfDateTask.needs_execute(task))
    return needs_execute


class ConfiguredCacheDir(SCons.CacheDir.CacheDir):
    """SCons's CacheDir whose config is read by :meth:`read_config`: SCons calls its private ``_readconfig``
    from the constructor, with no public hook, and its own creates the directory and config with no
    atomic rename."""

    def _readconfig(self, path: str) -> None:
        self.read_config(path)

    def read_config(self, path: str) -> None:
        raise NotImplementedError


# --- SCons's switches, read here only ------------------------------------------------------------------
# SCons keeps its command line's settings in module attributes its Main sets; none is public API, and a release may
# move one. tests/unit/test_engine.py allows the other build files only the public SCons names it lists.

def executes_actions() -> bool:
    """Whether SCons runs the steps' commands: False under ``scons -n`` (and ``-q``), which decide only."""
    return bool(SCons.Action.execute_actions)


def prints_actions() -> bool:
    """Whether SCons prints each step's line: False under ``-s``."""
    return bool(SCons.Action.print_actions)


def cache_debug() -> str | None:
    """``--cache-debug=FILE``'s FILE (``-``: stdout), or None without the option."""
    return SCons.CacheDir.cache_debug or None


def cache_show() -> bool:
    """``--cache-show``: a step restored from the cache prints the command that would have built it."""
    return bool(SCons.CacheDir.cache_show)


def hash_chunksize() -> int:
    """The block size SCons hashes files in (``--hash-chunksize``, in bytes)."""
    return int(SCons.Node.FS.File.hash_chunksize)


def find_file(name: str, directories: tuple[Any, ...]) -> Any:
    """The file node ``name`` found in the first of ``directories`` that has it (SCons's memoised FileFinder, the
    one its own C scanner searches with), or None."""
    return SCons.Node.FS.find_file(name, directories)


def interned(text: Any) -> str:
    """``text`` as the interned string SCons's scanners key their results by."""
    return SCons.Util.silent_intern(text)


def content_signature(data: bytes) -> str:
    """The content signature SCons gives a file holding ``data`` (its csig: the run's hash of the bytes)."""
    return SCons.Util.hash_signature(data)


def combined_signature(signatures: list[str]) -> str:
    """One signature of ``signatures`` in order, as SCons combines a node's children's into its build signature."""
    return SCons.Util.hash_collect(signatures)


def alias(name: str) -> Any:
    """The Alias node called ``name`` the SConscripts made, or None (SCons's default alias name space)."""
    return SCons.Node.Alias.default_ans.lookup(name)


# --- private SCons names, read here only ----------------------------------------------------------------

def decider(node: Any) -> Callable[..., bool]:
    """The decider function SCons uses for ``node`` (SCons keeps them in a private table)."""
    return SCons.Node._decider_map[node.changed_since_last_build]


def forget_scan(node: Any) -> None:
    """Drop what scanning ``node`` found so far, so that SCons scans it again when next asked."""
    node.implicit = None
    node.implicit_set = set()
    node._children_reset()


def seen_stat(node: Any) -> Any:
    """The stat SCons took of ``node`` this run and decides with (its memo; None when not taken, or cleared
    since: a target is stat'ed again once built)."""
    return node._memo.get("stat")


def forget_record(node: Any) -> None:
    """Keep ``node`` out of the sconsign this run writes and drop what the last run recorded of it, so the next
    run finds no record and rebuilds it (SCons keeps the entries per directory, to merge when it writes)."""
    sconsign = node.dir.sconsign()
    sconsign.to_be_merged.pop(node.name, None)
    sconsign.entries.pop(node.name, None)
    sconsign.dirty = True


def _build_error(task: Any) -> Any:
    exc = task.exc_info()[1]
    if exc is None:
        return None  # no exception recorded: SCons's own failed() looks further
    error = SCons.Errors.convert_to_BuildError(exc)
    error.node = error.node or task.node
    return error


def interrupted_step(task: Any) -> bool:
    """Whether a failed ``task`` failed because of Ctrl-C: SCons's own mark for a step it stopped, or a command
    that Ctrl-C ended (the terminal's SIGINT reaches every compiler of the build)."""
    error = _build_error(task)
    return error is not None and (error.errstr == SCons.Taskmaster.Job.interrupt_msg
                                  or interrupted(error.status or 0))


def fail_quietly(task: Any) -> None:
    """What SCons's BuildTask.failed does, without its ``scons: *** [target] …`` line (one per step in flight)."""
    error = _build_error(task)
    task.exception = (task.exc_info()[1], error, None)
    task.do_failed(error.exitstatus)
    task.exc_clear()


def use_implicit_cache_now() -> None:
    """``--implicit-cache`` from this point of the reading on: SCons applies the option only after the
    SConscripts are read, and the summary's plan scans before that."""
    SCons.Script.SetOption("implicit_cache", True)
    SCons.Node.implicit_cache = 1


def start_time() -> float | None:
    """When SCons started (its own clock: reading the SConscripts counts), if it says."""
    return getattr(SCons.Script, "start_time", None)


def restart_clock(now: float) -> None:
    """A run forked from the build server starts now: SCons set its clock when the server imported it."""
    SCons.Script.start_time = now


def abandon_sconsign() -> None:
    """After a failed sconsign write: SCons's database would try the same write again when it is collected at exit
    (a second error, printed as a traceback); the last record on disk stays as it was."""
    for db in SCons.SConsign.DB_sync_list:
        if hasattr(db, "_needs_sync"):
            db._needs_sync = False


def set_exit_status(status: int) -> None:
    """Make scons exit with ``status`` (a failure found after the build phase, e.g. its record not written)."""
    SCons.Script.Main.exit_status = status


def exit_status() -> int:
    """The exit status SCons has decided on so far (non-zero after a failed build phase)."""
    return int(getattr(SCons.Script.Main, "exit_status", 0) or 0)


# --- a build server's reader (opencoti_scons/reader.py): a graph read ahead of its request ------------------

def graph_nodes() -> list[Any]:
    """Every file-system node the reading made: SCons keeps them in its FS's directory tree (its ``entries``)."""
    fs = SCons.Node.FS.get_default_fs()
    found: list[Any] = []
    stack = list(fs.Root.values())
    while stack:
        node = stack.pop()
        found.append(node)
        for name, child in getattr(node, "entries", {}).items():
            if name not in (".", ".."):
                stack.append(child)
    return found


# id(executor) -> (the executor, its action signature): SCons's executors have __slots__, no room for one more
WarmSignatures = dict[int, tuple[Any, bytes]]


def _keeping_warm_signature(cleanup: Callable[[Any], None], warm: WarmSignatures) -> Callable[[Any, Any], None]:
    """Executor.cleanup that keeps an action signature computed ahead: it follows from the build environment and
    the step's explicit targets and sources, which a scan (what makes SCons clean an executor up) does not change.
    ``warm`` is the reader's (one per process: a build server's reader reads ahead once), not a run's."""
    def cleanup_keeping(run: Any, executor: Any) -> None:
        cleanup(executor)
        kept = warm.get(id(executor))
        if kept is not None and kept[0] is executor:
            executor._memo["get_contents"] = kept[1]
    return cleanup_keeping


def warm_action_signatures(nodes: list[Any], warm: WarmSignatures) -> None:
    """Each step's action signature (its command as signed: names and flags, no file's content), memoised on its
    executor as SCons's decider would compute it, and kept in ``warm`` through the cleanups a scan makes (once per
    process: a build server's reader); a step whose signature cannot be had yet is left to the build."""
    install("executor cleanup", lambda cleanup: _keeping_warm_signature(cleanup, warm))
    for node in nodes:
        if node.has_builder():
            executor = node.get_executor()
            try:
                warm[id(executor)] = (executor, executor.get_contents())
            except Exception:  # noqa: BLE001 - SCons computes it again when the build asks, and reports it then
                pass


def load_signatures(nodes: list[Any]) -> None:
    """Open SCons's sconsign and read the entries of every directory a step writes into (the database is one
    file: the reader checks it is unchanged before it builds)."""
    for directory in {node.dir for node in nodes if node.has_builder()}:
        directory.sconsign()


def forget_file_state(nodes: list[Any]) -> None:
    """What the nodes learned from the disk while the graph was read (stats, listings, found headers, scans,
    signatures) forgotten: what SCons's ``--interactive`` clears between builds (``Node.clear``), less the
    executors' memos (the action signatures, which no file's state enters)."""
    for node in nodes:
        node.del_binfo()
        node.clear_memoized_values()
        node.ninfo = node.new_ninfo()
        for attr in ("cachedir_csig", "cachesig", "contentsig", "on_disk_entries"):
            try:
                delattr(node, attr)
            except AttributeError:
                pass
        node.cached = False
        node.includes = None
        node.implicit = None  # forget_scan's Node._children_reset would clean the executor up too
        node.implicit_set = set()
        node.set_state(SCons.Node.no_state)
    SCons.Node.FS.find_file.__self__._memo.clear()  # the header searches' memo (FileFinder)
