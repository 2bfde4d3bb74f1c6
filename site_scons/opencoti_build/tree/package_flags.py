"""A package's compile flags, assembled once for both lanes (the fat host lane and the native lane).

A package compiles with the lane's defaults its recipe inherits (``Package.inherits``: upstream's
build/config.mk defaults, which llamafile's own recipe and TinyBLAS's partly skip), then its own
flags; each file adds its per-file flags (``FileFlags``), its ``TARGET_ARCH`` override, its version
stamps and the web UI define. The lanes differ only in their defaults and in how they spell a path.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opencoti_build.tree import webui
from opencoti_build.tree.sources import Package


@dataclass(frozen=True)
class LaneDefaults:
    """A lane's spelling of config.mk's defaults (sources.DEFAULT_*), each given to the packages inheriting it."""

    ccflags: tuple[str, ...] = ()  # inherited with "CCFLAGS"
    cppflags: tuple[str, ...] = ()  # inherited with "CPPFLAGS", as are the iquote dirs
    iquote: tuple[str, ...] = ()
    target_arch: tuple[str, ...] = ()  # inherited with "TARGET_ARCH"


@dataclass(frozen=True)
class PackageFlags:
    """What every file of one package compiles with; dirs are description paths."""

    ccflags: tuple[str, ...]
    cppflags: tuple[str, ...]
    iquote: tuple[str, ...]
    isystem: tuple[str, ...]
    defines: tuple[str, ...]
    target_arch: tuple[str, ...]


@dataclass(frozen=True)
class FileCompile:
    """What one file adds to its package's flags."""

    flags: tuple[str, ...]  # after the package's ccflags (gcc takes the last -O)
    target_arch: tuple[str, ...] | None  # appended to the package's target_arch (None: nothing)
    defines: tuple[str, ...]  # after the package's defines: version stamps, the web UI define


def package_flags(package: Package, defaults: LaneDefaults) -> PackageFlags:
    """The package's flags over the defaults its recipe inherits."""
    cpp = "CPPFLAGS" in package.inherits
    return PackageFlags(
        ccflags=(defaults.ccflags if "CCFLAGS" in package.inherits else ()) + package.flags,
        cppflags=defaults.cppflags if cpp else (),
        iquote=(defaults.iquote if cpp else ()) + package.iquote,
        isystem=package.isystem,
        defines=package.defines,
        target_arch=defaults.target_arch if "TARGET_ARCH" in package.inherits else (),
    )


def file_compile(package: Package, source: str, stamps: Mapping[str, str], webui_on: bool) -> FileCompile:
    """What the tree-relative ``source`` of ``package`` adds (``stamps``: sources.tree_stamps)."""
    flags, target_arch = package.file_flags(source)
    defines = package.stamp_defines(source, stamps)
    if webui_on and webui.applies(package.name, source):
        defines += (webui.DEFINE,)
    return FileCompile(flags, target_arch, defines)
