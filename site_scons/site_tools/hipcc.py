"""SCons tool ``hipcc``: compile ggml-cuda's ``.cu`` sources as HIP for AMD GPUs.

Nothing runs when the tool is loaded. ``env.ProbeRocm()`` finds and interrogates the toolchain,
read-only and once per build, and is called only by the SConscript of a requested ROCm build:

- hipcc: ``$ROCM_PATH/bin/hipcc`` when ROCM_PATH is set (default: env OPENCOTI_ROCM_PATH), else
  ``/opt/rocm/bin/hipcc``, else ``hipcc`` on PATH. ``HIP_PLATFORM=amd`` is set for it (Debian's
  hipcc otherwise picks nvcc when one is installed).
- ``HIPCC_VERBOSE=3 hipcc --version``: HIP and clang versions, the device-library dir, the clang.
- ``clang --target=amdgcn-amd-amdhsa --print-supported-cpus``: the processors clang knows.
- ``clang --offload-compress -###``: whether compressed bundles can be asked for (clang 15: no).

``env.HipObject(target, source)`` compiles one ``.cu`` with ``$HIPCC -x hip`` for every target in
``$HIP_OFFLOAD_ARCHS`` (the caller fills it from ``opencoti_build.rocm_archs.select_archs``), with
``#include`` dependencies of ``.cu``/``.cuh`` tracked through ``CPPPATH``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

import SCons.Action
import SCons.Scanner
import SCons.Subst
from SCons.Builder import Builder
from SCons.Environment import Base as Environment

from opencoti_build import compdb
from opencoti_build.prefix_maps import prefix_maps
from opencoti_build.rocm_archs import RocmSupport, device_lib_isas, parse_hipcc_config, parse_supported_cpus
from opencoti_build.errors import UserError

DEFAULT_ROCM_PATH = "/opt/rocm"
PROBE_TIMEOUT_S = 60
BASE_FLAGS = ("-O2", "-fPIC", "-std=c++17")
BASE_DEFINES = ("GGML_USE_HIP=1", "GGML_HIP_NO_VMM=1", "GGML_USE_TINYBLAS=1")
COMPRESS_FLAG = "--offload-compress"

_PROBES: dict[tuple[str, str], "HipToolchain | str"] = {}  # a str: why that hipcc is unusable


@dataclass(frozen=True)
class HipToolchain:
    """A usable hipcc: where it is, what it can build, and the flags it accepts."""

    hipcc: str
    rocm_path: str | None  # set in hipcc's ENV only when ROCM_PATH/ /opt/rocm selected it
    hip_version: str
    support: RocmSupport
    offload_compress: bool

    @property
    def description(self) -> str:
        return f"hipcc {self.hip_version} ({self.support.compiler}) at {self.hipcc}"


class RocmToolchainError(UserError):
    """ROCM_PATH names no usable hipcc, or the hipcc found is broken (one-line message)."""


def _locate(env: Environment) -> tuple[str | None, str | None, str]:
    """(hipcc path or None, ROCm dir that held it or None, what was searched).

    An explicit ROCM_PATH without bin/hipcc raises: it is a mistake, not an absent toolchain."""
    rocm_path = env.subst("$ROCM_PATH")
    if rocm_path:
        candidate = os.path.join(rocm_path, "bin", "hipcc")
        if not os.access(candidate, os.X_OK):
            raise RocmToolchainError(f"ROCM_PATH={rocm_path} has no executable bin/hipcc; "
                                     f"point it at a ROCm install or leave it empty to use /opt/rocm or PATH")
        return candidate, rocm_path, f"ROCM_PATH={rocm_path}"
    candidate = os.path.join(DEFAULT_ROCM_PATH, "bin", "hipcc")
    if os.access(candidate, os.X_OK):
        return candidate, DEFAULT_ROCM_PATH, DEFAULT_ROCM_PATH
    return shutil.which("hipcc", path=env["ENV"].get("PATH")), None, f"{DEFAULT_ROCM_PATH} and PATH"


def _run(argv: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)


def _interrogate(hipcc: str, rocm_path: str | None, environ: dict[str, str]) -> HipToolchain | str:
    """The toolchain behind ``hipcc``, or a one-line reason it is unusable."""
    verbose = _run([hipcc, "--version"], {**environ, "HIPCC_VERBOSE": "3"})
    config = parse_hipcc_config(verbose.stdout + verbose.stderr)
    clang = config.get("hipcc-cmd", "").split(" ", 1)[0]
    if "HIP_VERSION" not in config or not clang:
        return f"{hipcc} --version did not report a HIP version and its clang (is it a ROCm hipcc?)"
    listing = _run([clang, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"], environ)
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
    compress = _run(
        [clang, COMPRESS_FLAG, "-###", "-x", "hip", "-c", os.devnull, "-o", os.devnull,
         "--offload-arch=gfx906", "-nogpulib", "-nogpuinc"],
        environ,
    )
    return HipToolchain(
        hipcc=hipcc, rocm_path=rocm_path, hip_version=config["HIP_VERSION"], support=support,
        offload_compress=compress.returncode == 0,
    )


def probe_rocm(env: Environment) -> HipToolchain | str:
    """The ROCm toolchain (memoized per hipcc found), or the reason there is none (for a WARN).

    Raises RocmToolchainError for an explicit ROCM_PATH without hipcc and for a hipcc that cannot
    be interrogated. On success ``env`` gets ``HIPCC``, ``HIPCCFLAGS`` (``--offload-compress`` only
    where clang accepts it) and ``ENV`` with ``HIP_PLATFORM=amd`` (and ``ROCM_PATH`` when that
    selected hipcc).
    """
    hipcc, rocm_path, searched = _locate(env)
    if hipcc is None:
        return f"no hipcc in {searched}; install ROCm (hipcc) or set ROCM_PATH=DIR"
    environ = {**env["ENV"], "HIP_PLATFORM": "amd"}
    if rocm_path:
        environ["ROCM_PATH"] = rocm_path
    key = (hipcc, rocm_path or "")
    if key not in _PROBES:
        try:
            _PROBES[key] = _interrogate(hipcc, rocm_path, environ)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _PROBES[key] = f"{hipcc} could not be run ({exc})"
    found = _PROBES[key]
    if isinstance(found, str):
        raise RocmToolchainError(f"{found}; fix or remove that hipcc, or set ROCM_PATH to a working ROCm")
    env["HIPCC"] = found.hipcc
    env["ENV"] = environ
    if found.offload_compress:
        env.AppendUnique(HIPCCFLAGS=[COMPRESS_FLAG])
    return found


def _hip_object(env: Environment, target, source, **kw):
    """HipObject builder call plus a compile_commands.json entry when the compiledb tool is loaded."""
    nodes = env._HipObject(target, source, **kw)
    if hasattr(env, "CompileDbEntry"):
        for node in nodes:
            env.CompileDbEntry(node, node.sources[0], "HIPCCCOM", compdb.clang_hip_arguments)  # clang's HIP driver
    return nodes


def generate(env: Environment) -> None:
    env.SetDefault(
        INCPREFIX="-I", INCSUFFIX="", CPPDEFPREFIX="-D", CPPDEFSUFFIX="",  # set by no other tool of a bare env
        HIPCC="hipcc",
        HIPCCFLAGS=list(BASE_FLAGS),
        HIP_OFFLOAD_ARCHS=[],
        _HIP_ARCH_FLAGS="${_concat('--offload-arch=', HIP_OFFLOAD_ARCHS, '', __env__)}",
        # -ffile-prefix-map (opencoti_build.prefix_maps): __FILE__ and debug info, host and device, name no
        # checkout, SRC or BUILD_DIR path
        HIPCCPREFIXMAPS=[SCons.Subst.Literal(flag) for flag in
                         prefix_maps(env.Dir("#").abspath, env.get("SRC"), env.get("BUILD_DIR"))],
        HIPCCCOM="$HIPCC -x hip -c -o $TARGET $HIPCCFLAGS $HIPCCPREFIXMAPS $_HIP_ARCH_FLAGS "
                 "$_CPPDEFFLAGS $_CPPINCFLAGS $SOURCES",
    )
    env.AppendUnique(CPPDEFINES=list(BASE_DEFINES))
    scanner = SCons.Scanner.ClassicCPP(
        "HipScanner", [".cu", ".cuh", ".h", ".hpp", ".cpp", ".c", ".inc"], "CPPPATH",
        r'^[ \t]*#[ \t]*(?:include|import)[ \t]*(<|")([^>"]+)(>|")',
    )
    env["BUILDERS"]["_HipObject"] = Builder(
        action=SCons.Action.Action("$HIPCCCOM", "$HIPCCCOMSTR"),
        suffix=".o", src_suffix=".cu", source_scanner=scanner, single_source=True,
    )
    env.AddMethod(_hip_object, "HipObject")
    env.AddMethod(probe_rocm, "ProbeRocm")


def exists(env: Environment) -> bool:
    return True
