"""A fat compile's diagnostics: shared ones once, one-sided ones labelled with their architecture."""
from __future__ import annotations

import subprocess
from pathlib import Path

from opencoti_build.cosmo import diagnostics

from scons_runs import PROJECT

COSMOCC = str(PROJECT / "site_scons/cosmocc_shim/bin/cosmocc")


def fat_compile(tmp_path: Path, text: str, **environ: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "x.c").write_text(text)
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", **environ}
    return subprocess.run([COSMOCC, "-c", "-o", "o/x.o", "x.c"], cwd=tmp_path,
                          capture_output=True, text=True, env=env)


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line]


def test_a_shared_syntax_error_is_printed_once_without_a_label(tmp_path: Path) -> None:
    proc = fat_compile(tmp_path, "int g(void) { return 0 }\n")
    assert proc.returncode == 1
    assert errors(proc.stderr) == ["x.c:1:23: error: expected ';' before '}' token"]
    assert proc.stderr.count("return 0 }") == 1  # the source excerpt too


def test_a_one_architecture_error_names_it(tmp_path: Path) -> None:
    arm = fat_compile(tmp_path, "#ifdef __aarch64__\n#error arm only\n#endif\n")
    assert errors(arm.stderr) == ["x.c:2:2: error: #error arm only [aarch64]"]
    assert "x86_64 succeeded but aarch64 failed" in arm.stderr
    x86 = fat_compile(tmp_path, "#ifdef __x86_64__\n#error x86 only\n#endif\n")
    assert errors(x86.stderr) == ["x.c:2:2: error: #error x86 only [x86_64]"]
    assert "aarch64 succeeded but x86_64 failed" in x86.stderr


def test_colour_follows_clicolor_force_and_no_color(tmp_path: Path) -> None:
    forced = fat_compile(tmp_path, "int g(void) { return 0 }\n", CLICOLOR_FORCE="1")
    assert "\x1b[" in forced.stderr
    assert len(errors(diagnostics.plain(forced.stderr))) == 1  # still once when coloured
    assert "\x1b[" not in fat_compile(tmp_path, "int g(void) { return 0 }\n", TERM="xterm", NO_COLOR="1").stderr
