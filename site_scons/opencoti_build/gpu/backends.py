"""The GPU backends, one spec each, in build order: what the build knows of a backend outside its SCons tool
(site_scons/site_tools/<tool>.py) and its SConscript (backends/<name>/SConscript).

backends/SConscript checks, probes and reads each requested backend from its spec; package/ records each
DSO's toolchain; the manifest and ``opencoti-build inspect`` (binary_report) read every DSO with every
spec's device-code reader; the DSO verification (ggml_dso) checks the spec's names and entry points.
docs/architecture.md, "Adding a backend".

lief and the format readers load only when a DSO is read: a host build imports this module too.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from opencoti_build.errors import UserError, WhyNot
from opencoti_build.formats.executables import ELF_MAGIC
from opencoti_build.gpu import cuda_sources, vulkan_shaders
from opencoti_build.gpu.toolchains import cuda, rocm, vulkan


class Toolchain(Protocol):
    @property
    def record(self) -> str:
        """What the manifest's ``toolchains`` says made the DSO."""

    @property
    def description(self) -> str:
        """One line for messages: what and where."""

    @property
    def driver(self) -> str:
        """The compiler driver it runs (nvcc, hipcc, glslc): the provenance Statement digests its bytes."""


@dataclass(frozen=True)
class DeviceCode:
    """One backend's device code in a file, as inspect and the manifest print it."""

    architectures: tuple[str, ...]  # the manifest's spelling: sm_*/compute_*, gfx*, spirv-<version>
    summary: str | None  # inspect's line; None when the file holds none


@dataclass(frozen=True)
class Backend:
    name: str
    title: str  # as messages write it
    tool: str  # the SCons tool that compiles its device code and applies its toolchain (env.UseToolchain)
    variables: tuple[str, ...]  # the build variables it reads; the first says where its toolchain is
    probe: Callable[[Mapping[str, Any]], Toolchain]  # raises errors.Absent or toolchains.ToolchainBroken
    why_not_buildable: Callable[[str], WhyNot]  # SRC -> why this tree cannot build it; None: it can
    built_names: Callable[[str], list[str]]  # a linked DSO -> the names the build asks for (verification)
    device_code: Callable[[str], DeviceCode]  # any file -> what inspect and the manifest print
    entry_points: tuple[str, ...]  # the symbols llamafile's loader requires of the DSO

    @property
    def dso_name(self) -> str:
        return f"ggml-{self.name}.so"


def _is_elf(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(len(ELF_MAGIC)) == ELF_MAGIC


def _section_names(path: str) -> set[str]:
    if not _is_elf(path):
        return set()
    import lief  # ~1.5 s to import: only once a file is read

    from opencoti_build.formats.lief_names import lief_str

    binary = lief.ELF.parse(path)
    return {lief_str(s.name) for s in binary.sections} if binary is not None else set()


def _cuda_built(path: str) -> list[str]:
    from opencoti_build.formats import nvfatbin

    return nvfatbin.arch_names(path)


def _cuda_code(path: str) -> DeviceCode:
    from opencoti_build.formats import nvfatbin

    entries = nvfatbin.list_entries(path) if nvfatbin.SECTION in _section_names(path) else []
    if not entries:
        return DeviceCode((), None)
    archs = tuple(nvfatbin.arch_names(path))
    cubins = sum(e.kind == "cubin" for e in entries)
    compressed = sorted({e.compression for e in entries if e.compression})
    return DeviceCode(archs, f"cuda archs: {', '.join(archs)} ({cubins} cubin, {len(entries) - cubins} ptx entries; "
                             f"compressed: {', '.join(compressed) or 'no'})")


def _hip_built(path: str) -> list[str]:
    from opencoti_build.formats import hipbundle

    return hipbundle.bundle_targets(path)


def _hip_code(path: str) -> DeviceCode:
    from opencoti_build.formats import hipbundle

    if hipbundle.SECTION not in _section_names(path):
        return DeviceCode((), None)
    targets = tuple(hipbundle.bundle_targets(path))
    return DeviceCode(targets, f"hip targets: {', '.join(targets)}" if targets else None)


def _vulkan_built(path: str) -> list[str]:
    from opencoti_build.formats import spirv

    return spirv.embedded_shaders(path)


def _vulkan_code(path: str) -> DeviceCode:
    from opencoti_build.formats import spirv

    modules = spirv.find_modules(Path(path).read_bytes())
    if not modules:
        return DeviceCode((), None)
    versions = sorted({m.header.version for m in modules})
    return DeviceCode(tuple(f"spirv-{v}" for v in versions),
                      f"spir-v modules: {len(modules)} (version {', '.join(versions)})")


def _why_not_cuda_buildable(src: str) -> WhyNot:
    if cuda_sources.cuda_sources(src):
        return None
    return f"no ggml-cuda sources in {os.path.join(src, cuda_sources.CUDA_DIR)}"


def _why_not_vulkan_buildable(src: str) -> WhyNot:
    source = os.path.join(src, vulkan_shaders.SOURCE)
    return None if os.path.isfile(source) else f"{source} does not exist"


# Every translation unit of every DSO, device code and the ggml core alike, as upstream's cuda.sh/rocm.sh/vulkan.sh.
DSO_DEFINES: tuple[str, ...] = ("NDEBUG", "GGML_BUILD=1", "GGML_SHARED=1", "GGML_MULTIPLATFORM")

# ggml-rocm.so is HIP-compiled from the CUDA sources: llamafile's loader looks it up with the CUDA names.
CUDA_ENTRY_POINTS = ("ggml_backend_cuda_init", "ggml_backend_cuda_reg")

BACKENDS: tuple[Backend, ...] = (
    Backend("cuda", "CUDA", "nvcc", ("CUDA_PATH", "CUDA_ARCHS", "CUBLAS", "FA_ALL_QUANTS"), cuda.probe,
            lambda src: None,  # as upstream's cuda.sh: the kernel list may be empty, the DSO is still TinyBLAS + core
            _cuda_built, _cuda_code, CUDA_ENTRY_POINTS),
    Backend("rocm", "ROCm", "hipcc", ("ROCM_PATH", "OFFLOAD_ARCH", "FA_ALL_QUANTS"), rocm.probe,
            _why_not_cuda_buildable, _hip_built, _hip_code, CUDA_ENTRY_POINTS),
    Backend("vulkan", "Vulkan", "glslc", ("VULKAN_SDK",), vulkan.probe,
            _why_not_vulkan_buildable, _vulkan_built, _vulkan_code, ("ggml_backend_vulkan_init", "ggml_backend_vulkan_reg")),
)
NAMES: tuple[str, ...] = tuple(b.name for b in BACKENDS)
_BY_NAME = {b.name: b for b in BACKENDS}


def get(name: str) -> Backend:
    return _BY_NAME[name]


def dso_architectures(path: str | Path) -> list[str]:
    """Every backend's device architectures in the file at ``path``, in BACKENDS order (for manifests)."""
    return [a for spec in BACKENDS for a in spec.device_code(str(path)).architectures]


class NoBackendBuilt(UserError):
    """A build that needs a backend DSO got none, and CPU_ONLY=1 does not say that is wanted."""


def embedded_dsos(built: Mapping[str, Any], cpu_only: bool) -> dict[str, Any]:
    """The DSOs an artifact embeds (backend -> DSO): none with CPU_ONLY=1; refused when none were built otherwise."""
    if cpu_only:
        return {}
    if not built:
        raise NoBackendBuilt(f"package: no GPU backend DSO was built: {none_built_hint()}")
    return dict(built)


def none_built_hint() -> str:
    """The end of the message of a build that needed a DSO and found no toolchain for any."""
    titles = [b.title for b in BACKENDS]
    return (f"no {', '.join(titles[:-1])} or {titles[-1]} toolchain was found (see the WARN lines); install one, "
            f"point {'/'.join(b.variables[0] for b in BACKENDS)} at it, or pass CPU_ONLY=1")
