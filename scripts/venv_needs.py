"""What the project's virtual environment still lacks for one command (scripts/install-deps runs it with the venv's
Python): pyproject.toml's requirements, ``[project] dependencies`` and the extras named, that are not installed at a
version they allow (with what their own extras, such as ``securesystemslib[crypto]``, require), and the project
itself when it is not installed from this checkout. One line each, nothing when nothing is missing.

    python3 scripts/venv_needs.py PROJECT [EXTRA ...]          what is missing
    python3 scripts/venv_needs.py --all PROJECT [EXTRA ...]    every requirement (no venv yet)

The standard library alone, and pip's own copy of ``packaging`` for the version ranges (every venv has pip); without
it every requirement counts as missing.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PROJECT_LINE = "opencoti-build"  # this checkout, editable


def requirements(pyproject: dict[str, Any], extras: Sequence[str]) -> list[str]:
    """The project's own requirements and those of ``extras``, as pyproject.toml writes them."""
    project = pyproject["project"]
    found = list(project.get("dependencies", []))
    for extra in extras:
        found += project.get("optional-dependencies", {})[extra]
    return found


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def declared(name: str) -> list[str]:
    """The requirements an installed distribution declares (its metadata's Requires-Dist)."""
    try:
        return importlib.metadata.distribution(name).requires or []
    except importlib.metadata.PackageNotFoundError:
        return []


def missing(wanted: Sequence[str], requirement: Callable[[str], Any],
            version: Callable[[str], str | None] = installed_version,
            requires: Callable[[str], list[str]] = declared) -> list[str]:
    """Those of ``wanted`` not installed at a version they allow, or whose extras' requirements are not.
    ``requirement`` parses one (packaging's Requirement)."""
    def satisfied(req: Any) -> bool:
        have = version(req.name)
        return have is not None and req.specifier.contains(have, prereleases=True)

    lacking = []
    for text in wanted:
        req = requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue  # not for this platform or Python
        ok = satisfied(req)
        for extra in sorted(req.extras) if ok else ():
            for inner in map(requirement, requires(req.name)):
                if inner.marker is not None and inner.marker.evaluate({"extra": extra}) and not satisfied(inner):
                    ok = False
        if not ok:
            lacking.append(text)
    return lacking


def installed_here(project: Path) -> bool:
    """Whether ``opencoti_build`` is imported from this checkout's site_scons (``pip install -e`` of it)."""
    spec = importlib.util.find_spec("opencoti_build")
    origin = spec.origin if spec is not None else None
    return origin is not None and Path(origin).resolve().is_relative_to((project / "site_scons").resolve())


def main(argv: Sequence[str]) -> int:
    every = argv[:1] == ["--all"]
    project, *extras = argv[1:] if every else argv
    wanted = requirements(tomllib.loads((Path(project) / "pyproject.toml").read_text()), extras)
    try:
        from pip._vendor.packaging.requirements import Requirement
    except ImportError:
        every = True
    if every:
        lines = [PROJECT_LINE, *wanted]
    else:
        lines = ([] if installed_here(Path(project)) else [PROJECT_LINE]) + missing(wanted, Requirement)
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
