"""The ROCm toolchain: hipcc found and interrogated, once per hipcc in a build.

- hipcc: ``$ROCM_PATH/bin/hipcc`` when ROCM_PATH is set (default: env OPENCOTI_ROCM_PATH), else
  ``/opt/rocm/bin/hipcc``, else ``hipcc`` on PATH. It runs with ``HIP_PLATFORM=amd`` (Debian's hipcc
  otherwise picks nvcc when one is installed).
- ``HIPCC_VERBOSE=3 hipcc --version``: HIP and clang versions, the device-library dir, the clang.
- ``clang --target=amdgcn-amd-amdhsa --print-supported-cpus``: the processors clang knows.
- ``clang --offload-compress -###``: whether compressed bundles can be asked for (clang 15: no). Even with ``-###``
  clang makes its offload temporaries' directories (``null-XXXXXX``), so this probe runs with a TMPDIR of its own,
  removed after it: the build's (``BUILD_DIR/tmp``) is not written by a probe, a dry run's included.
"""
from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opencoti_build.errors import Absent
from opencoti_build.gpu.rocm_archs import RocmSupport, device_lib_isas, parse_hipcc_config, parse_supported_cpus
from opencoti_build.gpu.toolchains import Environ, Location, ToolchainBroken, frozen, locate, run

DEFAULT_ROCM_PATH = "/opt/rocm"
LOCATE_HINT = f"point it at a ROCm install or leave it empty to use {DEFAULT_ROCM_PATH} or PATH"
COMPRESS_FLAG = "--offload-compress"



@dataclass(frozen=True)
class HipToolchain:
    """A usable hipcc: where it is, what it can build, the flags it accepts, the environment it runs in."""

    hipcc: str
    rocm_path: str | None  # set in hipcc's environment only when ROCM_PATH or /opt/rocm selected it
    hip_version: str
    support: RocmSupport
    offload_compress: bool
    environ: tuple[tuple[str, str], ...]  # the command environment with HIP_PLATFORM (and ROCM_PATH)
    record: str  # what the manifest's ``toolchains`` says made a DSO: "HIP 5.2.21153-0 (clang 15.0.6)"

    @property
    def description(self) -> str:
        return f"hipcc {self.hip_version} ({self.support.compiler}) at {self.hipcc}"

    @property
    def driver(self) -> str:
        return self.hipcc


def _interrogate(hipcc: str, rocm_path: str | None, environ: dict[str, str]) -> HipToolchain | str:
    """The toolchain behind ``hipcc``, or a one-line reason it is unusable."""
    verbose = run([hipcc, "--version"], {**environ, "HIPCC_VERBOSE": "3"})
    config = parse_hipcc_config(verbose.stdout + verbose.stderr)
    clang = config.get("hipcc-cmd", "").split(" ", 1)[0]
    if "HIP_VERSION" not in config or not clang:
        return f"{hipcc} --version did not report a HIP version and its clang (is it a ROCm hipcc?)"
    listing = run([clang, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"], environ)
    cpus = parse_supported_cpus(listing.stdout + listing.stderr)
    if not cpus:
        return f"{clang} --print-supported-cpus lists no gfx processor (no AMDGPU target in hipcc's clang)"
    lib_dir = config.get("DEVICE_LIB_PATH", "")
    support = RocmSupport(
        compiler=f"clang {config.get('CLANG_VERSION', '?')}",
        compiler_cpus=cpus,
        device_lib_dir=lib_dir,
        device_lib_isas=device_lib_isas(lib_dir) if lib_dir else frozenset(),
    )
    with tempfile.TemporaryDirectory(prefix="opencoti-hip-probe-") as scratch:  # the process's TMPDIR, not the build's
        compress = run(
            [clang, COMPRESS_FLAG, "-###", "-x", "hip", "-c", os.devnull, "-o", os.devnull,
             "--offload-arch=gfx906", "-nogpulib", "-nogpuinc"],
            {**environ, "TMPDIR": scratch},
        )
    return HipToolchain(
        hipcc=hipcc, rocm_path=rocm_path, hip_version=config["HIP_VERSION"], support=support,
        offload_compress=compress.returncode == 0, environ=tuple(sorted(environ.items())),
        record=f"HIP {config['HIP_VERSION']} ({support.compiler})",
    )


def find_hipcc(settings: Mapping[str, Any]) -> Location:
    return locate(settings, "ROCM_PATH", "hipcc", [DEFAULT_ROCM_PATH], LOCATE_HINT)


def probe(settings: Mapping[str, Any]) -> HipToolchain:
    """The ROCm toolchain (memoized per hipcc found); a broken hipcc raises ToolchainBroken."""
    where = find_hipcc(settings)
    if where.program is None:
        raise Absent(f"no hipcc in {where.searched}; install ROCm (hipcc) or set ROCM_PATH=DIR")
    environ = {**settings["ENV"], "HIP_PLATFORM": "amd"}
    if where.root:
        environ["ROCM_PATH"] = where.root
    found = _probed(where.program, where.root, frozen(environ))
    if isinstance(found, str):
        raise ToolchainBroken(f"{found}; fix or remove that hipcc, or set ROCM_PATH to a working ROCm")
    return found


@functools.cache
def _probed(program: str, root: str | None, environ: Environ) -> HipToolchain | str:
    """:func:`_interrogate`'s answer, or why that hipcc could not be run (a str)."""
    try:
        return _interrogate(program, root, dict(environ))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{program} could not be run ({exc})"
