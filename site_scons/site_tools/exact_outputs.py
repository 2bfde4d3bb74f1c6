"""SCons tool: a built file counts as current only while it is the file the last build recorded.

SCons decides from a target's *inputs* alone: a target edited, truncated or emptied by hand, or one
rewritten by a run that was then killed (SIGKILL, the OOM killer, a CI timeout: the sconsign is
written only when a run ends), still counts as up to date when its inputs match the record. Bazel
checks its outputs too; so does this tool. Every build records each target's stamp, size and content
signature (SCons' own NodeInfo); before a target is taken as current its stat is compared with that
record, and when the stat differs its content is hashed: the same bytes keep it (a touch), other
bytes rebuild it. An interrupted run therefore leaves nothing a later run takes as current — every
file it rewrote no longer matches the record the last *finished* run wrote.

The same stamp serves SCons' content-timestamp decider for every file, inputs included: a file whose
stamp is unchanged is not re-read (big archives and multi-GiB models are not re-hashed on a null
build); a changed stamp re-hashes, and only a content change rebuilds. The stamp is the file's stat
identity as git's index compares it (mtime and ctime in ns, size, inode, device: opencoti_build.files), every
part compared, never a max of them: SCons' whole-second mtimes miss an edit made in the same second as the
recorded stamp; no mtime alone sees an edit that puts the old mtime back (`touch -r`, `utime`, `cp -p`,
`rsync -t`, `tar x`), which always moves the ctime; and a max of mtime and ctime hides that ctime when the
mtime lies in the future (a tree from a machine whose clock runs ahead). Such a file is said once a run (one
WARN). Two writes within one timestamp tick (a jiffy; a whole second on ext2/ext3, two on FAT) keep the stat, so a
stat taken within its file's tick is stamped so that no later run matches it, and that run reads the file again:
git's racily-clean rule (opencoti_scons/stamps.py; a file the run wrote counts from when the sconsign is written).

A file whose SHA-256 the build already knows (opencoti_build.cache.file_digests: the packager's artifact,
as written) is signed with that digest instead of being read again; a target recorded with such a
``sha256:`` signature is checked against one after a touch.

In a dry run (``scons -n``) no step writes its targets, so an input that would be rebuilt still holds its old bytes;
a step with such an input is taken as one that would run, as ``make -n`` has it, so the count the dry run ends with is
the count the build would show.

Construction variables: none read or set. Installing the tool replaces SCons's file stamp, up-to-date check and
content signature, and settles the run's stamps before the sconsign write (through opencoti_scons.engine, once per
process); each serves the run the engine is bound to (its ``opencoti_scons.progress.BuildRun``: its stamps, and its
``digests``, which are the packager's).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import SCons.Node
import SCons.Node.FS
import SCons.Script
import SCons.Util

from opencoti_build import files
from opencoti_build.cache import file_digests
from opencoti_scons import engine
from opencoti_scons.progress import BuildRun, dry_run_input_rebuilt

FUTURE_SLACK_NS = 2_000_000_000  # a clock a little ahead (NFS, a VM's) is not worth a line


def stamp(node: SCons.Node.FS.Base) -> int | None:
    """The file's change stamp: its stat identity, packed (see the module docstring)."""
    st = node.stat()
    return files.stamp(st) if st else None


def _stamp_noting_the_future(run: BuildRun, node: SCons.Node.FS.Base) -> int | None:
    """Base.getmtime: the run's stamp of ``node`` (opencoti_scons/stamps.py), saying once a run when a file's mtime
    lies in the future."""
    st = node.stat()
    if st is None:
        return None
    ahead = st.st_mtime_ns - time.time_ns()
    if ahead > FUTURE_SLACK_NS:
        run.say_once("future mtime", f"WARN: {node} was modified {ahead / 1e9:.0f} s in the future (a clock running "
                     "ahead where it was written?); edits are still seen: files are compared by their whole stat, "
                     "not by time")
    return run.stamps.stamp(node, st)


def matches_record(node: SCons.Node.FS.File, digests: file_digests.Digests) -> bool:
    """True when ``node``'s file is the one its last finished build recorded (stat, else content)."""
    ninfo = getattr(node.get_stored_info(), "ninfo", None)
    recorded_csig = getattr(ninfo, "csig", None)
    if recorded_csig is None:
        return False  # built, but no finished run recorded what it wrote
    st = node.stat()
    if st is None:
        return False
    if st.st_size == getattr(ninfo, "size", None) and stamp(node) == getattr(ninfo, "timestamp", None):
        return True
    if st.st_size != getattr(ninfo, "size", None):
        return False
    if recorded_csig.startswith(file_digests.PREFIX):
        return digests.signature(node.get_abspath()) == recorded_csig
    csig = SCons.Util.hash_file_signature(node.get_abspath(), engine.hash_chunksize())
    return csig == recorded_csig


def _signature(scons_csig: Callable[[SCons.Node.FS.File], str]) -> Callable[[BuildRun, SCons.Node.FS.File], str]:
    def get_csig(run: BuildRun, self: SCons.Node.FS.File) -> str:
        """The digest the build already has of this very file (see file_digests), else SCons' own signature."""
        ninfo = self.get_ninfo()
        if not hasattr(ninfo, "csig"):
            known = run.digests.known(self.get_abspath())
            if known is not None:
                ninfo.csig = known
        return scons_csig(self)  # the signature just set, if any
    return get_csig


def _current(inputs_current: Callable[[SCons.Node.FS.File], bool]) -> Callable[[BuildRun, SCons.Node.FS.File], bool]:
    def is_up_to_date(run: BuildRun, self: SCons.Node.FS.File) -> bool:
        if not inputs_current(self):
            return False
        if self.get_state() in (SCons.Node.up_to_date, SCons.Node.executed):
            return True  # decided earlier in this run (the C scanner asks again of a generated source)
        if dry_run_input_rebuilt(self):
            return False
        if self.has_builder() and not matches_record(self, run.digests):
            if "explain" in (SCons.Script.GetOption("debug") or ()):
                print(f"scons: rebuilding `{self}' because it is not the file the last build recorded")
            return False
        return True
    return is_up_to_date


def _settling(write: Callable[[], None]) -> Callable[[BuildRun], None]:
    def write_settled(run: BuildRun) -> None:
        run.stamps.settle()  # the files this run wrote get their real stamps where their tick is over
        write()
    return write_settled


def generate(env: Any) -> None:
    engine.install("file stamp", lambda scons_stamp: _stamp_noting_the_future)
    engine.install("file current", _current)
    engine.install("file signature", _signature)
    engine.install("sconsign settle", _settling)


def exists(env: Any) -> bool:
    return engine.supported()
