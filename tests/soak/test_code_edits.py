"""Edits that change no code compile nothing (opencoti_scons/code_decider.py), and the build stays exact.

A differential test: seeded rounds on a private copy of the miniature tree, built (the thin binary) by the stand-in.
Each round edits one C or C++ source or header of the fat lane, either in its comments and blanks only (a line
comment's words, a comment appended at the end, blanks or a comment at a line's end) or in its code (a definition
added, a comment line that moves every line below it, a blank that moves a line's tokens). The build after an edit
of comments and blanks only compiles no fat object; every ``CLEAN_EVERY`` rounds and at the end, every fat object,
the binary, its aarch64 ELF and its debug ELF equal a clean build's, which compiles whatever the shared cache lacks
(so an object a comment edit left alone is compared with one compiled from the edited file).

A run takes a slice of the rounds under the commit's seed, ``--long`` all of them; ``--seed`` replays a run
(tests/conftest.py, docs/testing.md).
"""
from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

from scons_runs import MINI_TREE, compiled, scons

ROUNDS, ROUNDS_PER_RUN = 40, 3
CLEAN_EVERY = 5
EDITED = ("llamafile/*.c", "llamafile/*.cpp", "llamafile/*.h", "llama.cpp/ggml/src/*.c", "llama.cpp/ggml/src/*.h",
          "llama.cpp/include/*.h", "llama.cpp/common/*.h", "llama.cpp/common/*.cpp")
COMPARED = ("o/llamafile/llamafile", "o/llamafile/linked/llamafile.aarch64.elf", "o/llamafile/linked/llamafile.com.dbg")


def _code_line(rng: random.Random, lines: list[str]) -> int | None:
    """A line that ends a statement (not a macro's, which a backslash continues), by the seed."""
    found = [i for i, line in enumerate(lines) if line.rstrip().endswith(";")]
    return rng.choice(found) if found else None


def reword_comment(rng: random.Random, lines: list[str], n: int) -> bool:
    """A line comment's words: the same line, other words."""
    found = [i for i, line in enumerate(lines) if line.lstrip().startswith("//") and not line.rstrip().endswith("\\")]
    if not found:
        return append_comment(rng, lines, n)
    i = rng.choice(found)
    lines[i] = lines[i][:lines[i].index("//")] + f"// reworded in round {n}\n"
    return True


def append_comment(rng: random.Random, lines: list[str], n: int) -> bool:
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    lines.append(f"/* appended in round {n} */\n")
    return True


def end_of_line(rng: random.Random, lines: list[str], n: int) -> bool:
    """Blanks, or a line comment, after the last token of a line."""
    i = _code_line(rng, lines)
    if i is None:
        return append_comment(rng, lines, n)
    lines[i] = lines[i].rstrip("\n") + rng.choice(["   \t", f"  // round {n}"]) + "\n"
    return True


def add_definition(rng: random.Random, lines: list[str], n: int) -> bool:
    append_comment(rng, lines, n)
    lines[-1] = f"#define OPENCOTI_ROUND_{n} {n}\n"
    return False


def comment_line_at_top(rng: random.Random, lines: list[str], n: int) -> bool:
    """Every line below moves: __LINE__ and the line table change."""
    lines.insert(0, f"// round {n}\n")
    return False


def blank_before_tokens(rng: random.Random, lines: list[str], n: int) -> bool:
    """A line's tokens move one column."""
    i = _code_line(rng, lines)
    if i is None:
        return comment_line_at_top(rng, lines, n)
    lines[i] = " " + lines[i]
    return False


# Each edit changes one file's lines in place and says whether it touched comments and blanks alone.
EDITS: tuple[Callable[[random.Random, list[str], int], bool], ...] = (
    reword_comment, append_comment, end_of_line, add_definition, comment_line_at_top, blank_before_tokens)


def _outputs(build: Path) -> dict[str, bytes]:
    out = build / "out"
    found = {rel: (out / rel).read_bytes() for rel in COMPARED}
    found.update({str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "o").rglob("*.o"))})
    return found


def _assert_equals_clean_build(tree: Path, root: Path, label: str) -> None:
    clean = root / "clean"
    shutil.rmtree(clean, ignore_errors=True)
    scons("host", f"SRC={tree}", f"CACHE_DIR={root / 'cache'}", build=clean)
    built, fresh = _outputs(root / "b"), _outputs(clean)
    assert built.keys() == fresh.keys(), label
    differing = sorted(name for name in built if built[name] != fresh[name])
    assert not differing, f"{label}: the incremental build's {differing[:5]} differ from a clean build's"


def test_comment_edits_compile_nothing_and_every_build_equals_a_clean_one(tmp_path: Path, seed: int,
                                                                          soak_count: Callable[[int, int], int]) -> None:
    tree = tmp_path / "src"
    shutil.copytree(MINI_TREE, tree)
    rng = random.Random(f"code edits {seed}")
    files = sorted(p for pattern in EDITED for p in tree.glob(pattern))
    build = ("host", f"SRC={tree}", f"CACHE_DIR={tmp_path / 'cache'}")
    scons(*build, build=tmp_path / "b")
    history: list[str] = []
    rounds = soak_count(ROUNDS, ROUNDS_PER_RUN)
    for n in range(1, rounds + 1):
        path, edit = rng.choice(files), rng.choice(EDITS)
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        comments_only = edit(rng, lines, n)
        path.write_text("".join(lines), encoding="utf-8")
        history.append(f"{n}: {edit.__name__} {path.relative_to(tree)}")
        label = f"seed {seed} round {n} ({history[-1]}; before: {history[-4:-1]})"
        built = scons(*build, build=tmp_path / "b")
        if comments_only:
            assert compiled(built) == [], f"{label}: an edit of comments and blanks compiled {compiled(built)}"
        if n % CLEAN_EVERY == 0 or n == rounds:
            _assert_equals_clean_build(tree, tmp_path, label)
