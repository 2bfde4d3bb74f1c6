"""A file's timestamp granularity and git's racily-clean rule (opencoti_build/incremental/timestamps.py)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from opencoti_build.incremental import timestamps

S = timestamps.SECOND_NS
SLACK = timestamps.clock_slack_ns()


def stat(mtime_ns: int, ctime_ns: int, dev: int = os.makedev(254, 1)) -> os.stat_result:
    """A stat result with these ns stamps (the float fields follow them) on device ``dev``."""
    return os.stat_result((0o100644, 1, dev, 1, 0, 0, 5, mtime_ns // S, mtime_ns // S, ctime_ns // S,
                           mtime_ns / S, mtime_ns / S, ctime_ns / S, mtime_ns, mtime_ns, ctime_ns))


MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
50 27 7:0 / /mnt/ext2 rw,relatime - ext2 /dev/loop0 rw
51 27 8:17 / /media/usb rw,relatime shared:9 master:2 - vfat /dev/sdb1 rw,fmask=0022
52 27 0:55 / /net/home rw,relatime - nfs4 server:/home rw,vers=4.2
"""


@pytest.fixture
def mounts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timestamps, "_mounted", lambda: timestamps.fs_types(MOUNTINFO))


def test_mountinfo_gives_each_device_its_filesystem_type_optional_fields_and_all() -> None:
    types = timestamps.fs_types(MOUNTINFO + "garbage\n\n99 1 x:y / /odd rw - weird none rw\n")
    assert types == {os.makedev(0, 21): "proc", os.makedev(254, 1): "ext4", os.makedev(7, 0): "ext2",
                     os.makedev(8, 17): "vfat", os.makedev(0, 55): "nfs4"}


@pytest.mark.parametrize(("ctime_ns", "tick"), [
    (10 * S + 123_456_789, 1), (10 * S + 123_456_780, 10), (10 * S + 120_000_000, 10_000_000),
    (10 * S + 100_000_000, 100_000_000), (10 * S, S), (0, S),
])
def test_the_tick_is_the_largest_power_of_ten_dividing_the_ctime_up_to_a_second(mounts, ctime_ns: int,
                                                                                  tick: int) -> None:
    assert timestamps.granularity_ns(stat(5 * S + 1, ctime_ns)) == tick  # the mtime is no measure: it can be set


def test_fat_has_two_second_ticks_and_no_ctime_of_its_own(mounts) -> None:
    usb = os.makedev(8, 17)
    st = stat(20 * S, 10 * S + 370_000_000, dev=usb)  # a creation time to the centisecond; 2 s mtimes
    assert timestamps.granularity_ns(st) == timestamps.FAT_TICK_NS
    assert timestamps.changed_ns(st) == 20 * S  # the later of the two
    assert timestamps.changed_ns(stat(20 * S, 10 * S)) == 10 * S  # elsewhere the ctime alone, whatever the mtime


@pytest.mark.parametrize(("ctime_ns", "looked_at_ns", "expected"), [
    (10 * S + 123_456_789, 10 * S + 123_456_789 + SLACK, False),  # ns stamps: within a jiffy of the change
    (10 * S + 123_456_789, 10 * S + 123_456_790 + SLACK, True),  # a jiffy and a tick after: settled
    (10 * S, 10 * S + 900_000_000, False),  # whole seconds: a write before 11 s keeps the stamp
    (10 * S, 11 * S + SLACK - 1, False),  # ... and the clock the stamp was cut from may lag ours by a jiffy
    (10 * S, 11 * S + SLACK, True),
    (10 * S + 123_456_789, 9 * S, False),  # a stamp from a clock ahead of ours
])
def test_a_stat_is_settled_a_tick_and_a_jiffy_after_the_last_change(mounts, ctime_ns: int, looked_at_ns: int,
                                                                      expected: bool) -> None:
    st = stat(ctime_ns - 5 * S, ctime_ns)
    assert timestamps.settled(st, looked_at_ns) is expected
    assert timestamps.settles_at_ns(st) == ctime_ns + timestamps.granularity_ns(st) + SLACK


def test_a_future_mtime_does_not_keep_a_file_unsettled_but_a_fat_one_does(mounts) -> None:
    ahead = 20 * S + 365 * 86400 * S  # a tree from a machine whose clock runs a year ahead
    assert timestamps.settled(stat(ahead, 10 * S + 1), 20 * S)  # every later write moves the ctime
    assert not timestamps.settled(stat(ahead, 10 * S, dev=os.makedev(8, 17)), 20 * S)


def test_the_slack_is_the_coarse_clocks_jiffy_and_at_least_a_millisecond() -> None:
    assert 1_000_000 <= SLACK <= 100_000_000


def test_a_file_just_written_here_is_unsettled_and_settles(tmp_path: Path) -> None:
    path = tmp_path / "f"
    looked_at = time.time_ns()  # before the write: its stamp lags the clock by a jiffy at most
    path.write_text("x")
    st = os.stat(path)
    assert not timestamps.settled(st, looked_at)
    assert timestamps.settled(st, timestamps.settles_at_ns(st))
