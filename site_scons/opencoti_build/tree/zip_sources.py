"""The thin binary's own zip store: the tree files that llamafile's C sources open as ``/zip/<path>``.

Upstream links them in as zipobj ``.zip.o`` objects (llamafile/BUILD.mk's LLAMAFILE_METAL_SOURCES)
so that llamafile/metal.c can extract the ggml and ggml-metal sources on macOS and compile a Metal
dylib at run time. The list is read from the literals themselves, never kept by hand: a
``"/zip/<dir>/<file>"`` literal in ``llamafile/*.c`` names a tree file that must be in the store.
Bare names (``"/zip/ggml-cuda.so"``, ``"/zip/.args"``) are the packager's entries, and literals
with a format (``"/zip/%s"``) or no name (the ``"/zip/"`` prefix test) name no file.
"""
from __future__ import annotations

import re
from pathlib import Path

from opencoti_build.errors import UserError

# Upstream's zipobj writes each entry with no padding before it (elfwriter_align(elf, 1, 0)).
ALIGN = 1
SCANNED = "llamafile/*.c"
_LITERAL = re.compile(r'"/zip/([^"%\\\s]+/[^"%\\\s]+)"')


class ZipSourceError(UserError):
    """A /zip/ literal names a file the tree lacks. One line."""


def zip_paths(root: Path | str) -> list[str]:
    """Tree-relative paths of every file ``llamafile/*.c`` opens as ``/zip/<path>``, sorted, unique."""
    root = Path(root)
    found: dict[str, str] = {}
    for source in sorted(root.glob(SCANNED)):
        text = source.read_text(errors="replace")
        for match in _LITERAL.finditer(text):
            path = match.group(1)
            where = f"{source.relative_to(root).as_posix()}:{text.count(chr(10), 0, match.start()) + 1}"
            if ".." in path.split("/") or not (root / path).is_file():
                raise ZipSourceError(f"{where} opens /zip/{path}, which is no file of the tree at {root}; "
                                     "fix the literal or the tree (the thin binary's zip store is read from these literals)")
            found.setdefault(path, where)
    return sorted(found)


# The linker's two other outputs, copied beside the stored binary (README: llamafile + .com.dbg, .aarch64.elf).
COMPANIONS = (".com.dbg", ".aarch64.elf")


def write_store(linked: Path | str, tree: Path | str, paths: list[str], output: Path | str, *, epoch: int) -> None:
    """``output`` = the linked binary + one stored entry per tree path (its bytes, named by the path).

    The same step for every toolchain, after the link: upstream's zipobj objects need cosmocc's
    linker (the stand-in has none), and a separate step means an edited Metal source rewrites the
    store only, never relinks. Entries are stored, unpadded (zipobj's alignment), timestamped with
    SOURCE_DATE_EPOCH and mode 0644: the bytes depend on the tree's content only. Written beside
    ``output`` and renamed, like the linker's companions copied next to it.
    """
    from opencoti_build.bulkcopy import zipwriter  # imported here: reading the tree needs none of it

    linked, tree, output = Path(linked), Path(tree), Path(output)
    for suffix in COMPANIONS:
        _copy(Path(str(linked) + suffix), Path(str(output) + suffix))
    zipwriter.append(linked, store_entries(tree, paths), output, align=ALIGN, epoch=epoch, mode=0o755)


def store_entries(tree: Path | str, paths: list[str]) -> list:
    """The zipappend entries of the store: each tree file under its tree path, mode 0644."""
    from opencoti_build.formats import zipappend

    return [zipappend.Entry.file(Path(tree) / path, name=path, mode=0o644) for path in paths]


def _copy(source: Path, dest: Path) -> None:
    import os
    import shutil

    from opencoti_build import tempfiles

    fd, tmp = tempfiles.create(dest)
    try:
        with open(source, "rb") as src, os.fdopen(fd, "wb", closefd=False) as out:
            shutil.copyfileobj(src, out, 1 << 20)
        os.fchmod(fd, os.stat(source).st_mode & 0o777)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
