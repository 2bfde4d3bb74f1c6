"""Running a command and measuring it: wall time, the child's peak RSS, its output; medians; the machine."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    """One finished command: exit status, wall seconds, peak RSS of the child tree (KiB), its stdout+stderr."""

    returncode: int
    wall: float
    max_rss_kib: int
    output: str


def run(argv: Sequence[str | Path], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Run ``argv`` to completion; output goes to a temporary file (no pipe back-pressure on the timing)."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                                env=dict(env) if env is not None else None, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    return Run(proc.returncode, wall, usage.ru_maxrss, text)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _first_line(argv: Sequence[str]) -> str:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return (proc.stdout or proc.stderr).strip().splitlines()[0] if (proc.stdout or proc.stderr).strip() else "?"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    import SCons

    mem_kib = 0
    try:
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "memory": f"{mem_kib / 1048576:.1f} GiB",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "scons": SCons.__version__,
        "gcc": _first_line(["gcc", "--version"]),
        "aarch64 gcc": _first_line(["aarch64-linux-gnu-gcc", "--version"]),
        "make": _first_line(["make", "--version"]),
        "ccache": _first_line(["ccache", "--version"]),
        "python executable": sys.executable,
    }
