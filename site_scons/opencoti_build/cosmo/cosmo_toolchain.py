"""Which cosmocc toolchain a build uses: a real one (COSMOCC=DIR) or the project's stand-in."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from opencoti_build import project
from opencoti_build.errors import UserError

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

    def describe(self) -> str:
        if self.kind == "stand-in":
            return (f"cosmocc stand-in ({self.root}/bin: gcc + aarch64-linux-gnu-gcc; "
                    "empty COSMOCC= for the pinned cosmocc, COSMOCC=DIR for yours)")
        return f"cosmocc at {self.root}" + (f" ({self.origin})" if self.origin else "")

    def record(self) -> str:
        """What MANIFEST.json says made the host: no path of the checkout (the stand-in lives in it)."""
        if self.kind == "stand-in":
            return "cosmocc stand-in (gcc + aarch64-linux-gnu-gcc)"
        if self.origin:  # the pinned one lives in the checkout: its version, not its path
            return f"cosmocc {self.origin.split(',')[0]}"
        return self.describe()


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
