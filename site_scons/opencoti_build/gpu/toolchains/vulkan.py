"""The Vulkan shader compiler: glslc (``$VULKAN_SDK/bin/glslc`` when VULKAN_SDK is set, default env
OPENCOTI_VULKAN_SDK; else ``glslc`` on PATH), asked its version once per glslc in a build.
"""
from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opencoti_build.errors import Absent
from opencoti_build.gpu.toolchains import Environ, Location, ToolchainBroken, frozen, locate, run

LOCATE_HINT = "point it at a Vulkan SDK or leave it empty to use glslc on PATH"



@dataclass(frozen=True)
class GlslcToolchain:
    glslc: str
    version: str  # glslc --version's first line, e.g. "shaderc v2023.8 v2023.8"
    record: str  # what the manifest's ``toolchains`` says made a DSO: "glslc <version>"
    sdk: str | None = None  # VULKAN_SDK as a real path (its include/ and lib/ are used); None: glslc from PATH

    @property
    def description(self) -> str:
        return f"glslc ({self.version}) at {self.glslc}"

    @property
    def driver(self) -> str:
        return self.glslc


def find_glslc(settings: Mapping[str, Any]) -> Location:
    return locate(settings, "VULKAN_SDK", "glslc", (), LOCATE_HINT)


def probe(settings: Mapping[str, Any]) -> GlslcToolchain:
    """glslc (memoized per path); one that does not run raises ToolchainBroken."""
    where = find_glslc(settings)
    if where.program is None:
        raise Absent("no glslc on PATH; install glslc (shaderc) or the Vulkan SDK, or set VULKAN_SDK=DIR")
    found = _interrogate(where.program, where.root, frozen(settings["ENV"]))
    if isinstance(found, str):
        raise ToolchainBroken(found)
    return found


@functools.cache
def _interrogate(glslc: str, sdk: str | None, environ: Environ) -> GlslcToolchain | str:
    """What ``glslc --version`` says, or why that glslc is unusable (a str)."""
    try:
        proc = run([glslc, "--version"], environ)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{glslc} could not be run ({exc})"
    first = (proc.stdout.strip().splitlines() or [""])[0]
    if proc.returncode == 0 and first:
        return GlslcToolchain(glslc=glslc, version=first, record=f"glslc {first}", sdk=sdk)
    return f"{glslc} --version failed (exit {proc.returncode}); reinstall glslc"
