"""The build stays in pieces a maintainer can read (issue 46): no function of it above radon's cyclomatic complexity
15, no module of site_scons over 450 lines. Measured over every build file (site_scons, SConstruct, the SConscripts),
as radon measures them (radon is in the test extra)."""
from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

ROOT = Path(__file__).resolve().parents[2]
MAX_COMPLEXITY = 15
MAX_LINES = 450

# Over a limit today: each entry goes when its code is split, and the test fails once one is no longer over, so the
# list only shrinks.
KNOWN_OVER: frozenset[str] = frozenset()


def _build_files() -> list[Path]:
    files = [*ROOT.glob("site_scons/**/*.py"), ROOT / "SConstruct", *ROOT.glob("*.SConscript"),
             *ROOT.glob("*/SConscript"), *ROOT.glob("*/*/SConscript")]
    return sorted(f for f in files if "fixtures" not in f.parts)


def over_the_limits(files: list[Path], root: Path = ROOT) -> set[str]:
    """``path`` for a site_scons module over MAX_LINES, ``path:Class.function`` for a function over MAX_COMPLEXITY."""
    over = set()
    for path in files:
        text = path.read_text()
        name = str(path.relative_to(root))
        if name.startswith("site_scons/") and len(text.splitlines()) > MAX_LINES:
            over.add(name)
        over.update(f"{name}:{block.fullname}" for block in cc_visit(text)
                    if block.complexity > MAX_COMPLEXITY and not hasattr(block, "methods"))  # a class: its methods
    return over


def test_no_function_is_over_complexity_15_and_no_module_over_450_lines() -> None:
    over = over_the_limits(_build_files())
    assert sorted(over - KNOWN_OVER) == []
    assert sorted(KNOWN_OVER - over) == []  # no longer over: take it off the list


def _function(name: str, branches: int, indent: str = "") -> str:
    """A function of complexity ``branches + 1``."""
    body = "".join(f"{indent}    if x == {i}:\n{indent}        return {i}\n" for i in range(branches))
    return f"{indent}def {name}(x):\n{body}{indent}    return None\n"


def test_the_check_finds_a_long_module_and_a_branchy_function(tmp_path: Path) -> None:
    (tmp_path / "site_scons").mkdir()
    branchy = tmp_path / "site_scons/branchy.py"
    branchy.write_text("class C:\n" + _function("pick", MAX_COMPLEXITY, indent="    "))
    fine = tmp_path / "site_scons/fine.py"
    fine.write_text(_function("pick", MAX_COMPLEXITY - 1))
    long = tmp_path / "site_scons/long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    assert over_the_limits([branchy, fine, long], tmp_path) == {"site_scons/branchy.py:C.pick", "site_scons/long.py"}
