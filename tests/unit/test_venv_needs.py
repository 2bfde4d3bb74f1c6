"""scripts/venv_needs.py, which tells scripts/install-deps what the project's venv lacks: pyproject.toml's
requirements not installed at a version they allow (their extras' requirements too), and nothing else."""
from __future__ import annotations

import importlib.util
import tomllib

from pip._vendor.packaging.requirements import Requirement

from scons_runs import PROJECT

spec = importlib.util.spec_from_file_location("venv_needs", PROJECT / "scripts" / "venv_needs.py")
assert spec is not None and spec.loader is not None
venv_needs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(venv_needs)


def test_the_demo_asks_for_the_build_alone_and_the_tests_for_their_extra_too() -> None:
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    demo = venv_needs.requirements(pyproject, [])
    test = venv_needs.requirements(pyproject, ["test"])
    assert any(r.startswith("scons>=") for r in demo) and not any(r.startswith("pytest") for r in demo)
    assert test[:len(demo)] == demo and any(r.startswith("pytest>=") for r in test)


def test_missing_are_the_absent_the_out_of_range_and_those_whose_extras_lack_something() -> None:
    installed = {"scons": "4.11.1", "lief": "0.14.0", "securesystemslib": "1.3.0", "cryptography": "44.0.0",
                 "cyclonedx-python-lib": "11.0.0"}
    requires = {"securesystemslib": ["cryptography>=40; extra == 'crypto'", "pykcs11; extra == 'pkcs11'"],
                "cyclonedx-python-lib": ["jsonschema>=4.18; extra == 'json-validation'"]}
    wanted = ["scons>=4.11,<4.12", "lief>=0.15", "redis>=5", "securesystemslib[crypto]>=1.0",
              "cyclonedx-python-lib[json-validation]>=11", "pywin32; sys_platform == 'win32'"]
    assert venv_needs.missing(wanted, Requirement, installed.get, lambda name: requires.get(name, [])) == [
        "lief>=0.15", "redis>=5", "cyclonedx-python-lib[json-validation]>=11"]
