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
