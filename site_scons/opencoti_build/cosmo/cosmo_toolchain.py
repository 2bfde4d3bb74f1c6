"""Which cosmocc toolchain a build uses: a real one (COSMOCC=DIR) or the project's stand-in."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from opencoti_build import project
from opencoti_build.errors import UserError
from opencoti_build.formats.executables import ELF_MAGIC

SHIM_DIR = project.SITE_SCONS / "cosmocc_shim"
TOOLS = ("cosmocc", "cosmoc++", "ar.ape")

# TARGET_ARCH when the user gives none: upstream tunes for zen4; gcc 12 (the stand-in's compiler
# on Debian bookworm) has no znver4, so the stand-in tunes for the newest zen it knows.
DEFAULT_TARGET_ARCH = {
    "cosmocc": ("-Xx86_64-mtune=znver4",),
    "stand-in": ("-Xx86_64-mtune=znver3",),
}


class ToolchainError(UserError):
    """COSMOCC names no usable cosmocc toolchain."""


@dataclass(frozen=True)
class Toolchain:
    kind: str  # "cosmocc" or "stand-in"
    root: Path
    origin: str = ""  # "pinned 4.0.2, downloaded" for the provisioned one (opencoti_build.config.provision)
    archive_sha256: str = ""  # the provisioned one: the sha256 its release zip was checked against

    @property
    def cc(self) -> str:
        return str(self.root / "bin" / "cosmocc")

    @property
    def cxx(self) -> str:
        return str(self.root / "bin" / "cosmoc++")

    @property
    def ar(self) -> str:
        return str(self.root / "bin" / "ar.ape")

    def compiler(self, arch: str, cxx: bool) -> str | None:
        """The compiler behind one half of the fat driver (None: the stand-in's gcc/g++ of that arch)."""
        if self.kind == "stand-in":
            return None
        return str(self.root / "bin" / (f"{arch}-unknown-cosmo-c++" if cxx else f"{arch}-unknown-cosmo-cc"))

    @property
    def pinned_version(self) -> str | None:
        """The provisioned one's release ("4.0.2"); None for a cosmocc of the user's and the stand-in."""
        return self.origin.split(",")[0].removeprefix("pinned ") if self.origin.startswith("pinned ") else None

    def drivers(self, which: Callable[[str], str | None]) -> dict[str, str]:
        """The programs its fat compiles run, by the name they are run as (what the provenance Statement digests):
        the stand-in's gcc and g++ of each architecture where ``which`` (the build's PATH) finds them; a cosmocc's
        fat drivers and the compilers behind them, where they exist."""
        from opencoti_build.cosmo import fatcc

        if self.kind == "stand-in":
            names = sorted({name for compilers in fatcc.COMPILERS.values() for name in compilers.values()})
            return {name: path for name in names if (path := which(name))}
        programs = [self.cc, self.cxx] + [self.compiler(arch, cxx) for arch in fatcc.ARCHES for cxx in (False, True)]
        return {f"bin/{Path(p).name}": p for p in programs if p and os.path.isfile(p)}

    def describe(self) -> str:
        if self.kind == "stand-in":
            return (f"cosmocc stand-in ({self.root}/bin: gcc + aarch64-linux-gnu-gcc; "
                    "empty COSMOCC= for the pinned cosmocc, COSMOCC=DIR for yours)")
        return f"cosmocc at {self.root}" + (f" ({self.origin})" if self.origin else "")

    def objects_follow_code(self, flags: Sequence[str]) -> bool:
        """Whether a compile with ``flags`` writes the same object for the same code, whatever the comments: gcc's do
        (the stand-in runs gcc whatever the flags, a cosmocc runs it by default and with -mgcc); a cosmocc's clang
        (-mclang) with debug info puts each source's MD5 in the DWARF 5 line table."""
        if self.kind == "stand-in":
            return True
        compiler = [flag for flag in flags if flag in ("-mclang", "-mgcc")]
        debug = [flag for flag in flags if flag.startswith("-g") and not flag.startswith("-gno-")]
        return not compiler or compiler[-1] == "-mgcc" or not debug or debug[-1] == "-g0"

    def record(self) -> str:
        """What MANIFEST.json says made the host: no path of the checkout (the stand-in lives in it)."""
        if self.kind == "stand-in":
            return "cosmocc stand-in (gcc + aarch64-linux-gnu-gcc)"
        if self.origin:  # the pinned one lives in the checkout: its version, not its path
            return f"cosmocc {self.origin.split(',')[0]}"
        return self.describe()


def runnable_argv(argv: list[str]) -> list[str]:
    """``argv`` as a shell would start it: a program with neither ``#!`` nor an ELF header goes through /bin/sh.

    cosmocc's ``ar.ape`` (and its other tools) are APEs: on Linux without binfmt_misc, execve refuses them
    (ENOEXEC) and only a shell's fallback runs them, as make's execvp does for upstream's build.
    """
    try:
        with open(argv[0], "rb") as fh:
            head = fh.read(4)
    except OSError:
        return argv  # not a path (looked up on PATH) or unreadable: exec says why
    if head.startswith(b"#!") or head == ELF_MAGIC:
        return argv
    return ["/bin/sh", *argv]


def find_toolchain(cosmocc_dir: str) -> Toolchain:
    """The toolchain unpacked at ``cosmocc_dir`` ("stand-in": the project's; opencoti_build.config.provision decides)."""
    if cosmocc_dir == "stand-in":
        return Toolchain("stand-in", SHIM_DIR)
    root = Path(cosmocc_dir).expanduser().resolve()
    missing = [t for t in TOOLS if not os.access(root / "bin" / t, os.X_OK)]
    if missing:
        raise ToolchainError(
            f"COSMOCC={cosmocc_dir} has no executable bin/{missing[0]}; point COSMOCC at an unpacked cosmocc "
            "release (the directory holding bin/cosmocc), leave it empty for the pinned one, or COSMOCC=stand-in")
    return Toolchain("cosmocc", root)


def missing_output_message(toolchain: Toolchain, source: str, missing: str) -> str:
    """One line for a fat compile that exited 0 without writing ``missing`` (an object or its twin)."""
    who = f"COSMOCC={toolchain.root}" if toolchain.kind == "cosmocc" else "the cosmocc stand-in"
    return (f"{who} compiled {source} but wrote no {missing} (a fat compile writes X.o and .aarch64/X.o); "
            "point COSMOCC at a cosmocc release whose driver builds both, or COSMOCC=stand-in for the stand-in")
