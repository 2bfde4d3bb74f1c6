"""Dynamic-link facts of an ELF shared object: what it needs, and which of its imports nothing provides.

Facts only, no policy (auditwheel style): the DSO builder decides what is fatal. The resolution
mirrors the dynamic loader closely enough for a build-time check: DT_NEEDED names are looked up
in DT_RPATH (only when there is no DT_RUNPATH), DT_RUNPATH, the caller's extra directories (a
toolkit's lib64, its driver stubs), the directories of /etc/ld.so.conf, then the default
directories; every library loaded transitively provides symbols, as the loader's global scope does.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from opencoti_build.formats.lief_names import lief_str

if TYPE_CHECKING:
    import lief

_DEFAULT_DIRS: tuple[str, ...] = (
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
    "/lib64", "/usr/lib64", "/lib", "/usr/lib",
)


@dataclass(frozen=True)
class LinkReport:
    """``unresolved``: undefined, non-weak imports no loaded library defines (sorted).
    ``missing_libraries``: DT_NEEDED names (direct or transitive) found in no search directory."""

    needed: tuple[str, ...]
    unresolved: tuple[str, ...]
    missing_libraries: tuple[str, ...]


def _parse(path: str) -> lief.ELF.Binary:
    # lief loads here, not with the module: importing it takes ~0.8 s, and every SCons run that asks for a
    # backend imports this module (ggml_dso), most of them never parsing an ELF file.
    import lief

    binary = lief.ELF.parse(path)
    if binary is None:
        raise ValueError(f"{path}: not an ELF file")
    return binary


def _ld_so_conf_dirs(conf: str = "/etc/ld.so.conf", _seen: frozenset[str] = frozenset()) -> list[str]:
    """Directories listed by ld.so.conf and the files it includes (what ldconfig caches)."""
    if conf in _seen or not os.path.isfile(conf):
        return []
    dirs: list[str] = []
    for line in Path(conf).read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(conf), pattern)
            for included in sorted(glob.glob(pattern)):
                dirs.extend(_ld_so_conf_dirs(included, _seen | {conf}))
        else:
            dirs.append(line)
    return dirs


def _origin_expand(entries: str, origin: str) -> list[str]:
    return [e.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for e in entries.split(":") if e]


def _own_search_dirs(binary: lief.ELF.Binary, path: str) -> list[str]:
    import lief

    origin = os.path.dirname(os.path.abspath(path))
    # lief makes each DT_RUNPATH and DT_RPATH entry an instance of the class that holds its path
    runpath = [e for e in binary.dynamic_entries if isinstance(e, lief.ELF.DynamicEntryRunPath)]
    if runpath:
        return [d for e in runpath for d in _origin_expand(lief_str(e.runpath), origin)]
    rpath = [e for e in binary.dynamic_entries if isinstance(e, lief.ELF.DynamicEntryRpath)]
    return [d for e in rpath for d in _origin_expand(lief_str(e.rpath), origin)]


def find_library(name: str, dirs: Sequence[str], stub_dirs: Sequence[str] = ()) -> str | None:
    """Path of the library ``name`` in ``dirs``; in ``stub_dirs`` also its unversioned name
    (a toolkit's ``stubs/libcuda.so`` stands for the driver's ``libcuda.so.1``)."""
    if "/" in name:
        return name if os.path.isfile(name) else None
    for d in dirs:
        candidate = os.path.join(d, name)
        if os.path.isfile(candidate):
            return candidate
    unversioned = name.split(".so", 1)[0] + ".so"
    for d in stub_dirs:
        for candidate in (os.path.join(d, name), os.path.join(d, unversioned)):
            if os.path.isfile(candidate):
                return candidate
    return None


@lru_cache(maxsize=None)
def _exports(path: str) -> tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]:
    """(defined dynamic symbol names, DT_NEEDED, own search dirs) of one library, parsed once."""
    binary = _parse(path)
    defined = frozenset(lief_str(s.name) for s in binary.dynamic_symbols if s.name and s.shndx != 0)
    return defined, tuple(lief_str(name) for name in binary.libraries), tuple(_own_search_dirs(binary, path))


def undefined_imports(binary: lief.ELF.Binary) -> set[str]:
    """Names of the undefined dynamic symbols that must be bound at load (weak ones may stay null)."""
    import lief

    return {
        lief_str(s.name) for s in binary.dynamic_symbols
        if s.name and s.shndx == 0 and s.binding != lief.ELF.Symbol.BINDING.WEAK
        and s.binding != lief.ELF.Symbol.BINDING.LOCAL
    }


def link_report(path: str, extra_dirs: Iterable[str] = (), stub_dirs: Iterable[str] = ()) -> LinkReport:
    """Resolve ``path``'s DT_NEEDED closure and report imports none of it defines."""
    binary = _parse(path)
    system_dirs = [*extra_dirs, *_ld_so_conf_dirs(), *_DEFAULT_DIRS]
    stubs = list(stub_dirs)
    wanted = undefined_imports(binary)
    own_dirs = _own_search_dirs(binary, path)
    provided: set[str] = set()
    missing: list[str] = []
    seen: set[str] = set()
    queue: list[tuple[str, list[str]]] = [(lief_str(name), own_dirs) for name in binary.libraries]
    while queue:  # breadth-first, like the loader's symbol search order
        name, requester_dirs = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        found = find_library(name, [*requester_dirs, *system_dirs], stubs)
        if found is None:
            missing.append(name)
            continue
        defined, needed, dirs = _exports(os.path.realpath(found))
        provided |= defined
        queue.extend((n, list(dirs)) for n in needed)
    return LinkReport(
        needed=tuple(lief_str(name) for name in binary.libraries),
        unresolved=tuple(sorted(wanted - provided)),
        missing_libraries=tuple(missing),
    )
