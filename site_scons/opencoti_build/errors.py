"""The one error idiom of the build: every refusal a user can cause derives from :class:`UserError`.

A ``UserError``'s message is one line naming the thing and the fix. SConscripts catch this base
only (a real bug keeps its traceback) and report it with :func:`fail`: ``scons: error: …``, exit 2.
"""
from __future__ import annotations

import errno
import signal
import sys
from typing import NoReturn

# The answer of a check that passes or says why not: None, it holds; a string, the one-line reason (ready to print or
# to put in a refusal). A function giving one is named why_not_<what must hold> (docs/architecture.md).
WhyNot = str | None


class UserError(ValueError):
    """Bad input or an environment the build cannot use. The message is one line."""


class Absent(Exception):
    """Something optional this machine or tree lacks (a GPU toolchain, a backend's sources): no error.

    The message is the one-line reason; the caller skips what needed it with one WARN line.
    """


def fail(message: str | BaseException) -> NoReturn:
    """Print ``scons: error: <message>`` on stderr and exit 2 (usable from any SConscript)."""
    sys.stderr.write(f"scons: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def os_error_line(exc: OSError, what: str) -> str:
    """One line for an OSError on ``what``, saying disk full / permission denied in those words."""
    if exc.errno == errno.ENOSPC:
        return f"{what}: no space left on the device (disk full); free space and run the build again"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{what}: permission denied; make it writable or point the variable elsewhere"
    return f"{what}: {exc.strerror or exc}"


def interrupted(returncode: int) -> bool:
    """Whether a child's exit status says Ctrl-C stopped it (killed by SIGINT, or a driver's 128 + SIGINT)."""
    return returncode in (-signal.SIGINT, 128 + signal.SIGINT)


def stop_if_interrupted(returncode: int) -> None:
    """Raise KeyboardInterrupt for a child Ctrl-C stopped: scons then says "Build interrupted." once, not that the
    child failed (the child may see the signal first, or alone in a worker thread)."""
    if interrupted(returncode):
        raise KeyboardInterrupt
