"""A generated llamafile-0.10-shaped source tree of N translation units, with its include graph.

The files are taken from the package table in ``opencoti_build.tree.sources`` itself, so the build's
own description builds the tree unchanged: the listed files (ggml, llama and its models, common,
mtmd, server, llamafile, TinyBLAS variants, stb, httplib), a subset in proportion when N is
smaller, and made-up members of the table's glob patterns (gperf tables, highlighters) when N is
larger. TUs include shared headers through the ``-iquote`` directories (``"ggml.h"``,
``"llama.h"``, ``"common.h"``) and vendor headers through ``-isystem``
(``"nlohmann/json.hpp"``), and headers include one another, so one header edit reaches a known
set of dependents: :meth:`FatTree.dependents`, computed with each TU's own search path.
"""
from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from opencoti_build.tree import sources

L = "llama.cpp"
GG = f"{L}/ggml"

# Headers: path -> headers it includes (as written, resolved through the -iquote/-isystem dirs).
HEADERS: dict[str, tuple[str, ...]] = {
    f"{GG}/include/ggml.h": (),
    f"{GG}/include/ggml-alloc.h": ("ggml.h",),
    f"{GG}/include/ggml-backend.h": ("ggml.h", "ggml-alloc.h"),
    f"{GG}/include/ggml-cpu.h": ("ggml-backend.h",),
    f"{GG}/src/ggml-common.h": (),
    f"{GG}/src/ggml-impl.h": ("ggml.h",),
    f"{GG}/src/ggml-backend-impl.h": ("ggml-backend.h",),
    f"{GG}/src/ggml-quants.h": ("ggml-common.h", "ggml-impl.h"),
    f"{GG}/src/ggml-cpu/ggml-cpu-impl.h": ("ggml-impl.h", "ggml-cpu.h"),
    f"{GG}/src/ggml-cpu/simd-mappings.h": ("ggml-cpu-impl.h",),
    f"{GG}/src/ggml-cpu/vec.h": ("simd-mappings.h",),
    f"{GG}/src/ggml-cpu/ops.h": ("ggml-cpu-impl.h",),
    f"{L}/include/llama.h": ("ggml.h", "ggml-cpu.h", "ggml-backend.h"),
    f"{L}/src/llama-impl.h": ("llama.h",),
    f"{L}/src/llama-arch.h": ("llama-impl.h",),
    f"{L}/src/llama-graph.h": ("llama-arch.h",),
    f"{L}/src/llama-model.h": ("llama-arch.h", "llama-graph.h"),
    f"{L}/src/models/models.h": ("llama-model.h",),
    f"{L}/vendor/nlohmann/json.hpp": (),
    f"{L}/vendor/cpp-httplib/httplib.h": (),
    f"{L}/common/common.h": ("llama.h",),
    f"{L}/common/log.h": ("ggml.h",),
    f"{L}/common/chat.h": ("common.h", "nlohmann/json.hpp"),
    f"{L}/common/jinja/jinja.h": ("common.h",),
    f"{L}/tools/mtmd/mtmd.h": ("llama.h",),
    f"{L}/tools/mtmd/clip.h": ("mtmd.h", "ggml-backend.h"),
    f"{L}/tools/mtmd/models/models.h": ("clip.h",),
    f"{L}/tools/server/server-common.h": ("common.h", "chat.h", "nlohmann/json.hpp"),
    "llamafile/version.h": (),
    "llamafile/llamafile.h": ("version.h", "ggml.h"),
    "llamafile/tinyblas.h": (),
    "llamafile/tinyblas_cpu.h": ("tinyblas.h", "ggml-impl.h"),
    "llamafile/highlight/highlight.h": (),
    "third_party/stb/stb.h": (),
}

# The header the "one header edit" scenario changes: the ggml CPU SIMD layer (vec.h's base).
VERSION_H = "llamafile/version.h"
EDIT_HEADER = f"{GG}/src/ggml-cpu/simd-mappings.h"

# What a TU includes, by the directory it lives in (first matching prefix); "<x>" is a system include.
TU_INCLUDES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (f"{GG}/src/ggml-cpu/", ("ggml-cpu-impl.h", "vec.h", "ops.h")),
    (f"{GG}/src/", ("ggml-impl.h", "ggml-backend-impl.h", "ggml-quants.h")),
    (f"{L}/src/models/", ("models.h",)),
    (f"{L}/src/", ("llama-impl.h", "llama-model.h")),  # + its own leaf header
    (f"{L}/common/jinja/", ("jinja.h",)),
    (f"{L}/common/", ("common.h", "log.h", "chat.h")),
    (f"{L}/tools/mtmd/models/", ("models.h",)),
    (f"{L}/tools/mtmd/", ("mtmd.h", "clip.h")),
    (f"{L}/tools/server/", ("server-common.h",)),
    (f"{L}/vendor/cpp-httplib/", ("httplib.h",)),
    ("llamafile/highlight/", ("highlight.h",)),
    ("llamafile/", ("llamafile.h", "tinyblas_cpu.h")),
    ("third_party/stb/", ("stb.h",)),
)
MAIN_TU = "llamafile/main.cpp"
GPERF_INCLUDES = ("llamafile/highlight/highlight.h",)  # the generated .c lives in the build dir
LEAF_DIR = f"{L}/src/"  # each llama TU there has its own header, included by nothing else


def _has_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def _generated_name(pattern: str, i: int, package: sources.Package) -> str | None:
    """The i-th made-up file for a glob ``pattern``: ``*`` becomes ``gen<i>``; None if excluded."""
    name = pattern.replace("**/", "").replace("*", f"gen{i:05d}", 1).replace("*", "")
    if not fnmatch.fnmatchcase(name, pattern.replace("**/", "")) or any(
            fnmatch.fnmatchcase(name, x) for x in package.exclude):
        return None
    return name


def _quotas(total: int, sizes: list[int], floors: list[int]) -> list[int]:
    """Split ``total`` over groups in proportion to ``sizes``, each at least its floor and at most its size."""
    quota = [min(s, max(f, total * s // max(1, sum(sizes)))) for s, f in zip(sizes, floors)]
    i = 0
    while sum(quota) < total and any(q < s for q, s in zip(quota, sizes)):
        if quota[i % len(sizes)] < sizes[i % len(sizes)]:
            quota[i % len(sizes)] += 1
        i += 1
    return quota


def choose_sources(n: int) -> list[tuple[sources.Package, str]]:
    """N (package, tree-relative source) pairs that the host program's package table resolves.

    Listed files come first, in each package's order (main.cpp first; a subset in proportion when N is smaller
    than the lists; at least one per required package); any TUs beyond the lists are made-up
    members of the table's glob patterns, spread evenly over them.
    """
    packages = sources.HOST_PROGRAM.packages
    # main() first, so even a tiny tree links; then the ggml core, which the build refuses to do without
    core = set(sources.GGML_CORE_SOURCES)
    listed = [sorted((s for s in p.sources if not _has_glob(s)), key=lambda s: (s != MAIN_TU, s not in core))
              for p in packages]
    globs = [(p, g) for p in packages for g in p.sources if _has_glob(g)]
    floors = [max(0 if p.optional or not lst else 1, sum(s in core for s in lst)) for p, lst in zip(packages, listed)]
    if n < sum(floors):
        raise ValueError(f"the package table needs at least {sum(floors)} TUs (one per required package, "
                         "and the ggml core)")
    quota = _quotas(min(n, sum(map(len, listed))), [len(x) for x in listed], floors)
    chosen = [(p, s) for p, lst, q in zip(packages, listed, quota) for s in lst[:q]]
    if all(s != MAIN_TU for _, s in chosen):  # a table that globs llamafile/*.cpp: make main.cpp one of them
        chosen += [(p, MAIN_TU) for p, g in globs if fnmatch.fnmatchcase(MAIN_TU, g)][:1]
    i = 0
    while len(chosen) < n:
        if not globs:
            raise ValueError(f"the package table lists {len(chosen)} files and has no glob to grow to {n}")
        package, pattern = globs[i % len(globs)]
        name = _generated_name(pattern, i // len(globs), package)
        if name is not None:
            chosen.append((package, name))
        i += 1
    return chosen


@dataclass
class FatTree:
    """A generated tree: its root, its TUs (tree-relative), and the headers each TU reaches."""

    root: Path
    tus: list[str] = field(default_factory=list)
    reached: dict[str, set[str]] = field(default_factory=dict)  # TU -> every header it includes, transitively
    headers: int = 0

    def dependents(self, header: str) -> set[str]:
        """TUs that include ``header``, directly or through other headers (gperf tables by their .gperf)."""
        return {tu for tu in self.tus if header in self.reached[tu]}


def _search_dirs(package: sources.Package) -> tuple[str, ...]:
    """The TU's search path, as the host build passes it: -iquote (the root first where the recipe
    carries config.mk's CPPFLAGS), then -isystem."""
    root = (".",) if "CPPFLAGS" in getattr(package, "inherits", ("CPPFLAGS",)) else ()
    return root + tuple(package.iquote) + tuple(package.isystem)


def _resolve(name: str, includer: str, dirs: tuple[str, ...], root: Path) -> str | None:
    """Where gcc finds ``"name"`` included from ``includer``: its own directory, then ``dirs``."""
    for d in (posixpath.dirname(includer),) + dirs:
        candidate = posixpath.normpath(posixpath.join(d, name))
        if (root / candidate).is_file():
            return candidate
    return None


def _reach(tu: str, written: dict[str, tuple[str, ...]], dirs: tuple[str, ...], root: Path) -> set[str]:
    """Every header ``tu`` includes, following each header's own includes with the TU's search path."""
    seen: set[str] = set()
    stack = [tu]
    while stack:
        includer = stack.pop()
        for name in written.get(includer, ()):
            found = _resolve(name, includer, dirs, root)
            if found is None:
                raise ValueError(f"{includer}: {name} is not found on the search path of {tu}")
            if found not in seen:
                seen.add(found)
                stack.append(found)
    return seen


def _directive(name: str) -> str:
    return f'#include "{name}"'


def _symbol(path: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in path)


def _header_text(path: str, includes: tuple[str, ...]) -> str:
    lines = ["#pragma once", *map(_directive, includes), f"struct {_symbol(path)} {{ int value; }};",
             f"static const int {_symbol(path)}_edit = 0;", ""]
    return "\n".join(lines)


def _tu_text(path: str, includes: tuple[str, ...], cxx: bool) -> str:
    sym = _symbol(path)
    body = [*map(_directive, includes), ""]
    if cxx:
        body += [f"namespace {{ int helper(int x) {{ return x * {len(path)} + 1; }} }}",
                 f'extern "C" int {sym}(int x) {{ return helper(x) ^ {len(includes)}; }}']
    else:
        body += [f"int {sym}(int x) {{ return x * {len(path)} + {len(includes)}; }}"]
    if path == MAIN_TU:
        body.append("int main() { return 0; }")
    return "\n".join(body) + "\n"


def _gperf_text(path: str) -> str:
    sym = _symbol(path)
    return "\n".join([
        "%{", "#include <string.h>", *map(_directive, GPERF_INCLUDES), "%}",
        f"%define lookup-function-name {sym}_lookup", f"%define hash-function-name {sym}_hash", "%readonly-tables",
        "%%", "if", "else", "while", "for", "return", "%%",
        f"int {sym}(const char *w, size_t n) {{ return {sym}_lookup(w, n) != 0; }}", "",
    ])


def _tu_includes(path: str) -> tuple[str, ...]:
    if path.endswith(".gperf"):
        return GPERF_INCLUDES
    for prefix, includes in TU_INCLUDES:
        if path.startswith(prefix):
            leaf = (posixpath.basename(path).rsplit(".", 1)[0] + "-leaf.h",) if posixpath.dirname(path) + "/" == LEAF_DIR else ()
            return includes + leaf
    return ()


def generate(root: Path, n: int) -> FatTree:
    """Write an N-TU tree at ``root`` (which must not exist) and return it with its include graph."""
    root = Path(root)
    root.mkdir(parents=True)
    written: dict[str, tuple[str, ...]] = dict(HEADERS)
    chosen = choose_sources(n)
    for _, path in chosen:
        written[path] = _tu_includes(path)
        if posixpath.dirname(path) + "/" == LEAF_DIR:
            written[posixpath.join(LEAF_DIR, written[path][-1])] = ("llama-impl.h",)
    for path, includes in written.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.endswith(".gperf"):
            target.write_text(_gperf_text(path))
        elif path in HEADERS or path.endswith("-leaf.h"):
            target.write_text(_header_text(path, includes))
        else:
            target.write_text(_tu_text(path, includes, path.endswith(sources.CXX_SUFFIXES)))
    with open(root / VERSION_H, "a") as f:
        f.write("#define LLAMAFILE_MAJOR 0\n#define LLAMAFILE_MINOR 10\n#define LLAMAFILE_PATCH 3\n")
    tree = FatTree(root, headers=len(written) - len(chosen))
    for package, path in chosen:
        tree.tus.append(path)
        tree.reached[path] = _reach(path, written, _search_dirs(package), root)
    return tree


def comment_header(tree: FatTree, header: str, serial: int) -> None:
    """Append a comment to ``header``: no token of it changes and no line of an including file moves (a compiler
    writes the same objects; ccache's preprocessor mode hits, its direct mode misses)."""
    with open(tree.root / header, "a", encoding="utf-8") as fh:
        fh.write(f"/* a comment-only edit, {serial} */\n")


def edit_header(tree: FatTree, header: str, serial: int) -> None:
    """Change ``header`` so every dependent's preprocessed text changes (no cache can hit on it)."""
    path = tree.root / header
    text = path.read_text()
    old = next(line for line in text.splitlines() if line.startswith("static const int ") and "_edit = " in line)
    path.write_text(text.replace(old, old.split("=")[0] + f"= {serial};"))
