"""The vendored llamafile tree: reset, llamafile's own patch step, the opencoti series, and their record.

Plain Python (no SCons): ``vendors/SConscript`` calls it at read time, before the tree is globbed.

SRC is a llamafile-0.10 git checkout whose ``llama.cpp/`` is a git submodule. ``apply`` does, in order:

1. reset: the outer checkout to its HEAD, every submodule (recursively) to the commit its parent records,
   untracked files removed (ignored ones, e.g. an old ``o/``, are kept);
2. llamafile's own step (upstream ``llama.cpp.patches/apply-patches.sh``): copy
   ``llama.cpp.patches/llamafile-files/*`` into ``llama.cpp/``, then apply
   ``llama.cpp.patches/patches/*.patch`` in name order;
3. the opencoti series: ``vendors/patches/llamafile/*.patch`` in name order.

Every patch applies from the SRC root with ``-p1``, as upstream runs ``patch -p1`` there: ``a/llama.cpp/...``
reaches into the submodule and ``a/llamafile/...`` the outer tree, so one opencoti patch may touch both
(docs/vendoring.md shows how to capture one). Patches go through ``git apply``: a hunk
applies exactly (at any offset) or the whole patch is refused, never with fuzz. Name order is code-point
order (``LC_ALL=C ls``). Not done: upstream's ``fetch-ui-assets.sh`` (a download; builds are offline).

The record (``vendors/applied-series.json`` by default, see ``read_record``) says what the last apply made.
A change it does not account for is foreign: apply and reset refuse to discard it without ``force``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from opencoti_build.errors import UserError, os_error_line, stop_if_interrupted
from opencoti_build.files import identity
from opencoti_build.tree import patch_failure

LLAMA = "llama.cpp"
LLAMAFILE_FILES = "llama.cpp.patches/llamafile-files"
LLAMAFILE_PATCHES = "llama.cpp.patches/patches"
OPENCOTI_PATCHES = "vendors/patches/llamafile"
DEFAULT_RECORD = "vendors/applied-series.json"
RECORD_FORMAT = 1

# One changed file of the tree: {"sha256", "size", "mtimeNs", "stat" (opencoti_build.files.identity)}, or None for a
# deleted tracked file.
FileEntry = dict[str, Any] | None


class SeriesError(UserError):
    """Apply or reset cannot go on; the message is one line naming the thing and the fix."""


def _listing(changes: list[str], limit: int) -> str:
    """The first ``limit`` of ``changes`` for one line, then how many more; a file name that is not UTF-8
    shows its bytes escaped (``\\xff``) instead of failing the print."""
    shown = [c.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for c in changes[:limit]]
    return ", ".join(shown) + (f" and {len(changes) - limit} more" if len(changes) > limit else "")


class ForeignChanges(SeriesError):
    """The tree holds changes no apply made; ``changes`` lists every one, tree-relative."""

    def __init__(self, src: Path, action: str, changes: list[str]) -> None:
        self.changes = changes
        super().__init__(
            f"{action} would discard {len(changes)} change(s) in {src} that no apply made: {_listing(changes, 20)}; "
            f"capture them as a patch under {OPENCOTI_PATCHES}/ or pass FORCE=1 to discard them"
        )


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str
    series: str  # "llamafile" (llama.cpp.patches/patches) or "opencoti" (vendors/patches/llamafile)

    def as_record(self) -> dict[str, str]:
        return {"name": self.name, "sha256": self.sha256, "series": self.series}


@dataclass(frozen=True)
class TreeState:
    head: str                         # the outer checkout's commit
    recorded: dict[str, str]          # submodule path -> commit its parent's HEAD records
    checked_out: dict[str, str]       # initialised submodule path -> its HEAD
    files: dict[str, FileEntry]       # every path that differs from its repository's HEAD


@dataclass(frozen=True)
class Outcome:
    action: str   # "applied", "unchanged", "reset", "kept" (a plain build left foreign changes alone)
    summary: str  # one line for the build log


# --- git -----------------------------------------------------------------------------------------

def _git_env() -> dict[str, str]:
    # C locale: git's stderr is parsed; a GIT_DIR from a calling hook must not redirect -C.
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    return env


def _run_git(repo: Path, *args: str) -> tuple[int, str, str]:
    """``git -C repo args``: (exit status, stdout, stderr). Paths in stdout keep undecodable bytes as surrogates,
    so they name the same files again; stderr only ever reaches a message, so it is decoded for printing."""
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=_git_env())
    return result.returncode, result.stdout.decode("utf-8", "surrogateescape"), result.stderr.decode("utf-8", "replace")


def _git(repo: Path, *args: str) -> str:
    status, out, err = _run_git(repo, *args)
    stop_if_interrupted(status)
    if status < 0:
        raise SeriesError(f"git {args[0]} in {repo} was killed ({signal.Signals(-status).name}); run the same "
                          "command again: the apply record says what is done, and an unfinished apply is redone")
    if status != 0:
        first = next((line for line in err.splitlines() if line.strip()), f"exit status {status}")
        raise SeriesError(f"git {args[0]} failed in {repo}: {first.strip()}")
    return out


def is_checkout(src: Path) -> bool:
    """Whether ``src`` is the root of a git checkout (not merely a folder inside one)."""
    src = Path(src)
    if not (src / ".git").exists():
        return False
    try:
        return Path(_git(src, "rev-parse", "--show-toplevel").strip()).resolve() == src.resolve()
    except SeriesError:
        return False


def _gitlinks(repo: Path) -> dict[str, str]:
    """Submodule path (relative to ``repo``) -> commit that ``repo``'s HEAD records for it."""
    links = {}
    for entry in _git(repo, "ls-tree", "-r", "-z", "HEAD").split("\0"):
        meta, _, path = entry.partition("\t")
        if meta.startswith("160000 "):
            links[path] = meta.split()[2]
    return links


def _submodules(src: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(recorded, checked_out) for every submodule below ``src``, recursively, keyed by tree-relative path."""
    recorded: dict[str, str] = {}
    checked_out: dict[str, str] = {}
    pending = [""]
    while pending:
        parent = pending.pop()
        for path, commit in _gitlinks(src / parent).items():
            rel = f"{parent}/{path}" if parent else path
            recorded[rel] = commit
            if (src / rel / ".git").exists():
                checked_out[rel] = _git(src / rel, "rev-parse", "HEAD").strip()
                pending.append(rel)
    return recorded, checked_out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry(path: Path, known: FileEntry) -> FileEntry:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    seen = list(identity(st))
    if known is not None and known["size"] == st.st_size and known.get("stat") == seen:
        return known  # the whole stat unchanged since it was hashed (a kept mtime moves the ctime): trust that hash
    data = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else path.read_bytes()
    return {"sha256": _sha256(data), "size": st.st_size, "mtimeNs": st.st_mtime_ns, "stat": seen}


def tree_state(src: Path, known: dict[str, FileEntry] | None = None) -> TreeState:
    """The tree's commits and every file differing from HEAD; ``known`` entries spare re-hashing."""
    known = known or {}
    recorded, checked_out = _submodules(src)
    files: dict[str, FileEntry] = {}
    for repo in ["", *checked_out]:
        status = _git(src / repo, "status", "--porcelain=v1", "-z", "--untracked-files=all",
                      "--ignore-submodules=all", "--no-renames")
        for item in filter(None, status.split("\0")):
            if item.endswith("/"):
                continue  # an untracked nested repository: git clean leaves it, so nothing is discarded
            rel = f"{repo}/{item[3:]}" if repo else item[3:]
            files[rel] = _entry(src / rel, known.get(rel))
    return TreeState(_git(src, "rev-parse", "HEAD").strip(), recorded, checked_out, files)


def _reset(src: Path) -> None:
    """Outer checkout to HEAD, submodules to their recorded commits, untracked files gone (ignored ones stay)."""
    _git(src, "reset", "--quiet", "--hard", "HEAD")
    _git(src, "clean", "-d", "--force", "--quiet")
    _git(src, "submodule", "update", "--init", "--recursive", "--force", "--quiet")
    for sub in _submodules(src)[1]:
        _git(src / sub, "clean", "-d", "--force", "--quiet")


# --- patches -------------------------------------------------------------------------------------

def series(folder: Path, name: str) -> list[Patch]:
    """The ``*.patch`` files of ``folder`` in code-point name order (none if the folder is absent)."""
    paths = sorted((p for p in Path(folder).glob("*.patch") if p.is_file()), key=lambda p: p.name)
    return [Patch(p.name, p, _sha256(p.read_bytes()), name) for p in paths]


# What makes a file a patch git apply can use: a git diff header, or a ---/+++ file header pair.
_DIFF = re.compile(rb"^diff --git |^--- [^\n]*\n\+\+\+ ", re.M)


def check_series(folder: Path | str, patches: list[Patch]) -> None:
    """SeriesError unless ``folder`` is a directory and every one of ``patches`` holds a diff."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SeriesError(f"PATCH_SERIES={folder}: no such directory; point it at the folder of opencoti *.patch files")
    for patch in patches:
        if not _DIFF.search(patch.path.read_bytes()):
            raise SeriesError(f"{patch.path} is not a patch (no diff in it); regenerate it with `git format-patch` "
                              f"or remove it from {folder}")


def _apply_patch(src: Path, patch: Patch) -> None:
    status, _, err = _run_git(src, "apply", "--whitespace=nowarn", str(patch.path))
    if status != 0:
        raise SeriesError(patch_failure.message(patch, status, err))


def _copy_llamafile_files(src: Path) -> None:
    """Upstream's ``cp -r llamafile-files/* llama.cpp/`` (the glob skips top-level dot entries)."""
    origin = src / LLAMAFILE_FILES
    for path in sorted(origin.rglob("*")) if origin.is_dir() else []:
        rel = path.relative_to(origin)
        if rel.parts[0].startswith(".") or not path.is_file():
            continue
        dest = src / LLAMA / rel
        data = path.read_bytes()
        # A destination the submodule ignores survives the reset: leave it untouched when already equal.
        if not dest.is_file() or dest.read_bytes() != data:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            shutil.copymode(path, dest)


def _keep_mtimes(src: Path, before: dict[str, FileEntry], after: dict[str, FileEntry]) -> dict[str, FileEntry]:
    """Give a file that re-apply left byte-identical its old mtime back: to every build it never changed."""
    kept = dict(after)
    for rel, entry in after.items():
        old = before.get(rel)
        if entry is not None and old is not None and old["sha256"] == entry["sha256"]:
            atime = os.lstat(src / rel).st_atime_ns
            os.utime(src / rel, ns=(atime, old["mtimeNs"]), follow_symlinks=False)
            kept[rel] = {**entry, "mtimeNs": old["mtimeNs"], "stat": list(identity(os.lstat(src / rel)))}
    return kept


# --- the record ----------------------------------------------------------------------------------

def _load(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise SeriesError(f"cannot read the apply record {path}: {exc}; delete it and apply with FORCE=1") from exc
    return record if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else None


def read_record(path: Path = Path(DEFAULT_RECORD)) -> dict[str, Any] | None:
    """The last complete apply, or None (never applied, reset since, or interrupted). Its shape::

        {"format": 1, "state": "applied",
         "source": "/abs/path/of/SRC",
         "upstreamCommit": "<outer checkout HEAD>",
         "submodules": {"llama.cpp": "<commit>", ...},          # every submodule, recursively
         "patches": [{"name": "x.patch", "sha256": "<hex>", "series": "llamafile" | "opencoti"}, ...],
         "files": {"llama.cpp/common/log.cpp": {"sha256", "size", "mtimeNs", "stat"} | null, ...},  # post-apply
         "stateSha256": "<hex over the sorted (path, sha256) of files>"}

    ``patches`` is in application order: llamafile's own series, then opencoti's. Raises SeriesError when
    the file exists but cannot be read as JSON.
    """
    record = _load(path)
    return record if record is not None and record.get("state") == "applied" else None


def _write(path: Path, record: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # a reader never sees half a record
    except OSError as exc:  # a full disk: the last record stays whole, and says the tree is not applied
        tmp.unlink(missing_ok=True)
        raise SeriesError(os_error_line(exc, f"cannot write the apply record {path}")) from None


def _state_sha256(files: dict[str, FileEntry]) -> str:
    pairs = sorted((rel, entry["sha256"] if entry else None) for rel, entry in files.items())
    return _sha256(json.dumps(pairs).encode())


def _record_for(path: Path, src: Path) -> dict[str, Any] | None:
    """The record if it describes ``src`` (another SRC's record says nothing about this tree)."""
    record = _load(path)
    return record if record is not None and record.get("source") == str(src) else None


def _known(record: dict[str, Any] | None) -> dict[str, FileEntry] | None:
    """The hashed files of a complete record, which spare re-hashing files whose stat is unchanged."""
    return record["files"] if record is not None and record.get("state") == "applied" else None


# --- apply and reset -----------------------------------------------------------------------------

def _foreign(state: TreeState, record: dict[str, Any] | None) -> list[str]:
    """What a reset would discard that the last apply did not make."""
    if record is not None and record.get("state") == "applying":
        return []  # an interrupted apply: every change is its own, half done
    expected: dict[str, FileEntry] = record["files"] if record else {}
    foreign = [rel for rel, entry in sorted(state.files.items())
               if rel not in expected or _sha(expected[rel]) != _sha(entry)]
    for sub, commit in sorted(state.checked_out.items()):
        if commit != state.recorded[sub]:
            foreign.append(f"{sub} (checked out at {commit[:12]}, recorded {state.recorded[sub][:12]})")
    return foreign


def _sha(entry: FileEntry) -> str | None:
    return entry["sha256"] if entry else None


def _up_to_date(record: dict[str, Any] | None, state: TreeState, opencoti: list[Patch]) -> TypeGuard[dict[str, Any]]:
    return (
        record is not None and record.get("state") == "applied"
        and record["upstreamCommit"] == state.head
        and record["submodules"] == state.checked_out == state.recorded
        and [p for p in record["patches"] if p["series"] == "opencoti"] == [p.as_record() for p in opencoti]
        and {rel: _sha(e) for rel, e in record["files"].items()} == {rel: _sha(e) for rel, e in state.files.items()}
    )


def _checkout(src: Path | str) -> Path:
    src = Path(src).resolve()
    if not is_checkout(src):
        raise SeriesError(f"SRC={src} is not a git checkout; clone llamafile there "
                          f"(git clone --recurse-submodules) or point SRC at one")
    return src


def apply(src: Path | str, patch_dir: Path | str, record_path: Path | str, force: bool = False) -> Outcome:
    """Reset ``src``, run llamafile's patch step, apply the opencoti series from ``patch_dir``, record it.

    Does nothing when the record, the tree and the series agree. Raises ForeignChanges (unless ``force``)
    and SeriesError; after a failing patch the tree is pristine and no record is left.
    """
    src, record_path = _checkout(src), Path(record_path)
    opencoti = series(Path(patch_dir), "opencoti")
    check_series(patch_dir, opencoti)  # before anything is reset or recorded
    record = _record_for(record_path, src)
    state = tree_state(src, _known(record))
    if _up_to_date(record, state, opencoti):
        count = len(record["patches"])
        return Outcome("unchanged", f"apply: {src} already carries its series ({count} patch(es)); nothing to do")
    foreign = _foreign(state, record)
    if foreign and not force:
        raise ForeignChanges(src, "apply", foreign)
    _write(record_path, {"format": RECORD_FORMAT, "state": "applying", "source": str(src)})
    try:
        _reset(src)
        _copy_llamafile_files(src)
        applied = series(src / LLAMAFILE_PATCHES, "llamafile") + opencoti
        for patch in applied:
            _apply_patch(src, patch)
    except BaseException:
        # A failed or interrupted apply leaves the pristine tree, never a half-patched one. Should the reset
        # itself fail, the "applying" record stays: the next apply then knows every change is its own.
        _reset(src)
        record_path.unlink(missing_ok=True)
        raise
    after = tree_state(src)
    files = _keep_mtimes(src, state.files, after.files)
    _write(record_path, {
        "format": RECORD_FORMAT, "state": "applied", "source": str(src),
        "upstreamCommit": after.head, "submodules": after.checked_out,
        "patches": [p.as_record() for p in applied], "files": files, "stateSha256": _state_sha256(files),
    })
    counts = f"{len(applied) - len(opencoti)} llamafile + {len(opencoti)} opencoti patches"
    discarded = f"; discarded {len(foreign)} foreign change(s) (FORCE=1)" if foreign else ""
    return Outcome("applied",
                   f"apply: {src} reset to {after.head[:12]}, {counts}, {len(files)} files changed{discarded}")


def apply_if_safe(src: Path | str, patch_dir: Path | str, record_path: Path | str) -> Outcome:
    """What a plain build does first: apply when that discards nothing, else build the tree as it is."""
    try:
        return apply(src, patch_dir, record_path)
    except ForeignChanges as exc:
        return Outcome("kept", f"warning: building {Path(src).resolve()} as it is, with {len(exc.changes)} change(s) "
                               f"no apply made ({_listing(exc.changes, 5)}); `scons apply` (FORCE=1 to discard them) "
                               f"restores the series")


def reset(src: Path | str, record_path: Path | str, force: bool = False) -> Outcome:
    """Restore the pristine tree and drop the record; refuses to discard foreign changes without ``force``."""
    src, record_path = _checkout(src), Path(record_path)
    record = _record_for(record_path, src)
    state = tree_state(src, _known(record))
    foreign = _foreign(state, record)
    if foreign and not force:
        raise ForeignChanges(src, "reset", foreign)
    _reset(src)
    record_path.unlink(missing_ok=True)
    discarded = f", discarding {len(foreign)} foreign change(s) (FORCE=1)" if foreign else ""
    return Outcome("reset", f"reset: {src} restored to pristine {state.head[:12]}{discarded}")
