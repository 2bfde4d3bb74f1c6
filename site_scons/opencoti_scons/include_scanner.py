"""The ``#include`` scanner every compiling tool uses (a module the tools import, not a tool itself).

It searches as gcc does: ``#include "x"`` looks in the including file's directory, then the -iquote
directories, then -I, then -isystem; ``#include <x>`` skips the first two. SCons' own C scanner
knows -I only, so a header found through -iquote or -isystem would be missed (no rebuild when it
changes) or, under a same-named header elsewhere, misattributed. ``#include_next`` is not followed
(neither llama.cpp nor llamafile uses it). tests/integration/test_include_scanner.py checks it against ``gcc -M``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import SCons.Scanner
import SCons.Util

from opencoti_build.tree.sources import CXX_SUFFIXES
from opencoti_scons import engine

# The sources a compile scans (a builder's source_scanner is used whatever the suffix; these key the
# scanner where a tool registers it by suffix).
SOURCE_SUFFIXES: tuple[str, ...] = (".c", *CXX_SUFFIXES)
INCLUDE_RE = r'^[ \t]*#[ \t]*(?:include|import)[ \t]*(<|")([^>"]+)(>|")'


class IncludeScanner(SCons.Scanner.ClassicCPP):
    """gcc's search order; the path function returns ``(n_quote_only, *dirs)``: the first n dirs are -iquote's."""

    @staticmethod
    def find_include(include, source_dir, path):
        n_quote = path[0] if path else 0
        dirs = tuple(path[1:])
        delimiter, name = SCons.Util.to_str(include[0]), SCons.Util.to_str(include[1])
        search = (source_dir,) + dirs if delimiter == '"' else dirs[n_quote:]
        return engine.find_file(name, search), engine.interned(name)


def include_scanner(name: str = "IncludeScanner", suffixes: Sequence[str] = SOURCE_SUFFIXES,
                    quote_vars: Sequence[str] = ("IQUOTEPATH",),
                    dir_vars: Sequence[str] = ("CPPPATH", "ISYSTEMPATH")) -> IncludeScanner:
    """A scanner searching the dirs of the ``quote_vars`` for ``"x"`` only, then those of ``dir_vars`` in order
    (construction variables: -iquote, then -I and -isystem; a variable the env lacks is no dirs)."""
    quote_finders = [SCons.Scanner.FindPathDirs(v) for v in quote_vars]
    dir_finders = [SCons.Scanner.FindPathDirs(v) for v in dir_vars]

    def path(env: Any, dir: Any = None, target: Any = None, source: Any = None, argument: Any = None) -> tuple:
        quote = tuple(d for find in quote_finders for d in find(env, dir, target, source))
        rest = tuple(d for find in dir_finders for d in find(env, dir, target, source))
        return (len(quote),) + quote + rest

    scanner = IncludeScanner(name, list(suffixes), quote_vars[0] if quote_vars else dir_vars[0], INCLUDE_RE)
    scanner.path_function = path
    return scanner
