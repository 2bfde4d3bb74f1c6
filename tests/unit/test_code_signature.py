"""The code signature (opencoti_build/incremental/code_signature.py): what a comment-only edit keeps, what any other
edit changes, and the spots where the bytes must decide."""
from __future__ import annotations

import pytest

from opencoti_build.incremental.code_signature import code_only, signature

BASE = b'#include "a.h"\nint f(int x) { // doubles\n  return 2 * x;  /* twice */\n}\n'


@pytest.mark.parametrize("edited", [
    b'#include "a.h"\nint f(int x) { // triples, no: doubles\n  return 2 * x;  /* twice */\n}\n',  # a comment's words
    b'#include "a.h"\nint f(int x) { // doubles\n  return 2 * x;  /* two times */\n}\n',
    b'#include "a.h"\nint f(int x) { // doubles   \n  return 2 * x;  /* twice */   \n}\n',  # trailing blanks
    b'#include "a.h"\nint f(int x) { // doubles\n  return 2 * x;\n}\n',  # a comment at a line's end removed
    BASE + b"// appended at the end: no line of the file moves\n",  # the comment-only edit
    BASE.replace(b"// doubles", b"/* doubles */"),
])
def test_an_edit_of_comments_or_trailing_blanks_keeps_the_signature(edited: bytes) -> None:
    assert signature(edited) == signature(BASE) is not None


@pytest.mark.parametrize("edited", [
    BASE.replace(b"2 * x", b"3 * x"),  # code
    BASE.replace(b"2 * x", b"2*x"),  # blanks between tokens: the columns move
    BASE.replace(b"  return", b"/**/return"),  # a comment before code on its line: its column moves
    BASE.replace(b"// doubles", b"/* doubles\n */"),  # a comment that takes a line more: __LINE__ moves
    b"\n" + BASE,
    BASE.replace(b"\n", b"\r\n"),  # CRLF: kept as it is (its bytes are code)
    BASE.replace(b'"a.h"', b'"b.h"'),
    BASE + b"int g;",
])
def test_any_other_edit_changes_it(edited: bytes) -> None:
    assert signature(edited) != signature(BASE)


@pytest.mark.parametrize(("text", "code"), [
    (b'const char *u = "http://x"; // c\n', b'const char *u = "http://x";\n'),  # no comment inside a string
    (b"char c = '/'; char d = '\"'; // c\n", b"char c = '/'; char d = '\"';\n"),
    (b'char *s = "a\\"//b"; // c\n', b'char *s = "a\\"//b";\n'),  # an escaped quote
    (b'char *s = "a\\\n//b"; // c\n', b'char *s = "a\\\n//b";\n'),  # a backslash-newline inside a string
    (b"int n = 1'000'000; // it's\n", b"int n = 1'000'000;\n"),  # digit separators start no character literal
    (b"int m = 0x1'fp-3'0; char c = L'x'; // c\n", b"int m = 0x1'fp-3'0; char c = L'x';\n"),
    (b"#include <sys//types.h> // c\n", b"#include <sys//types.h>\n"),  # a header name
    (b"// one \\\n still the comment\ncode\n", b"\n\ncode\n"),  # a backslash-newline continues a line comment
    (b'auto r = R"d(a // b  \n /* )" */ )d";  // c\n', b'auto r = R"d(a // b  \n /* )" */ )d";\n'),  # raw: its own
    (b'auto r = u8R"(x)"; auto t = xR"(y)"; // c\n', b'auto r = u8R"(x)"; auto t = xR"(y)";\n'),
    (b"a /* unterminated\n", b"a /* unterminated\n"),  # the compiler refuses it: left as code
    (b"int x;   \t", b"int x;"),  # the last line's trailing blanks
])
def test_only_comments_are_blanked(text: bytes, code: bytes) -> None:
    assert code_only(text) == code


@pytest.mark.parametrize("text", [b"int a; // c\rint b;\n", b'char *s = "??/"; // c\n',
                                  b'auto r = R"x(never closed\n'])
def test_a_file_read_two_ways_is_left_to_its_bytes(text: bytes) -> None:
    assert code_only(text) is None and signature(text) is None
