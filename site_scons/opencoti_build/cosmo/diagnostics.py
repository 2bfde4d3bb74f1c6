"""One report from a fat compile's two compilers: shared diagnostics once, the rest labelled.

A fat compile runs gcc and aarch64-linux-gnu-gcc on the same file at once. Left to write to the
terminal themselves, every diagnostic of shared code comes out twice and the two streams interleave
(an IDE's problem matcher counts each error twice). The driver captures both and merges them here:
the two outputs are aligned line by line (difflib), lines both printed appear once, and a
diagnostic line only one compiler printed ends with `` [x86_64]`` or `` [aarch64]``. gcc's
``file:line:col: severity: message`` form is kept (the label is at the end of the message, where
VS Code's ``$gcc`` matcher and Vim's errorformat take it as part of the text).
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

_ANSI = re.compile(r"\x1b\[[0-9;]*[mK]")
# gcc's diagnostic line: path:line[:col]: severity: text (the severity may be coloured).
DIAGNOSTIC = re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? "
                        r"(?P<severity>fatal error|error|warning|note): (?P<text>.*)$")


def plain(line: str) -> str:
    """``line`` without colour escapes."""
    return _ANSI.sub("", line)


def is_diagnostic(line: str) -> bool:
    return DIAGNOSTIC.match(plain(line)) is not None


def _labelled(lines: list[str], arch: str) -> list[str]:
    return [f"{line} [{arch}]" if is_diagnostic(line) else line for line in lines]


def merge(outputs: Mapping[str, str], order: tuple[str, str] = ("x86_64", "aarch64")) -> str:
    """The two compilers' outputs as one text: common lines once, one-sided diagnostics labelled.

    Lines are compared without colour escapes, so a coloured and a plain run merge alike.
    """
    first, second = order
    a = outputs.get(first, "").splitlines()
    b = outputs.get(second, "").splitlines()
    matcher = difflib.SequenceMatcher(None, [plain(x) for x in a], [plain(x) for x in b], autojunk=False)
    merged: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            merged += a[i1:i2]
            continue
        merged += _labelled(a[i1:i2], first)  # replace, delete: what only the first printed
        merged += _labelled(b[j1:j2], second)  # replace, insert: what only the second printed
    return "".join(line + "\n" for line in merged)


def colour_wanted(environ: Mapping[str, str], stream_is_tty: bool) -> bool:
    """gcc's colours for a captured compile: CLICOLOR_FORCE forces, NO_COLOR forbids, else a terminal."""
    if environ.get("CLICOLOR_FORCE", "0") not in ("", "0"):
        return True
    if environ.get("NO_COLOR"):
        return False
    return stream_is_tty and environ.get("TERM", "dumb") != "dumb"
