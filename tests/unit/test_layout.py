"""The core package's layout: its index names every module, and no module of it imports SCons."""
from __future__ import annotations

import ast
import pkgutil
import re

import opencoti_build
from opencoti_build import formats


def _indexed(package) -> set[str]:
    return set(re.findall(r"^- ``(\w+)``:", package.__doc__, re.M))


def _modules(package) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "__main__"}


def test_the_package_index_names_every_module_and_no_other() -> None:
    assert _indexed(opencoti_build) == _modules(opencoti_build)
    assert _indexed(formats) == _modules(formats)


def test_no_core_module_imports_scons() -> None:
    importing = []
    for path in sorted(p for root in opencoti_build.__path__ for p in __import__("pathlib").Path(root).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "SCons" or n.startswith("SCons.") for n in names):
                importing.append(path.name)
    assert importing == []
