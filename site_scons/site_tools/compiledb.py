"""SCons tool: compile_commands.json for every translation unit, whatever builder compiles it, always current.

SCons' own compilation_db only knows its built-in Object builders; here every compiling builder
registers its translation units from its emitter, as compilation_db does: a tool's own builder adds
``opencoti_scons.compiledb.object_emitter(command_vars, transform)`` to its emitters (or calls
``env.CompileDbEntry(target, source, command_var, transform)`` from its emitter), and
``env.CompileDbObjectBuilders()`` makes an env's SCons StaticObject/SharedObject register their C and C++
compiles. After every part is read, ``env.CompileDbFinish()`` makes the database node depend on the entries'
content (a Value of their hash): a flag change changes the node's input, so it is rebuilt. When the reading is
the last run's (only sources or headers changed: opencoti_build.incremental.null_build.carry_over) the last digest is reused
and the entries are expanded only if the file has to be written. The file is never taken from CacheDir (NoCache:
its entries name this checkout's paths). Every build that compiles also builds it (as Meson and CMake's export
do); ``COMPILEDB=`` empty turns it off. How: opencoti_scons/compiledb.py; the rules for entries (one per file,
clang arguments for GPU sources): opencoti_build/report/compdb.py.

Construction variables read: COMPILEDB (the file; empty: none), FILE (`scons compile`), and each entry's
command variable (FATCCCOM, SHCXXCOM, NVCCCOM, ...) in the env that registered it. Sets: none. Methods:
CompileDbEntry, CompileDbObjectBuilders, CompileDbFinish. Load it first with ``run=`` (the run's
``opencoti_scons.progress.BuildRun``: its memo carries the database's digest between runs); a compiling tool
loading it again on a clone gets the same database.
"""
from __future__ import annotations

from typing import Any

from opencoti_scons import engine
from opencoti_scons.compiledb import CompileDb
from opencoti_scons.progress import BuildRun


def generate(env: Any, run: BuildRun | None = None) -> None:
    if hasattr(env, "CompileDbEntry"):
        return  # loaded on an env this one was cloned from (a compiling tool loads it too): one database per run
    if run is None:
        raise ValueError("load compiledb first with run= (SConstruct does): the entries belong to the run")
    db = CompileDb(run.memo)  # this run's entries: every env cloned from this one registers here
    env.AddMethod(db.add_entry, "CompileDbEntry")
    env.AddMethod(db.object_builders, "CompileDbObjectBuilders")
    env.AddMethod(db.finish, "CompileDbFinish")


def exists(env: Any) -> bool:
    return engine.supported()
