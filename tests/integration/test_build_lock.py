"""The build lock (opencoti_build.incremental.build_lock) on its own: who waits, who refuses, a lock that is lost."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from opencoti_build import locks
from opencoti_build.errors import UserError
from opencoti_build.incremental import build_lock

from scons_runs import PROJECT

HOLD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {site!r})
    from opencoti_build.incremental import build_lock
    build_lock.acquire(sys.argv[1])
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
""").format(site=str(PROJECT / "site_scons"))


def hold(build_dir: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(build_dir), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_refuses_naming_the_holder_or_waits_for_it(tmp_path: Path) -> None:
    holder = hold(tmp_path / "b", 1.5)
    with pytest.raises(UserError) as refused:
        build_lock.acquire(tmp_path / "b", wait=False)
    assert str(refused.value) == (f"BUILD_DIR={tmp_path / 'b'} is in use by another build (pid {holder.pid}); "
                                  "wait for it to finish or use another BUILD_DIR")
    said: list[str] = []
    fd = build_lock.acquire(tmp_path / "b", say=said.append, poll=0.05)
    assert holder.poll() is not None, "the lock was granted while its holder was alive"
    assert said == [f"waiting for the build running in {tmp_path / 'b'} (pid {holder.pid}) to finish"]
    assert not locks.replaced(tmp_path / "b" / ".lock", fd)


def test_a_killed_holder_leaves_no_lock_behind(tmp_path: Path) -> None:
    holder = hold(tmp_path / "b", 60)
    holder.kill()
    holder.wait()
    said: list[str] = []
    build_lock.acquire(tmp_path / "b", say=said.append, wait=False)
    assert said == []


def test_a_child_given_the_lock_keeps_it_after_its_parent_dies(tmp_path: Path) -> None:
    # the parent takes the lock, hands it to a long child (as the build's commands get it), and dies
    parent = textwrap.dedent(f"""
        import subprocess, sys
        sys.path.insert(0, {str(PROJECT / 'site_scons')!r})
        from opencoti_build.incremental import build_lock
        build_lock.acquire({str(tmp_path / 'b')!r})
        # the child's output away from the pipe run() reads: else run() returns only at its exit, racing
        # the lock's release
        child = subprocess.Popen(["sleep", "1.5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 pass_fds=build_lock.held_fds())
        print(child.pid, flush=True)
    """)
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True)
    with pytest.raises(UserError):
        build_lock.acquire(tmp_path / "b", wait=False)  # the parent is gone; its orphan still holds it
    build_lock.acquire(tmp_path / "b", poll=0.05, say=lambda line: None)
    assert time.monotonic() - started >= 1.4, "granted before the orphan exited"
