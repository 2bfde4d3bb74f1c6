"""SCons tool ``glslc``: GLSL compute shaders -> SPIR-V, and SPIR-V embedded into C++.

Nothing runs when the tool is loaded: glslc is found by ``opencoti_build.gpu.toolchains.vulkan.probe``,
called only for a requested Vulkan build; ``env.UseToolchain(found)`` then points the environment at it.

- ``env.Spirv(target, source, GLSLDEFINES=[...])``: one ``.comp`` -> one ``.spv`` with
  ``glslc -fshader-stage=compute --target-env=vulkan1.2 -O`` and a ``-D`` per define.
  ``#include``s are followed by a scanner over the source's directory and ``GLSLPATH``, so editing
  a shared ``.glsl`` rebuilds exactly the shaders that include it, directly or not.
- ``env.SpirvVariants(directory, source, variants)``: one ``.spv`` per variant name
  (``{name: defines}``), ``directory/<name>.spv`` (names must differ across a build).
- ``env.EmbedSpirv(cpp, hpp, spvs)``: C++ defining ``unsigned char <name>_data[]`` and
  ``unsigned int <name>_len`` for each ``<name>.spv``, and the header declaring them, as
  vulkan-shaders-gen does (``opencoti_build.formats.spirv.c_array_source``). Output depends only on the
  names and bytes (sorted by name).

Construction variables read: ``GLSLCFLAGS``, ``GLSLDEFINES``, ``GLSLPATH``, ``GLSLCCOMSTR``. Set by
``UseToolchain``: ``GLSLC``, ``BACKEND_TOOLCHAIN`` (for the manifest). Set by the tool: ``GLSLCCOM``,
``_GLSLDEFFLAGS``, ``_GLSLINCFLAGS``, ``SPIRV_NAMES`` (per EmbedSpirv call), and defaults for the rest.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import SCons.Action
import SCons.Errors
from SCons.Builder import Builder
from SCons.Environment import Base as Environment

from opencoti_build.formats import spirv
from opencoti_build.gpu import toolchains
from opencoti_build.gpu.toolchains import vulkan
from opencoti_scons.include_scanner import include_scanner

BASE_FLAGS = ("-fshader-stage=compute", "--target-env=vulkan1.2", "-O")


def use_toolchain(env: Environment, found: vulkan.GlslcToolchain) -> None:
    """Compile shaders with ``found`` (from ``opencoti_build.gpu.toolchains.vulkan.probe``)."""
    env["GLSLC"] = found.glslc
    env["BACKEND_TOOLCHAIN"] = found


def _embed(target, source, env) -> None:
    cpp, hpp = (Path(t.get_abspath()) for t in target)
    modules = {Path(s.get_abspath()).stem: Path(s.get_abspath()).read_bytes() for s in source}
    for path, text in ((hpp, spirv.c_array_header(list(modules))), (cpp, spirv.c_array_source(modules, hpp.name))):
        staged = path.with_name(f".{path.name}.tmp")
        staged.write_text(text)
        os.replace(staged, path)


def _embed_spirv(env: Environment, cpp: str, hpp: str, spvs: Sequence) -> list:
    """``cpp`` and ``hpp`` from the ``.spv`` nodes/paths ``spvs``; each stem must be a C identifier."""
    nodes = env.arg2nodes(list(spvs), env.File)
    names = [Path(str(n)).stem for n in nodes]
    bad = [n for n in names if not spirv.is_c_identifier(n)]
    if bad:
        raise SCons.Errors.UserError(f"SPIR-V name {bad[0]!r} is not a C identifier; rename its variant")
    return env._EmbedSpirv([cpp, hpp], nodes, SPIRV_NAMES=sorted(names))


def _spirv_variants(env: Environment, directory: str, source, variants: Mapping[str, Sequence[str]]) -> list:
    """One ``directory/<name>.spv`` per variant of ``source``, each with its own defines."""
    nodes = []
    for name, defines in sorted(variants.items()):
        nodes.extend(env.Spirv(os.path.join(str(directory), f"{name}.spv"), source, GLSLDEFINES=list(defines)))
    return nodes


def generate(env: Environment) -> None:
    env.SetDefault(
        GLSLC="glslc",
        GLSLCFLAGS=list(BASE_FLAGS),
        GLSLDEFINES=[],
        GLSLPATH=[],
        _GLSLDEFFLAGS="${_concat('-D', GLSLDEFINES, '', __env__)}",
        _GLSLINCFLAGS="${_concat('-I', GLSLPATH, '', __env__, RDirs, TARGET, SOURCE)}",
        GLSLCCOM="$GLSLC $GLSLCFLAGS $_GLSLDEFFLAGS $_GLSLINCFLAGS -o $TARGET $SOURCE",
    )
    scanner = include_scanner("GlslScanner", (".comp", ".glsl"), quote_vars=(), dir_vars=("GLSLPATH",))
    env["BUILDERS"]["Spirv"] = Builder(
        action=SCons.Action.Action("$GLSLCCOM", "$GLSLCCOMSTR"),
        suffix=".spv", src_suffix=".comp", source_scanner=scanner, single_source=True,
    )
    env["BUILDERS"]["_EmbedSpirv"] = Builder(
        action=SCons.Action.Action(_embed, "Embedding SPIR-V into $TARGET", varlist=["SPIRV_NAMES"]),
    )
    env.AddMethod(_spirv_variants, "SpirvVariants")
    env.AddMethod(_embed_spirv, "EmbedSpirv")
    env.AddMethod(use_toolchain, "UseToolchain")


def exists(env: Environment) -> bool:
    """Whether a glslc is where the build would look (``VULKAN_SDK``, PATH)."""
    return toolchains.found(vulkan.find_glslc, env)
