"""SCons tool: the build's decider (opencoti_scons/code_decider.py): content-timestamp, and for the compiles marked
with ``env.DecidedByCode(targets)`` an edit of comments or trailing blanks in a C or C++ input changes nothing.

Load it once on the base environment (its clones keep the decider). Construction variables read: BUILD_DIR (the known code signatures are kept in
BUILD_DIR/code-signatures). Adds the method DecidedByCode. Nothing is written by a dry run.
"""
from __future__ import annotations

import atexit
import os
from typing import Any

import SCons.Script

from opencoti_build.incremental.code_signature import KnownSignatures
from opencoti_scons import engine
from opencoti_scons.code_decider import CodeDecider


def generate(env: Any) -> None:
    decider = CodeDecider(KnownSignatures(os.path.join(env["BUILD_DIR"], KnownSignatures.FILE_NAME)))
    env.Decider(decider.decide)
    env.AddMethod(lambda _env, targets: decider.mark(targets), "DecidedByCode")
    if not SCons.Script.GetOption("no_exec"):  # `scons -n` writes nothing
        atexit.register(decider.finish)


def exists(env: Any) -> bool:
    return engine.supported()
