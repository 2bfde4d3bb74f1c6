"""An edit of comments or trailing blanks compiles nothing (opencoti_scons/code_decider.py): one translation unit of
the miniature tree, compiled (both halves) by the stand-in with `scons compile FILE=`. The seeded differential test
against clean builds is tests/soak/test_code_edits.py."""
from __future__ import annotations

from pathlib import Path

from opencoti_build.incremental.code_signature import KnownSignatures

from scons_runs import compiled, scons

TU = "llamafile/highlight/highlight.cpp"
HEADER = "llamafile/highlight/highlight.h"


def test_a_comment_edit_compiles_nothing_a_code_edit_compiles_and_a_lost_table_only_costs_a_compile(
        tmp_path: Path, tree: Path) -> None:
    build = tmp_path / "b"

    def compile_tu() -> list[str]:
        return compiled(scons(f"SRC={tree}", "CACHE_DIR=", "compile", f"FILE={TU}", build=build))

    assert compile_tu() == [str(build / "out" / "o" / TU) + ".o"]
    header, source = tree / HEADER, tree / TU
    header.write_text(header.read_text() + "// a comment appended to the header\n")
    source.write_text(source.read_text().replace("\n", "   \n", 3) + "/* and one to the source */\n")
    assert compile_tu() == [], "an edit of comments and trailing blanks compiled"
    assert scons(f"SRC={tree}", "CACHE_DIR=", "compile", f"FILE={TU}", "-q", build=build, check=False).returncode == 0

    header.write_text(header.read_text() + "#define OPENCOTI_CODE_EDIT 1\n")
    assert len(compile_tu()) == 1, "a code edit compiled nothing"

    (build / "out" / KnownSignatures.FILE_NAME).write_bytes(b"\x00damaged")  # read as an empty table
    header.write_text(header.read_text() + "// another comment\n")
    assert len(compile_tu()) == 1, "with no known signature the edited header's dependents compile again"
    header.write_text(header.read_text() + "// and one more\n")
    assert compile_tu() == [], "the table was not made again"
