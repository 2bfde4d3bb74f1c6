"""A compile command's prefix maps, spelled for the launcher in front of the compiler (CCWRAPPER).

Not a tool: the compiling tools (cosmocc, ggml_dso, native_gcc, nvcc) set ``env["_XMAPS"] =
compile_maps("X_PATH_MAPS")`` and put ``$_XMAPS`` in their compile commands. It expands to the words of
``opencoti_build.cosmo.prefix_maps`` for the ``(OLD, NEW)`` pairs in ``$X_PATH_MAPS``: always the plain
``-ffile-prefix-map=OLD=NEW`` in a signature, and behind ``-Xpreprocessor`` in the command that runs when
the launcher keys on options as written (launchers.MAPS_VIA_PREPROCESSOR_VAR: sccache). Both spellings give
the same objects, so turning CCWRAPPER on or off rebuilds nothing. Links keep the plain spelling.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import SCons.Subst

from opencoti_build.cache import launchers
from opencoti_build.cosmo import prefix_maps

PerTarget = Callable[[Any, Any], list[tuple[str, str]]]


def env_path_maps(env: Any, llamacpp: str | None = None) -> list[tuple[str, str]]:
    """The ``(OLD, NEW)`` prefix-map pairs of ``env``'s checkout, ``$SRC`` and ``$BUILD_DIR`` (and a llama.cpp
    checkout): what every compile and link of the build maps (opencoti_build.cosmo.prefix_maps)."""
    return prefix_maps.path_maps(env.Dir("#").abspath, env.get("SRC"), env.get("BUILD_DIR"), llamacpp)


def compile_maps(maps_var: str, nvcc: bool = False, per_target: PerTarget | None = None) -> Callable[..., list[Any]]:
    """A callable construction variable: the prefix-map words of ``$maps_var`` (gcc's, or nvcc's ``-Xcompiler=``),
    then those of ``per_target(target, env)``'s pairs (last, so they win over the general ones)."""
    spell = prefix_maps.nvcc_flags if nvcc else prefix_maps.gcc_flags

    def words(target: Any, source: Any, env: Any, for_signature: bool) -> list[Any]:
        via = bool(env.get(launchers.MAPS_VIA_PREPROCESSOR_VAR)) and not for_signature
        maps = list(env[maps_var]) + (per_target(target, env) if per_target else [])
        return [SCons.Subst.Literal(word) for word in spell(maps, via)]

    return words
