"""Prefix maps: where the build lives never reaches its outputs.

Compilers write the paths they were given into objects: DWARF names (sources, headers, the compile
directory), ``__FILE__`` in asserts, HIP's per-TU ids. The same commit built from two checkouts, or
with ``SRC`` at two places, must give the same bytes (so cache entries and artifacts are shared), so
every compile and link gets ``-ffile-prefix-map=OLD=NEW`` for:

- the checkout -> ``.``: the compile directory (SCons runs from the checkout root);
- ``SRC`` -> ``src``: the source tree (in gdb: ``set substitute-path src <tree>``);
- ``LLAMACPP`` (native lane) -> ``src/llama.cpp``: where ``SRC``'s own llama.cpp would be;
- ``BUILD_DIR`` -> ``build``: generated sources and headers (the default BUILD_DIR is ``./build``).

gcc compares prefixes as strings, and names a header's directory by mapping the mapped name once more.
So only the checkout is mapped bare (it is the compile directory itself); ``SRC``, ``LLAMACPP`` and
``BUILD_DIR`` are mapped as directories, ``OLD/=NEW/``: a bare ``BUILD_DIR=b`` would also rename
``backends/...`` and ``build-info.cpp``, and rename ``build/o/gen`` (already mapped) to ``builduild/o/gen``.

The maps are given general to specific (an OLD after every OLD that is a prefix of it, else in the
order above, whatever the paths' lengths, so checkouts at other paths get the same flags and share cache
entries): gcc applies the *last* matching option (clang the longest OLD), so a tree nested in another (the default ``SRC``, ``vendors/sources/llamafile``, inside the
checkout; ``BUILD_DIR`` inside ``SRC``) takes its own name. A path reached through a symlink is mapped
both as given and resolved (the compile directory is the resolved one); one inside the checkout also
as SCons writes it on command lines, relative to the checkout, so ``SRC=tests/fixtures/llamafile-mini``
and ``SRC=/elsewhere`` both name their files ``src/...``. A path holding ``=`` cannot be mapped (the
compilers split OLD from NEW at the first ``=``) and is left out.

Plain Python, no SCons: site_tools/cosmocc.py, nvcc.py, hipcc.py, ggml_dso.py (and through it
backends/vulkan) and native/SConscript all take their maps from :func:`path_maps`.
"""
from __future__ import annotations

import os

PROJECT_NAME = "."
SRC_NAME = "src"
BUILD_NAME = "build"
LLAMACPP_NAME = "src/llama.cpp"
FLAG = "-ffile-prefix-map"


def path_maps(project: str, src: str | None, build_dir: str | None,
              llamacpp: str | None = None) -> list[tuple[str, str]]:
    """``(OLD, NEW)`` pairs, general to specific; one OLD appears once (the most specific role wins), and
    none that a shorter one already maps the same way."""
    project = os.path.normpath(os.path.abspath(project))
    roles = [(project, PROJECT_NAME), (src, SRC_NAME), (llamacpp, LLAMACPP_NAME), (build_dir, BUILD_NAME)]
    chosen: dict[str, tuple[str, int]] = {}
    for role, (path, new) in enumerate(roles):  # later roles win a tie: BUILD_DIR == SRC maps to build
        if not path:
            continue
        given = os.path.normpath(os.path.join(project, path))
        olds = [given, os.path.realpath(given)]
        rel = os.path.relpath(given, project)
        if rel != "." and not rel.startswith(".."):
            olds.append(rel)  # SCons names a file inside the checkout relative to it
        tail = "" if new == PROJECT_NAME else "/"  # a tree's files, never a name that merely starts like it
        for old in olds:
            if "=" not in old and old != "/" and old + tail != new + tail:
                chosen.pop(old + tail, None)
                chosen[old + tail] = (new + tail, role)

    def nesting(item: tuple[str, tuple[str, int]]) -> tuple[int, int]:
        # Each map after every map whose OLD is a prefix of its OLD (gcc: the last match wins); otherwise
        # in role order, not by length: the flags, and so the cache keys, must not depend on how long the
        # paths of this checkout are.
        old, (_, role) = item
        return sum(1 for other in chosen if other != old and old.startswith(other)), role

    kept: list[tuple[str, str]] = []
    for old, (new, _) in sorted(chosen.items(), key=nesting):  # stable: ties keep insertion order
        if remap(old, kept) != new:  # else a shorter map already names it so (LLAMACPP = $SRC/llama.cpp)
            kept.append((old, new))
    return kept


# What BUILD_DIR holds before a build has written it: the outputs' root (o/: objects, generated sources).
BUILD_DIR_OUTPUTS = "o"


def renamed_twice(project: str, src: str | None, build_dir: str | None, llamacpp: str | None = None) -> str | None:
    """The ``VAR=value`` of a tree the debug info would name wrongly, else None.

    gcc names a header's directory by mapping the mapped name again. A tree inside the checkout at a mapped
    name plus more (``BUILD_DIR=build/o``: its ``o/gen`` maps to ``build/o/gen``, and again to ``build/gen``)
    is renamed twice when the tree mapped to that name holds an entry called like the next part of the path.
    """
    project = os.path.normpath(os.path.abspath(project))
    trees = {SRC_NAME: src, LLAMACPP_NAME: llamacpp or (src and os.path.join(src, "llama.cpp")), BUILD_NAME: build_dir}
    for var, path in (("SRC", src), ("LLAMACPP", llamacpp), ("BUILD_DIR", build_dir)):
        if not path:
            continue
        rel = os.path.relpath(os.path.normpath(os.path.join(project, path)), project)
        for name, tree in trees.items():
            if not tree or not rel.startswith(name + "/"):
                continue
            first = rel[len(name) + 1:].split("/")[0]
            if os.path.lexists(os.path.join(project, tree, first)) or (name == BUILD_NAME and first == BUILD_DIR_OUTPUTS):
                return f"{var}={path}"
    return None


# sccache before 0.19 keys a compile on its options as written, so an OLD path among them keeps checkouts at
# other paths from sharing hits. Given as a preprocessor option (-Xpreprocessor), the same map reaches the one
# cc1 that preprocesses and compiles (the objects are the same bytes: tests/integration/test_launchers.py), and sccache
# leaves preprocessor options out of its key: the preprocessed text stands for them, SCCACHE_BASEDIRS stripped.
VIA_PREPROCESSOR = "-Xpreprocessor"


def gcc_flags(maps: list[tuple[str, str]], via_preprocessor: bool = False) -> list[str]:
    """``-ffile-prefix-map=OLD=NEW`` for each pair, in order (gcc, g++, clang, hipcc, the cosmocc driver);
    ``via_preprocessor``: each behind ``-Xpreprocessor`` (gcc and g++ compiles only, not links)."""
    flags = [f"{FLAG}={old}={new}" for old, new in maps]
    return [word for flag in flags for word in (VIA_PREPROCESSOR, flag)] if via_preprocessor else flags


def nvcc_flags(maps: list[tuple[str, str]], via_preprocessor: bool = False) -> list[str]:
    """The same for nvcc's host compiler: ``-Xcompiler=`` splits at commas, so such a pair is left out."""
    head = f"-Xcompiler={VIA_PREPROCESSOR}," if via_preprocessor else "-Xcompiler="
    return [head + flag for flag in gcc_flags(maps) if "," not in flag]


def prefix_maps(project: str, src: str | None, build_dir: str | None,
                llamacpp: str | None = None) -> list[str]:
    """The ``-ffile-prefix-map=OLD=NEW`` flags of :func:`path_maps`, general to specific."""
    return gcc_flags(path_maps(project, src, build_dir, llamacpp))


def remap(path: str, maps: list[tuple[str, str]]) -> str:
    """What the compilers make of ``path`` under ``maps`` (the last matching prefix wins)."""
    for old, new in reversed(maps):
        if path.startswith(old):  # a string prefix, as gcc compares
            return new + path[len(old):]
    return path
