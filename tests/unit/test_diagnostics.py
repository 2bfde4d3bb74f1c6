"""A fat compile's diagnostics: shared ones once, one-sided ones labelled with their architecture.

In-process checks of the core here; the real builds and tools: tests/integration/test_diagnostics.py.
"""
from __future__ import annotations

from opencoti_build.cosmo import diagnostics


def test_merge_keeps_gccs_form_so_problem_matchers_read_it() -> None:
    x86 = "a.c: In function 'f':\na.c:3:5: warning: unused variable 'v' [-Wunused-variable]\n"
    arm = x86 + "a.c:9:1: error: only here\n"
    merged = diagnostics.merge({"x86_64": x86, "aarch64": arm})
    assert merged == x86 + "a.c:9:1: error: only here [aarch64]\n"
    match = diagnostics.DIAGNOSTIC.match(merged.splitlines()[-1])
    assert match and match["path"] == "a.c" and match["line"] == "9" and match["severity"] == "error"


def test_colour_decision() -> None:
    assert diagnostics.colour_wanted({"TERM": "xterm"}, True)
    assert not diagnostics.colour_wanted({"TERM": "xterm", "NO_COLOR": "1"}, True)
    assert not diagnostics.colour_wanted({"TERM": "dumb"}, True)
    assert not diagnostics.colour_wanted({}, False)
    assert diagnostics.colour_wanted({"CLICOLOR_FORCE": "1"}, False)
