"""Which parts of the build the command line asks for, so the others are never read (no probes, no I/O).

:func:`plan` decides it once per run, from the targets as given and the build's output paths; the SConscripts and
the compile database read the :class:`Plan` and never the targets themselves.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from opencoti_build.errors import UserError
from opencoti_build.gpu import backends

# Every target name the build defines (its aliases); anything else must be a path.
NAMES: tuple[str, ...] = ("host", "compiledb", "compile", "apply", "reset", *backends.NAMES, "backends", "package",
                          "verify", "install", "native", "native-cuda")


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def asks_for(targets: Iterable[object], names: Iterable[str], outputs: Iterable[str], project: str) -> bool:
    """True when a target is one of ``names``, or a path at, under or above one of ``outputs``."""
    names, outputs = set(names), list(outputs)
    for target in map(str, targets):
        if target in names:
            return True
        path = os.path.normpath(os.path.join(project, target))
        if any(inside(path, out) or inside(out, path) for out in outputs):
            return True
    return False


def check_known(targets: Iterable[object], outputs: Iterable[str], project: str) -> None:
    """UserError naming the first target that is no target name, no existing path and no path at, under
    or above one of ``outputs`` (what the build writes): a misspelled target, refused before any work."""
    outputs = [os.path.normpath(os.path.join(project, out)) for out in outputs]
    for target in map(str, targets):
        if target in NAMES:
            continue
        path = os.path.normpath(os.path.join(project, target))
        if os.path.lexists(path) or any(inside(path, out) or inside(out, path) for out in outputs):
            continue
        raise UserError(f"unknown target {target!r}: no such target or file; the targets are {', '.join(NAMES)} "
                        "or a path the build writes (`scons -h` says what each target builds)")


# Targets that never need the thin binary: asking only for them must not download a toolchain. (`verify` alone
# checks the artifacts in DIST_DIR as they lie: no tree, no toolchain.)
NO_HOST = frozenset({*backends.NAMES, "backends", "apply", "reset", "native", "native-cuda", "verify"})
NATIVE = ("native", "native-cuda")
# Targets that compile nothing: the compile database is left as it is (compile: that file's objects only).
NOT_COMPILING = frozenset(("apply", "reset", "verify", "compile"))
# Targets that want every backend (compile: FILE may be a DSO's source); the embedding ones none with CPU_ONLY=1.
ALL_BACKENDS = frozenset(("backends", "package", "install", "compiledb", "compile"))
EMBEDDING = frozenset(("package", "install"))  # install: what package makes, copied under PREFIX


@dataclass(frozen=True)
class Outputs:
    """The directories and files the build writes, absolute."""

    build_dir: str
    dist_dir: str
    backend_dist_dir: str
    compiledb: str

    @property
    def package_dir(self) -> str:
        return os.path.join(self.dist_dir, "llamafile")

    @property
    def native_dir(self) -> str:
        return os.path.join(self.build_dir, "native")


@dataclass(frozen=True)
class Plan:
    """What one run builds."""

    names: frozenset[str]  # the targets as given
    native_only: bool  # only the native lane: no llamafile tree needed
    host: bool  # the thin binary is read (not with HOST=, nor when only targets that need none are asked)
    checkout: bool  # the host lane builds llama.cpp's own server from LLAMACPP= (no llamafile tree is read)
    backends: tuple[str, ...]  # the backends to read, in build order
    package: bool  # `package` or `install`, or a path around the artifacts: package/SConscript is read
    verify: bool  # `verify`: the artifacts checked against their manifests
    verify_builds_first: bool  # `verify` with what packages (`package`, `install`): package, then check what it made;
    #                            otherwise verify checks every artifact in DIST_DIR as it lies
    verify_alone: bool  # `verify` and nothing else: no source tree is read, no toolchain probed
    native: bool  # the native lane, or a path around its outputs
    series: str | None  # "apply" or "reset"
    compile_file: bool  # `scons compile FILE=`
    compiledb_asked: bool
    compiles: bool  # something compiles: the compile database is refreshed
    default: bool  # no target given: the default build


def _backends_wanted(given: list[str], outputs: Outputs, project: str, *, cpu_only: bool,
                     checkout: bool) -> tuple[str, ...]:
    """The GPU backends the targets ask for, in build order; none when the host lane builds a checkout's server
    (``checkout``), where naming one is a UserError."""
    names = frozenset(given)
    if checkout:
        asked = sorted(names & {*backends.NAMES, "backends"})
        if asked:
            raise UserError(f"LLAMACPP= makes the host lane build llama.cpp's own llama-server, which loads no "
                            f"llamafile GPU DSO; build {' '.join(asked)} in a run of its own (from SRC's llamafile tree)")
        return ()
    want_all = ALL_BACKENDS - EMBEDDING if cpu_only else ALL_BACKENDS
    around_backends = (outputs.backend_dist_dir, os.path.join(outputs.build_dir, "backends"))
    if asks_for(given, want_all, around_backends, project):
        return tuple(backends.NAMES)
    return tuple(name for name in backends.NAMES if name in names)


def plan(targets: Iterable[object], outputs: Outputs, project: str, *, host_prebuilt: bool,
         cpu_only: bool, checkout: bool = False) -> Plan:
    """The run's plan; UserError for a target that is no target name and no path the build writes, for
    ``apply`` with ``reset``, or for a GPU backend asked for by name in a run whose host lane builds a checkout's
    server (``checkout``: LLAMACPP= is given; that server loads no llamafile DSO, so no target then wants one)."""
    given = [str(t) for t in targets]
    check_known(given, [outputs.build_dir, outputs.dist_dir, outputs.backend_dist_dir, outputs.compiledb], project)
    names = frozenset(given)
    series = [name for name in ("apply", "reset") if name in names]
    if len(series) == 2:
        raise UserError("`apply` and `reset` undo each other; give one of them")
    host = not host_prebuilt and not (names and names <= NO_HOST)
    wanted = _backends_wanted(given, outputs, project, cpu_only=cpu_only, checkout=checkout and host)
    package = asks_for(given, EMBEDDING, (outputs.package_dir,), project)
    return Plan(
        names=names,
        native_only=bool(names) and names <= set(NATIVE),
        host=host,
        checkout=checkout and host,
        backends=wanted,
        package=package,
        verify="verify" in names,
        verify_builds_first="verify" in names and package,
        verify_alone=names == {"verify"},
        native=asks_for(given, NATIVE, (outputs.native_dir,), project),
        series=series[0] if series else None,
        compile_file="compile" in names,
        compiledb_asked="compiledb" in names,
        compiles=not (names and names <= NOT_COMPILING),
        default=not names,
    )
