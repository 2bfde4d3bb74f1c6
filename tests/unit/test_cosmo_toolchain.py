"""How a cosmocc toolchain's programs are started: an APE goes through the shell, as make's execvp does."""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR, Toolchain, runnable_argv


@pytest.mark.parametrize("head, through_sh", [
    (b"MZqFpD='\n\n\x00\x10", True),   # an APE: execve refuses it without binfmt_misc (ENOEXEC)
    (b"# a script with no #! line\n", True),
    (b"#!/bin/sh\nexec true\n", False),
    (b"\x7fELF\x02\x01\x01", False),
])
def test_a_program_execve_would_refuse_is_started_through_sh(tmp_path: Path, head: bytes, through_sh: bool) -> None:
    program = tmp_path / "ar.ape"
    program.write_bytes(head)
    argv = [str(program), "rcsD", "lib.a", "x.o"]
    assert runnable_argv(argv) == (["/bin/sh", *argv] if through_sh else argv)


def test_a_name_left_to_path_lookup_is_left_alone() -> None:
    assert runnable_argv(["gcc", "-c", "x.c"]) == ["gcc", "-c", "x.c"]


def test_the_stand_ins_ar_ape_is_refused_by_execve_like_the_real_one() -> None:
    """The fast tiers use the stand-in: its ar.ape must take the same path as cosmocc's APE ar.ape does."""
    ar = str(SHIM_DIR / "bin" / "ar.ape")
    assert runnable_argv([ar, "rcsD"]) == ["/bin/sh", ar, "rcsD"]


@pytest.mark.parametrize(("kind", "flags", "follows"), [
    ("stand-in", ["-mclang", "-g"], True),  # gcc whatever the flags say
    ("cosmocc", ["-O2", "-g"], True),  # gcc by default
    ("cosmocc", ["-mclang", "-g", "-gno-column-info"], False),  # clang's DWARF 5 line table: each source's MD5
    ("cosmocc", ["-mclang", "-g", "-mgcc"], True), ("cosmocc", ["-mclang", "-O2"], True),
    ("cosmocc", ["-g", "-mclang", "-g0"], True),
])
def test_only_a_clang_compile_with_debug_info_writes_objects_that_follow_comments(kind: str, flags: list[str],
                                                                                  follows: bool) -> None:
    assert Toolchain(kind, Path("/c")).objects_follow_code(flags) is follows
