"""The native-ELF lane's reading of the source description (no SCons): host gcc, one architecture.

The lane compiles the host program's sources that lie under ``llama.cpp/`` (:func:`native_package`)
from a bare llama.cpp checkout ``LLAMACPP``. What differs from the fat lane is written here as rules
over the description, never as a second source list:

- a package made of llama.cpp sources only also compiles the other ``.c``/``.cpp`` files of the
  directories it lists (a llama.cpp newer than llamafile's adds files there, as upstream's CMake
  globs), plus :data:`EXTRA_DIRS`, less other programs' mains (:data:`NATIVE_EXCLUDE`);
- cosmo-only flags and defines are dropped (:func:`native_flags`, :func:`native_defines`),
  including ``LLAMAFILE_TUI``, which renames the server's main for llamafile's dispatcher;
- the CPU backend gets this architecture's ``ggml-cpu/arch/<arch>`` kernels (the fat lane builds
  ``GGML_CPU_GENERIC``), with the instruction sets of upstream's CMake ``GGML_NATIVE=OFF`` profile;
- the files upstream's CMake generates from ``*.in`` templates are written reproducibly
  (opencoti_build.config.templates, shared with the fat lane);
- cuBLAS is found in the toolkit or in NVIDIA's ``nvidia-cublas`` wheel (opencoti_build.gpu.cublas);
- every package compiles with CMake's one profile: config.mk's defaults less the fat-only flags
  (:func:`lane_defaults`), whatever its fat recipe skips.

The checkout is read where it is (``llama=`` of sources.tree_file): a description path
``llama.cpp/x`` is ``LLAMACPP/x``, whatever the checkout's directory is called.
"""
from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from opencoti_build.errors import UserError
from opencoti_build.tree import sources
from opencoti_build.tree.package_flags import LaneDefaults

LLAMA_PREFIX = f"{sources.LLAMA}/"

# Flags only cosmocc understands.
FAT_ONLY_FLAGS: frozenset[str] = frozenset({"-mcosmo", "-mclang", "-mgcc"})
FAT_ONLY_FLAG_PREFIXES: tuple[str, ...] = ("-X",)  # cosmocc's per-architecture flags
# Defines that select cosmo/llamafile code paths: the multi-arch CPU fallback, llamafile's TinyBLAS
# dispatch (its sgemm.cpp is cosmo-bound; opencoti-elf-stubs.cpp answers for it) and cosmo checks.
FAT_ONLY_DEFINES: frozenset[str] = frozenset({
    "COSMOCC=1", "GGML_USE_LLAMAFILE", "GGML_CPU_GENERIC", "GGML_MULTIPLATFORM", "LLAMAFILE_TUI"})
NATIVE_DEFINES: tuple[str, ...] = ("_GNU_SOURCE",)  # ggml's CMake adds it on Linux (CPU affinity, mremap)

# ggml-cpu's per-architecture kernels, and upstream CMake's GGML_NATIVE=OFF instruction sets.
ARCH_DIRS: Mapping[str, str] = {"x86_64": "x86", "aarch64": "arm"}
ARCH_FLAGS: Mapping[str, tuple[str, ...]] = {
    "x86_64": ("-msse4.2", "-mavx", "-mavx2", "-mbmi2", "-mfma", "-mf16c"),
    "aarch64": (),
}

# Directories a newer llama.cpp adds to a package, and the TUs of other programs in listed directories.
EXTRA_DIRS: Mapping[str, tuple[str, ...]] = {
    sources.COMMON.name: (f"{LLAMA_PREFIX}common/parsers",),
    sources.GGML.name: (f"{LLAMA_PREFIX}ggml/src/ggml-cpu/tiled",),  # the tiled matmul kernels ggml-cpu.c calls
    # CMake's vendor::hash, which mtmd links (hash_sha256_hex); its sha256 core is plain C
    sources.MTMD.name: (f"{LLAMA_PREFIX}vendor/hash", f"{LLAMA_PREFIX}vendor/hash/sha256"),
}
# Include dirs those extra directories need (vendor::hash's sources include "rotate-bits/…" from its root).
EXTRA_IQUOTE: Mapping[str, tuple[str, ...]] = {sources.MTMD.name: (f"{LLAMA_PREFIX}vendor/hash",)}
NATIVE_EXCLUDE: tuple[str, ...] = (
    f"{LLAMA_PREFIX}tools/mtmd/mtmd-cli.cpp", f"{LLAMA_PREFIX}tools/mtmd/deprecation-warning.cpp",
    f"{LLAMA_PREFIX}ggml/src/ggml-cpu/arch/*/cpu-feats.cpp",  # scores CPU variants of GGML_BACKEND_DL builds
)

# NATIVE_LINKER: the linker of the lane's links, as gcc's -fuse-ld= names it. After an edit's compiles, the
# link of the one -g server (240 MB) is the rest of the build: ld.gold takes about half of ld.bfd's time
# there (docs/benchmarks.md), so ``auto`` takes gold wherever binutils ships it and the compiler's own
# default elsewhere. The flag is part of every link's command line, so a change of linker relinks.
LINKERS: tuple[str, ...] = ("auto", "bfd", "gold")
AUTO_LINKER = "gold"

# ggml-backend-reg.cpp registers CUDA only when compiled with GGML_USE_CUDA.
BACKEND_REG_SOURCE = f"{LLAMA_PREFIX}ggml/src/ggml-backend-reg.cpp"


class NativeTreeError(UserError):
    """LLAMACPP names no llama.cpp checkout (one-line message naming it and the fix)."""


class LinkerError(UserError):
    """NATIVE_LINKER names a linker this machine lacks."""


def linker_flags(choice: str, on_path: Callable[[str], bool]) -> list[str]:
    """The links' ``-fuse-ld=`` flag for NATIVE_LINKER ``choice`` (:data:`LINKERS`); ``on_path(program)``
    says whether a program is on the build's PATH. ``auto`` without gold: no flag (the compiler's default)."""
    if choice == "auto":
        return [f"-fuse-ld={AUTO_LINKER}"] if on_path(f"ld.{AUTO_LINKER}") else []
    if not on_path(f"ld.{choice}"):
        raise LinkerError(f"NATIVE_LINKER={choice}: ld.{choice} is not on PATH; install binutils' ld.{choice} "
                          "or use NATIVE_LINKER=auto")
    return [f"-fuse-ld={choice}"]


def llamacpp_dir(value: str, src: str, project: str) -> str:
    """Absolute LLAMACPP (empty: ``<src>/llama.cpp``; relative: from the project root), checked."""
    path = Path(value) if value else Path(src) / sources.LLAMA
    if not path.is_absolute():
        path = Path(project) / path
    missing = [d for d in ("ggml", "src") if not (path / d).is_dir()]
    if missing:
        raise NativeTreeError(f"LLAMACPP={path} is not a llama.cpp checkout (no {' or '.join(d + '/' for d in missing)}); "
                              f"point LLAMACPP= at the root of a llama.cpp tree")
    return str(path)


def tree_path(rel: str, llamacpp: str) -> str:
    """Where a description path (``llama.cpp/...``) lies in the bare checkout."""
    if not rel.startswith(LLAMA_PREFIX):
        raise ValueError(f"{rel} is outside {LLAMA_PREFIX}: the native lane reads only the llama.cpp checkout")
    return os.path.join(llamacpp, rel[len(LLAMA_PREFIX):])


def native_flags(flags: Sequence[str]) -> list[str]:
    """``flags`` without the fat-only ones (cosmo driver flags, -X<arch>, fat-only -D)."""
    def fat_only(flag: str) -> bool:
        return (flag in FAT_ONLY_FLAGS or flag.startswith(FAT_ONLY_FLAG_PREFIXES)
                or (flag.startswith("-D") and flag[2:] in FAT_ONLY_DEFINES))
    return [f for f in flags if not fat_only(f)]


def native_defines(defines: Sequence[str]) -> list[str]:
    return [d for d in defines if d not in FAT_ONLY_DEFINES]


def _own(paths: Sequence[str]) -> tuple[str, ...]:
    return tuple(p for p in paths if p.startswith(LLAMA_PREFIX))


def native_package(package: sources.Package, machine: str) -> sources.Package | None:
    """The package's llama.cpp part as the native lane compiles it, or None when it has none."""
    own = _own(package.sources)
    if not own:
        return None
    dirs: set[str] = set()
    if len(own) == len(package.sources):  # a llama.cpp package: complete its directories
        dirs = {posixpath.dirname(s) for s in own} | set(EXTRA_DIRS.get(package.name, ()))
        if package.name == sources.GGML.name and machine in ARCH_DIRS:
            dirs.add(f"{LLAMA_PREFIX}ggml/src/ggml-cpu/arch/{ARCH_DIRS[machine]}")
    return dataclasses.replace(
        package,
        inherits=sources.COMPILE_DEFAULTS,
        sources=own + tuple(f"{d}/*{ext}" for d in sorted(dirs) for ext in (".c", ".cpp")),
        exclude=package.exclude + NATIVE_EXCLUDE,
        iquote=_own(package.iquote) + EXTRA_IQUOTE.get(package.name, ()), isystem=_own(package.isystem),
        defines=tuple(native_defines(package.defines)), flags=tuple(native_flags(package.flags)),
        per_file=tuple(dataclasses.replace(r, flags=tuple(native_flags(r.flags)), target_arch=None)
                       for r in package.per_file),
    )


def native_packages(machine: str, program: sources.Program = sources.HOST_PROGRAM) -> list[sources.Package]:
    """The program's packages with a llama.cpp part, as :func:`native_package` reads them, in link order."""
    return [n for n in (native_package(p, machine) for p in program.packages) if n is not None]


def lane_defaults(machine: str, extra_ccflags: Sequence[str] = ()) -> LaneDefaults:
    """config.mk's defaults as this lane compiles them: fat-only flags dropped, upstream CMake's instruction
    sets for ``machine`` and ``extra_ccflags`` (the prefix maps) after the CCFLAGS, no ``-iquote.``."""
    return LaneDefaults(
        ccflags=tuple(native_flags(sources.DEFAULT_CCFLAGS)) + ARCH_FLAGS.get(machine, ()) + tuple(extra_ccflags),
        cppflags=tuple(native_flags(sources.DEFAULT_CPPFLAGS)),
    )


def resolve(package: sources.Package, llamacpp: str) -> list[str]:
    """The package's sources present in the checkout, as description paths (Package.resolve)."""
    return package.resolve(Path(llamacpp), llama=Path(llamacpp))  # the lane reads llama.cpp/ paths only


def core_package(machine: str) -> sources.Package:
    """libggml-base.so's package: the ggml core (sources.GGML_CORE_SOURCES) with ggml's flags."""
    ggml = native_package(sources.GGML, machine)
    assert ggml is not None  # GGML's sources all lie under llama.cpp/
    return dataclasses.replace(ggml, name="ggml-base", sources=sources.GGML_CORE_SOURCES)


def link_packages(machine: str, llamacpp: str, core: Iterable[str]) -> list[tuple[sources.Package, list[str]]]:
    """llama-server's packages in link order, each with the sources it compiles: a source is compiled
    once, by the first package that has it, and never when it is in ``core`` (libggml-base.so's)."""
    claimed = set(core)
    packages = []
    for package in native_packages(machine):
        rels = [r for r in resolve(package, llamacpp) if r not in claimed]
        claimed.update(rels)
        packages.append((package, rels))
    return packages
