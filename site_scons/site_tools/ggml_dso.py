"""Shared machinery of the self-contained GPU backend DSOs (ggml-cuda.so, ggml-rocm.so, ggml-vulkan.so).

API (after ``env.Tool('ggml_dso')``):

``env.GgmlCoreObjects() -> list[Node]``
    The ggml core (``opencoti_build.sources.core_sources($SRC)``, i.e. GGML_CORE_SOURCES) compiled
    with the host gcc/g++ as position-independent objects under ``$BUILD_DIR/backends/ggml-core/``,
    with ``env.GccPrefixMaps()``.
    Every DSO links its own copy because cosmo_dlopen cannot resolve symbols from the host process.
    Compiled once per build however many backends ask (the list is memoized per SRC/BUILD_DIR).

``env.GccPrefixMaps() -> list``
    gcc/g++/clang's ``-ffile-prefix-map`` flags for the checkout, ``$SRC`` and ``$BUILD_DIR``
    (``opencoti_build.prefix_maps``): every compile and link of a DSO takes them, so the DSO's bytes do
    not depend on where the checkout, the tree or the build directory are.

``env.GgmlDso(backend, objects, *, linker, link_flags=(), libs=(), static_runtime=..., archs=(),
              arch_probe=None, lib_dirs=(), stub_dirs=(), entry_points=None, link_prefix_maps=None) -> Node``
    Links ``objects`` + the core objects into
    ``$BACKEND_DIST_DIR/llamafile/<backend>/$LLAMAFILE_VERSION/ggml-<backend>.so`` and returns that node.
    - ``linker``: the driver that links (``'$NVCC'``, ``'$HIPCC'``, ``'g++'``).
    - ``link_flags``: driver flags (``--shared``/``-shared``, arch flags); ``libs``: ``-l`` words, after the objects.
    - ``static_runtime``: the words that link libstdc++/libgcc statically; the default suits gcc-like
      drivers, nvcc passes ``('-Xcompiler=-static-libstdc++,-static-libgcc',)``.
    - ``archs``: the architecture names the build asked for; ``arch_probe`` (a callable, or a
      ``'module:function'`` string) maps a DSO path to the names it holds, in the same spelling.
      The link fails if any asked-for name is missing.
    - ``lib_dirs``/``stub_dirs``: extra directories to resolve DT_NEEDED in (see opencoti_build.elfcheck).
    - ``entry_points``: the symbols the DSO must export; default ``ggml_backend_<backend>_init``/``_reg``
      (ggml-rocm.so, HIP-compiled from the CUDA sources, exports the ``cuda`` names and passes them).
    - ``link_prefix_maps``: the linker's -ffile-prefix-map words (opencoti_build.prefix_maps); default the
      gcc/clang spelling, nvcc passes its ``-Xcompiler=`` one (``$NVCCPREFIXMAPS``).
    The link writes ``.ggml-<backend>.so.unverified`` beside the output; it is renamed to the output
    only after verification passes (SCons keeps failed outputs, and the packager and the mirror take
    the output by name). Verification: every asked-for arch present, the entry points exported, every DT_NEEDED found, no undefined symbol that the
    DT_NEEDED closure leaves unresolved. It also defines:
    - the mirror ``$HOME/.llamafile/v/<ver>/ggml-<backend>.so`` (byte-identical copy; HOME from ``env['ENV']``),
    - the alias ``<backend>`` (output + mirror + a check, run on every build of the alias, that WARNs
      when ``$HOME/ggml-<backend>.so`` exists and differs: llamafile's loader may pick it up instead).

``env.SkipBackend(backend, reason) -> None``
    Prints the one ``WARN: <backend> skipped: <reason>`` line of a backend whose toolchain is absent
    and defines its alias empty (``scons <backend>`` then builds nothing instead of "don't know how to
    make"). A backend SConscript returns its result.
"""
from __future__ import annotations

import filecmp
import importlib
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import SCons.Errors
import SCons.Subst
from SCons.Script import Action

from opencoti_build import elfcheck, sources
from opencoti_build.prefix_maps import prefix_maps

CORE_FLAGS: tuple[str, ...] = ("-O2",)  # SharedObject adds -fPIC
CORE_DEFINES: tuple[str, ...] = ("NDEBUG", "GGML_BUILD=1", "GGML_SHARED=1", "GGML_MULTIPLATFORM")
GCC_STATIC_RUNTIME: tuple[str, ...] = ("-static-libstdc++", "-static-libgcc")
CORE_LIST = "GGML_CORE_SOURCES in site_scons/opencoti_build/sources.py"

_core_objects: dict[tuple[str, str], list[Any]] = {}


def unverified_path(target_path: str) -> str:
    """Where the link writes before verification: hidden, beside the output (same filesystem, atomic rename)."""
    head, tail = os.path.split(target_path)
    return os.path.join(head, f".{tail}.unverified")


def default_entry_points(backend: str) -> tuple[str, str]:
    """The symbols llamafile's loader requires of ggml-<backend>.so."""
    return f"ggml_backend_{backend}_init", f"ggml_backend_{backend}_reg"


def _resolve_probe(probe: str) -> Callable[[str], Iterable[str]]:
    module, _, function = probe.partition(":")
    return getattr(importlib.import_module(module), function)


def verification_error(path: str, backend: str, archs: Sequence[str], arch_probe: str | None,
                       lib_dirs: Sequence[str] = (), stub_dirs: Sequence[str] = (),
                       required: Sequence[str] = ()) -> str | None:
    """The first reason the linked DSO at ``path`` must not be published, or None."""
    name = f"ggml-{backend}.so"
    if archs and arch_probe:
        present = set(_resolve_probe(arch_probe)(path))
        absent = [a for a in archs if a not in present]
        if absent:
            return (f"{name} lacks the requested architecture {absent[0]} "
                    f"(it holds: {', '.join(sorted(present)) or 'none'}); the toolkit dropped it silently")
    import lief  # only needed once a DSO exists

    binary = lief.ELF.parse(path)
    exported = {s.name for s in binary.dynamic_symbols if s.exported}
    for symbol in required or default_entry_points(backend):
        if symbol not in exported:
            return f"{name} does not export {symbol}; llamafile cannot load it (is the backend source compiled in?)"
    report = elfcheck.link_report(path, lib_dirs, stub_dirs)
    if report.missing_libraries:
        return (f"{name} needs {report.missing_libraries[0]}, found in no library directory; "
                f"install it or stop linking it")
    if report.unresolved:
        more = f" (and {len(report.unresolved) - 1} more)" if len(report.unresolved) > 1 else ""
        return (f"{name}: undefined symbol {report.unresolved[0]}{more} provided by no DT_NEEDED library; "
                f"add the ggml core source defining it to {CORE_LIST}")
    return None


def _verify_and_publish(target: list[Any], source: list[Any], env: Any) -> None:
    final = target[0].get_abspath()
    staged = unverified_path(final)
    error = verification_error(staged, env["DSO_BACKEND"], list(env["DSO_ARCHS"]), env["DSO_ARCH_PROBE"] or None,
                               list(env["DSO_LIB_DIRS"]), list(env["DSO_STUB_DIRS"]), list(env["DSO_ENTRY_POINTS"]))
    if error is not None:
        os.remove(staged)
        raise SCons.Errors.BuildError(node=target[0], errstr=error)
    os.chmod(staged, 0o755)
    os.replace(staged, final)


def _mirror(target: list[Any], source: list[Any], env: Any) -> None:
    """Copy byte-identically, atomically: the runtime may be reading the old mirror right now."""
    dest = target[0].get_abspath()
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    staged = unverified_path(dest)
    shutil.copyfile(source[0].get_abspath(), staged)
    os.chmod(staged, 0o755)
    os.replace(staged, dest)


def _warn_shadow(target: list[Any], source: list[Any], env: Any) -> None:
    built = source[0].get_abspath()
    shadow = os.path.join(env["ENV"]["HOME"], os.path.basename(built))
    if os.path.isfile(shadow) and not filecmp.cmp(shadow, built, shallow=False):
        sys.stderr.write(f"WARN: {shadow} differs from the {os.path.basename(built)} just built and may be loaded "
                         f"instead of it; delete it or copy the new one over it\n")


def gcc_prefix_maps(env: Any) -> list[Any]:
    """gcc's -ffile-prefix-map flags for the checkout, SRC and BUILD_DIR (opencoti_build.prefix_maps)."""
    return [SCons.Subst.Literal(flag) for flag in prefix_maps(env.Dir("#").abspath, env["SRC"], env["BUILD_DIR"])]


def ggml_core_objects(env: Any) -> list[Any]:
    key = (env["SRC"], env["BUILD_DIR"])
    if key not in _core_objects:
        core = env.Clone(CC="gcc", CXX="g++")
        for tool in ("gcc", "g++"):
            core.Tool(tool)
        core.Replace(
            CCFLAGS=list(CORE_FLAGS) + gcc_prefix_maps(env), CFLAGS=["-std=gnu11"], CXXFLAGS=["-std=gnu++17"],
            CPPDEFINES=list(CORE_DEFINES),
            CPPPATH=[os.path.join(env["SRC"], d) for d in sources.GGML_CORE_INCLUDES],
        )
        objects = []
        for rel in sources.core_sources(env["SRC"]):
            # keep the extension in the object name: ggml.c and ggml.cpp both exist upstream
            obj = core.SharedObject(os.path.join(env["BUILD_DIR"], "backends", "ggml-core", rel + ".o"),
                                    os.path.join(env["SRC"], rel))
            if hasattr(core, "CompileDbEntry"):  # the compiledb tool is loaded
                core.CompileDbEntry(obj[0], obj[0].sources[0], "SHCCCOM" if rel.endswith(".c") else "SHCXXCOM")
            objects.extend(obj)
        _core_objects[key] = objects
    return list(_core_objects[key])


def _probe_name(arch_probe: str | Callable[[str], Iterable[str]] | None) -> str:
    # a 'module:function' string keeps the action signature stable and picklable
    if arch_probe is None or isinstance(arch_probe, str):
        return arch_probe or ""
    return f"{arch_probe.__module__}:{arch_probe.__qualname__}"


def ggml_dso(env: Any, backend: str, objects: Sequence[Any], *, linker: str, link_flags: Sequence[str] = (),
             libs: Sequence[str] = (), static_runtime: Sequence[str] = GCC_STATIC_RUNTIME,
             archs: Sequence[str] = (), arch_probe: str | Callable[[str], Iterable[str]] | None = None,
             lib_dirs: Sequence[str] = (), stub_dirs: Sequence[str] = (),
             entry_points: Sequence[str] | None = None, link_prefix_maps: Sequence[Any] | None = None) -> Any:
    version = env["LLAMAFILE_VERSION"]
    name = f"ggml-{backend}.so"
    output = os.path.join(env["BACKEND_DIST_DIR"], "llamafile", backend, version, name)
    link = Action("$DSOLINKCOM", "$DSOLINKCOMSTR")
    verify = Action(_verify_and_publish, "Verifying $TARGET",
                    varlist=["DSO_BACKEND", "DSO_ARCHS", "DSO_ARCH_PROBE", "DSO_LIB_DIRS", "DSO_STUB_DIRS",
                             "DSO_ENTRY_POINTS"])
    dso = env.Command(
        output, list(objects) + ggml_core_objects(env), [link, verify],
        DSOLINKCOM="$DSO_LINKER $DSO_LINKFLAGS $DSO_PREFIXMAPS $DSO_STATIC_RUNTIME "
                   "-o ${TARGET.dir}/.${TARGET.file}.unverified $SOURCES $DSO_LIBS",
        DSO_BACKEND=backend, DSO_LINKER=linker, DSO_LINKFLAGS=list(link_flags), DSO_LIBS=list(libs),
        DSO_STATIC_RUNTIME=list(static_runtime), DSO_ARCHS=list(archs), DSO_ARCH_PROBE=_probe_name(arch_probe),
        DSO_LIB_DIRS=list(lib_dirs), DSO_STUB_DIRS=list(stub_dirs), DSO_ENTRY_POINTS=list(entry_points or ()),
        DSO_PREFIXMAPS=list(gcc_prefix_maps(env) if link_prefix_maps is None else link_prefix_maps),
    )
    mirror = env.Command(
        os.path.join(env["ENV"]["HOME"], ".llamafile", "v", version, name), dso,
        Action(_mirror, "Mirroring $SOURCE to $TARGET"),
    )
    env.NoCache(mirror)  # a second copy of the DSO in the cache buys nothing
    shadow_check = env.Alias(f"{backend}-shadow-check", dso, Action(_warn_shadow, None))
    env.AlwaysBuild(shadow_check)
    env.Alias(backend, [dso, mirror, shadow_check])
    return dso[0]


def skip_backend(env: Any, backend: str, reason: str) -> None:
    sys.stderr.write(f"WARN: {backend} skipped: {reason}\n")
    env.Alias(backend, [])


def generate(env: Any) -> None:
    env.AddMethod(gcc_prefix_maps, "GccPrefixMaps")
    env.AddMethod(ggml_core_objects, "GgmlCoreObjects")
    env.AddMethod(ggml_dso, "GgmlDso")
    env.AddMethod(skip_backend, "SkipBackend")


def exists(env: Any) -> bool:
    return shutil.which("gcc") is not None and shutil.which("g++") is not None
