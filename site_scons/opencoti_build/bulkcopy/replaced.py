"""What becomes of the output a new one replaces: its page cache dropped as the copy begins, its blocks freed after
the rename, a big one's by a process of its own once this one has ended (docs/packaging.md, "Reading the model").
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Below this a replaced output is freed sooner than a process to free it would start.
FREE_APART_MIN = 64 << 20
# The writing ends of the pipes the freeing processes read: never closed here, so each replaced output is freed once
# this process has ended (the kernel closes them at its exit)
_HELD_UNTIL_EXIT: list[int] = []


def drop_cached(output: Path) -> None:
    """Drop the page cache of the output about to be replaced (on the writeback thread, as the copy begins: it frees
    frames far faster than the copy takes them). Its pages are garbage once the new one is renamed
    over it, and the new output needs as many: frames just freed are reused at once, where fresh ones cost the
    kernel (and a VM's host) far more: on the benchmark's VM a 3 GiB copy took 9-10 s of system time beside a cached
    old artifact, 2.5-3 s without it. Pages still mapped (a running llamafile) or dirty stay."""
    try:
        fd = os.open(output, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no output yet, or one we may not read: nothing of ours to drop
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:  # advice: a filesystem that takes none loses nothing
        pass
    finally:
        os.close(fd)


def close_replaced(fd: int) -> None:
    """Close the replaced output's descriptor. Where that would free a big file (no name or other descriptor left),
    the freeing is left to a process of its own, after this one has ended: nothing here waits for it (the last
    ``scons package`` step waited 0.4 s for 3 GiB, the kernel trimming the blocks), and nothing here shares the
    disk's journal with it (freed while the run went on, 3 GiB made its last small writes, the manifest's fsync,
    the sconsign and the records, 0.2-0.3 s slower). That process holds a copy of the descriptor and reads a pipe
    whose writing end this process keeps until it exits (:data:`_HELD_UNTIL_EXIT`: the kernel closes it then, also
    when this process is killed), so its copy is the last; it exits at that EOF, so it cannot linger. A run
    replacing several big outputs frees them all at its end: the disk holds each old output with the new one
    until then. Where that process cannot be started (no ``setsid``), the close here frees the file."""
    holder = None
    try:
        st = os.fstat(fd)
        if st.st_nlink == 0 and st.st_size >= FREE_APART_MIN:
            holder = _holder(fd)
    finally:
        os.close(fd)
        if holder is not None:
            _HELD_UNTIL_EXIT.append(holder)


def _holder(fd: int) -> int | None:
    """Start a process that holds ``fd`` until the returned pipe end is closed (in a session of its own: its
    parent, setsid, has exited, so no one here waits for it or reaps it); None where none could be started."""
    read_end, write_end = os.pipe()
    started = False
    try:
        subprocess.run(["setsid", "--fork", "cat"], stdin=read_end, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, pass_fds=(fd,), check=True)
        started = True
    except (OSError, subprocess.CalledProcessError):
        pass
    finally:
        os.close(read_end)
        if not started:
            os.close(write_end)
    return write_end if started else None
