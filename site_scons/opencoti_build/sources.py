"""The llamafile source tree as data: every package the host binary and the GPU DSOs compile.

Paths are relative to the source tree root (``SRC``, a llamafile-0.10-shaped checkout whose
``llama.cpp/`` is the patched llama.cpp submodule). Patterns are globs where upstream globs
(``**`` descends); explicit lists where upstream's BUILD.mk lists. This module is the one place
a reader looks to learn what gets compiled with which flags.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

LLAMA = "llama.cpp"
CXX_SUFFIXES: tuple[str, ...] = (".cpp", ".cc", ".cxx")

# The ggml core every self-contained DSO compiles into itself (cosmo_dlopen cannot resolve
# symbols from the host process) and the host binary links. ggml.c's type_traits table points at
# every type's CPU to_float/from_float, resolved eagerly at dlopen: a core .c added here lands in
# the host and in every DSO at once. A listed file that the tree lacks is skipped (older trees).
GGML_CORE_SOURCES: tuple[str, ...] = (
    f"{LLAMA}/ggml/src/ggml.c",
    f"{LLAMA}/ggml/src/ggml-alloc.c",
    f"{LLAMA}/ggml/src/ggml-backend.cpp",
    f"{LLAMA}/ggml/src/ggml-backend-meta.cpp",
    f"{LLAMA}/ggml/src/ggml-quants.c",
    f"{LLAMA}/ggml/src/ggml-threading.cpp",
)

# Include directories of the ggml core, for the DSOs' host-compiled copy of it.
GGML_CORE_INCLUDES: tuple[str, ...] = (f"{LLAMA}/ggml/include", f"{LLAMA}/ggml/src")

LLAMA_IQUOTE: tuple[str, ...] = tuple(
    f"{LLAMA}/{d}"
    for d in ("common", "include", "ggml/include", "ggml/src", "ggml/src/ggml-cpu", "src", "tools/mtmd")
)

LLAMA_DEFINES: tuple[str, ...] = (
    "COSMOCC=1", "GGML_USE_LLAMAFILE", "GGML_USE_CPU", "GGML_USE_CPU_REPACK", "GGML_USE_OPENMP",
    "GGML_CPU_GENERIC", "GGML_SCHED_MAX_COPIES=4", "NDEBUG",
)


@dataclass(frozen=True)
class FileFlags:
    """Flags for the files of a package matching ``pattern`` (fnmatch on the tree-relative path).

    ``flags`` are appended after the package's (gcc takes the last ``-O``); ``target_arch`` is
    appended to the build's TARGET_ARCH (upstream's ``private TARGET_ARCH +=`` for the TinyBLAS
    CPU variants).
    """

    pattern: str
    flags: tuple[str, ...] = ()
    target_arch: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Package:
    """One group of translation units compiled with one set of flags into one fat archive."""

    name: str
    sources: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    iquote: tuple[str, ...] = ()
    isystem: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    per_file: tuple[FileFlags, ...] = ()
    optional: bool = False  # a tree may lack it entirely (mtmd in older trees)

    def resolve(self, root: Path) -> list[str]:
        """The package's sources present under ``root``, sorted, tree-relative, excludes removed."""
        found: set[str] = set()
        for pattern in self.sources:
            if any(ch in pattern for ch in "*?["):
                found.update(p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file())
            elif (root / pattern).is_file():
                found.add(pattern)
        return sorted(s for s in found if not any(fnmatch.fnmatchcase(s, x) for x in self.exclude))

    def file_flags(self, source: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """(extra flags, TARGET_ARCH override or None) for one tree-relative source."""
        flags: list[str] = []
        target_arch = None
        for rule in self.per_file:
            if fnmatch.fnmatchcase(source, rule.pattern):
                flags.extend(rule.flags)
                if rule.target_arch is not None:
                    target_arch = rule.target_arch
        return tuple(flags), target_arch


_FAST = ("-O3", "-mgcc")  # upstream builds ggml's hot loops with gcc at -O3
_SMALL = ("-Os",)

GGML = Package(
    name="ggml",
    sources=GGML_CORE_SOURCES + (
        f"{LLAMA}/ggml/src/ggml.cpp",
        f"{LLAMA}/ggml/src/ggml-backend-dl.cpp",
        f"{LLAMA}/ggml/src/ggml-backend-reg.cpp",
        f"{LLAMA}/ggml/src/ggml-opt.cpp",
        f"{LLAMA}/ggml/src/gguf.cpp",
        f"{LLAMA}/ggml/src/ggml-cpu/*.c",
        f"{LLAMA}/ggml/src/ggml-cpu/*.cpp",
        f"{LLAMA}/ggml/src/ggml-cpu/amx/*.cpp",
    ),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES,
    flags=("-fopenmp",),
    per_file=(
        FileFlags(f"{LLAMA}/ggml/src/ggml.c", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-quants.c", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/quants.c", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/vec.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/ops.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/binary-ops.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/unary-ops.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-backend-reg.cpp", _SMALL),
    ),
)

LLAMA_LIB = Package(
    name="llama",
    sources=(f"{LLAMA}/src/*.cpp", f"{LLAMA}/src/models/*.cpp"),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES,
    flags=("-fopenmp",),
)

COMMON = Package(
    name="common",
    sources=(f"{LLAMA}/common/*.cpp", f"{LLAMA}/common/jinja/*.cpp"),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES + ("LLAMA_USE_HTTPLIB",),
    flags=("-fopenmp",),
    per_file=(
        FileFlags(f"{LLAMA}/common/arg.cpp", _SMALL),
        FileFlags(f"{LLAMA}/common/log.cpp", _SMALL),
    ),
)

MTMD = Package(
    name="mtmd",
    sources=(f"{LLAMA}/tools/mtmd/*.cpp", f"{LLAMA}/tools/mtmd/models/*.cpp"),
    exclude=(f"{LLAMA}/tools/mtmd/mtmd-cli.cpp", f"{LLAMA}/tools/mtmd/deprecation-warning.cpp"),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES,
    flags=("-fopenmp",),
    optional=True,
)

HTTPLIB = Package(
    name="httplib",
    sources=(f"{LLAMA}/vendor/cpp-httplib/httplib.cpp",),
    isystem=(f"{LLAMA}/vendor",),
    defines=("NDEBUG",),
    optional=True,
)

SERVER = Package(
    name="server",
    sources=(f"{LLAMA}/tools/server/*.cpp",),
    iquote=LLAMA_IQUOTE + (f"{LLAMA}/tools/server",),
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES + ("LLAMA_USE_HTTPLIB",),
    # the server's main() is renamed so llamafile's own main dispatches to it
    flags=("-fopenmp", "-Dmain=llama_server"),
)

LLAMAFILE_IQUOTE: tuple[str, ...] = (".",) + LLAMA_IQUOTE

LLAMAFILE = Package(
    name="llamafile",
    sources=("llamafile/*.c", "llamafile/*.cpp"),
    exclude=("llamafile/tinyblas_cpu_*.cpp", "llamafile/*_test.c", "llamafile/*_test.cpp"),
    iquote=LLAMAFILE_IQUOTE,
    isystem=("third_party", f"{LLAMA}/vendor"),
    defines=("LLAMAFILE_TUI", "COSMOCC=1", "GGML_MULTIPLATFORM"),
    flags=("-fopenmp",),
)

# TinyBLAS CPU kernels: one TU per CPU variant, each compiled for its own instruction set.
_AVX2 = ("-Xx86_64-mavx2", "-Xx86_64-mfma", "-Xx86_64-mf16c")
TINYBLAS = Package(
    name="tinyblas",
    sources=("llamafile/tinyblas_cpu_*.cpp",),
    iquote=LLAMAFILE_IQUOTE,
    isystem=("third_party",),
    defines=("COSMOCC=1", "GGML_MULTIPLATFORM"),
    per_file=(
        FileFlags("llamafile/tinyblas_cpu_*_amd_avx.cpp", target_arch=("-Xx86_64-mavx",)),
        FileFlags("llamafile/tinyblas_cpu_*_amd_fma.cpp", target_arch=_AVX2),
        FileFlags("llamafile/tinyblas_cpu_*_amd_avx2.cpp", target_arch=_AVX2),
        FileFlags("llamafile/tinyblas_cpu_*_amd_avx512f.cpp", target_arch=_AVX2 + ("-Xx86_64-mavx512f",)),
        FileFlags(
            "llamafile/tinyblas_cpu_*_amd_zen4.cpp",
            target_arch=_AVX2 + ("-Xx86_64-mavx512f", "-Xx86_64-mavx512vl", "-Xx86_64-mavx512vnni", "-Xx86_64-mavx512bf16"),
        ),
        FileFlags("llamafile/tinyblas_cpu_*_arm80.cpp", target_arch=("-Xaarch64-march=armv8-a",)),
        FileFlags("llamafile/tinyblas_cpu_*_arm82.cpp", target_arch=("-Xaarch64-march=armv8.2-a+dotprod+fp16",)),
    ),
)

# Syntax highlighting: C++ lexers plus the gperf keyword tables (``*.gperf`` → C, then compiled).
HIGHLIGHT = Package(
    name="highlight",
    sources=("llamafile/highlight/*.cpp", "llamafile/highlight/*.gperf"),
    iquote=(".",),
    defines=("COSMOCC=1",),
    optional=True,
)

STB = Package(
    name="stb",
    sources=("third_party/stb/*.c",),
    iquote=(".",),
    optional=True,
)


@dataclass(frozen=True)
class Program:
    """A fat program linked from packages' archives; ``main`` holds the TU with main()."""

    output: str
    packages: tuple[Package, ...]
    link_flags: tuple[str, ...] = field(default=("-fopenmp",))
    libs: tuple[str, ...] = ("-lm",)


# Link order: dependents before what they depend on, as the archives are searched once.
HOST_PROGRAM = Program(
    output="llamafile/llamafile",
    packages=(LLAMAFILE, SERVER, MTMD, COMMON, LLAMA_LIB, GGML, TINYBLAS, HIGHLIGHT, HTTPLIB, STB),
)

PACKAGES: tuple[Package, ...] = HOST_PROGRAM.packages


def core_sources(root: Path) -> list[str]:
    """The ggml core sources present in ``root``: the DSOs' self-contained copy."""
    return [s for s in GGML_CORE_SOURCES if (Path(root) / s).is_file()]


# build/config.mk's defaults, applied to every fat compile; packages append to them.
DEFAULT_CCFLAGS: tuple[str, ...] = ("-O2", "-g", "-fexceptions", "-ffunction-sections", "-fdata-sections", "-mclang")
DEFAULT_CXXFLAGS: tuple[str, ...] = ("-frtti", "-std=gnu++23")
DEFAULT_CPPFLAGS: tuple[str, ...] = ("-mcosmo", "-DGGML_MULTIPLATFORM", "-Wno-attributes", "-DLLAMAFILE_DEBUG")
DEFAULT_IQUOTE: tuple[str, ...] = (".",)  # upstream's `-iquote.`: the tree root
