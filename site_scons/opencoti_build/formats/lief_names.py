"""Names lief reads from an ELF file's string tables, as ``str``.

lief gives a name that is not valid UTF-8 as ``bytes``. Decoded with surrogateescape it stays distinct
from every other name and encodes back to its bytes. A module of its own: the readers that need it load
nothing else with it (each one's importers' code closures stay as they were, opencoti_build.incremental.import_closure).
"""
from __future__ import annotations


def lief_str(value: str | bytes) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
