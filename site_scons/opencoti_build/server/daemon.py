"""A build server's process: detached from the terminal that started it (``serve --detach``), saying when it is
ready to the parent that waits for it, and re-executed in place when its code changes (same pid, socket and lock)."""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from opencoti_build import locks, streams
from opencoti_build.server import boundary
from opencoti_build.server.listener import Bound


class Daemon:
    """A server's standard streams and its word to the parent that started it. In the foreground there is no one
    to tell: its banner and its log are its terminal. Detached, the banner still goes to the terminal (the parent's
    stdout, inherited), then stdout joins stderr in the log and the parent is told it may exit."""

    def __init__(self) -> None:
        self.ready_fd = -1  # the pipe to the waiting parent, while the server is not ready yet
        self.log_fd = -1  # ...and its log, stdout's once the banner is out

    def detach(self, log: Path, bound: Bound) -> bool:
        """Fork into the background: True in the server, whose own session holds ``bound``'s lock now (the lock
        file names it); False in the parent, once the server said it is ready (it exits 1 if the server never
        does)."""
        read_end, write_end = os.pipe()
        streams.flush()
        if os.fork():
            os.close(write_end)
            said = os.read(read_end, 1)
            os.close(read_end)
            if not said:
                print(f"opencoti-build: the build server did not start; see {log}", file=sys.stderr)
                raise SystemExit(1)
            return False
        os.close(read_end)
        os.setsid()  # no terminal's signals, and it outlives the shell that started it
        self.ready_fd = write_end
        self.log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, boundary.PRIVATE_FILE)
        os.fchmod(self.log_fd, boundary.PRIVATE_FILE)  # whatever the umask, or the mode an older server left it
        streams.stdin_from_null()
        streams.point({2: self.log_fd})
        locks.name_holder(bound.lock_fd)  # the server, not the parent that bound it
        return True

    def ready(self) -> None:
        """Tell a waiting ``serve --detach`` parent the server is up (its banner went to the terminal first)."""
        streams.flush()
        if self.ready_fd >= 0:
            streams.point({1: self.log_fd}, close=True)
            os.write(self.ready_fd, b"1")
            os.close(self.ready_fd)
            self.ready_fd = self.log_fd = -1


def restart(bound: Bound, idle_timeout: float, variable_args: Sequence[str]) -> NoReturn:
    """Re-execute the server in place after a change to its code: the new process takes the socket and the lock
    (``--inherit``), so no client sees it go and no other server can take its place meanwhile."""
    print(f"{time.strftime('%H:%M:%S')} the server's code changed: restarting", file=sys.stderr, flush=True)
    listen_fd, lock_fd = bound.inheritable()
    os.execv(sys.executable, [sys.executable, "-m", "opencoti_build", "serve", "--idle-timeout", str(idle_timeout),
                              "--inherit", str(listen_fd), str(lock_fd), *variable_args])
