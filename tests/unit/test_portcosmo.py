"""-fportcosmo done to the source text: switches over cosmopolitan's run-time constants lowered, the rest untouched."""
from __future__ import annotations

import pytest

from opencoti_build.tree.portcosmo import lower_switches, names_runtime_constant

ERRNO_SWITCH = """\
const char *d(int r) {
    switch (r) {
    case EINVAL:
        return "inval";
    case ENOMEM:
        break;
    default:
        return "other";
    }
    return "nomem";
}
"""


def test_a_switch_over_errno_values_becomes_comparisons_and_gotos_on_the_same_lines() -> None:
    lowered = lower_switches(ERRNO_SWITCH, cxx=False)
    assert lowered == """\
const char *d(int r) {
    { const __auto_type __portcosmo0 = (r); if (__portcosmo0 == (EINVAL)) goto __portcosmo0_0; \
if (__portcosmo0 == (ENOMEM)) goto __portcosmo0_1; goto __portcosmo0_2;  {
    __portcosmo0_0:
        return "inval";
    __portcosmo0_1:
        goto __portcosmo0_end;
    __portcosmo0_2:
        return "other";
    } __portcosmo0_end:; }
    return "nomem";
}
"""
    assert lowered.count("\n") == ERRNO_SWITCH.count("\n")


def test_cxx_gets_auto_and_without_a_default_the_switch_falls_to_its_end() -> None:
    lowered = lower_switches("void f(int e) { switch (e) { case EPERM: g(); } }", cxx=True)
    assert lowered == ("void f(int e) { { const auto __portcosmo0 = (e); if (__portcosmo0 == (EPERM)) goto __portcosmo0_0; "
                       "goto __portcosmo0_end;  { __portcosmo0_0: g(); } __portcosmo0_end:; } }")


@pytest.mark.parametrize("text", [
    "int f(enum k x) { switch (x) { case A: return 1; case ERRORISH: return 2; default: return 0; } }",
    '/* switch (r) { case EINVAL: } */ const char *s = "switch (r) { case EINVAL: }";\n',
    "#define CHECK(r) switch (r) { case EINVAL: break; }\nint x;\n",
    "// switch (errno) { case EINTR: }\n",
])
def test_anything_else_is_left_byte_for_byte(text: str) -> None:
    assert lower_switches(text, cxx=False) == text


def test_a_break_inside_a_loop_stays_the_loops_and_a_nested_switch_is_its_own() -> None:
    text = ("switch (e) { case EINTR: for (;;) { if (x) break; } while (y) break; break; "
            "case EAGAIN: switch (k) { case 1: break; } do { break; } while (0); break; }")
    lowered = lower_switches(text, cxx=False)
    body = lowered[lowered.index("__portcosmo0_0:"):]
    assert body.count("goto __portcosmo0_end") == 2  # the switch's own two breaks
    assert body.count("break;") == 4  # the for's, the while's, the inner switch's and the do's
    assert "case 1:" in body  # a switch over constants, inside, is left as written


def test_a_multi_line_condition_keeps_its_lines() -> None:
    text = "switch (f(a,\n           b)) {\ncase ENOENT: x(); }\n"
    lowered = lower_switches(text, cxx=False)
    assert lowered.count("\n") == 3 and "(f(a, " in lowered and "goto __portcosmo0_0" in lowered


def test_only_errno_and_signal_names_count_as_run_time_constants() -> None:
    assert names_runtime_constant("EINVAL") and names_runtime_constant("SIGBUS") and names_runtime_constant("-EIO")
    assert not names_runtime_constant("ERROR_KIND") and not names_runtime_constant("Kind::EOF") \
        and not names_runtime_constant("42")
