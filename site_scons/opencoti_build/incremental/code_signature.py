"""What a C or C++ file says to a compiler, apart from its comments and trailing whitespace: a signature that an edit
of comments or trailing blanks keeps, so that the steps compiling it need not run again (ccache's preprocessor mode,
at the cost of one regular-expression scan of the file instead of a preprocessor run).

The file is scanned as the compiler's lexer splits it into string, character and raw string literals, header names,
numbers, identifiers and comments; every comment is replaced by blanks of its own shape (its newlines kept), then
each line's trailing blanks are dropped, and the rest is hashed. Every token therefore keeps its line and column:
``__LINE__``, diagnostics and the debug info's line table come out the same, so the object a compiler writes from
the edited file is the one it wrote before, byte for byte, unless the compiler digests the source itself (clang's
DWARF 5 line tables carry each file's MD5: the build does not use this signature for such compiles).

The scan errs one way only: text it cannot place is kept as code (a change there counts). Where a file could be read
two ways (a carriage return that is not part of CRLF, which gcc takes as a newline; a ``??/`` trigraph, a backslash
to compilers that read trigraphs), there is no signature and its bytes decide.
"""
from __future__ import annotations

import hashlib
import marshal
import re

from opencoti_build.incremental import private

# Where a comment, a literal or a header name may start; what lies between is code, passed over at the regex
# engine's pace (a Python step per match, not per token).
_MARK = re.compile(rb"""["'/]""")
_STRING = re.compile(rb'"(?:\\.|[^"\\\n])*"', re.DOTALL)  # a backslash-newline inside continues it
_CHAR = re.compile(rb"'(?:\\.|[^'\\\n])*'", re.DOTALL)
_RAW = re.compile(rb'(?:u8|[uUL])?R"([^()\\\s"]{0,16})\(.*?\)\1"', re.DOTALL)
_COMMENT = re.compile(rb"//(?:\\\r?\n|[^\n])*|/\*.*?\*/", re.DOTALL)
_WORD_BYTES = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.")
_INCLUDE_OPEN = re.compile(rb"[ \t]*\#[ \t]*(?:include|include_next|import)[ \t]*<[^>\n]*\Z")  # a "//" in <...>
_HEADER_REST = re.compile(rb"[^>\n]*>")
_RAW_PREFIXES = {b"R", b"u8R", b"uR", b"UR", b"LR"}
_BLANKS = b" \t\f\v"
_AMBIGUOUS = re.compile(rb"\r(?!\n)|\?\?/")
_NOT_NEWLINE = re.compile(rb"[^\n]")

# The files scanned this way: C, C++ and CUDA sources and headers.
SUFFIXES: frozenset[str] = frozenset({".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".inc", ".cu", ".cuh"})


class _Unsure(Exception):
    """The scan cannot tell how the compiler reads a spot: the bytes decide."""


def _word_before(data: bytes, at: int) -> bytes:
    """The identifier or pp-number that ends right before ``at`` (empty when none does)."""
    start = at
    while start > 0 and data[start - 1] in _WORD_BYTES:
        start -= 1
    return data[start:at]


def _is_number(word: bytes) -> bool:
    return word[:1].isdigit() or (word[:1] == b"." and word[1:2].isdigit())


def _literal(data: bytes, at: int) -> tuple[int, int | None]:
    """Where the literal starting with the quote at ``at`` ends (``at + 1`` when none does: a stray quote, or a digit
    separator as in 1'000, which are code), and where it starts when it is a raw string (its blanks are its own)."""
    word = _word_before(data, at)
    if data[at:at + 1] == b"'":
        if _is_number(word):
            return at + 1, None
        literal = _CHAR.match(data, at)
    elif word in _RAW_PREFIXES:
        raw = _RAW.match(data, at - len(word))
        if raw is None:
            raise _Unsure  # an unterminated raw string: the compiler refuses it, or reads further than this scan
        return raw.end(), raw.start()
    else:
        literal = _STRING.match(data, at)
    return (at + 1 if literal is None else literal.end()), None


def _header_name_end(data: bytes, at: int) -> int | None:
    """Where the header name ends when the "//" or "/*" at ``at`` lies inside one (#include <a//b.h>), else None."""
    if _INCLUDE_OPEN.match(data, data.rfind(b"\n", 0, at) + 1, at) is None:
        return None
    rest = _HEADER_REST.match(data, at)
    return at + 2 if rest is None else rest.end()


def _without_trailing_blanks(code: bytes, last_line_ends: bool) -> bytes:
    """``code`` without the blanks that end each of its lines (its last one too when ``last_line_ends``)."""
    lines = code.split(b"\n")
    tail = None if last_line_ends else lines.pop()
    for i, line in enumerate(lines):
        lines[i] = line[:-1].rstrip(_BLANKS) + b"\r" if line.endswith(b"\r") else line.rstrip(_BLANKS)
    return b"\n".join(lines if tail is None else [*lines, tail])


def code_only(data: bytes) -> bytes | None:
    """``data`` with each comment blanked (its newlines kept), the blanks that end a line dropped, except within a
    raw string literal, whose bytes are all its own, and the empty lines that end the file; None when the file could
    be read two ways (see the module docstring)."""
    if _AMBIGUOUS.search(data):
        return None
    kept: list[bytes] = []  # code with its comments blanked, then a raw string, and so on
    code: list[bytes] = []
    pos = last = 0
    try:
        while (mark := _MARK.search(data, pos)) is not None:
            at = mark.start()
            if mark.group() in (b'"', b"'"):
                pos, raw_start = _literal(data, at)
                if raw_start is not None:
                    kept += [_without_trailing_blanks(b"".join([*code, data[last:raw_start]]), False),
                             data[raw_start:pos]]
                    code, last = [], pos
                continue
            if data[at + 1:at + 2] not in (b"/", b"*"):
                pos = at + 1  # a division
                continue
            header_end = _header_name_end(data, at)
            comment = None if header_end is not None else _COMMENT.match(data, at)
            if comment is None:  # in a header name, or an unterminated block comment (refused by the compiler)
                pos = header_end or at + 2
                continue
            text = comment.group()
            code += [data[last:at], _NOT_NEWLINE.sub(b" ", text) if b"\n" in text else b" " * len(text)]
            pos = last = comment.end()
    except _Unsure:
        return None
    code.append(data[last:])
    kept.append(_without_trailing_blanks(b"".join(code), True))
    return _one_last_newline(b"".join(kept))


def _one_last_newline(code: bytes) -> bytes:
    """``code`` with the empty lines that end it dropped (no token follows them), its last newline kept; as it is
    when what would end it then is a backslash (a splice into the next line)."""
    ended = code.rstrip(b"\n")
    if ended == code or ended.endswith(b"\\"):
        return code
    return ended + b"\n"


def signature(data: bytes) -> str | None:
    """The SHA-256 of :func:`code_only` (hex), or None when the bytes must decide."""
    code = code_only(data)
    return None if code is None else hashlib.sha256(code).hexdigest()


class KnownSignatures:
    """The code signature of each file content the build has seen, by its content signature (SCons's csig), kept in
    BUILD_DIR between runs: what a file's last recorded bytes said, for comparison with what its new bytes say.

    A content's entry is a fact of its bytes alone, so any run may add to it, failed and killed ones included; the
    file is written whole or not at all, the user's alone, and one that cannot be read is an empty table (each
    changed file is then compiled again, as without it). The newest ``LIMIT`` contents are kept."""

    LIMIT = 100_000
    FILE_NAME = "code-signatures"

    def __init__(self, path: str) -> None:
        self.path = path
        self._table = self._load(path)
        self._changed = False

    @staticmethod
    def _load(path: str) -> dict[str, str]:
        try:
            with open(path, "rb") as handle:
                table = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in table.items()):
            return {}
        return table

    def known(self, content_signature: str) -> str | None:
        """The code signature of the content with this signature ("" when its bytes decide), or None if unknown."""
        return self._table.get(content_signature)

    def learn(self, content_signature: str, data: bytes) -> str:
        """The code signature of ``data``, the content with this signature, kept for later runs ("" when its bytes
        decide)."""
        found = self._table.get(content_signature)
        if found is None:
            found = self._table[content_signature] = signature(data) or ""
            self._changed = True
        return found

    def save(self) -> None:
        """Write the table when this run learned anything (the newest LIMIT entries)."""
        if not self._changed:
            return
        entries = list(self._table.items())[-self.LIMIT:]
        private.write(self.path, marshal.dumps(dict(entries)))
        self._changed = False
