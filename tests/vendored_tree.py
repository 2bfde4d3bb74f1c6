"""Builds, on the fly, git checkouts shaped like llamafile 0.10 for the apply/reset tests.

The outer repository holds ``llamafile/``, ``llama.cpp.patches/{llamafile-files,patches}`` and a
``llama.cpp`` submodule, which itself holds a ``vendor/mini`` submodule (so recursion is exercised).
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main")


def file_protocol_env(monkeypatch) -> None:
    """Let git clone the tests' local submodules (git >= 2.38 refuses file:// submodules by default)."""
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _commit_tree(repo: Path, files: dict[str, str]) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "upstream")


def _add_submodule(parent: Path, origin: Path, path: str) -> None:
    git(parent, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(origin), path)
    git(parent, "commit", "-qm", f"add {path}")


def lines(prefix: str, n: int = 12) -> str:
    return "".join(f"{prefix} line {i}\n" for i in range(1, n + 1))


# The upstream-style patch of llama.cpp.patches/patches: its git header names the submodule-relative
# path while ---/+++ name the outer-tree path, as Mozilla's patches do.
LLAMAFILE_PATCH = """\
diff --git a/common/log.cpp b/common/log.cpp
--- a/llama.cpp/common/log.cpp
+++ b/llama.cpp/common/log.cpp
@@ -2,3 +2,4 @@
 log line 2
 log line 3
+// llamafile: signals blocked on the logger thread
 log line 4
"""


DEFAULT_SUB = {
    "common/log.cpp": lines("log"),
    "ggml/src/ggml.c": lines("ggml"),
    "ggml/src/ggml.h": lines("ggml header"),
}
DEFAULT_OUTER = {
    "llamafile/version.h": "#define LLAMAFILE_MAJOR 0\n#define LLAMAFILE_MINOR 10\n#define LLAMAFILE_PATCH 3\n",
    "llamafile/main.c": lines("main"),
    "llama.cpp.patches/llamafile-files/BUILD.mk": "# llamafile's build of llama.cpp\n",
    "llama.cpp.patches/llamafile-files/common/license.cpp": "const char *license;\n",
    "llama.cpp.patches/patches/common_log.cpp.patch": LLAMAFILE_PATCH,
    ".gitignore": "/o/\n",
}
MINI = Path(__file__).parent / "fixtures" / "llamafile-mini"


def mini_contents() -> tuple[dict[str, str], dict[str, str]]:
    """tests/fixtures/llamafile-mini split as (outer tree, llama.cpp submodule) file contents."""
    outer: dict[str, str] = {}
    sub: dict[str, str] = {}
    for path in sorted(p for p in MINI.rglob("*") if p.is_file()):
        rel = path.relative_to(MINI).as_posix()
        if rel.startswith("llama.cpp/"):
            sub[rel[len("llama.cpp/"):]] = path.read_text()
        else:
            outer[rel] = path.read_text()
    return outer, sub


def make_tree(root: Path, outer: dict[str, str] = DEFAULT_OUTER, sub: dict[str, str] = DEFAULT_SUB) -> Path:
    """A llamafile-0.10-shaped checkout at ``root/llamafile`` (its origins alongside); returns its path.

    ``outer`` and ``sub`` are the file contents of the outer tree and of the llama.cpp submodule.
    """
    mini = root / "origin-mini"
    _commit_tree(mini, {"mini.h": "int mini;\n"})
    llama = root / "origin-llama.cpp"
    _commit_tree(llama, sub)
    _add_submodule(llama, mini, "vendor/mini")
    tree = root / "llamafile"
    _commit_tree(tree, outer)
    _add_submodule(tree, llama, "llama.cpp")
    git(tree, "submodule", "update", "--init", "--recursive", "-q")
    return tree


def diff(rel: str, old: str, new: str) -> str:
    """A -p1 patch, from the outer tree root, turning ``old`` into ``new`` at ``rel``."""
    with tempfile.TemporaryDirectory() as work:
        for side, text in (("a", old), ("b", new)):
            (Path(work) / side / rel).parent.mkdir(parents=True)
            (Path(work) / side / rel).write_text(text)
        result = subprocess.run(["git", "diff", "--no-index", "--no-prefix", f"a/{rel}", f"b/{rel}"],
                                cwd=work, capture_output=True, text=True)
    assert result.returncode == 1, result.stderr  # 1: the files differ
    return result.stdout


def snapshot(tree: Path) -> dict[str, tuple[bytes, int]]:
    """Every file below ``tree`` (git metadata aside): path -> (bytes, mtime_ns)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            path = Path(dirpath) / name
            if name != ".git":
                found[str(path.relative_to(tree))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return found
