"""The include scanner every compiling tool shares (opencoti_scons/include_scanner.py), against ``gcc -M``.

The scanner runs inside a real SCons (a tiny SConstruct reading this project's site_scons); gcc -M with
the same -iquote/-I/-isystem dirs says which headers the compile really reads.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from opencoti_build.tree import sources

from scons_runs import MINI_TREE, PROJECT

SCONSTRUCT = """
import json
from SCons.Script import Environment
from opencoti_scons.include_scanner import include_scanner

scanner = include_scanner()
result = {}
for case in json.load(open("cases.json")):
    env = Environment(tools=[], IQUOTEPATH=case["iquote"], CPPPATH=case["I"], ISYSTEMPATH=case["isystem"])
    node = env.File(case["source"])
    deps = node.get_implicit_deps(env, scanner, lambda s: s.path(env, env.Dir("#")))
    result[case["source"]] = sorted(d.abspath for d in deps)
json.dump(result, open("deps.json", "w"))
"""


def scanned(work: Path, cases: list[dict]) -> dict[str, set[str]]:
    work.mkdir()
    (work / "SConstruct").write_text(SCONSTRUCT)
    (work / "cases.json").write_text(json.dumps(cases))
    subprocess.run([sys.executable, "-m", "SCons", "-C", str(work), "-Q", f"--site-dir={PROJECT / 'site_scons'}", "."],
                   check=True, capture_output=True)
    return {k: {str(Path(p).resolve()) for p in v} for k, v in json.loads((work / "deps.json").read_text()).items()}


def gcc_headers(case: dict, within: Path) -> set[str]:
    flags = ([w for d in case["iquote"] for w in ("-iquote", d)] + [f"-I{d}" for d in case["I"]]
             + [w for d in case["isystem"] for w in ("-isystem", d)])
    compiler = "g++" if case["source"].endswith(".cpp") else "gcc"
    # without the compile's -D and -m flags a variant may stop at its #error: the headers are listed all the same
    out = subprocess.run([compiler, "-M", *flags, case["source"]], capture_output=True, text=True).stdout
    assert ":" in out, case["source"]
    words = out.replace("\\\n", " ").split(":", 1)[1].split()[1:]  # the source itself first
    return {p for p in (str(Path(w).resolve()) for w in words) if p.startswith(str(within.resolve()))}


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_gccs_search_order_quote_iquote_i_isystem(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    write(tree, {
        # "same.h" is in the source's dir and in every search dir: the source's own wins
        "src/a.c": '#include "same.h"\n#include "q_only.h"\n#include <angle.h>\n#include <sys_only.h>\nint a;\n',
        "src/same.h": '#include "nested.h"\n',
        "src/nested.h": "",  # found beside the header that includes it
        "quote/same.h": "", "quote/q_only.h": "", "quote/angle.h": "",  # <angle.h> skips -iquote
        "inc/same.h": "", "inc/angle.h": '#include "inc_sibling.h"\n', "inc/inc_sibling.h": "",
        "sys/sys_only.h": "", "sys/angle.h": "",  # -I before -isystem
        # a C++ source: the same search, system headers (<vector>) found in no dir given
        "src/b.cpp": '#include "q_only.h"\n#include <vector>\nint b;\n',
    })
    cases = [{"source": str(tree / s), "iquote": [str(tree / "quote")], "I": [str(tree / "inc")],
              "isystem": [str(tree / "sys")]} for s in ("src/a.c", "src/b.cpp")]
    found = scanned(tmp_path / "work", cases)
    for case in cases:
        assert found[case["source"]] == gcc_headers(case, tree), case["source"]
    assert found[cases[0]["source"]] == {str(tree / p) for p in (
        "src/same.h", "src/nested.h", "quote/q_only.h", "inc/angle.h", "inc/inc_sibling.h", "sys/sys_only.h")}


def test_real_sources_with_their_packages_dirs(tmp_path: Path) -> None:
    """The miniature tree's sources, each with its package's -iquote and -isystem dirs (and -iquote.)."""
    cases = []
    for package in sources.HOST_PROGRAM.packages:
        if not package.iquote or not package.sources[0].endswith((".c", ".cpp")):
            continue
        for rel in package.resolve(MINI_TREE):
            cases.append({"source": str(MINI_TREE / rel), "I": [],
                          "iquote": [str(MINI_TREE / d) for d in (*sources.DEFAULT_IQUOTE, *package.iquote)],
                          "isystem": [str(MINI_TREE / d) for d in package.isystem]})
    assert len(cases) >= 20
    found = scanned(tmp_path / "work", cases)
    with_headers = 0
    for case in cases:
        assert found[case["source"]] == gcc_headers(case, MINI_TREE), case["source"]
        with_headers += bool(found[case["source"]])
    assert with_headers >= 15
