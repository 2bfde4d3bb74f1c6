"""The unit tier's promise, checked: a process start inside a unit test is refused (tests/unit/conftest.py)."""
from __future__ import annotations

import os
import subprocess

import pytest


def test_starting_a_subprocess_is_refused_with_the_way_out() -> None:
    with pytest.raises(RuntimeError, match=r"^a unit test started a process \(subprocess\.Popen .*move it to tests/integration/$"):
        subprocess.run(["true"], check=False)


def test_forking_and_system_are_refused() -> None:
    with pytest.raises(RuntimeError, match=r"os\.fork"):
        os.fork()
    with pytest.raises(RuntimeError, match=r"os\.system"):
        os.system("true")
