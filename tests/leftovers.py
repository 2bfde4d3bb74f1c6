"""What a test run changes in the checkout: the entries of ``git status --porcelain --ignored`` that were not there
when it started, and the ignored ones (``!!``: a build/, a compile_commands.json, .venv) that went (tests/conftest.py
compares them at the session's end and fails the run on any).

Before and after, not against a clean tree: work in progress in the checkout is no leftover, nor is a commit made
meanwhile (an untracked or changed file that is no longer listed). The caches that running Python, pytest and mypy
keep are none either. Another process writing in the checkout meanwhile (a build of one's own, another engineer's
edit) shows up too: rerun when the list names it.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

CACHES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache"})


def status(root: Path) -> frozenset[str] | None:
    """``git status --porcelain --ignored`` of ``root``, a set of lines; None outside a git checkout or without git.
    Takes no optional lock: a commit made meanwhile in the checkout finds no index.lock of ours."""
    try:
        proc = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain", "--ignored"],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return frozenset(line for line in proc.stdout.splitlines() if line) if proc.returncode == 0 else None


def _cache(line: str) -> bool:
    return bool(CACHES & set(Path(line[3:].strip('"')).parts))


def left(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """The entries of ``after`` that ``before`` had not, then the ignored entries of ``before`` that ``after`` has not
    (as ``gone: !! PATH``), caches aside, each in order."""
    added = sorted(line for line in after - before if not _cache(line))
    return added + sorted(f"gone: {line}" for line in before - after if line.startswith("!! ") and not _cache(line))
