"""CUDA architecture selection for ggml-cuda.so: tables keyed by toolkit version and target arch.

Defaults follow llamafile's cuda.sh: SASS only (``code=sm_X``, no PTX, so a GPU outside the list
gets no JIT fallback), 75/80/86/89/90 on every toolkit; CUDA 13 on x86-64 adds the Blackwell
consumer family ``sm_120f``; CUDA 13 on aarch64 replaces the list with Jetson Thor (``sm_110f``) and
DGX Spark (``sm_121a``). CUDA 12.x never gets sm_120. ``CUDA_ARCHS=80,90,120f`` overrides the list
and is validated against what that nvcc accepts, so a typo fails before any compile.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from opencoti_build.errors import UserError

Version = tuple[int, int]


class CudaArchError(UserError):
    """A CUDA_ARCHS entry, toolkit version or target arch the build cannot honour (one-line message)."""


@dataclass(frozen=True, order=True)
class CudaArch:
    """A real architecture: ``number`` 120 and ``variant`` 'f' is sm_120f ('a': arch-specific, 'f': family)."""

    number: int
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> CudaArch:
        match = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})([af]?)", text.strip())
        if match is None:
            raise CudaArchError(f"CUDA_ARCHS: {text.strip()!r} is not an architecture; write e.g. CUDA_ARCHS=80,90,120f")
        return cls(int(match.group(1)), match.group(2))

    @property
    def name(self) -> str:
        return f"{self.number}{self.variant}"

    @property
    def sm(self) -> str:
        return f"sm_{self.name}"

    @property
    def gencode(self) -> tuple[str, str]:
        return ("-gencode", f"arch=compute_{self.name},code=sm_{self.name}")


def _archs(*names: str) -> tuple[CudaArch, ...]:
    return tuple(CudaArch.parse(n) for n in names)


_TURING_TO_HOPPER = _archs("75", "80", "86", "89", "90")

# (toolkit major, target arch) -> the default list (upstream cuda.sh).
DEFAULT_ARCHS: dict[tuple[int, str], tuple[CudaArch, ...]] = {
    (12, "x86_64"): _TURING_TO_HOPPER,
    (12, "aarch64"): _TURING_TO_HOPPER,
    (13, "x86_64"): _TURING_TO_HOPPER + _archs("120f"),
    (13, "aarch64"): _archs("110f", "121a"),
}

# Majors on which upstream passes --compress-mode=size (about 4x smaller DSO); nvcc knows it since 12.8.
COMPRESS_MAJORS: frozenset[int] = frozenset({13})
COMPRESS_SINCE: Version = (12, 8)
COMPRESS_FLAG = "--compress-mode=size"


def _with_variants(numbers: tuple[int, ...], variants: tuple[str, ...]) -> frozenset[CudaArch]:
    return frozenset(CudaArch(n, v) for n in numbers for v in variants)


_CUDA12 = _archs("50", "52", "53", "60", "61", "62", "70", "72", "75", "80", "86", "87", "89", "90", "90a")
_CUDA12_8 = frozenset(_CUDA12) | _with_variants((100, 101, 120), ("", "a"))
_CUDA12_9 = _CUDA12_8 | _with_variants((100, 101, 103, 120, 121), ("", "a", "f"))

# First toolkit version -> the real architectures its nvcc accepts from then on (CUDA 13 dropped
# everything before Turing and renamed sm_101 to sm_110).
ACCEPTED_ARCHS: tuple[tuple[Version, frozenset[CudaArch]], ...] = (
    ((12, 0), frozenset(_CUDA12)),
    ((12, 8), _CUDA12_8),
    ((12, 9), _CUDA12_9),
    ((13, 0), frozenset(_archs("75", "80", "86", "87", "88", "89", "90", "90a"))
     | _with_variants((100, 103, 110, 120, 121), ("", "a", "f"))),
)

_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def target_machine(machine: str) -> str:
    """``platform.machine()`` spelled as the tables spell it."""
    try:
        return _MACHINES[machine.lower()]
    except KeyError:
        raise CudaArchError(f"no CUDA architecture table for host arch {machine!r} (x86_64 and aarch64 have one)") from None


def parse_nvcc_version(text: str) -> Version:
    """(major, minor) from ``nvcc --version`` output ("Cuda compilation tools, release 13.0, V13.0.88")."""
    match = re.search(r"release (\d+)\.(\d+)", text)
    if match is None:
        raise CudaArchError("`nvcc --version` printed no 'release X.Y' line; is this nvcc?")
    return int(match.group(1)), int(match.group(2))


def accepted_archs(version: Version) -> frozenset[CudaArch]:
    """The real architectures the nvcc of ``version`` can build (newest known table for newer toolkits)."""
    known = [archs for since, archs in ACCEPTED_ARCHS if since <= version]
    if not known:
        raise CudaArchError(f"CUDA {version[0]}.{version[1]} is older than 12.0, the oldest llamafile builds with; "
                            f"point CUDA_PATH at a 12.x or 13.x toolkit")
    return known[-1]


def _fmt(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def parse_override(text: str) -> list[CudaArch]:
    """``80,90,120f`` → archs, duplicates dropped, order kept."""
    archs: list[CudaArch] = []
    for word in text.split(","):
        if word.strip():
            arch = CudaArch.parse(word)
            if arch not in archs:
                archs.append(arch)
    if not archs:
        raise CudaArchError("CUDA_ARCHS names no architecture; write e.g. CUDA_ARCHS=80,90,120f or leave it empty")
    return archs


def selected_archs(version: Version, machine: str, override: str = "") -> list[CudaArch]:
    """The architectures to build: ``override`` validated against this toolkit, else the default table."""
    accepted = accepted_archs(version)
    if not override.strip():
        try:
            return list(DEFAULT_ARCHS[(version[0], target_machine(machine))])
        except KeyError:
            raise CudaArchError(f"no default architecture list for CUDA {_fmt(version)} on {machine}; "
                                f"set CUDA_ARCHS (e.g. CUDA_ARCHS=80,90)") from None
    archs = parse_override(override)
    for arch in archs:
        if arch not in accepted:
            names = ", ".join(a.name for a in sorted(accepted))
            raise CudaArchError(f"CUDA_ARCHS: nvcc {_fmt(version)} cannot build {arch.sm} (it builds {names}); "
                                f"drop it or use a toolkit that has it")
    numbers = [a.number for a in archs]
    for arch in archs:
        if numbers.count(arch.number) > 1:
            # nvcc refuses e.g. sm_100 and sm_100f cubins in one compile
            clash = " and ".join(a.sm for a in archs if a.number == arch.number)
            raise CudaArchError(f"CUDA_ARCHS: {clash} cannot be built together; keep one")
    return archs


def compress_flags(version: Version) -> list[str]:
    if version[0] in COMPRESS_MAJORS and version >= COMPRESS_SINCE:
        return [COMPRESS_FLAG]
    return []


def gencode_flags(version: Version, machine: str, override: str = "") -> list[str]:
    """nvcc words selecting the architectures (and the fatbin compression) for compile and link."""
    flags = [word for arch in selected_archs(version, machine, override) for word in arch.gencode]
    return flags + compress_flags(version)
