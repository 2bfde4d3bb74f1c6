"""What a variable's value may be: each parser with its one-line refusal (UserError naming the variable and the fix),
and the helpers of the checkers opencoti_build.config.buildvars's table gives each variable.
"""
from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opencoti_build import project
from opencoti_build.config import upstream_pin
from opencoti_build.errors import UserError
from opencoti_build.tree import patch_series

ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
EPOCH_MAX = 253402300799  # 9999-12-31T23:59:59Z, the latest SOURCE_DATE_EPOCH gcc accepts
ALIGN_MAX = 1 << 30
PROJECT = project.ROOT
DEFAULTS = {"PREFIX": "/usr/local", "BUILD_DIR": "build", "DIST_DIR": "dist", "BACKEND_DIST_DIR": "vendors/dist", "CACHE_DIR": ".opencoti/cache",
            "COMPILEDB": "compile_commands.json", "SRC": upstream_pin.LLAMAFILE_PATH, "PATCH_SERIES": patch_series.OPENCOTI_PATCHES,
            "APPLIED_SERIES": patch_series.DEFAULT_RECORD}


def resolved(value: str, project: Path | str) -> Path:
    """A path variable's value as a path: a relative one is from ``project``."""
    path = Path(value)
    return path if path.is_absolute() else Path(project) / path


def file_in_the_way(path: Path) -> Path | None:
    """``path`` or the nearest of its parents that exists, when that is not a directory."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def empty(name: str) -> UserError:
    """The refusal of a path variable given empty."""
    return UserError(f"{name}= is empty; name a path, or leave {name} out for its default ({DEFAULTS[name]})")


def not_a_directory(name: str, value: str, path: Path, blocker: Path) -> UserError:
    """The refusal of a directory variable where ``blocker``, ``path`` or one of its parents, is a file."""
    if blocker == path:
        return UserError(f"{name}={value} is a file, not a directory; point {name}= at a directory")
    return UserError(f"{name}={value}: {blocker} is a file, not a directory; point {name}= at a directory")


def source_date_epoch(value: object) -> int:
    """SOURCE_DATE_EPOCH as an int: decimal seconds since 1970 (the reproducible-builds definition)."""
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) > EPOCH_MAX:
        raise UserError(f"SOURCE_DATE_EPOCH={value!r} is not a whole number of seconds since 1970 (0 to {EPOCH_MAX}); "
                        "set it to e.g. 0 or the last commit's `git log -1 --format=%ct`")
    return int(text)


def install_bin(env: Mapping[str, Any], project: Path | str = PROJECT) -> Path:
    """Where `scons install` copies to: ``$DESTDIR$PREFIX/bin`` (a relative PREFIX without DESTDIR is from the
    project, as every path variable is); UserError for an empty PREFIX, a relative one under DESTDIR, or a file in
    the way."""
    prefix, destdir = str(env["PREFIX"]).strip(), str(env["DESTDIR"]).strip()
    if not prefix:
        raise empty("PREFIX")
    if destdir and not os.path.isabs(prefix):
        raise UserError(f"PREFIX={prefix} is relative, but DESTDIR={destdir} stages an installation of an absolute "
                        "PREFIX; give PREFIX as an absolute path (e.g. /usr/local)")
    root = resolved(destdir, project) / prefix.lstrip("/") if destdir else resolved(prefix, project)
    bindir = root / "bin"
    blocker = file_in_the_way(bindir)
    if blocker is not None:
        raise UserError(f"cannot install into {bindir}: {blocker} is a file, not a directory; choose another PREFIX")
    return bindir


def align(value: object) -> int:
    """ALIGN as an int: a power of two from 1 to 2**30 (decimal or 0x…)."""
    try:
        number = int(str(value).strip(), 0)
    except ValueError:
        number = -1
    if number < 1 or number & (number - 1) or number > ALIGN_MAX:
        raise UserError(f"ALIGN={value!r} is not a power of two between 1 and 2**30; use e.g. ALIGN=65536")
    return number


def arch(value: str, machine: str | None = None) -> str:
    """ARCH as x86_64 or aarch64 (aliases amd64, x64, arm64 accepted); empty: this machine's."""
    name = (value or machine or platform.machine()).strip()
    found = ARCHES.get(name.lower())
    if found is None:
        if value:
            raise UserError(f"ARCH={value} is not an architecture llamafile ships; use ARCH=x86_64 or ARCH=aarch64")
        raise UserError(f"this machine is {name}, which llamafile does not ship for; pass ARCH=x86_64 or ARCH=aarch64")
    return found


def compile_file(env: Mapping[str, Any], project: Path | str = PROJECT) -> str:
    """FILE= of `scons compile`, absolute: an existing file, relative to the project or else to SRC."""
    value = str(env.get("FILE", "")).strip()
    if not value:
        raise UserError("`scons compile` needs FILE=path/to/source.c (relative to the project or to SRC)")
    candidates = [resolved(value, project), resolved(value, resolved(str(env["SRC"]), project))]
    for path in candidates:
        if path.is_file():
            return os.path.realpath(path)
    raise UserError(f"FILE={value}: no such file in the project or in SRC={env['SRC']}")
