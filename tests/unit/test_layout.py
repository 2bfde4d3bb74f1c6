"""The core package's layout: each package's index names every module, at most a dozen modules stay at the top, and
no module of it imports SCons."""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re

import opencoti_build


def _indexed(package) -> set[str]:
    return set(re.findall(r"^- ``(\w+)``:", package.__doc__, re.M))


def _modules(package) -> set[str]:
    return {m.name for m in pkgutil.iter_modules(package.__path__) if m.name != "__main__"}


def _packages() -> list:
    found = [opencoti_build]
    for info in pkgutil.walk_packages(opencoti_build.__path__, "opencoti_build."):
        if info.ispkg:
            found.append(importlib.import_module(info.name))
    return found


def test_every_package_index_names_every_module_and_no_other() -> None:
    packages = _packages()
    assert len(packages) >= 11  # the packages by concern, formats and gpu.toolchains among them
    for package in packages:
        assert _indexed(package) == _modules(package), package.__name__


def test_at_most_a_dozen_modules_stay_at_the_top() -> None:
    top = [m for m in pkgutil.iter_modules(opencoti_build.__path__) if not m.ispkg]
    assert 0 < len(top) <= 12


def test_no_core_module_imports_scons() -> None:
    importing = []
    for path in sorted(p for root in opencoti_build.__path__ for p in __import__("pathlib").Path(root).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "SCons" or n.startswith("SCons.") for n in names):
                importing.append(path.name)
    assert importing == []
