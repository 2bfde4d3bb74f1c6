"""The native-ELF lane's reading of the source description (no SCons): host gcc, one architecture.

The lane compiles the host program's llama.cpp part from a bare llama.cpp checkout ``LLAMACPP``, read as
opencoti_build.tree.upstream reads one for every lane (which packages, which sources, which defines). What the
native lane adds is written here as rules over that reading, never as a second source list:

- cosmo-only flags and defines are dropped (:func:`native_flags`, :func:`native_defines`);
- the CPU backend gets this architecture's ``ggml-cpu/arch/<arch>`` kernels (upstream.ARCH_DIRS), with the
  instruction sets of upstream's CMake ``GGML_NATIVE=OFF`` profile;
- the files upstream's CMake generates from ``*.in`` templates are written reproducibly
  (opencoti_build.config.templates, shared with the fat lane);
- cuBLAS is found in the toolkit or in NVIDIA's ``nvidia-cublas`` wheel (opencoti_build.gpu.cublas);
- the ggml core is its own shared library, libggml-base.so (:func:`core_package`), which libggml-cuda.so and
  llama-server share.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from opencoti_build.errors import UserError
from opencoti_build.tree import sources, upstream
from opencoti_build.tree.package_flags import LaneDefaults

# Flags only cosmocc understands.
FAT_ONLY_FLAGS: frozenset[str] = frozenset({"-mcosmo", "-mclang", "-mgcc"})
FAT_ONLY_FLAG_PREFIXES: tuple[str, ...] = ("-X",)  # cosmocc's per-architecture flags
# Defines that select cosmo code paths, besides the llamafile tree's own (upstream.TREE_ONLY_DEFINES, which cover
# llamafile's TinyBLAS dispatch: a checkout of llamafile's patched llama.cpp calls it, opencoti-elf-stubs.cpp answers).
FAT_ONLY_DEFINES: frozenset[str] = upstream.TREE_ONLY_DEFINES | {"COSMOCC=1", "GGML_MULTIPLATFORM"}
NATIVE_DEFINES: tuple[str, ...] = ("_GNU_SOURCE",)  # ggml's CMake adds it on Linux (CPU affinity, mremap)

# Upstream CMake's GGML_NATIVE=OFF instruction sets.
ARCH_FLAGS: Mapping[str, tuple[str, ...]] = {
    "x86_64": ("-msse4.2", "-mavx", "-mavx2", "-mbmi2", "-mfma", "-mf16c"),
    "aarch64": (),
}

# NATIVE_LINKER: the linker of the lane's links, as gcc's -fuse-ld= names it. After an edit's compiles, the
# link of the one -g server (240 MB) is the rest of the build: ld.gold takes about half of ld.bfd's time
# there (docs/benchmarks.md), so ``auto`` takes gold wherever binutils ships it and the compiler's own
# default elsewhere. The flag is part of every link's command line, so a change of linker relinks.
LINKERS: tuple[str, ...] = ("auto", "bfd", "gold")
AUTO_LINKER = "gold"

# ggml-backend-reg.cpp registers CUDA only when compiled with GGML_USE_CUDA.
BACKEND_REG_SOURCE = f"{upstream.LLAMA_PREFIX}ggml/src/ggml-backend-reg.cpp"


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


def native_flags(flags: Sequence[str]) -> list[str]:
    """``flags`` without the fat-only ones (cosmo driver flags, -X<arch>, fat-only -D)."""
    def fat_only(flag: str) -> bool:
        return (flag in FAT_ONLY_FLAGS or flag.startswith(FAT_ONLY_FLAG_PREFIXES)
                or (flag.startswith("-D") and flag[2:] in FAT_ONLY_DEFINES))
    return [f for f in flags if not fat_only(f)]


def native_defines(defines: Sequence[str]) -> list[str]:
    """``defines`` without the fat-only ones, nor those the lane gives every compile (NATIVE_DEFINES)."""
    return [d for d in defines if d not in FAT_ONLY_DEFINES and d not in NATIVE_DEFINES]


def native_packages(machine: str, program: sources.Program = sources.HOST_PROGRAM) -> list[sources.Package]:
    """The program's llama.cpp packages (upstream.packages with ``machine``'s kernels) as this lane compiles
    them: fat-only flags and defines dropped, in link order."""
    arch_dirs = [upstream.ARCH_DIRS[machine]] if machine in upstream.ARCH_DIRS else []
    return [dataclasses.replace(
        p, defines=tuple(native_defines(p.defines)), flags=tuple(native_flags(p.flags)),
        per_file=tuple(dataclasses.replace(r, flags=tuple(native_flags(r.flags))) for r in p.per_file),
    ) for p in upstream.packages(arch_dirs, program)]


def lane_defaults(machine: str, extra_ccflags: Sequence[str] = ()) -> LaneDefaults:
    """config.mk's defaults as this lane compiles them: fat-only flags dropped, upstream CMake's instruction
    sets for ``machine`` and ``extra_ccflags`` (the prefix maps) after the CCFLAGS, no ``-iquote.``."""
    return LaneDefaults(
        ccflags=tuple(native_flags(sources.DEFAULT_CCFLAGS)) + ARCH_FLAGS.get(machine, ()) + tuple(extra_ccflags),
        cppflags=tuple(native_flags(sources.DEFAULT_CPPFLAGS)),
    )


def core_package(machine: str) -> sources.Package:
    """libggml-base.so's package: the ggml core (sources.GGML_CORE_SOURCES) with ggml's flags."""
    ggml = next(p for p in native_packages(machine) if p.name == sources.GGML.name)
    return dataclasses.replace(ggml, name="ggml-base", sources=sources.GGML_CORE_SOURCES)


def link_packages(machine: str, llamacpp: str, core: Iterable[str]) -> list[tuple[sources.Package, list[str]]]:
    """llama-server's packages in link order, each with the sources it compiles (upstream.claimed): none of
    ``core`` (libggml-base.so's)."""
    return upstream.claimed(native_packages(machine), llamacpp, core)
