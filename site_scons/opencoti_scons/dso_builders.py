"""The GPU backend DSOs' link, verification and publication, and the ggml core compiled into each (the SCons side of
site_tools/ggml_dso.py, over opencoti_build.gpu.backends and dso_verification)."""
from __future__ import annotations

import filecmp
import os
import sys
from collections.abc import Sequence
from typing import Any

import SCons.Errors
import SCons.Subst
from SCons.Script import Action

from opencoti_build import files
from opencoti_build.cache import launchers
from opencoti_build.cosmo.prefix_maps import gcc_flags
from opencoti_build.gpu import backends, dso_verification
from opencoti_build.report import summary
from opencoti_build.tree import sources
from opencoti_scons.compile_maps import compile_maps, env_path_maps
from opencoti_scons.progress import count_as

CORE_FLAGS: tuple[str, ...] = ("-O2",)  # SharedObject adds -fPIC
GCC_STATIC_RUNTIME: tuple[str, ...] = ("-static-libstdc++", "-static-libgcc")


def _verify_and_publish(target: list[Any], source: list[Any], env: Any) -> None:
    final = target[0].get_abspath()
    staged = dso_verification.staged_path(final)
    error = dso_verification.verification_error(staged, backends.get(env["DSO_BACKEND"]), list(env["DSO_ARCHS"]),
                                                list(env["DSO_LIB_DIRS"]), list(env["DSO_STUB_DIRS"]))
    if error is not None:
        os.remove(staged)
        raise SCons.Errors.BuildError(node=target[0], errstr=error)
    dso_verification.publish(staged, final)


def _mirror(target: list[Any], source: list[Any], env: Any) -> None:
    dso_verification.copy_atomically(source[0].get_abspath(), target[0].get_abspath())


def shadow_signature(path: str) -> str:
    """What the shadow check's run depends on besides the DSO: ``path``'s stat, or that it is absent."""
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}: absent"
    return f"{path}: {' '.join(map(str, files.identity(st)))}"


def _warn_shadow(target: list[Any], source: list[Any], env: Any) -> None:
    built = source[0].get_abspath()
    name = os.path.basename(built)
    shadow = os.path.join(env["ENV"]["HOME"], name)
    findings = []
    if os.path.isfile(shadow) and not filecmp.cmp(shadow, built, shallow=False):
        findings.append(f"WARN: {shadow} differs from the {name} just built and may be loaded instead of it; "
                        "delete it or copy the new one over it\n")
    mirror = env["DSO_UNMIRRORED"]  # where llamafile looks first, left alone without MIRROR=1
    if mirror and os.path.isfile(mirror) and not filecmp.cmp(mirror, built, shallow=False):
        findings.append(f"WARN: {mirror} differs from the {name} just built, and llamafile loads that copy first: "
                        f"build with MIRROR=1 to put this one there, or delete it\n")
    sys.stderr.write("".join(findings))
    with open(target[0].get_abspath(), "w", encoding="utf-8") as out:
        out.write("".join(findings))


def gcc_compile_env(env: Any, **replace: Any) -> Any:
    """A clone that compiles a DSO's C and C++ with the host gcc/g++ (``replace`` set on it): the prefix maps
    after its CCFLAGS (spelled as CCWRAPPER wants them), CCWRAPPER in front, compile-database entries."""
    cc = env.Clone(CC="gcc", CXX="g++")
    for tool in ("gcc", "g++"):
        cc.Tool(tool)
    cc.Replace(**replace, GCC_PATH_MAPS=env_path_maps(env), _GCCCOMPILEMAPS=compile_maps("GCC_PATH_MAPS"))
    cc.Append(CCFLAGS=["$_GCCCOMPILEMAPS"])
    cc.SetDefault(**launchers.construction_vars("", []))
    for com in ("SHCCCOM", "SHCXXCOM"):  # CCWRAPPER before gcc/g++, outside the signature
        cc[com] = launchers.prefixed(cc[com])
    if hasattr(cc, "CompileDbObjectBuilders"):  # the compiledb tool is loaded
        cc.CompileDbObjectBuilders()
    return cc


class GgmlCore:
    """The ggml core every DSO compiles into itself, declared once per run for each (SRC, BUILD_DIR) and shared
    by every backend's link."""

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str], list[Any]] = {}

    def objects(self, env: Any) -> list[Any]:
        key = (env["SRC"], env["BUILD_DIR"])
        if key not in self._objects:
            core = gcc_compile_env(env, CCFLAGS=list(CORE_FLAGS), CFLAGS=["-std=gnu11"], CXXFLAGS=["-std=gnu++17"],
                                   CPPDEFINES=list(backends.DSO_DEFINES),
                                   CPPPATH=[os.path.join(env["SRC"], d) for d in sources.GGML_CORE_INCLUDES])
            objects = []
            for rel in sources.core_sources(env["SRC"]):
                # keep the extension in the object name: ggml.c and ggml.cpp both exist upstream
                objects.extend(core.SharedObject(os.path.join(env["BUILD_DIR"], "backends", "ggml-core", rel + ".o"),
                                                 os.path.join(env["SRC"], rel)))
            self._objects[key] = objects
        return list(self._objects[key])


def ggml_dso(env: Any, spec: backends.Backend, objects: Sequence[Any], *, core: GgmlCore, linker: str,
             link_flags: Sequence[str] = (), libs: Sequence[str] = (),
             static_runtime: Sequence[str] = GCC_STATIC_RUNTIME, archs: Sequence[str] = (),
             lib_dirs: Sequence[str] = (), stub_dirs: Sequence[str] = (),
             link_prefix_maps: Sequence[Any] | None = None) -> Any:
    version = env["LLAMAFILE_VERSION"]
    output = os.path.join(env["BACKEND_DIST_DIR"], "llamafile", spec.name, version, spec.dso_name)
    link = Action("$DSOLINKCOM", "$DSOLINKCOMSTR")
    verify = Action(_verify_and_publish, "Verifying $TARGET",
                    varlist=["DSO_BACKEND", "DSO_ARCHS", "DSO_LIB_DIRS", "DSO_STUB_DIRS"])
    dso = env.Command(
        output, list(objects) + core.objects(env), [link, verify],
        DSOLINKCOM="$DSO_LINKER $DSO_LINKFLAGS $DSO_PREFIXMAPS $DSO_STATIC_RUNTIME -o $DSO_STAGED $SOURCES $DSO_LIBS",
        DSO_STAGED=dso_verification.staged_path(env.File(output).abspath),
        DSO_BACKEND=spec.name, DSO_LINKER=linker, DSO_LINKFLAGS=list(link_flags), DSO_LIBS=list(libs),
        DSO_STATIC_RUNTIME=list(static_runtime), DSO_ARCHS=list(archs),
        DSO_LIB_DIRS=list(lib_dirs), DSO_STUB_DIRS=list(stub_dirs),
        DSO_PREFIXMAPS=list([SCons.Subst.Literal(flag) for flag in gcc_flags(env_path_maps(env))]
                            if link_prefix_maps is None else link_prefix_maps),
    )
    mirror = []
    mirror_path = os.path.join(env["ENV"]["HOME"], ".llamafile", "v", version, spec.dso_name)
    if env["MIRROR"]:  # asked for: two checkouts sharing a HOME would overwrite each other's copies
        mirror = env.Command(mirror_path, dso, Action(_mirror, "Mirroring $SOURCE to $TARGET"))
        env.NoCache(mirror)  # a second copy of the DSO in the cache buys nothing
        count_as(mirror, summary.INSTALLED)  # a copy to where llamafile loads it: not a compile
    # A stray $HOME/ggml-<backend>.so shadows the built one at load time (cuda.sh's old default), and so does,
    # without MIRROR=1, an older ~/.llamafile/v/<ver>/ copy: the first place llamafile loads from. The check
    # runs when the DSO or those files change, so `scons -q` can still find a backend current.
    shadow = os.path.join(env["ENV"]["HOME"], spec.dso_name)
    unmirrored = "" if env["MIRROR"] else mirror_path
    shadow_check = env.Command(
        os.path.join(env["BUILD_DIR"], "backends", f"{spec.name}.shadow-check"),
        [dso, env.Value(shadow_signature(shadow)), *([env.Value(shadow_signature(unmirrored))] if unmirrored else [])],
        Action(_warn_shadow, None), DSO_UNMIRRORED=unmirrored)
    shadow_check[0].attributes.not_a_step = True  # bookkeeping, not counted by the build summary
    env.NoCache(shadow_check)
    env.Alias(spec.name, [dso, *mirror, shadow_check])
    return dso[0]
