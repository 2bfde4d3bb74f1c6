"""An upstream llama.cpp checkout (``LLAMACPP=``) as the source description reads it, for every lane that builds one.

The llamafile tree's packages (opencoti_build.tree.sources) describe the llama.cpp that llamafile vendors. A bare
checkout is read through the same description, by rules written here once, never as a second source list:

- a package keeps its sources under ``llama.cpp/`` only; one made of llama.cpp sources only also compiles the
  other ``.c``/``.cpp`` files of the directories it lists (a newer llama.cpp adds files there, as upstream's CMake
  globs), plus :data:`EXTRA_DIRS`, less other programs' mains and what CMake builds only for other set-ups
  (:data:`EXCLUDE`);
- the defines that select llamafile's code paths are dropped (:data:`TREE_ONLY_DEFINES`): the server's own
  ``main`` stays ``main``, ggml-cpu uses its own kernels, not llamafile's TinyBLAS or the generic fallback; those
  upstream's CMake adds are added (:data:`CMAKE_DEFINES`);
- ggml-cpu's per-architecture kernels (``ggml-cpu/arch/<arch>/``) are the lane's business: the native lane adds
  its machine's directory (:func:`packages` ``arch_dirs``), the fat lane compiles one wrapper per file name
  (:func:`arch_wrappers`) whose x86-64 half includes ``arch/x86/`` and whose aarch64 half ``arch/arm/``.

The checkout is read where it is: a description path ``llama.cpp/x`` is ``LLAMACPP/x``, whatever the checkout's
directory is called (:func:`tree_path`). The checkout must be a llama.cpp whose ggml version the description
knows (:data:`KNOWN_GGML_SERIES`): an older or newer one has other files and is refused before anything is written.
The llamafile tree's own llama.cpp (the native lane's default) is not asked: the description was written from it.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from opencoti_build.errors import UserError
from opencoti_build.tree import sources

LLAMA_PREFIX = f"{sources.LLAMA}/"

# The ggml versions (major.minor, from ggml/CMakeLists.txt) whose trees the description has built, and where each
# was seen: a checkout of another series is refused (its file lists differ from the description's).
KNOWN_GGML_SERIES: Mapping[str, str] = {"0.25": "the llama.cpp of llama-cpp-python 0.3.36"}

# Defines that select the llamafile tree's code paths: llamafile's TinyBLAS dispatch (its sgemm.cpp is llamafile's),
# the generic CPU fallback a fat build of that tree uses, and the rename of the server's main for llamafile's TUI.
TREE_ONLY_DEFINES: frozenset[str] = frozenset({"GGML_USE_LLAMAFILE", "GGML_CPU_GENERIC", "LLAMAFILE_TUI"})

# Defines upstream's CMake gives a package's directory where the llamafile tree's recipe has none: ggml's
# (ggml/src/CMakeLists.txt) on Linux, for CPU affinity, scheduling policies and mremap, which cosmopolitan's headers
# honour as glibc's do.
CMAKE_DEFINES: Mapping[str, tuple[str, ...]] = {sources.GGML.name: ("_GNU_SOURCE",)}

# Directories a newer llama.cpp adds to a package, and the TUs of other programs in listed directories.
EXTRA_DIRS: Mapping[str, tuple[str, ...]] = {
    sources.COMMON.name: (f"{LLAMA_PREFIX}common/parsers",),
    sources.GGML.name: (f"{LLAMA_PREFIX}ggml/src/ggml-cpu/tiled",),  # the tiled matmul kernels ggml-cpu.c calls
    # CMake's vendor::hash, which mtmd links (hash_sha256_hex); its sha256 core is plain C
    sources.MTMD.name: (f"{LLAMA_PREFIX}vendor/hash", f"{LLAMA_PREFIX}vendor/hash/sha256"),
}
# Include dirs those extra directories need (vendor::hash's sources include "rotate-bits/…" from its root).
EXTRA_IQUOTE: Mapping[str, tuple[str, ...]] = {sources.MTMD.name: (f"{LLAMA_PREFIX}vendor/hash",)}
EXCLUDE: tuple[str, ...] = (
    f"{LLAMA_PREFIX}tools/mtmd/mtmd-cli.cpp", f"{LLAMA_PREFIX}tools/mtmd/deprecation-warning.cpp",
    f"{LLAMA_PREFIX}ggml/src/ggml-cpu/arch/*/cpu-feats.cpp",  # scores CPU variants of GGML_BACKEND_DL builds
)

# The files of a checkout whose switch statements go over cosmopolitan's run-time constants (errno values, signal
# numbers): no compiler takes them without cosmopolitan gcc's -fportcosmo, so the build compiles lowered copies
# (opencoti_build.tree.portcosmo) in every lane of a checkout. A source is compiled from its copy; a header's copy is found first,
# through the include dir named beside it. tests/realtree/test_real_cosmocc.py checks this list against every file
# of llama-cpp-python 0.3.36's tree.
PORTCOSMO_SOURCES: tuple[str, ...] = (f"{LLAMA_PREFIX}ggml/src/ggml.c",)  # posix_memalign's EINVAL, ENOMEM
PORTCOSMO_HEADERS: Mapping[str, str] = {  # header -> the include dir it is found through
    f"{LLAMA_PREFIX}vendor/sheredom/subprocess.h": f"{LLAMA_PREFIX}vendor",  # errno -> subprocess_error_*
}

# Per-file flags a checkout needs beyond the description's, by package. llama-memory-hybrid-idx.cpp destroys a
# unique_ptr to a type completed later in the file: clang with libc++ at C++23 (cosmocc's -mclang, the default)
# instantiates the constexpr destructor there and refuses the incomplete type; gcc (-mgcc) instantiates it at the
# end of the file, as the native lane's does.
CHECKOUT_FILE_FLAGS: Mapping[str, tuple[sources.FileFlags, ...]] = {
    sources.LLAMA_LIB.name: (sources.FileFlags(f"{LLAMA_PREFIX}src/llama-memory-hybrid-idx.cpp", ("-mgcc",)),),
}

# ggml-cpu's per-architecture kernels: the directory of each, and the macro a fat compile's half defines.
ARCH_ROOT = f"{LLAMA_PREFIX}ggml/src/ggml-cpu/arch"
ARCH_DIRS: Mapping[str, str] = {"x86_64": "x86", "aarch64": "arm"}
HALF_MACROS: Mapping[str, str] = {"x86_64": "__x86_64__", "aarch64": "__aarch64__"}
# What the wrappers' #include names are relative to: ggml/src, on every ggml compile's -iquote path (LLAMA_IQUOTE).
ARCH_INCLUDE_BASE = f"{LLAMA_PREFIX}ggml/src"


class CheckoutError(UserError):
    """LLAMACPP names no llama.cpp checkout, or one of a ggml series the description does not know (one line)."""


def known_versions() -> str:
    return "; ".join(f"ggml {series}.x ({where})" for series, where in KNOWN_GGML_SERIES.items())


def checkout_dir(value: str, src: str, project: str) -> str:
    """Absolute LLAMACPP (empty: ``<src>/llama.cpp``; relative: from the project root), checked: it has ``ggml/``
    and ``src/``, and a given one's ``ggml/CMakeLists.txt`` names a ggml version of :data:`KNOWN_GGML_SERIES` (the
    llamafile tree's own llama.cpp, the default, is the one the description was written from)."""
    path = Path(value) if value else Path(src) / sources.LLAMA
    if not path.is_absolute():
        path = Path(project) / path
    missing = [d for d in ("ggml", "src") if not (path / d).is_dir()]
    if missing:
        raise CheckoutError(f"LLAMACPP={path} is not a llama.cpp checkout (no {' or '.join(d + '/' for d in missing)}); "
                            f"point LLAMACPP= at the root of a llama.cpp tree")
    if not value:
        return str(path)
    version = sources.ggml_version(path)
    if version is None:
        raise CheckoutError(f"LLAMACPP={path} names no ggml version (looked for GGML_VERSION_MAJOR/MINOR/PATCH in "
                            f"ggml/CMakeLists.txt); known to work: {known_versions()}")
    if version.rsplit(".", 1)[0] not in KNOWN_GGML_SERIES:
        raise CheckoutError(f"LLAMACPP={path} is ggml {version}, whose sources the description does not know "
                            f"(known to work: {known_versions()}); check out a known version")
    return str(path)


def artifact_version(llamacpp: str) -> str:
    """The version an artifact of the checkout's server carries in its name and MANIFEST.json: ``llama.cpp-<ggml>``."""
    return f"{sources.LLAMA}-{sources.ggml_version(llamacpp) or 'unknown'}"


def tree_path(rel: str, llamacpp: str) -> str:
    """Where a description path (``llama.cpp/...``) lies in the bare checkout."""
    if not rel.startswith(LLAMA_PREFIX):
        raise ValueError(f"{rel} is outside {LLAMA_PREFIX}: a bare checkout holds only llama.cpp's files")
    return os.path.join(llamacpp, rel[len(LLAMA_PREFIX):])


def _own(paths: Sequence[str]) -> tuple[str, ...]:
    return tuple(p for p in paths if p.startswith(LLAMA_PREFIX))


def package(described: sources.Package, arch_dirs: Sequence[str] = ()) -> sources.Package | None:
    """The package's llama.cpp part as a checkout compiles it, or None when it has none; ggml gets the kernels of
    ``arch_dirs`` (names under :data:`ARCH_ROOT`)."""
    own = _own(described.sources)
    if not own:
        return None
    dirs: set[str] = set()
    if len(own) == len(described.sources):  # a llama.cpp package: complete its directories
        dirs = {posixpath.dirname(s) for s in own} | set(EXTRA_DIRS.get(described.name, ()))
        if described.name == sources.GGML.name:
            dirs.update(f"{ARCH_ROOT}/{d}" for d in arch_dirs)
    return dataclasses.replace(
        described,
        inherits=sources.COMPILE_DEFAULTS,  # CMake's one profile, whatever the llamafile recipe skips
        sources=own + tuple(f"{d}/*{ext}" for d in sorted(dirs) for ext in (".c", ".cpp")),
        exclude=described.exclude + EXCLUDE,
        iquote=_own(described.iquote) + EXTRA_IQUOTE.get(described.name, ()), isystem=_own(described.isystem),
        defines=tuple(d for d in described.defines if d not in TREE_ONLY_DEFINES) + CMAKE_DEFINES.get(described.name, ()),
        flags=tuple(f for f in described.flags if not (f.startswith("-D") and f[2:] in TREE_ONLY_DEFINES)),
        per_file=tuple(dataclasses.replace(r, target_arch=None) for r in described.per_file)
        + CHECKOUT_FILE_FLAGS.get(described.name, ()),
    )


def packages(arch_dirs: Sequence[str] = (), program: sources.Program = sources.HOST_PROGRAM) -> list[sources.Package]:
    """The program's packages with a llama.cpp part, as :func:`package` reads them, in link order."""
    return [p for p in (package(d, arch_dirs) for d in program.packages) if p is not None]


def resolve(described: sources.Package, llamacpp: str) -> list[str]:
    """The package's sources present in the checkout, as description paths (Package.resolve)."""
    return described.resolve(Path(llamacpp), llama=Path(llamacpp))  # llama.cpp/ paths only: the checkout is the root


def claimed(packages: Iterable[sources.Package], llamacpp: str,
            taken: Iterable[str] = ()) -> list[tuple[sources.Package, list[str]]]:
    """Each package with the sources it compiles: a source is compiled once, by the first package that has it
    (the server's main is in the server's directory too), and never when it is in ``taken``."""
    seen = set(taken)
    found = []
    for described in packages:
        rels = [r for r in resolve(described, llamacpp) if r not in seen]
        seen.update(rels)
        found.append((described, rels))
    return found


@dataclasses.dataclass(frozen=True)
class ArchWrapper:
    """A fat compile's view of one ggml-cpu kernel file: each half includes its own architecture's copy."""

    name: str  # the file name in arch/<arch>/ (quants.c, repack.cpp), and the wrapper's
    includes: Mapping[str, str]  # architecture -> description path of the file its half includes

    @property
    def text(self) -> str:
        lines = [f"// ggml-cpu's per-architecture {self.name} for each half of a fat compile "
                 "(opencoti_build.tree.upstream.arch_wrappers)."]
        keyword = "#if"
        for arch, rel in self.includes.items():
            lines += [f"{keyword} defined({HALF_MACROS[arch]})",
                      f'#include "{posixpath.relpath(rel, ARCH_INCLUDE_BASE)}"']
            keyword = "#elif"
        missing = sorted(set(HALF_MACROS) - set(self.includes))
        # a file one architecture lacks: that half compiles nothing of it
        lines.append(f"#elif !defined({') && !defined('.join(HALF_MACROS[a] for a in missing)})" if missing else "#else")
        lines += ['#error "a fat compile has an x86-64 and an aarch64 half only"', "#endif", ""]
        return "\n".join(lines)


def arch_wrappers(llamacpp: str) -> list[ArchWrapper]:
    """One wrapper per kernel file name of ``arch/x86`` and ``arch/arm`` in the checkout (less :data:`EXCLUDE`)."""
    found: dict[str, dict[str, str]] = {}
    for arch, directory in ARCH_DIRS.items():
        for rel in sources.tree_glob(llamacpp, f"{ARCH_ROOT}/{directory}/*", llama=llamacpp):
            if rel.endswith((".c", ".cpp")) and not any(fnmatch.fnmatchcase(rel, x) for x in EXCLUDE):
                found.setdefault(posixpath.basename(rel), {})[arch] = rel
    return [ArchWrapper(name, includes) for name, includes in sorted(found.items())]
