"""The null build's fast path: a run that would find nothing to do exits right after SConstruct starts.

SCons tracks nodes, but reading the SConscripts depends on more: they read files, list directories
(globs, header search paths), run probes (nvcc --version, git), read environment variables and look
for stray DSOs in $HOME. So a successful run records everything it touched, observed where Python
touches the file system: every path it stat'ed (``os.stat``/``os.lstat``: existence checks, SCons'
node stats, ``shutil.which``), opened (audit event ``open``), listed (``os.listdir``/``os.scandir``)
or ran (``subprocess.Popen``, with the git files a ``git -C`` probe reads), every imported module's
file, its command line, working directory and whole environment. The next run compares all of it
first: when nothing differs it prints what the recorded run printed while reading, the lines before its summary
that a null build prints too (how to run what ``package`` made), and the summary, and exits. Any difference, and
any run this cannot vouch for, takes the full path, which decides exactly as before.

When only the build phase's files changed (an edit of a source or header: nothing the SConscripts read
or listed, no code, no variable), the full run's reading is the recorded one's, so it may reuse what that
reading computed (:class:`Memo`: the compile database's digest) and, while no file a header search
looked at appeared or vanished, the includes SCons scanned (its implicit cache): :func:`carry_over`.
Such a run keeps every recorded path in its own record, since it skips the work that observed them.

Never recorded, so never fast: runs with options other than -Q, -s, -k, -j N, -C DIR; runs asking for ``verify`` or
``install``, or for a trace (``TRACE=``) (:func:`why_never_recorded` says which); runs whose graph holds a step
that always runs; failed or interrupted runs; and a run during which
a file it read outside the output directories changed (its stat at the end differs from the first
one seen: it may have been read before the change).

Signatures: a file is (type, size, mtime_ns, ctime_ns, inode), so an edit, a touch, a replacement
or a deletion is seen; a directory is its inode and, when the run listed it, its sorted entry names. A file whose
stat was taken within its timestamp tick (git's racily-clean rule: a same-size write in that tick keeps the stat)
is recorded as unsettled, and a record with one never answers: the next run takes the full path, whose decider
hashes it again. An input counts from when it was first looked at, the build's code from when the run started, an
output from when the record is written (the run's last outputs are waited for, a few ms, where stamps are finer
than a tenth of a second).

The record keeps no secret: the command line's values and the environment's are keyed digests (names in the
clear), the key beside the record; both are the user's alone (opencoti_build.incremental.private).

What callers use is imported here from the package's modules:

- ``check``: whether a run may take the fast path, and what a run whose reading is the last one's carries over.
- ``observe``: the recorder of a full run: what it stats, opens, lists, runs and prints while reading, and the facts
  its reading took from a file (``Fact``).
- ``record``: a path's signature, and the record a run writes and the next one reads.
- ``replay``: the fast path's output.
"""
from __future__ import annotations

from opencoti_build.incremental.null_build.check import (
    CarryOver,
    Memo,
    carry_over,
    difference,
    eligible,
    paths_difference,
    settings_difference,
    why_never_recorded,
)
from opencoti_build.incremental.null_build.observe import Fact, Recorder, reading_done, start, unrecorded
from opencoti_build.incremental.null_build.record import (
    FORMAT,
    RECORD_NAME,
    Record,
    Signature,
    environment,
    interpreter,
    key_file,
    record_file,
    sealed,
    signature,
    signed,
)
from opencoti_build.incremental.null_build.replay import replay

__all__ = ["RECORD_NAME", "FORMAT", "Signature", "signature", "signed", "environment", "sealed", "Record", "interpreter",
           "record_file", "key_file", "eligible", "why_never_recorded", "difference", "settings_difference", "paths_difference", "CarryOver", "carry_over", "Memo", "replay", "Fact", "Recorder", "start", "reading_done", "unrecorded"]
