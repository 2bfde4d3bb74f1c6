"""`opencoti-build inspect FILE`: what a built DSO, host binary, llamafile artifact or GGUF model holds.

Prints the file format (ELF machine and type, or APE), DT_NEEDED and imports nothing provides, the
llamafile entry points, each backend's device code (opencoti_build.gpu.backends: the CUDA architectures of
``.nv_fatbin``, the gfx targets of ``.hip_fatbin``, the SPIR-V modules), and the counts of the symbol families listed in vendors/symbol-families.txt.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import lief

from opencoti_build import project
from opencoti_build.formats import elfcheck, gguf_model, hipbundle
from opencoti_build.formats.executables import APE_MAGIC, ELF_MAGIC
from opencoti_build.formats.lief_names import lief_str
from opencoti_build.gpu import backends
from opencoti_build.tree import patch_series

FAMILIES_FILE = project.ROOT / "vendors" / "symbol-families.txt"
SERIES_RECORD = project.ROOT / patch_series.DEFAULT_RECORD
METHODS = ("symbols", "strings")
ENTRY_POINT = re.compile(r"ggml_backend_\w+_(init|reg)")
MIN_STRING = 4
_PRINTABLE_RUN = re.compile(rb"[\x20-\x7e\t]{%d,}" % MIN_STRING)


@dataclass(frozen=True)
class Family:
    name: str
    method: str  # "symbols" or "strings"
    pattern: str


def parse_families(text: str, source: str = "symbol-families.txt") -> list[Family]:
    families = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) != 3 or fields[1] not in METHODS:
            raise ValueError(f"{source}:{number}: expected '<name> symbols|strings <regex>', got {line.strip()!r}")
        try:
            re.compile(fields[2])
        except re.error as exc:
            raise ValueError(f"{source}:{number}: bad regex {fields[2]!r} ({exc})") from None
        families.append(Family(fields[0], fields[1], fields[2].strip()))
    return families


def load_families(path: Path = FAMILIES_FILE) -> list[Family]:
    return parse_families(path.read_text(encoding="utf-8"), str(path))


def printable_strings(data: bytes) -> set[str]:
    """Distinct runs of printable characters, as ``strings -n4`` finds them."""
    return {m.group().decode("ascii") for m in _PRINTABLE_RUN.finditer(data)}


def defined_symbols(binary: lief.ELF.Binary) -> list[str]:
    """Demangled defined dynamic symbols (``nm -D --defined-only | c++filt``); static ones if none."""
    symbols = [s for s in binary.dynamic_symbols if s.name and s.shndx != 0]
    if not symbols:
        symbols = [s for s in binary.symtab_symbols if s.name and s.shndx != 0]
    return [s.demangled_name or lief_str(s.name) for s in symbols]


def family_counts(families: list[Family], data: bytes, binary: lief.ELF.Binary | None) -> dict[str, int | None]:
    """Family name -> count; None for a symbols family on a file without an ELF symbol table."""
    counts: dict[str, int | None] = {}
    symbols = defined_symbols(binary) if binary is not None else None
    strings = printable_strings(data) if any(f.method == "strings" for f in families) else set()
    for family in families:
        if family.method == "symbols":
            regex = re.compile(family.pattern, re.I)
            counts[family.name] = None if symbols is None else sum(1 for s in symbols if regex.search(s))
        else:
            regex = re.compile(family.pattern)
            counts[family.name] = sum(1 for s in strings if regex.fullmatch(s))
    return counts


def describe_format(data: bytes, binary: lief.ELF.Binary | None) -> str:
    if binary is not None:
        bits = "ELF64" if binary.header.identity_class == lief.ELF.Header.CLASS.ELF64 else "ELF32"
        kind = str(binary.header.file_type).split(".")[-1]
        return f"{bits} {str(binary.header.machine_type).split('.')[-1]} {kind}"
    if data.startswith(APE_MAGIC):
        return "APE (cosmopolitan Actually Portable Executable; no ELF symbols, families by strings only)"
    return "not ELF"


def model_report(path: str) -> list[str]:
    """What a GGUF model is: its version and counts (gguf_model parses it whole; ModelError when it is damaged)."""
    info = gguf_model.check_gguf(path)
    return [f"file: {path}", f"format: GGUF v{info.version} model, {info.tensors} tensors, {info.metadata} metadata "
            f"keys, tensor data at byte {info.data_offset} of {info.file_size}"]


def _link_lines(path: str, binary: lief.ELF.Binary) -> list[str]:
    """An ELF's dynamic linking: what it needs (and what of that is not found), what it leaves unresolved, and
    which of its exported symbols are entry points."""
    link = elfcheck.link_report(path)
    lines = [f"needed: {', '.join(link.needed) or 'none'}"]
    if link.missing_libraries:
        lines.append(f"needed but not found: {', '.join(link.missing_libraries)}")
    lines.append(f"unresolved imports: {', '.join(link.unresolved) or 'none'}")
    names = (lief_str(s.name) for s in binary.dynamic_symbols if s.exported)
    exported = sorted(name for name in names if ENTRY_POINT.fullmatch(name))
    return [*lines, f"entry points: {', '.join(exported) or 'none'}"]


def report(path: str, families: list[Family]) -> list[str]:
    with open(path, "rb") as f:
        head = f.read(len(APE_MAGIC))
    if head.startswith(gguf_model.GGUF_MAGIC):
        return model_report(path)
    if not head.startswith((ELF_MAGIC, APE_MAGIC)):
        raise ValueError("not an ELF, APE or GGUF file; inspect reads DSOs, host binaries, llamafile artifacts "
                         "and models")
    data = Path(path).read_bytes()
    binary = lief.ELF.parse(path) if data.startswith(ELF_MAGIC) else None
    lines = [f"file: {path}", f"format: {describe_format(data, binary)}"]
    if binary is not None:
        lines += _link_lines(path, binary)
    lines += [code.summary for code in (spec.device_code(path) for spec in backends.BACKENDS) if code.summary]
    lines.append("families:")
    for family in families:
        count = family_counts([family], data, binary)[family.name]
        shown = "n/a (no ELF symbols; use a strings family)" if count is None else str(count)
        lines.append(f"  {family.name:<16} {family.method:<8} {shown}")
    return lines


def series_report(record_path: Path) -> list[str]:
    """The patch chain a build of the vendored tree carries, from the record `scons apply` writes."""
    record = patch_series.read_record(record_path)
    if record is None:
        return [f"series: no complete apply recorded at {record_path} (run `scons apply`)"]
    lines = [f"series: {record_path}", f"  upstream commit: {record['upstreamCommit']}"]
    lines += [f"  submodule {path}: {commit}" for path, commit in sorted(record["submodules"].items())]
    lines += [f"  {p['series']:<9} {p['name']}  sha256 {p['sha256']}" for p in record["patches"]]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="opencoti-build inspect",
                                     description=__doc__.splitlines()[0].replace("`", ""))  # plain in --help
    parser.add_argument("file", nargs="*", help="a ggml-*.so, a host binary or artifact (APE or ELF), any ELF, a GGUF model")
    parser.add_argument("--families", type=Path, default=FAMILIES_FILE, help="pattern file (default: %(default)s)")
    parser.add_argument("--series", type=Path, nargs="?", const=SERIES_RECORD, metavar="RECORD",
                        help="also print the applied patch series (default record: %(const)s)")
    ns = parser.parse_args(argv)
    if not ns.file and ns.series is None:
        parser.error("give a FILE to inspect, or --series")
    if ns.series is not None:
        print("\n".join(series_report(ns.series)))
    try:
        families = load_families(ns.families)
    except (OSError, ValueError) as exc:
        parser.exit(2, f"opencoti-build inspect: {exc}\n")
    status = 0
    for path in ns.file:
        try:
            print("\n".join(report(path, families)))
        except OSError as exc:
            print(f"opencoti-build inspect: {path}: {exc.strerror}", file=sys.stderr)
            status = 1
        except (ValueError, hipbundle.HipBundleError, gguf_model.ModelError) as exc:
            print(f"opencoti-build inspect: {path}: {exc}", file=sys.stderr)
            status = 1
    return status
