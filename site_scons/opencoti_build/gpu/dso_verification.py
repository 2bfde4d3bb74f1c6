"""Whether a linked backend DSO may be published, and its publication: the rules site_tools/ggml_dso.py applies.

A DSO is linked to :func:`staged_path` and renamed to its output only after :func:`verification_error`
finds nothing: SCons keeps a failed step's outputs, and the packager and the mirror take the output by
name, so an unverified DSO must never lie there.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from opencoti_build import tempfiles
from opencoti_build.formats import elfcheck
from opencoti_build.gpu import backends

CORE_LIST = "GGML_CORE_SOURCES in site_scons/opencoti_build/tree/sources.py"


def staged_path(output: str) -> str:
    """Where the link writes before verification: hidden, beside the output (same filesystem, atomic rename)."""
    head, tail = os.path.split(output)
    return os.path.join(head, f".{tail}.unverified")


def verification_error(path: str, spec: backends.Backend, archs: Sequence[str], lib_dirs: Sequence[str] = (),
                       stub_dirs: Sequence[str] = ()) -> str | None:
    """The first reason the DSO of backend ``spec`` linked at ``path`` must not be published, or None.

    It must hold every name in ``archs`` (``spec.built_names``' spelling), export the spec's entry
    points, find every DT_NEEDED in ``lib_dirs`` (``stub_dirs``: link-time stand-ins, see
    formats/elfcheck) or the system's, and leave no undefined symbol unresolved by that closure.
    """
    if archs:
        present = set(spec.built_names(path))
        absent = [a for a in archs if a not in present]
        if absent:
            return (f"{spec.dso_name} lacks the requested architecture {absent[0]} "
                    f"(it holds: {', '.join(sorted(present)) or 'none'}); the toolkit dropped it silently")
    import lief  # ~1.5 s to import: only once a DSO exists

    binary = lief.ELF.parse(path)
    if binary is None:
        raise ValueError(f"{path}: not an ELF file")
    exported = {s.name for s in binary.dynamic_symbols if s.exported}
    for symbol in spec.entry_points:
        if symbol not in exported:
            return (f"{spec.dso_name} does not export {symbol}; llamafile cannot load it "
                    f"(is the backend source compiled in?)")
    report = elfcheck.link_report(path, lib_dirs, stub_dirs)
    if report.missing_libraries:
        return (f"{spec.dso_name} needs {report.missing_libraries[0]}, found in no library directory; "
                f"install it or stop linking it")
    if report.unresolved:
        more = f" (and {len(report.unresolved) - 1} more)" if len(report.unresolved) > 1 else ""
        return (f"{spec.dso_name}: undefined symbol {report.unresolved[0]}{more} provided by no DT_NEEDED library; "
                f"add the ggml core source defining it to {CORE_LIST}")
    return None


def publish(staged: str, output: str) -> None:
    """The verified DSO at ``staged`` becomes ``output``, executable, in one rename."""
    os.chmod(staged, 0o755)
    os.replace(staged, output)


def copy_atomically(source: str, dest: str) -> None:
    """A byte-identical copy of ``source`` at ``dest``, renamed into place from its own temporary file:
    the runtime may be reading the old ``dest`` right now. What a killed copy left is swept first."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    tempfiles.remove_stale(os.path.dirname(dest), os.path.basename(dest))
    fd, tmp = tempfiles.create(dest)
    try:
        with os.fdopen(fd, "wb") as out, open(source, "rb") as src:
            shutil.copyfileobj(src, out)
        publish(str(tmp), dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
