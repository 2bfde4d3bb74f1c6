"""compile_commands.json for every translation unit, whatever builder compiles it, always current (the SCons side
of site_tools/compiledb.py; the entries' rules are opencoti_build.report.compdb's).

SCons' own compilation_db only knows its built-in Object builders; here every compiling builder
registers its translation units from its emitter, as compilation_db does: a tool's own builder adds
``object_emitter(command_vars, transform)`` to its emitters (or calls ``env.CompileDbEntry(target,
source, command_var, transform)`` from its emitter), and ``env.CompileDbObjectBuilders()`` makes an
env's SCons StaticObject/SharedObject register their C and C++ compiles.
After every part is read, ``env.CompileDbFinish()`` makes the database node depend on the entries'
content (a Value of their hash): a flag change changes the node's input, so it is rebuilt. Expanding
the entries costs about a third of a run that reads the SConscripts, so when the reading is the last
run's (only sources or headers changed: opencoti_build.incremental.null_build.carry_over) the last digest is
reused and the entries are expanded only if the file has to be written. It is and it is never taken from CacheDir (NoCache: its entries name this checkout's paths). Every
build that compiles also builds it (as Meson and CMake's export do); ``COMPILEDB=`` empty turns it off.
The rules for entries (one per file, clang arguments for GPU sources) are opencoti_build.report.compdb's.

One :class:`CompileDb` per run holds the registered entries.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import SCons.Action
import SCons.Builder
import SCons.Subst
from SCons.Script import BUILD_TARGETS, Default, GetOption

from opencoti_build import errors, tempfiles
from opencoti_build.cache import launchers
from opencoti_build.config import targets, values
from opencoti_build.incremental import null_build
from opencoti_build.report import compdb
from opencoti_build.tree.sources import CXX_SUFFIXES

Transform = Callable[[list[str]], list[str]]
_MEMO_KEY = "compiledb digest"
_NO_ENTRIES = hashlib.sha256(compdb.render([]).encode()).hexdigest()


def object_emitter(command_vars: Mapping[str, str], transform: Transform | None = None) -> Callable[..., Any]:
    """An emitter that registers each object (its first target and source) with the command variable of
    its source's suffix (``{".c": "CCCOM", ".cpp": "CXXCOM", ...}``); it changes neither list. The env
    must have the compiledb tool (its CompileDbEntry method)."""
    def emitter(target, source, env):
        env.CompileDbEntry(target[0], source[0], command_vars[source[0].get_suffix()], transform)
        return target, source
    return emitter


# SCons' object builders: builder name -> (command variable of C, of C++)
OBJECT_BUILDERS: Mapping[str, tuple[str, str]] = {"StaticObject": ("CCCOM", "CXXCOM"),
                                                  "SharedObject": ("SHCCCOM", "SHCXXCOM")}


class CompileDb:
    """The entries one run registered (env, target, source, command variable, transform), in registration
    order, expanded only when the database is on."""

    def __init__(self, memo: null_build.Memo) -> None:
        self.memo = memo
        self.entries: list[tuple[Any, Any, Any, str, Transform | None]] = []
        self._expanded: list[dict] | None = None

    def add_entry(self, env: Any, target: Any, source: Any, command_var: str,
                  transform: Transform | None = None) -> None:
        source = env.File(source) if isinstance(source, str) else source
        self.entries.append((env, target, source, command_var, transform))

    def object_builders(self, env: Any) -> None:
        """This env's StaticObject and SharedObject register their C and C++ compiles (once per builder)."""
        for name, (c_com, cxx_com) in OBJECT_BUILDERS.items():
            builder = env["BUILDERS"].get(name)
            if builder is None or getattr(builder, "compiledb_registers", False):
                continue
            emitter = object_emitter({".c": c_com, **{s: cxx_com for s in CXX_SUFFIXES}})
            for suffix in (".c", *CXX_SUFFIXES):
                if suffix in builder.emitter:
                    builder.emitter[suffix] = SCons.Builder.ListEmitter([builder.emitter[suffix], emitter])
            builder.compiledb_registers = True

    @staticmethod
    def _made_from(source: Any) -> set[str]:
        """The real paths a registered source stands for: itself, and what generated it (a .gperf)."""
        paths = {os.path.realpath(source.abspath)}
        if source.has_builder():
            paths |= {os.path.realpath(s.abspath) for s in source.sources if hasattr(s, "abspath")}
        return paths

    def _compile_alias(self, env: Any, path: str) -> None:
        """`scons compile FILE=`: every object registered from ``path`` (fat pair, DSO cores), nothing else."""
        objects = [e[1] for e in self.entries if path in self._made_from(e[2])]
        if not objects:
            errors.fail(f"FILE={env['FILE']}: no object of this build is made from {path} "
                        "(a header? `scons compile` takes a .c, .cpp, .cu or .gperf the build compiles)")
        env.Alias("compile", objects)

    @staticmethod
    def _entry(env: Any, target: Any, source: Any, command_var: str, transform: Transform | None) -> dict:
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

    def expanded(self) -> list[dict]:
        if self._expanded is None:
            self._expanded = compdb.one_per_file(self._entry(*e) for e in self.entries)
        return self._expanded

    def _write(self, target: Any, source: Any, env: Any) -> int:
        path = target[0].get_abspath()  # str() is relative to the top dir: its dirname may be ""
        text = compdb.render(compdb.merged(compdb.read(path), self.expanded()))
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

    def finish(self, env: Any, plan: targets.Plan) -> None:
        """Create the database node from every registered entry; called once, after every part is read."""
        if plan.compile_file:
            self._compile_alias(env, values.compile_file(env))
        if not env.get("COMPILEDB"):  # turned off (buildvars.validate refused `scons compiledb` with it empty)
            return
        if not plan.compiles:
            return  # nothing compiles: no entries expanded, the file left as it is
        # The entries follow from the SConscripts' reading alone: when it is the last run's, so is their digest
        # (opencoti_build.incremental.null_build.carry_over), and they are expanded only if the file must be written.
        digest = self.memo.remembered(_MEMO_KEY)
        if digest is None:
            digest = hashlib.sha256(compdb.render(self.expanded()).encode()).hexdigest()
        self.memo.remember(_MEMO_KEY, digest)
        db = env.Command(env.File(env["COMPILEDB"]), env.Value(digest),
                         SCons.Action.Action(self._write, "COMPILEDB $TARGET"))
        env.NoCache(db)
        env.Precious(db)
        db[0].attributes.not_a_step = True  # bookkeeping, not counted in the build's summary line (build_summary)
        # `scons compiledb` also makes the generated sources its entries name (clangd opens them).
        generated = [e[2] for e in self.entries if getattr(e[2], "has_builder", lambda: False)()]
        env.Alias("compiledb", db + generated)
        if plan.compiledb_asked or digest == _NO_ENTRIES:
            return
        if plan.default:
            Default(db)
        elif not GetOption("clean"):  # `scons -c install` removes what it names, not the IDE's database
            BUILD_TARGETS.append(db[0])
