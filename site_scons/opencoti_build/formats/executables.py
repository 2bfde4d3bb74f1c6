"""The magic bytes that say what kind of executable a file is (the packager, inspect and verify read them)."""
from __future__ import annotations

ELF_MAGIC = b"\x7fELF"
APE_MAGIC = b"MZqFpD"  # cosmopolitan's Actually Portable Executable: a shell-script-shaped PE header
