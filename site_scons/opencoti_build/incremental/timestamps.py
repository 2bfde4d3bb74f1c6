"""How fine a file's timestamps are, and when its stat vouches for its bytes (git's "racily clean" rule).

A write sets a file's ctime to the kernel's clock, cut to what the filesystem keeps: nanoseconds on ext4, XFS,
btrfs and tmpfs, whole seconds on ext2/ext3 with 128-byte inodes and some NFS servers, two seconds on FAT. A
second write in the same tick leaves the stat as the first one left it. So a stat taken at a moment when the file
may still change within its ctime's tick does not vouch for the bytes read after it: a same-size edit undone
within that second would look like no change at all. Such a stat is *unsettled*; whoever recorded it hashes the
file again next time instead of trusting it (:func:`settled`).

The tick is read from the stat itself: a ctime that is a whole number of seconds (no stat time carries a
sub-second part), of milliseconds, ... is taken to have been cut to that unit (on a filesystem with ns stamps one
in a billion is whole by chance, and is merely hashed again). FAT keeps no ctime of its own and two-second mtimes,
so its filesystem type (``/proc/self/mountinfo``, by the stat's device) makes it two seconds, the later of the
two stamps counting. The kernel's clock itself moves in jiffies (``CLOCK_REALTIME_COARSE``), which a change's
stamp may lag by one: that is added to every tick.
"""
from __future__ import annotations

import functools
import os
import time

SECOND_NS = 1_000_000_000
FAT_TICK_NS = 2 * SECOND_NS
FAT_TYPES = frozenset({"vfat", "msdos", "fat", "umsdos", "exfat"})  # no ctime of their own, 2 s mtimes
_COARSE_CLOCK = getattr(time, "CLOCK_REALTIME_COARSE", 5)  # Linux's number, where Python does not name it
MOUNTINFO = "/proc/self/mountinfo"


def fs_types(mountinfo: str) -> dict[int, str]:
    """Device number (``os.makedev``) -> filesystem type, from the text of a ``/proc/<pid>/mountinfo``."""
    types: dict[int, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 3:
            continue
        major, _, minor = fields[2].partition(":")
        after = line.split(" - ", 1)[1].split()
        if major.isdigit() and minor.isdigit() and after:
            types.setdefault(os.makedev(int(major), int(minor)), after[0])
    return types


@functools.cache
def _mounted() -> dict[int, str]:
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="replace") as f:
            return fs_types(f.read())
    except OSError:
        return {}


def fs_type(dev: int) -> str:
    """The type of the filesystem on device ``dev`` ("" when unknown); mounts are read once per process."""
    return _mounted().get(dev, "")


@functools.cache
def clock_slack_ns() -> int:
    """How far a change's stamp may lag the clock this process reads: one jiffy of the kernel's coarse clock, at
    least a millisecond (where the coarse clock cannot be asked, 10 ms: HZ=100)."""
    try:
        resolution = int(time.clock_getres(_COARSE_CLOCK) * SECOND_NS)
    except (OSError, OverflowError, ValueError):
        resolution = 10_000_000
    return max(resolution, 1_000_000)


def _fat(st: os.stat_result) -> bool:
    return fs_type(st.st_dev) in FAT_TYPES


def granularity_ns(st: os.stat_result) -> int:
    """The tick of ``st``'s timestamps: 2 s on FAT, else the largest power of ten (1 ns .. 1 s) dividing its ctime."""
    if _fat(st):
        return FAT_TICK_NS
    tick, below = 1, st.st_ctime_ns % SECOND_NS
    while tick < SECOND_NS and below % (tick * 10) == 0:
        tick *= 10
    return tick


def changed_ns(st: os.stat_result) -> int:
    """When the file last changed: its ctime, which every write, truncation, chmod or rename moves to the clock (an
    mtime can be set by hand, even into the future); on FAT, which keeps no ctime, the later of the two."""
    return max(st.st_mtime_ns, st.st_ctime_ns) if _fat(st) else st.st_ctime_ns


def settles_at_ns(st: os.stat_result) -> int:
    """The first moment from which no write can leave the stat ``st`` as it is."""
    return changed_ns(st) + granularity_ns(st) + clock_slack_ns()


def settled(st: os.stat_result, looked_at_ns: int) -> bool:
    """Whether ``st`` vouches for the bytes read after it, taken at ``looked_at_ns`` (``time.time_ns()`` before the
    stat, or any earlier moment): the file's last change lies a whole tick before, so any later write moves its
    stat. A stamp from a clock ahead of ours (a network filesystem's) is not settled."""
    return looked_at_ns >= settles_at_ns(st)
