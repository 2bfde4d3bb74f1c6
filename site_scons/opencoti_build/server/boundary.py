"""The build server's boundary (docs/server.md, "Who may reach it"): what it trusts on disk, and whom it serves.

A server runs builds as its user with whatever a request brings (a command line, an environment with its
PATH and secrets, the client's terminal), so only that user may reach it, and neither it nor a client trusts
a place another user could have written:

- the socket's directory, ``BUILD_DIR/server``, is the user's alone: owned by them, with no permission bit for
  group or others (``serve`` makes it 0700 whatever the umask, and what it writes there 0600, the C client
  0700), and every entry in it is theirs. ``serve`` refuses one that is not; so do both clients, before they
  send a request (and the environment in it) to a socket there.
- ``BUILD_DIR`` and the bookkeeping the server relies on in it (the build lock, the null build's record,
  SCons's sconsign) are owned by the user and writable by no one else: no write bit for others, and one for
  the group only when that group is the user's alone (a user private group under umask 002, as Debian's
  OpenSSH allows it). ``serve`` refuses them otherwise.
- every connection's peer (``SO_PEERCRED``) is the server's own user, or it is refused before a byte of it is
  read: one line in the server's log, one line to the peer, the connection closed, nothing run.

Each refusal is one line that names the path and the fix. Plain Python with no import heavier than the
standard library's: the Python client imports it, and client.c makes the same checks of the socket's
directory and of the peer.
"""
from __future__ import annotations

import os
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from opencoti_build.server import protocol

PRIVATE_DIR = 0o700  # BUILD_DIR when serve makes it, BUILD_DIR/server
PRIVATE_FILE = 0o600  # the server's lock, log, socket and the client's stamp
CLIENT_MODE = 0o700  # the C client
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Unsafe(Exception):
    """A path another user owns or could have written. ``str()`` is ``serve``'s line; :meth:`for_client` the
    client's (which sends nothing there)."""

    def __init__(self, shown: str, why: str, fix: str) -> None:
        self.shown, self.why, self.fix = shown, why, fix
        super().__init__(f"{shown} {why}: {fix} and serve again")

    def for_client(self) -> str:
        return f"{self.shown} {self.why}: the request (it carries your environment) was not sent; {self.fix} " \
               "and serve again"


def _mode(st: os.stat_result) -> int:
    return stat.S_IMODE(st.st_mode)


def _foreign(st: os.stat_result, shown: str, uid: int) -> Unsafe | None:
    if st.st_uid != uid:
        return Unsafe(shown, f"is owned by uid {st.st_uid} (not you, uid {uid})", f"remove it (rm -rf {shown})")
    return None


def check_private(st: os.stat_result, shown: str, uid: int | None = None) -> None:
    """The socket's directory: the user's, and no permission bit for group or others."""
    uid = os.geteuid() if uid is None else uid
    unsafe = _foreign(st, shown, uid)
    if unsafe is None and _mode(st) & 0o077:
        unsafe = Unsafe(shown, f"is open to group or others (mode {_mode(st):04o})", f"remove it (rm -rf {shown})")
    if unsafe is not None:
        raise unsafe


def check_unshared(st: os.stat_result, shown: str, uid: int | None = None,
                   alone: Callable[[int, int], bool] | None = None) -> None:
    """BUILD_DIR or a file of its bookkeeping: the user's, and writable by no one else (a group write bit only when
    the group is the user's alone: ``alone(gid, uid)``, by default :func:`group_of_one`)."""
    uid = os.geteuid() if uid is None else uid
    unsafe = _foreign(st, shown, uid)
    if unsafe is None:
        mode = _mode(st)
        if mode & 0o002 or (mode & 0o020 and not (alone or group_of_one)(st.st_gid, uid)):
            unsafe = Unsafe(shown, f"is writable by {'others' if mode & 0o002 else f'group {st.st_gid}'} "
                                   f"(mode {mode:04o})", f"chmod go-w {shown}")
    if unsafe is not None:
        raise unsafe


def group_of_one(gid: int, uid: int) -> bool:
    """Whether ``uid`` is the only member of group ``gid``, as its primary group or a listed one (a user private
    group): its write bit then lets no one else in."""
    import grp
    import pwd

    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    primary = {entry.pw_uid for entry in pwd.getpwall() if entry.pw_gid == gid}
    listed = set(group.gr_mem)
    return bool(primary | listed) and primary <= {uid} and listed <= {user.pw_name}


def check_build_dir(build_dir: Path, shown: str, bookkeeping: Iterable[str], uid: int | None = None) -> None:
    """``serve``'s check of BUILD_DIR and of the bookkeeping files named that are there (none of it need exist)."""
    for path, name in [(build_dir, shown), *((build_dir / f, os.path.join(shown, f)) for f in bookkeeping)]:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        check_unshared(st, name, uid)


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` whose every directory made is 0700, whatever the umask (those already there are left as they are)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR)
        except FileExistsError:
            continue  # made meanwhile by someone else: checked as what was there
        os.chmod(directory, PRIVATE_DIR)


def open_server_dir(directory: Path, shown: str, uid: int | None = None) -> int:
    """``serve``: the socket's directory opened (made 0700 with any parent missing when absent), checked to be the
    user's alone, every entry in it too: its descriptor (the socket is bound through it)."""
    make_private_dirs(directory)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        check_private(os.fstat(fd), shown, uid)
        for name in os.listdir(fd):
            entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if entry.st_uid != (os.geteuid() if uid is None else uid):
                raise Unsafe(os.path.join(shown, name), f"is owned by uid {entry.st_uid} (not you)",
                             f"remove {shown} (rm -rf {shown})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_socket_dir(directory: Path, shown: str, uid: int | None = None) -> int | None:
    """A client: the socket's directory opened when it is the user's alone (None: there is none, so no server);
    Unsafe when it is there but another user's or open to others (nothing may be sent to a socket in it)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except PermissionError:  # there, and not ours to read: say whose it is
        check_private(os.stat(directory), shown, uid)
        return None  # ours, and ours alone, yet not readable: no server could listen in it
    except OSError:
        return None
    try:
        check_private(os.fstat(fd), shown, uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def socket_there(dir_fd: int, name: str, shown: str, uid: int | None = None) -> bool:
    """Whether the directory holds a socket ``name`` (False: none, no server); Unsafe when another user owns it."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    unsafe = _foreign(st, os.path.join(shown, name), os.geteuid() if uid is None else uid)
    if unsafe is not None:
        raise unsafe
    return stat.S_ISSOCK(st.st_mode)


def peer(sock: socket.socket) -> tuple[int, int, int]:
    """The other end's (pid, uid, gid), as they were when it connected (or listened)."""
    return _CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))


def check_server_peer(sock: socket.socket, shown: str, uid: int | None = None) -> None:
    """A client, once connected: the server listening there is this user's (Unsafe otherwise)."""
    uid = os.geteuid() if uid is None else uid
    pid, peer_uid, _ = peer(sock)
    if peer_uid != uid:
        raise Unsafe(shown, f"is served by uid {peer_uid} (pid {pid}; not you, uid {uid})",
                     f"remove it (rm -rf {os.path.dirname(shown) or '.'})")


def stranger(sock: socket.socket, uid: int | None = None) -> str | None:
    """The server's look at a connection: None when its peer is the server's user; else the log's line for it."""
    uid = os.geteuid() if uid is None else uid
    pid, peer_uid, _ = peer(sock)
    if peer_uid == uid:
        return None
    return f"refused a connection from uid {peer_uid} (pid {pid}): this server serves uid {uid} only; nothing was " \
           "read or run"


def admit(conn: socket.socket, uid: int | None = None, log: Callable[[str], None] | None = None) -> bool:
    """Whether the server may read ``conn``'s request. A stranger's is not read: the log says so in one line and it
    is told so in one (without waiting on it), then the caller closes the connection."""
    line = stranger(conn, uid)
    if line is None:
        return True
    (log or _log)(line)
    try:
        conn.send(protocol.frame({"refused": f"the build server (pid {os.getpid()}) serves its own user "
                                             f"(uid {os.geteuid() if uid is None else uid}) only: nothing was read "
                                             "or run; build with scons"}), socket.MSG_DONTWAIT)
    except OSError:
        pass  # gone, or not reading: the closed connection says enough
    return False


def _log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)
