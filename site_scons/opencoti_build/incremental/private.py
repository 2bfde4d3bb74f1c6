"""BUILD_DIR's bookkeeping is the user's alone and holds no secret.

A build runs with the user's whole environment (a CI token, a Redis password in ``OPENCOTI_CACHE_URL``) and command
line (``CACHE_URL=redis://:PASSWORD@...``), and the null build's record must tell whether they changed. It keeps a
keyed digest of each value (HMAC-SHA256 under a random key of this build directory's, :func:`key`), never the
value: the same values give the same digests, and a record copied off the machine (a CI job uploading ``build/``)
tells nothing of them without the key. What the build writes for itself in ``BUILD_DIR`` (the record and its key,
the lock, SCons's sconsign, the notes, the tuning probe's answers, the scratch directory) is made readable by the
user alone: files 0600, directories 0700, whatever the umask (:func:`write`, :func:`make_dir`). What the build writes
for others (objects, binaries, artifacts) keeps the umask's modes. A line that names a command line for a log
shows it with every password taken out (:func:`shown`).
"""
from __future__ import annotations

import hmac
import os
from collections.abc import Iterable
from urllib.parse import urlsplit

FILE_MODE = 0o600
DIR_MODE = 0o700
KEY_BYTES = 32
_DIGEST = "hmac-sha256:"


def write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` as the user's alone (0600), whole or not at all: a temporary beside it, renamed."""
    staged = f"{os.fspath(path)}.{os.getpid()}.tmp"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a temporary a killed run left with another mode
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        os.unlink(staged)
        raise
    os.close(fd)
    os.replace(staged, path)


def make_dir(path: str | os.PathLike[str]) -> None:
    """``path`` (and its parents) made, ``path`` itself the user's alone (0700) whatever the umask."""
    os.makedirs(path, DIR_MODE, exist_ok=True)
    os.chmod(path, DIR_MODE)


def key(path: str | os.PathLike[str]) -> bytes:
    """The random key kept at ``path`` (0600), made on first use. Two runs making it at once agree (the first one's
    link wins); a damaged one is replaced: the digests made with it no longer match, which costs a full run."""
    found = read_key(path)
    if found is not None:
        return found
    staged = f"{os.fspath(path)}.{os.getpid()}.new"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        os.write(fd, os.urandom(KEY_BYTES))
    finally:
        os.close(fd)
    try:
        if os.path.lexists(path):
            os.replace(staged, path)
        else:
            try:
                os.link(staged, path)  # never over another run's new key
            except FileExistsError:
                pass
    finally:
        if os.path.lexists(staged):
            os.unlink(staged)
    found = read_key(path)
    if found is None:
        raise OSError(f"cannot keep a key in {os.fspath(path)}")
    return found


def read_key(path: str | os.PathLike[str]) -> bytes | None:
    """The key at ``path``, or None when there is none (yet) or it is damaged."""
    try:
        with open(path, "rb") as f:
            found = f.read(KEY_BYTES + 1)
    except OSError:
        return None
    return found if len(found) == KEY_BYTES else None


def digest(secret: bytes, value: str) -> str:
    """``value``'s keyed digest under ``secret`` (the same value, the same digest; nothing of the value in it)."""
    return _DIGEST + hmac.digest(secret, value.encode("utf-8", "surrogateescape"), "sha256").hex()


def digested_environment(secret: bytes, environ: dict[str, str]) -> dict[str, str]:
    """Each variable's name, with its value's keyed digest."""
    return {name: digest(secret, value) for name, value in environ.items()}


def digested_arguments(secret: bytes, args: Iterable[str]) -> list[str]:
    """A command line with each ``NAME=VALUE`` variable's value replaced by its keyed digest (options and targets
    as they are: an option's value names a directory or a number of jobs)."""
    return [f"{arg.partition('=')[0]}={digest(secret, arg.partition('=')[2])}"
            if "=" in arg and not arg.startswith("-") else arg for arg in args]


def shown_url(value: str) -> str:
    """``value`` with the password of a URL in it replaced by ``***`` (anything else as it is)."""
    try:
        parts = urlsplit(value)
        password = parts.password
    except ValueError:
        return value
    if not password or "@" not in parts.netloc:
        return value
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{parts.netloc.rsplit('@', 1)[1]}").geturl()


def shown(args: Iterable[str]) -> list[str]:
    """A command line for a log: each ``NAME=URL`` (``CACHE_URL=redis://:PASSWORD@...``) without its password."""
    return [f"{arg.partition('=')[0]}={shown_url(arg.partition('=')[2])}" if "=" in arg else arg for arg in args]
