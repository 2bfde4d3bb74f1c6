"""Where a build server listens: the configuration's lock taken, then its socket bound, once the directories and the
bookkeeping it trusts are checked to be the user's alone (boundary.py). A server re-executed for new code keeps
both (:meth:`Bound.inherited`)."""
from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from opencoti_build import locks
from opencoti_build.incremental import build_lock, null_build
from opencoti_build.server import boundary, protocol


class Refused(Exception):
    """The server cannot serve here: the line says why, and the fix."""


def bookkeeping(sconsign: str) -> tuple[str, ...]:
    """What the server relies on in BUILD_DIR, beside its own directory: the build lock it takes for a null answer,
    the record it answers from, the sconsign (``sconsign``: its name) its reader loads."""
    return build_lock.LOCK_NAME, null_build.RECORD_NAME, sconsign


@dataclass(frozen=True)
class Bound:
    """The socket a server accepts requests on, and the descriptor through which it holds its configuration's lock
    (the lock file names its pid) for as long as it runs, re-executed or not."""

    listener: socket.socket
    lock_fd: int

    @classmethod
    def inherited(cls, listen_fd: int, lock_fd: int) -> Bound:
        """The socket and lock of the process this one replaced (``serve --inherit``)."""
        return cls(socket.socket(fileno=listen_fd), lock_fd)

    def inheritable(self) -> tuple[int, int]:
        """Both descriptors kept open across an exec: the ``--inherit`` arguments of the process replacing this one."""
        os.set_inheritable(self.listener.fileno(), True)
        os.set_inheritable(self.lock_fd, True)
        return self.listener.fileno(), self.lock_fd


def bind(project: Path, variable_args: Sequence[str], trusted: Sequence[str]) -> Bound:
    """Check that no one else owns or may write what the server trusts (``trusted``: :func:`bookkeeping`), take the
    configuration's server lock, then its socket (a stale one, from a killed server, is replaced); Refused says why
    not."""
    directory = protocol.server_dir(project, variable_args)
    shown = protocol.shown_server_dir(variable_args)
    build_dir, shown_build = directory.parent, protocol.build_dir_arg(variable_args)
    try:
        boundary.check_build_dir(build_dir, shown_build, trusted)
        dir_fd = boundary.open_server_dir(directory, shown)  # made 0700 when absent, BUILD_DIR too
        try:  # again: a BUILD_DIR that was absent may have been made by another meanwhile
            boundary.check_build_dir(build_dir, shown_build, trusted)
        except boundary.Unsafe:
            os.close(dir_fd)
            raise
    except boundary.Unsafe as exc:
        raise Refused(str(exc)) from None
    except OSError as exc:
        raise Refused(f"cannot create {directory}: {exc.strerror}") from None
    try:
        return _lock_and_listen(dir_fd, variable_args)
    except OSError as exc:
        raise Refused(f"cannot serve from {shown}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def _lock_and_listen(dir_fd: int, variable_args: Sequence[str]) -> Bound:
    key = protocol.configuration_key(variable_args)
    lock_fd = os.open(key + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, boundary.PRIVATE_FILE,
                      dir_fd=dir_fd)
    if not locks.try_exclusive(lock_fd):
        holder = locks.named_holder(lock_fd)
        os.close(lock_fd)
        vars_text = " ".join(variable_args)
        raise Refused(f"a build server for this checkout and configuration runs already (pid {holder or '?'}); "
                      f"stop it with `python3 -m opencoti_build stop{' ' + vars_text if vars_text else ''}`")
    os.fchmod(lock_fd, boundary.PRIVATE_FILE)
    locks.name_holder(lock_fd)
    name = protocol.socket_name(variable_args)
    try:  # a killed server's: the lock says none serves it now
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o777 & ~boundary.PRIVATE_FILE)  # the socket runs builds as this user: 0600, whatever the umask
    try:
        listener.bind(protocol.short_path(dir_fd, name))
    finally:
        os.umask(old_umask)
    listener.listen(16)
    return Bound(listener, lock_fd)
