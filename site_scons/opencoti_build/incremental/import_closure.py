"""The source files of a module of this package and of every module of it that it imports, transitively.

A step whose output bytes are decided by Python code (the artifact and manifest writers,
site_tools/llamafile_package.py) depends on the files of that code, so that an edit to any of them redoes
the step. The list is read from the modules' import statements, lazy imports inside functions included,
never kept by hand. It errs on the side of more files: a module imported for one name still counts.

Parsing the modules is most of the cost (50 of them for the packager: a tenth of a second), so a run may pass a memo
of what each source imports by its SHA-256 (:class:`ImportMemo`, the build's is opencoti_build.cache.file_digests):
a source with the same bytes imports the same names.
"""
from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from opencoti_build import project

PACKAGE = "opencoti_build"
PACKAGE_DIR = project.PACKAGE_DIR


def module_file(name: str) -> Path | None:
    """The source of module ``name`` (``opencoti_build.x.y``), or None when it names no module of the package."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    path = PACKAGE_DIR.joinpath(*parts[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _statements(nodes: Iterable[ast.AST]) -> Iterator[ast.stmt]:
    """Every statement among ``nodes`` and in the blocks nested in them. An import is a statement, so no
    expression needs walking (most of a module's nodes; ast.walk visited them all)."""
    for node in nodes:
        if isinstance(node, ast.stmt):
            yield node
        for block in ("body", "orelse", "finalbody", "handlers", "cases"):
            yield from _statements(getattr(node, block, None) or [])


class ImportMemo(Protocol):
    """What each source imports, by the source's SHA-256 (hex), kept across runs."""

    def imported_names(self, source_sha256: str) -> list[str] | None: ...

    def remember_imports(self, source_sha256: str, names: list[str]) -> None: ...


def imported_names(source: Path, memo: ImportMemo | None = None) -> frozenset[str]:
    """Every ``opencoti_build...`` name the module at ``source`` imports, and for ``from X import y`` also ``X.y``
    (``y`` may be a submodule): from ``memo`` when it knows these bytes, else parsed (and given to it)."""
    text = source.read_bytes()
    if memo is None:
        return _parsed(text, str(source))
    key = hashlib.sha256(text).hexdigest()
    known = memo.imported_names(key)
    if known is None:
        known = sorted(_parsed(text, str(source)))
        memo.remember_imports(key, known)
    return frozenset(known)


@functools.lru_cache(maxsize=None)
def _parsed(text: bytes, filename: str) -> frozenset[str]:
    """:func:`imported_names` of a module's bytes, parsed. Once per process: a build asks for several closures
    that share most modules."""
    names: set[str] = set()
    for node in _statements(ast.parse(text, filename).body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(n for n in names if n.split(".")[0] == PACKAGE)


def source_files(*modules: str, memo: ImportMemo | None = None) -> list[Path]:
    """The files of ``modules`` and of the package's modules they import, transitively (packages' ``__init__``
    included: importing a submodule runs them), sorted; ``memo``: see the module docstring."""
    found: dict[str, Path] = {}
    pending = list(modules)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        source = module_file(name)
        if source is None:
            continue
        found[name] = source
        pending += imported_names(source, memo)
        pending += [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]  # its parent packages
    return sorted(set(found.values()))
