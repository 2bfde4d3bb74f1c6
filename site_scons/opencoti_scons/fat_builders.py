"""The actions and emitters of the cosmocc tool's builders (site_tools/cosmocc.py): fat compiles, archives and links,
gperf and the thin binary's zip store.

A fat compile writes ``X.o`` and ``.aarch64/X.o`` in one run of the driver; the emitter declares both as targets of
that one action, so SCons cleans, caches and restores the pair together. Commands run from argument lists, never
through a shell; a failed command leaves neither half of a pair behind. Every fat object is registered in the
compile database (opencoti_scons/compiledb.py) by its emitter.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import SCons.Action
import SCons.Builder
import SCons.Errors
import SCons.Subst
import SCons.Util

from opencoti_build.cache.launchers import FAT_LAUNCHER_ENV
from opencoti_build.cosmo import fatcc
from opencoti_build.cosmo.cosmo_toolchain import missing_output_message, runnable_argv
from opencoti_build.cosmo.prefix_maps import remap
from opencoti_build.errors import UserError
from opencoti_build.incremental import build_lock
from opencoti_build.tree import zip_sources
from opencoti_build.tree.sources import CXX_SUFFIXES
from opencoti_scons.compile_maps import env_path_maps


def dir_flags(flag: str, dirs) -> list:
    # Literal: a path is an argument, never re-substituted by SCons ('$' or spaces stay as they are).
    out = []
    for d in dirs or ():
        out += [flag, SCons.Subst.Literal(str(d))]
    return out


def _is_cxx(source) -> bool:
    return str(source).endswith(CXX_SUFFIXES)


def _argv(env, command_var: str, target, source) -> list[str]:
    lines = env.subst_list("$" + command_var, SCons.Subst.SUBST_CMD, target=target, source=source)
    return [str(arg) for arg in lines[0]] if lines else []


def _remove(paths) -> None:
    for path in paths:
        try:
            os.unlink(str(path))
        except FileNotFoundError:
            pass


def _run_argv(target, source, env, command_var: str) -> int:
    argv = _argv(env, command_var, target, source)
    proc = subprocess.run(argv, env=env["ENV"], pass_fds=build_lock.held_fds())
    if proc.returncode != 0:
        _remove(target)  # neither half of a pair may be taken as up to date later
        return proc.returncode
    missing = [str(t) for t in target if not os.path.exists(str(t))]
    if missing:  # a driver that honours no fat contract: keep (and cache) no half pair
        _remove(target)
        raise SCons.Errors.BuildError(node=target[0], errstr=missing_output_message(
            env["FAT_TOOLCHAIN"], str(source[0]), missing[0]))
    return 0


def fat_compile_c(target, source, env):
    return _run_argv(target, source, env, "FATCCCOM")


def fat_compile_cxx(target, source, env):
    return _run_argv(target, source, env, "FATCXXCOM")


def fat_compile_str(target, source, env):
    """``$FATCCCOMSTR``; with VERBOSE, the driver's line and the two compiler commands it runs."""
    if not env.get("VERBOSE"):
        return env.subst("$FATCCCOMSTR", target=target, source=source)
    cxx = _is_cxx(source[0])
    argv = _argv(env, "FATCXXCOM" if cxx else "FATCCCOM", target, source)
    driver = "cosmoc++" if cxx else "cosmocc"
    toolchain = env["FAT_TOOLCHAIN"]
    try:
        if toolchain.kind == "stand-in":
            launcher = env["ENV"].get(FAT_LAUNCHER_ENV)  # CCWRAPPER: the driver runs each half behind it
            halves = {arch: ([launcher] if launcher else []) + half
                      for arch, half in fatcc.compile_commands(driver, argv[1:]).items()}
        else:  # cosmocc's own driver: its two compilers, as it calls them
            halves = {arch: fatcc.half_compile_command(driver, argv[1:], arch, toolchain.compiler(arch, cxx))
                      for arch in fatcc.ARCHES}
    except fatcc.FatError:
        halves = {}  # the driver will refuse it and say why
    return "\n".join([" ".join(argv)] + [f"  [{arch}] " + " ".join(half) for arch, half in halves.items()])


def _fat_archive_argvs(target, source, env, staged: dict | None = None) -> list[list[str]]:
    """The two ``ar`` commands of a fat archive (x86-64 members, then their .aarch64 twins)."""
    members = _x86_inputs(source)
    return [[*runnable_argv([env.subst("$FATAR")]), *_argv(env, "FATARFLAGS", target, source), (staged or {}).get(str(out), str(out)), *inputs]
            for out, inputs in ((target[0], members), (target[1], [fatcc.twin(m) for m in members]))]


def fat_archive_str(target, source, env):
    if not env.get("VERBOSE"):
        return env.subst("$FATARCOMSTR", target=target, source=source)
    return "\n".join(" ".join(argv) for argv in _fat_archive_argvs(target, source, env))


def _fat_link_argv(target, source, env) -> list[str]:
    # Archives are searched once, in order: a group lets their cross references resolve.
    return [env.subst("$FATLINK"), *_argv(env, "FATLINKFLAGS", target, source),
            *_argv(env, "FATPREFIXMAPS", target, source), "-o", str(target[0]),
            "-Wl,--start-group", *_x86_inputs(source), "-Wl,--end-group", *_argv(env, "FATLIBS", target, source)]


def fat_link_str(target, source, env):
    if not env.get("VERBOSE"):
        return env.subst("$FATLINKCOMSTR", target=target, source=source)
    return " ".join(_fat_link_argv(target, source, env))


def freeze_include_flags(env) -> None:
    """Expand the -iquote/-I/-isystem flags once for this env instead of once per object signature."""
    env["_FATINCFLAGS"] = (dir_flags("-iquote", env["IQUOTEPATH"]) + dir_flags("-I", env["CPPPATH"])
                           + dir_flags("-isystem", env["ISYSTEMPATH"]))


def fat_object_emitter(target, source, env):
    x86 = target[0]
    cxx = _is_cxx(source[0])
    driver = "cosmoc++" if cxx else "cosmocc"
    arch = env.get("COMPILEDB_ARCH") or "x86_64"  # the half clangd is shown (aarch64 for ARM code)
    compiler = env["FAT_TOOLCHAIN"].compiler(arch, cxx)
    env.CompileDbEntry(x86, source[0], "FATCXXCOM" if cxx else "FATCCCOM",
                       lambda argv: fatcc.half_compile_command(driver, argv[1:], arch, compiler))
    targets = [x86, x86.dir.Dir(".aarch64").File(x86.name)]
    flags = env.subst("$FATCCFLAGS $FATCXXFLAGS $FATEXTRAFLAGS" if cxx else "$FATCCFLAGS $FATEXTRAFLAGS").split()
    if env["FAT_TOOLCHAIN"].objects_follow_code(flags) and hasattr(env, "DecidedByCode"):
        env.DecidedByCode(targets)  # a comment edit of its sources compiles nothing (site_tools/code_decider.py)
    return targets, source


def _twin_sources_emitter(target, source, env):
    """Links and archives read both halves: depend on every twin so a missing one is rebuilt."""
    twins = []
    for node in source:
        path = str(node)
        if path.endswith((".o", ".a")) and "/.aarch64/" not in path:
            twins.append(node.dir.Dir(".aarch64").File(node.name))
    return target, list(source) + twins


def _x86_inputs(source) -> list[str]:
    return [str(s) for s in source if "/.aarch64/" not in str(s)]


def fat_archive(target, source, env):
    # ar r updates in place and leaves its temporary beside the archive when killed: each half is
    # written from empty in the build's scratch dir (BUILD_DIR/tmp, swept by every run) and renamed.
    scratch = tempfile.mkdtemp(dir=env["ENV"]["TMPDIR"])
    try:
        staged = {str(out): os.path.join(scratch, f"{i}-{out.name}") for i, out in enumerate(target[:2])}
        for out, argv in zip(target[:2], _fat_archive_argvs(target, source, env, staged)):
            status = subprocess.run(argv, env=env["ENV"], pass_fds=build_lock.held_fds()).returncode
            if status != 0:
                _remove(target)
                return status  # as the archiver said it (a Ctrl-C shows as one)
            os.makedirs(os.path.dirname(str(out)), exist_ok=True)
            os.replace(staged[str(out)], str(out))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def fat_archive_emitter(target, source, env):
    target, source = _twin_sources_emitter(target, source, env)
    return [target[0], target[0].dir.Dir(".aarch64").File(target[0].name)], source


def fat_link_emitter(target, source, env):
    target, source = _twin_sources_emitter(target, source, env)
    out = target[0]
    return [out, out.dir.File(out.name + ".com.dbg"), out.dir.File(out.name + ".aarch64.elf")], source


def fat_link(target, source, env):
    argv = _fat_link_argv(target, source, env)
    proc = subprocess.run(argv, env=env["ENV"], pass_fds=build_lock.held_fds())
    if proc.returncode != 0:
        _remove(target)
    return proc.returncode


def gperf(target, source, env):
    # gperf's output names its command line and, in #line, its input: reading the table from stdout
    # keeps the output path (BUILD_DIR) out, and the input is renamed as the prefix maps name it
    # (src/...), so the generated C is the same wherever the checkout and SRC live.
    given = str(source[0])
    proc = subprocess.run(["gperf", given], env=env["ENV"], capture_output=True, pass_fds=build_lock.held_fds())
    if proc.returncode != 0:
        print(proc.stderr.decode(errors="replace"), end="")
        return proc.returncode
    maps = env_path_maps(env)
    text = proc.stdout.replace(given.encode(), remap(given, maps).encode())
    with open(str(target[0]), "wb") as fh:  # a killed write leaves a file its record does not describe
        fh.write(text)
    return 0


def zip_store_emitter(target, source, env):
    """Targets: the binary and the linker's companions; sources: the linked three, then the tree files."""
    out, linked = target[0], source[0]
    companions = [out.dir.File(out.name + s) for s in zip_sources.COMPANIONS]
    return [out, *companions], [linked, *(linked.dir.File(linked.name + s) for s in zip_sources.COMPANIONS), *source[1:]]


def zip_store(target, source, env):
    try:
        zip_sources.write_store(str(source[0]), env["ZIPSTORE_TREE"], list(env["ZIPSTORE_PATHS"]), str(target[0]),
                                epoch=int(env["SOURCE_DATE_EPOCH"]))
    except (UserError, OSError) as exc:
        _remove(target)
        raise SCons.Errors.BuildError(errstr=str(exc)) from exc
    return 0
