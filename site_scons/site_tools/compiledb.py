"""SCons tool: compile_commands.json for every translation unit, whatever builder compiles it, always current.

SCons' own compilation_db only knows its built-in Object builders; here every compiling builder
registers its translation units from its emitter, as compilation_db does: a tool's own builder adds
``object_emitter(command_vars, transform)`` to its emitters (or calls ``env.CompileDbEntry(target,
source, command_var, transform)`` from its emitter), and ``env.CompileDbObjectBuilders()`` makes an
env's SCons StaticObject/SharedObject register their C and C++ compiles.
After every part is read, ``env.CompileDbFinish()`` makes the database node depend on the entries'
content (a Value of their hash): a flag change changes the node's input, so it is rebuilt. Expanding
the entries costs about a third of a run that reads the SConscripts, so when the reading is the last
run's (only sources or headers changed: opencoti_build.null_build.carry_over) the last digest is
reused and the entries are expanded only if the file has to be written. It is and it is never taken from CacheDir (NoCache: its entries name this checkout's paths). Every
build that compiles also builds it (as Meson and CMake's export do); ``COMPILEDB=`` empty turns it off.
The rules for entries (one per file, clang arguments for GPU sources) are opencoti_build.compdb's.

Construction variables read: COMPILEDB (the file; empty: none), FILE (`scons compile`), and each entry's
command variable (FATCCCOM, SHCXXCOM, NVCCCOM, ...) in the env that registered it. Sets: none.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import SCons.Action
import SCons.Builder
import SCons.Subst
from SCons.Script import BUILD_TARGETS, COMMAND_LINE_TARGETS, Default

from opencoti_build import buildvars, compdb, errors, launchers, null_build, tempfiles
from opencoti_build.sources import CXX_SUFFIXES

# (env, target, source, command variable, transform of the argument list), in registration order
_ENTRIES: list[tuple[object, object, object, str, Callable[[list[str]], list[str]] | None]] = []
_STATE: dict[str, list[dict]] = {}
_MEMO_KEY = "compiledb digest"
_NO_ENTRIES = hashlib.sha256(compdb.render([]).encode()).hexdigest()

# Targets that compile nothing: the database is left as it is.
NOT_COMPILING = frozenset(("apply", "reset", "verify", "compile"))  # compile: that file's objects, nothing else


def _add_entry(env, target, source, command_var: str, transform: Callable[[list[str]], list[str]] | None = None) -> None:
    source = env.File(source) if isinstance(source, str) else source
    _ENTRIES.append((env, target, source, command_var, transform))  # expanded only when the database is on


def object_emitter(command_vars: Mapping[str, str],
                   transform: Callable[[list[str]], list[str]] | None = None) -> Callable[..., Any]:
    """An emitter that registers each object (its first target and source) with the command variable of
    its source's suffix (``{".c": "CCCOM", ".cpp": "CXXCOM", ...}``); it changes neither list. The env
    must have this tool (a tool importing this module has a second copy of it: the entries are the tool's)."""
    def emitter(target, source, env):
        env.CompileDbEntry(target[0], source[0], command_vars[source[0].get_suffix()], transform)
        return target, source
    return emitter


# SCons' object builders: builder name -> (command variable of C, of C++)
OBJECT_BUILDERS: Mapping[str, tuple[str, str]] = {"StaticObject": ("CCCOM", "CXXCOM"),
                                                  "SharedObject": ("SHCCCOM", "SHCXXCOM")}


def _object_builders(env) -> None:
    """This env's StaticObject and SharedObject register their C and C++ compiles (once per builder)."""
    for name, (c_com, cxx_com) in OBJECT_BUILDERS.items():
        builder = env["BUILDERS"].get(name)
        if builder is None or getattr(builder, "_compiledb_registers", False):
            continue
        emitter = object_emitter({".c": c_com, **{s: cxx_com for s in CXX_SUFFIXES}})
        for suffix in (".c", *CXX_SUFFIXES):
            if suffix in builder.emitter:
                builder.emitter[suffix] = SCons.Builder.ListEmitter([builder.emitter[suffix], emitter])
        builder._compiledb_registers = True


def _made_from(source) -> set[str]:
    """The real paths a registered source stands for: itself, and what generated it (a .gperf)."""
    paths = {os.path.realpath(source.abspath)}
    if source.has_builder():
        paths |= {os.path.realpath(s.abspath) for s in source.sources if hasattr(s, "abspath")}
    return paths


def _compile_alias(env, path: str) -> None:
    """`scons compile FILE=`: every object registered from ``path`` (fat pair, DSO cores), nothing else."""
    objects = [e[1] for e in _ENTRIES if path in _made_from(e[2])]
    if not objects:
        errors.fail(f"FILE={env['FILE']}: no object of this build is made from {path} "
                    "(a header? `scons compile` takes a .c, .cpp, .cu or .gperf the build compiles)")
    env.Alias("compile", objects)


def _entry(env, target, source, command_var, transform) -> dict:
    # without CCWRAPPER's launcher: an IDE wants the compiler as argv[0]
    bare = env.Override(launchers.construction_vars("", []))
    lines = bare.subst_list("$" + command_var, SCons.Subst.SUBST_CMD, target=[target], source=[source])
    arguments = [str(a) for a in lines[0]]
    if transform is not None:
        arguments = transform(arguments)
    return {
        "directory": env.Dir("#").abspath,
        "file": source.abspath,
        "output": target.abspath,
        "arguments": arguments,
    }


def _expanded() -> list[dict]:
    if "entries" not in _STATE:
        _STATE["entries"] = compdb.one_per_file(_entry(*e) for e in _ENTRIES)
    return _STATE["entries"]


def _write_compiledb(target, source, env) -> int:
    path = target[0].get_abspath()  # str() is relative to the top dir: its dirname may be ""
    text = compdb.render(compdb.merged(compdb.read(path), _expanded()))
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if old != text:  # leave clangd's file alone when nothing changed
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tempfiles.remove_stale(os.path.dirname(path), os.path.basename(path))  # a killed run's write of it
        fd, tmp = tempfiles.create(path)  # locked while written; renamed into place whole
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            os.fchmod(fh.fileno(), 0o644)  # mkstemp's 0600 would hide it from an IDE run as another user
            os.replace(tmp, path)
    return 0


def _finish(env) -> None:
    """Create the database node from every registered entry; called once, after every part is read."""
    if "compile" in map(str, COMMAND_LINE_TARGETS):
        _compile_alias(env, buildvars.compile_file(env))
    names = set(map(str, COMMAND_LINE_TARGETS))
    asked = "compiledb" in names
    if not env.get("COMPILEDB"):  # turned off (buildvars.validate refused `scons compiledb` with it empty)
        return
    if names and names <= NOT_COMPILING:
        return  # nothing compiles: no entries expanded, the file left as it is
    # The entries follow from the SConscripts' reading alone: when it is the last run's, so is their digest
    # (opencoti_build.null_build.carry_over), and they are expanded only if the file must be written.
    digest = null_build.remembered(_MEMO_KEY)
    if digest is None:
        digest = hashlib.sha256(compdb.render(_expanded()).encode()).hexdigest()
    null_build.remember(_MEMO_KEY, digest)
    db = env.Command(env.File(env["COMPILEDB"]), env.Value(digest),
                     SCons.Action.Action(_write_compiledb, "COMPILEDB $TARGET"))
    env.NoCache(db)
    env.Precious(db)
    db[0].attributes.not_a_step = True  # bookkeeping, not counted in the build's summary line (build_summary)
    # `scons compiledb` also makes the generated sources its entries name (clangd opens them).
    generated = [e[2] for e in _ENTRIES if getattr(e[2], "has_builder", lambda: False)()]
    env.Alias("compiledb", db + generated)
    if asked or digest == _NO_ENTRIES:
        return
    if not names:
        Default(db)
    else:
        BUILD_TARGETS.append(db[0])


def generate(env) -> None:
    env.AddMethod(_add_entry, "CompileDbEntry")
    env.AddMethod(_object_builders, "CompileDbObjectBuilders")
    env.AddMethod(_finish, "CompileDbFinish")


def exists(env) -> bool:
    # What the entries are expanded with: SCons' command-list substitution and per-suffix emitters.
    return hasattr(SCons.Subst, "SUBST_CMD") and hasattr(SCons.Builder, "ListEmitter")
