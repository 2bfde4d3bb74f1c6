"""Where the tests find a real cosmocc (a release unpacked, or one built from source): OPENCOTI_REAL_COSMOCC.

The fast tiers build with the stand-in; the contract tests (tests/integration/test_fatcc.py) also run on a real
cosmocc when this names one, and the real-toolchain tests (tests/realtree/test_real_cosmocc.py) need one. None is
downloaded or built by the tests: without it they are skipped, saying so once.
"""
from __future__ import annotations

import os
from pathlib import Path

REAL_COSMOCC_ENV = "OPENCOTI_REAL_COSMOCC"
DRIVER_FILES = ("bin/cosmocc", "bin/cosmoc++", "bin/ar.ape", "bin/ape-aarch64.elf")


def real_cosmocc() -> Path | None:
    """The cosmocc OPENCOTI_REAL_COSMOCC names, when it has the fat driver, ar.ape and the aarch64 APE loader."""
    root = os.environ.get(REAL_COSMOCC_ENV)
    if not root:
        return None
    path = Path(root).expanduser()
    return path if all((path / f).is_file() for f in DRIVER_FILES) else None


def skip_line() -> str:
    return (f"{REAL_COSMOCC_ENV} names no cosmocc (bin/cosmocc, cosmoc++, ar.ape, ape-aarch64.elf): "
            "point it at an unpacked cosmocc to run these on the real driver (docs/provisioning.md)")
