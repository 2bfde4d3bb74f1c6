"""Which gfx targets ggml-rocm.so is built for: upstream's list, cut to what this ROCm can build.

A target builds only if hipcc's clang knows the processor (``--print-supported-cpus`` for
``amdgcn-amd-amdhsa``) AND the ROCm device libraries carry its ISA bitcode
(``oclc_isa_version_<NNN>.bc``): Debian's ROCm 5.2 (clang 15) knows gfx1100-gfx1103 but ships no
device library for them, and its clang has never heard of gfx942.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from opencoti_build.errors import UserError, WhyNot

# llamafile 0.10 rocm.sh's default --offload-arch list, in its order.
UPSTREAM_OFFLOAD_ARCHS: tuple[str, ...] = (
    "gfx906", "gfx942", "gfx1030", "gfx1031", "gfx1032", "gfx1100", "gfx1101", "gfx1102", "gfx1103",
)

_ISA_FILE = re.compile(r"^oclc_isa_version_([0-9a-f]+)\.bc$")
_TARGET_ID = re.compile(r"^(gfx[0-9a-f]+)((?::[a-z0-9]+[+-])*)$")


class OffloadArchError(UserError):
    """OFFLOAD_ARCH asks for something this ROCm cannot build."""


@dataclass(frozen=True)
class RocmSupport:
    """What one ROCm install can build, as discovered by the hipcc tool's probe."""

    compiler: str  # e.g. "clang 15.0.6"
    compiler_cpus: frozenset[str]
    device_lib_dir: str
    device_lib_isas: frozenset[str]

    def why_not_buildable(self, target: str) -> WhyNot:
        """Why ``target`` (a target id, features allowed) cannot be built here; None if it can."""
        match = _TARGET_ID.match(target)
        if not match:
            return "not a gfx target id (expected e.g. gfx1030 or gfx90a:xnack+)"
        processor = match.group(1)
        if processor not in self.compiler_cpus:
            return f"hipcc's {self.compiler} does not know the processor {processor}"
        if processor not in self.device_lib_isas:
            isa = processor.removeprefix("gfx")
            return f"no device library oclc_isa_version_{isa}.bc for it in {self.device_lib_dir}"
        return None


def parse_hipcc_config(text: str) -> dict[str, str]:
    """``HIPCC_VERBOSE=3 hipcc --version`` output as a dict: its ``KEY=value`` lines
    (DEVICE_LIB_PATH, HIP_CLANG_PATH, ROCM_PATH ...), ``hipcc-cmd`` (the clang command it runs),
    ``HIP_VERSION`` and ``CLANG_VERSION``."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        if m := re.match(r"^([A-Z_]+)=(.*)$", line):
            config[m.group(1)] = m.group(2).strip()
        elif line.startswith("hipcc-cmd:"):
            config["hipcc-cmd"] = line.partition(":")[2].strip()
        elif m := re.match(r"^HIP version:\s*(\S+)", line):
            config["HIP_VERSION"] = m.group(1)
        elif m := re.search(r"clang version (\d+\.\d+\.\d+)", line):
            config["CLANG_VERSION"] = m.group(1)
    return config


def device_lib_isas(directory: str | Path) -> frozenset[str]:
    """The processors whose ISA bitcode the device-library directory holds (``gfx1030``, ``gfx90a``)."""
    root = Path(directory)
    if not root.is_dir():
        return frozenset()
    return frozenset(f"gfx{m.group(1)}" for p in root.iterdir() if (m := _ISA_FILE.match(p.name)))


def parse_supported_cpus(text: str) -> frozenset[str]:
    """gfx processors in clang's ``--print-supported-cpus`` listing (one indented name a line)."""
    return frozenset(line.strip() for line in text.splitlines() if re.fullmatch(r"\s+gfx[0-9a-f]+\s*", line))


def split_override(value: str) -> list[str]:
    """OFFLOAD_ARCH's comma- (or space-) separated targets, in order, without duplicates."""
    seen: dict[str, None] = {}
    for item in re.split(r"[,\s]+", value.strip()):
        if item:
            seen.setdefault(item, None)
    return list(seen)


def default_archs(support: RocmSupport, upstream: Iterable[str] = UPSTREAM_OFFLOAD_ARCHS) -> tuple[list[str], list[str]]:
    """(targets to build, one warning line per upstream target skipped and why)."""
    archs: list[str] = []
    warnings: list[str] = []
    for target in upstream:
        reason = support.why_not_buildable(target)
        if reason:
            warnings.append(f"rocm: skipping {target}: {reason}")
        else:
            archs.append(target)
    return archs, warnings


def override_archs(value: str, support: RocmSupport) -> list[str]:
    """OFFLOAD_ARCH's targets, or OffloadArchError naming every one this ROCm cannot build."""
    targets = split_override(value)
    if not targets:
        raise OffloadArchError("OFFLOAD_ARCH is empty after splitting on commas; name at least one gfx target")
    bad = [(t, support.why_not_buildable(t)) for t in targets]
    bad = [(t, r) for t, r in bad if r]
    if bad:
        what = "; ".join(f"{t}: {r}" for t, r in bad)
        buildable, _ = default_archs(support)
        raise OffloadArchError(
            f"OFFLOAD_ARCH names targets this ROCm cannot build ({what}); "
            f"drop them (buildable upstream targets here: {', '.join(buildable) or 'none'}) or set ROCM_PATH to a newer ROCm"
        )
    return targets


def select_archs(override: str, support: RocmSupport) -> tuple[list[str], list[str]]:
    """(targets, warnings): OFFLOAD_ARCH's targets if given (no warnings), else the filtered upstream list."""
    if override.strip():
        return override_archs(override, support), []
    return default_archs(support)
