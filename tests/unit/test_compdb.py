"""compile_commands.json as a run merges it with the last one's (opencoti_build/report/compdb.py)."""
from __future__ import annotations

from opencoti_build.report import compdb


def entry(file: str, output: str) -> dict:
    return {"file": file, "output": output, "arguments": ["cc", "-c", file, "-o", output], "directory": "/"}


def test_a_merge_keeps_other_lanes_and_drops_entries_this_run_replaces() -> None:
    old = [entry("/a/native.c", "/b/native.o"), entry("/a/main.c", "/b/main.o.old"),
           entry("/old-checkout/host/zip_args.c", "/b/zip_args.o")]  # the same build directory, another checkout
    new = [entry("/a/main.c", "/b/main.o"), entry("/new-checkout/host/zip_args.c", "/b/zip_args.o")]
    assert compdb.merged(old, new) == sorted([entry("/a/native.c", "/b/native.o"), *new],
                                             key=lambda e: (e["file"], e["output"]))
