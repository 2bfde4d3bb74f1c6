"""Finding and interrogating the GPU toolchains, with no SCons: ``cuda`` (nvcc), ``rocm`` (hipcc), ``vulkan`` (glslc).

Every probe takes the build's settings: a mapping (an SCons environment, or a plain dict in tests) holding
the backend's variables (``CUDA_PATH``, ``ROCM_PATH``, ``VULKAN_SDK``, …) and ``ENV``, the environment
commands run with. It returns the toolchain, or raises :class:`opencoti_build.errors.Absent` (none is
installed: the backend is skipped with one WARN line) or :class:`ToolchainBroken` (the one named
explicitly is not there, or the one found does not work: one error line). Probes only read.

- ``cuda``: nvcc: its release, what it can build (the gencode table's row) and cuBLAS beside it.
- ``rocm``: hipcc: its ROCm release and the gfx targets it can build.
- ``vulkan``: glslc: its version, for the manifest's toolchains.

Where a toolchain is found is its real path (:func:`locate`): ``/usr/local/cuda`` and the ``/usr/local/cuda-13.0`` it
links to are one toolkit, so every command, signature and output is the same whichever name found it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opencoti_build.errors import UserError

PROBE_TIMEOUT_S = 60


class ToolchainBroken(UserError):
    """A toolchain named explicitly is missing, or the one found cannot be used (one line naming it and the fix)."""


def setting(settings: Mapping[str, Any], key: str) -> str:
    """A variable of the settings as a string; unset and empty are the same."""
    return str(settings.get(key) or "")


@dataclass(frozen=True)
class Location:
    """Where a toolchain's program was found, as real paths (:func:`real_program`)."""

    program: str | None  # the executable; None: found nowhere
    root: str | None  # the install directory that held it (the variable's value or a default); None: from PATH
    searched: str  # what was searched, for the message of an absent toolchain


def real_program(path: str) -> str:
    """``path`` with every directory symlink on the way resolved, its own name kept: the same toolkit reached through
    ``/usr/local/cuda`` or ``/usr/local/cuda-13.0`` is the same program, run by the same command (nvcc reads its
    include and library paths from the directory it was started from: another name gives other bytes). The program
    itself is not resolved, since a driver may act on the name it is started by (``clang++`` is a link to ``clang``)."""
    return os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))


def locate(settings: Mapping[str, Any], variable: str, program: str, defaults: Sequence[str], hint: str) -> Location:
    """``program`` in ``$variable/bin`` when the variable is set, and only there: an install named explicitly must
    not be swapped for another, so one without the program raises ToolchainBroken ending in ``hint``.
    Else the first of ``defaults``' ``bin/`` that has it, else ``program`` on the settings' PATH.
    The program and the root are real paths: any name of one install finds the same Location.
    """
    explicit = setting(settings, variable)
    if explicit:
        candidate = os.path.join(explicit, "bin", program)
        if not os.access(candidate, os.X_OK):
            raise ToolchainBroken(f"{variable}={explicit} has no executable bin/{program}; {hint}")
        return Location(real_program(candidate), os.path.realpath(explicit), f"{variable}={explicit}")
    for root in defaults:
        candidate = os.path.join(root, "bin", program)
        if os.access(candidate, os.X_OK):
            return Location(real_program(candidate), os.path.realpath(root), root)
    searched = f"{', '.join(defaults)} and PATH" if defaults else "PATH"
    found = shutil.which(program, path=settings["ENV"].get("PATH"))
    return Location(real_program(found) if found else None, None, searched)


Environ = tuple[tuple[str, str], ...]  # an environment as a memoized probe's argument (hashable)


def frozen(environ: Mapping[str, Any]) -> Environ:
    """``environ`` as a hashable argument: probes memoize per program and environment (functools.cache), since a
    build asks again for every backend and the answer cannot change within it."""
    return tuple(sorted((str(k), str(v)) for k, v in environ.items()))


def run(argv: Sequence[str], environ: Mapping[str, str] | Environ) -> subprocess.CompletedProcess[str]:
    """A probe command's result (never raises for its exit status; OSError and TimeoutExpired pass)."""
    return subprocess.run(list(argv), env=dict(environ), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                          check=False)


def found(find: Callable[[Mapping[str, Any]], Location], settings: Mapping[str, Any]) -> bool:
    """Whether ``find`` (a module's locate step) finds its program: a tool's ``exists()``; runs nothing."""
    try:
        return find(settings).program is not None
    except ToolchainBroken:  # the install named explicitly lacks it
        return False
