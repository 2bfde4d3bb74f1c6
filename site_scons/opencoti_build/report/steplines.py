"""The one short line each kind of step prints (``WORD target``), unless ``VERBOSE=1`` asks for commands.

Every builder's action is ``Action("$XCOM", "$XCOMSTR")`` (or a Python function with a ``$XCOMSTR``
display); with VERBOSE off these strings are set, with VERBOSE on they are left empty and SCons
prints ``$XCOM`` itself, the real command line. The fat compile's line is the cosmocc tool's own
(``FATCC <obj> (+ .aarch64)``, or with VERBOSE the driver line and both per-architecture commands).
"""
from __future__ import annotations

# Base environment: the backend lanes (nvcc, hipcc, glslc, the DSOs' gcc compiles of the ggml core and
# Vulkan's C++). The DSO link prints "Linking"; its verification is Python, so it prints the same
# line in both modes ("Verifying").
BASE = {
    "NVCCCOMSTR": "NVCC $TARGET",
    "HIPCCCOMSTR": "HIPCC $TARGET",
    "GLSLCCOMSTR": "GLSLC $TARGET",
    "SHCCCOMSTR": "DSOCC $TARGET",
    "SHCXXCOMSTR": "DSOCXX $TARGET",
    "DSOLINKCOMSTR": "Linking $TARGET",
    "INSTALLSTR": "INSTALL $TARGET",
}
# The native-ELF lane (native/SConscript) uses its own words.
NATIVE = {
    "CCCOMSTR": "NATIVECC $TARGET",
    "CXXCOMSTR": "NATIVECC $TARGET",
    "SHCCCOMSTR": "NATIVECC $TARGET",
    "SHCXXCOMSTR": "NATIVECC $TARGET",
    "ARCOMSTR": "NATIVEAR $TARGET",
    "LINKCOMSTR": "NATIVELINK $TARGET",
    "SHLINKCOMSTR": "NATIVELINK $TARGET",
    "NVCCCOMSTR": "NVCC $TARGET",
}


def short_forms(table: dict[str, str], verbose: bool) -> dict[str, str]:
    """The ``*COMSTR`` values for an environment: the short lines, or empty ones (SCons prints the command)."""
    return {key: ("" if verbose else value) for key, value in table.items()}


def cached_line(targets: list[str]) -> str:
    """The one line of a step restored from the cache, shaped like the step lines (``CACHED target``): a fat
    object's twin as the compile line has it (``(+ .aarch64)``), any other extra targets counted."""
    first, rest = targets[0], targets[1:]
    if not rest:
        return f"CACHED {first}"
    head, _, name = first.rpartition("/")
    if rest == [f"{head}/.aarch64/{name}" if head else f".aarch64/{name}"]:
        return f"CACHED {first} (+ .aarch64)"
    return f"CACHED {first} (+ {len(rest)} more)"
