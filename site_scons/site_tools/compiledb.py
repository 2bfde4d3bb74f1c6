"""SCons tool: compile_commands.json for every translation unit, whatever builder compiles it.

SCons' own compilation_db only knows its built-in Object builders; fat objects, CUDA and HIP
objects register here instead, through ``env.CompileDbEntry(target, source, command_var)``.
Registration is a list append at read time; commands are expanded only when `compiledb` runs.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable

import SCons.Action
import SCons.Subst
from SCons.Script import COMMAND_LINE_TARGETS

# (env, target, source, command variable, transform of the argument list)
_ENTRIES: list[tuple[object, object, object, str, Callable[[list[str]], list[str]] | None]] = []
_DEFINED: list[bool] = []


def _add_entry(env, target, source, command_var: str, transform: Callable[[list[str]], list[str]] | None = None) -> None:
    if "compiledb" in COMMAND_LINE_TARGETS:
        _ENTRIES.append((env, target, source, command_var, transform))


def _entry(env, target, source, command_var, transform) -> dict:
    lines = env.subst_list("$" + command_var, SCons.Subst.SUBST_CMD, target=[target], source=[source])
    arguments = [str(a) for a in lines[0]]
    if transform is not None:
        arguments = transform(arguments)
    return {
        "directory": env.Dir("#").abspath,
        "file": source.abspath if hasattr(source, "abspath") else os.path.abspath(str(source)),
        "output": target.abspath,
        "arguments": arguments,
    }


def _write_compiledb(target, source, env) -> int:
    entries = sorted((_entry(*e) for e in _ENTRIES), key=lambda e: (e["file"], e["output"]))
    text = json.dumps(entries, indent=2) + "\n"
    path = str(target[0])
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if old != text:  # leave clangd's file alone when nothing changed
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)
    print(f"compiledb: {len(entries)} entries in {path}")
    return 0


def generate(env) -> None:
    env.AddMethod(_add_entry, "CompileDbEntry")
    if not _DEFINED:
        _DEFINED.append(True)
        db = env.Command(env.File(env["COMPILEDB"]), [], SCons.Action.Action(_write_compiledb, None))
        env.AlwaysBuild(db)
        env.Precious(db)
        env.Alias("compiledb", db)


def exists(env) -> bool:
    return True
