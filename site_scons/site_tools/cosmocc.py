"""SCons tool: cosmocc fat objects, fat archives and fat program links.

A fat compile writes ``X.o`` and ``.aarch64/X.o`` in one run of the driver; the emitter declares both
as targets of that one action, so SCons cleans, caches and restores the pair together (CacheDir keys
each target and counts a multi-target node a hit only when all its targets come back).

Commands run from argument lists, never through a shell; a failed command leaves neither half of a
pair behind. Every fat object is registered in the compile database by its emitter. The actions and emitters:
opencoti_scons/fat_builders.py.

Builders: FatObject, FatLibrary, FatProgram, ZipStore, Gperf; methods: SayToolchain, FreezeIncludeFlags.

Construction variables read: FAT_TOOLCHAIN (else COSMOCC; set to the toolchain used), SRC, BUILD_DIR (the
prefix maps), IQUOTEPATH, CPPPATH, ISYSTEMPATH, CPPDEFINES, VERBOSE, COMPILEDB_ARCH, SOURCE_DATE_EPOCH,
ZIPSTORE_TREE, ZIPSTORE_PATHS, ENV (its OPENCOTI_FAT_LAUNCHER: CCWRAPPER, which the stand-in
driver runs each half behind; opencoti_build.cache.launchers), CCWRAPPER_MAPS_VIA_PREPROCESSOR. Set where unset: FATCC, FATCXX, FATAR, FATARFLAGS, FATLINK, FATCCFLAGS,
FATCXXFLAGS, FATCPPFLAGS, FAT_TARGET_ARCH, FATEXTRAFLAGS, FATLINKFLAGS, FATLIBS, FAT_PATH_MAPS, FATPREFIXMAPS
(the link's), FATCCCOMSTR,
FATARCOMSTR, FATLINKCOMSTR, CPPDEFPREFIX, CPPDEFSUFFIX (and IQUOTEPATH, CPPPATH, ISYSTEMPATH, CPPDEFINES
empty). Set: FATCCCOM, FATCXXCOM, _FATINCFLAGS, _FATCOMPILEMAPS (opencoti_scons/compile_maps.py), _fat_dir_flags.
"""
from __future__ import annotations

import os
import sys

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Subst
import SCons.Util

from opencoti_build.cache.launchers import FAT_LAUNCHER_ENV
from opencoti_build.cosmo import fatcc
from opencoti_build.cosmo.cosmo_toolchain import DEFAULT_TARGET_ARCH, find_toolchain
from opencoti_build.cosmo.prefix_maps import gcc_flags
from opencoti_build.errors import UserError
from opencoti_build.tree.sources import CXX_SUFFIXES, DEFAULT_CCFLAGS, DEFAULT_CPPFLAGS, DEFAULT_CXXFLAGS
from opencoti_scons.compile_maps import compile_maps, env_path_maps
from opencoti_scons.fat_builders import (
    dir_flags,
    fat_archive,
    fat_archive_emitter,
    fat_archive_str,
    fat_compile_c,
    fat_compile_cxx,
    fat_compile_str,
    fat_link,
    fat_link_emitter,
    fat_link_str,
    fat_object_emitter,
    freeze_include_flags,
    gperf,
    zip_store,
    zip_store_emitter,
)
from opencoti_scons.include_scanner import include_scanner


def _say_toolchain(env, run) -> None:
    """The toolchain line, said when it changes (``run.note``); the launcher's WARN every run."""
    run.note("toolchain", f"toolchain: {env['FAT_TOOLCHAIN'].describe()}")
    if env["FAT_TOOLCHAIN"].kind != "stand-in" and env["ENV"].get(FAT_LAUNCHER_ENV):
        print("WARN: CCWRAPPER does not reach cosmocc's fat compiles (its driver takes no launcher; "
              "docs/scale.md says how to wrap its compilers); the other compiles use it", file=sys.stderr)


def generate(env) -> None:
    env.Tool("compiledb")
    # host/SConscript chooses it (opencoti_build.config.provision); anything else cloning the tool names one.
    toolchain = env.get("FAT_TOOLCHAIN") or find_toolchain(env.get("COSMOCC") or "stand-in")
    env["FAT_TOOLCHAIN"] = toolchain
    env.SetDefault(
        FATCC=toolchain.cc, FATCXX=toolchain.cxx, FATAR=toolchain.ar, FATLINK=toolchain.cxx,
        FATARFLAGS=["rcsD"],  # D: deterministic (no dates, uids or modes), s: indexed by ar itself
        FATCCFLAGS=list(DEFAULT_CCFLAGS), FATCXXFLAGS=list(DEFAULT_CXXFLAGS), FATCPPFLAGS=list(DEFAULT_CPPFLAGS),
        FAT_TARGET_ARCH=list(DEFAULT_TARGET_ARCH[toolchain.kind]), FATEXTRAFLAGS=[],
        IQUOTEPATH=[], CPPPATH=[], ISYSTEMPATH=[], CPPDEFINES=[], FATLINKFLAGS=[], FATLIBS=[],
        CPPDEFPREFIX="-D", CPPDEFSUFFIX="",
    )
    env["_fat_dir_flags"] = dir_flags
    env["_FATINCFLAGS"] = ("${_fat_dir_flags('-iquote', IQUOTEPATH)} ${_fat_dir_flags('-I', CPPPATH)} "
                           "${_fat_dir_flags('-isystem', ISYSTEMPATH)}")
    # -ffile-prefix-map for the checkout, SRC and BUILD_DIR (opencoti_build.cosmo.prefix_maps): both halves of
    # every compile and the link, whatever a package's recipe resets; outputs then name no absolute path.
    env.SetDefault(FAT_PATH_MAPS=env_path_maps(env))
    env.SetDefault(FATPREFIXMAPS=[SCons.Subst.Literal(flag) for flag in gcc_flags(env["FAT_PATH_MAPS"])])
    # A launcher reaches the stand-in's halves only (FAT_LAUNCHER_ENV): they take the maps as it wants them
    env["_FATCOMPILEMAPS"] = compile_maps("FAT_PATH_MAPS") if toolchain.kind == "stand-in" else "$FATPREFIXMAPS"
    common = "$FATCPPFLAGS $_FATINCFLAGS $_CPPDEFFLAGS $FATCCFLAGS $_FATCOMPILEMAPS"
    # The short lines (VERBOSE=1 prints the commands instead: the *_str functions above).
    env.SetDefault(FATCCCOMSTR="FATCC ${TARGETS[0]} (+ .aarch64)", FATARCOMSTR="FATAR ${TARGETS[0]} (+ .aarch64)",
                   FATLINKCOMSTR="FATLINK ${TARGETS[0]} (+ .com.dbg, .aarch64.elf)")
    env["FATCCCOM"] = f"$FATCC {common} $FATEXTRAFLAGS $FAT_TARGET_ARCH -c -o ${{TARGETS[0]}} $SOURCE"
    env["FATCXXCOM"] = f"$FATCXX {common} $FATCXXFLAGS $FATEXTRAFLAGS $FAT_TARGET_ARCH -c -o ${{TARGETS[0]}} $SOURCE"

    # One action per language, each signed by its own command only (half the substitution per object).
    c_action = SCons.Action.Action(fat_compile_c, fat_compile_str, varlist=["FATCCCOM"])
    cxx_action = SCons.Action.Action(fat_compile_cxx, fat_compile_str, varlist=["FATCXXCOM"])
    env["BUILDERS"]["FatObject"] = SCons.Builder.Builder(
        action={".c": c_action, **{suffix: cxx_action for suffix in CXX_SUFFIXES}}, emitter=fat_object_emitter,
        source_scanner=include_scanner("FatIncludeScanner"),
        suffix=".o", single_source=True)
    env["BUILDERS"]["FatLibrary"] = SCons.Builder.Builder(
        action=SCons.Action.Action(fat_archive, fat_archive_str, varlist=["FATAR", "FATARFLAGS"]),
        emitter=fat_archive_emitter)
    env["BUILDERS"]["FatProgram"] = SCons.Builder.Builder(
        action=SCons.Action.Action(fat_link, fat_link_str,
                                   varlist=["FATLINK", "FATLINKFLAGS", "FATLIBS", "FATPREFIXMAPS"]),
        emitter=fat_link_emitter)
    # The thin binary's own zip store (opencoti_build.tree.zip_sources): ZipStore(out, [linked, *tree files]).
    env["BUILDERS"]["ZipStore"] = SCons.Builder.Builder(
        action=SCons.Action.Action(zip_store, "ZIPSTORE ${TARGETS[0]} (${len(ZIPSTORE_PATHS)} /zip/ sources)",
                                   varlist=["ZIPSTORE_PATHS", "SOURCE_DATE_EPOCH"]),
        emitter=zip_store_emitter)
    env["BUILDERS"]["Gperf"] = SCons.Builder.Builder(
        action=SCons.Action.Action(gperf, "GPERF $TARGET"),
        suffix=".c", src_suffix=".gperf", single_source=True)
    env.AddMethod(_say_toolchain, "SayToolchain")
    env.AddMethod(freeze_include_flags, "FreezeIncludeFlags")


def exists(env) -> bool:
    """The toolchain's fat drivers and ar are there, and, for the stand-in, the gcc pair it drives."""
    try:
        toolchain = env.get("FAT_TOOLCHAIN") or find_toolchain(env.get("COSMOCC") or "stand-in")
    except UserError:
        return False
    programs = [toolchain.cc, toolchain.cxx, toolchain.ar]
    if toolchain.kind == "stand-in":
        programs += [c for compilers in fatcc.COMPILERS.values() for c in compilers.values()] + list(fatcc.ARCHIVERS.values())
    return all(env.WhereIs(p) or os.access(p, os.X_OK) for p in programs)
