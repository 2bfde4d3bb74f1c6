"""`opencoti-build verify ARTIFACT` and `opencoti-build pin ARTIFACT`.

verify re-reads a packaged artifact and holds it against its MANIFEST.json: the whole file's
sha256, then every zip entry (digest, data offset, alignment, stored), then each embedded DSO
against the copies in vendors/dist and the runtime's ~/.llamafile cache, then its SBOM and provenance
Statement (the Statement's signature with a public key). It prints what the seed's manual checklist printed
(`unzip -l | grep ggml-`, `sha256sum`, `jq -r .sha256`), one FAIL line per problem, and one FAILED line per kind
of problem with what fits it: an artifact that does not match its manifest is repackaged; a DSO in vendors/dist
that is not the one inside an intact artifact was rebuilt since (package again to embed it); a stale
~/.llamafile copy is deleted or replaced with MIRROR=1; a signature that does not verify is a key question.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from opencoti_build import files, project
from opencoti_build.artifacts import intoto, provenance
from opencoti_build.artifacts import manifest as manifests
from opencoti_build.config import signing_keys
from opencoti_build.errors import WhyNot
from opencoti_build.formats.executables import APE_MAGIC, ELF_MAGIC
from opencoti_build.formats.zipstore import CentralRecord, ZipStoreError, data_offset, method_name, read_zip_store

_CHUNK = 4 << 20
PROJECT = project.ROOT
PIN_ASSET = "opencoti-embedder.llamafile"


@dataclass(frozen=True)
class StaleCopy:
    """A copy of an embedded DSO outside the artifact that is not the one inside it."""

    name: str  # ggml-<backend>.so
    path: Path
    problem: str  # its FAIL line


@dataclass
class Report:
    """Problems make verify fail (one line each), by kind: ``problems`` the artifact against its manifest, SBOM and
    Statement; ``signature`` the Statement's signature against the public key given; ``copies`` a DSO in vendors/dist
    that is not the one inside the artifact; ``mirrors`` a ~/.llamafile copy that is not. Notes are printed but do
    not fail. ``refused``: why the file could not be checked at all (not an artifact, no manifest): the one line
    verify prints then."""

    problems: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    copies: list[StaleCopy] = field(default_factory=list)  # in vendors/dist
    mirrors: list[StaleCopy] = field(default_factory=list)  # in ~/.llamafile/v/<ver>/
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def failed(self) -> bool:
        return bool(self.refused or self.problems or self.signature or self.copies or self.mirrors)


def artifacts_in(directory: Path) -> list[Path]:
    """What `scons verify` checks in ``$DIST_DIR/llamafile``: every ``*.llamafile`` there, and the artifact of every
    manifest there whose artifact is gone (verify names what is missing); none when the directory is absent."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = {name for name in names if name.endswith(".llamafile")}
    found |= {name[: -len(manifests.MANIFEST_SUFFIX)] for name in names
              if name.endswith(".llamafile" + manifests.MANIFEST_SUFFIX)}
    return [directory / name for name in sorted(found) if not name.startswith(".")]  # not a writer's temporary


def why_not_an_artifact(path: Path) -> WhyNot:
    """Why ``path`` is not a llamafile artifact (an APE or ELF executable carrying a zip store), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(APE_MAGIC))
    except FileNotFoundError:
        return f"{path}: no such artifact; run `scons package` first"
    except OSError as exc:
        return f"{path}: cannot read it: {exc.strerror}"
    if not head.startswith((APE_MAGIC, ELF_MAGIC)):
        return f"{path} is not a llamafile artifact (neither an APE nor an ELF executable); name a .llamafile file"
    try:
        read_zip_store(path)
    except ZipStoreError:
        return f"{path} is not a llamafile artifact (an executable without a zip store); name a .llamafile file"
    return None


def _stored_digest(f, offset: int, size: int) -> tuple[str, int]:
    """(sha256, CRC-32) of ``size`` bytes at ``offset``: a stored entry's data, read in place."""
    digest, crc = hashlib.sha256(), 0
    f.seek(offset)
    while size:
        chunk = f.read(min(size, _CHUNK))
        if not chunk:
            break
        digest.update(chunk)
        crc = zlib.crc32(chunk, crc)
        size -= len(chunk)
    return digest.hexdigest(), crc


def _member_sha256(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    digest = hashlib.sha256()
    with archive.open(info) as src:  # zipfile inflates and checks the CRC-32
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _unzip_l_line(info: zipfile.ZipInfo) -> str:
    y, mo, d, h, mi, _ = info.date_time
    return f"{info.file_size:>9}  {mo:02d}-{d:02d}-{y:04d} {h:02d}:{mi:02d}   {info.filename}"


@dataclass(frozen=True)
class _Reading:
    """An artifact whose entries are being checked: its bytes, its zip as Python's zipfile reads it (which inflates
    and checks the CRC-32 of a deflated entry), where its central directory starts, and the manifest's alignment."""
    artifact: Path
    raw: BinaryIO
    archive: zipfile.ZipFile
    members: dict[str, zipfile.ZipInfo]
    cd_offset: int
    align: int
    report: Report

    def member_sha256(self, name: str) -> str:
        return _member_sha256(self.archive, self.members[name])


def _check_entries(artifact: Path, manifest: dict, report: Report) -> dict[str, str]:
    """Check every zip entry against the manifest; returns each entry's SHA-256 as read from the artifact."""
    read: dict[str, str] = {}
    try:
        store = read_zip_store(artifact)
    except ZipStoreError as exc:
        report.problems.append(str(exc))
        return read
    expected = {e["name"]: e for e in manifest.get("entries", [])}
    try:
        archive = zipfile.ZipFile(artifact)
    except (zipfile.BadZipFile, OSError) as exc:
        report.problems.append(f"{artifact}: Python's zipfile cannot read it ({exc})")
        return read
    with archive, open(artifact, "rb") as raw:
        members = {i.filename: i for i in archive.infolist()}
        report.lines.append(f"$ unzip -l {artifact} | grep ggml-")
        report.lines += [_unzip_l_line(i) for i in members.values() if "ggml-" in i.filename]
        reading = _Reading(artifact, raw, archive, members, store.cd_offset, int(manifest.get("align") or 1), report)
        for record in store.records:
            want = expected.pop(record.name, None)
            digest = _unlisted_digest(reading, record) if want is None else _listed_digest(reading, record, want)
            if digest is not None:
                read[record.name] = digest
        report.problems += [f"{artifact}: manifest entry {name!r} is missing from the archive" for name in expected]
    return read


def _unlisted_digest(reading: _Reading, record: CentralRecord) -> str | None:
    """An entry the manifest does not list is a problem, and still read: the SBOM is checked against what the
    artifact holds, not against the manifest."""
    reading.report.problems.append(f"{reading.artifact}: entry {record.name!r} is not in the manifest")
    try:
        return reading.member_sha256(record.name)
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, zlib.error):
        return None


def _listed_digest(reading: _Reading, record: CentralRecord, want: dict) -> str | None:
    """A listed entry checked against its manifest entry (offset, alignment, method, size, SHA-256); its SHA-256
    as read, or None when it cannot be read."""
    problems = reading.report.problems
    try:
        offset = data_offset(reading.raw, reading.artifact, record, reading.cd_offset)
    except ZipStoreError as exc:
        problems.append(str(exc))
        return None
    method = method_name(record.method)
    problems += _layout_problems(record, want, offset, method, reading.align)
    if method == "stored":
        digest, crc = _stored_digest(reading.raw, offset, record.size)
        if crc != record.crc32:
            problems.append(f"{record.name}: CRC-32 {crc:08x} does not match its zip record {record.crc32:08x}")
    else:
        try:
            digest = reading.member_sha256(record.name)
        except (zipfile.BadZipFile, KeyError, OSError, EOFError, zlib.error) as exc:
            problems.append(f"{record.name}: cannot read it back ({exc})")
            return None
    if digest != want.get("sha256"):
        problems.append(f"{record.name}: sha256 {digest}, manifest says {want.get('sha256')}")
    return digest


def _layout_problems(record: CentralRecord, want: dict, offset: int, method: str, align: int) -> list[str]:
    """Where an entry's data lies, how it is stored and how big it is, against its manifest entry (an appended
    entry is stored, at a multiple of the alignment)."""
    problems = []
    if offset != want.get("offset"):
        problems.append(f"{record.name}: data offset {offset}, manifest says {want.get('offset')}")
    if want.get("appended") and offset % align:
        problems.append(f"{record.name}: data offset {offset} is not a multiple of {align}")
    if method != want.get("method") or (want.get("appended") and method != "stored"):
        problems.append(f"{record.name}: method {method}, manifest says {want.get('method')}")
    if record.size != want.get("size"):
        problems.append(f"{record.name}: size {record.size}, manifest says {want.get('size')}")
    return problems


def _check_dso_copies(manifest: dict, vendor_dist: Path, home: Path, report: Report) -> None:
    version = manifest.get("llamafileVersion", "?")
    for dso in manifest.get("dsos", []):
        copies = (
            ("vendors/dist", vendor_dist / "llamafile" / dso["backend"] / version / dso["name"]),
            ("~/.llamafile mirror", home / ".llamafile" / "v" / version / dso["name"]),
        )
        for label, path in copies:
            if not path.is_file():
                if label == "vendors/dist":  # the mirror is made with MIRROR=1 only
                    report.notes.append(f"note: no {label} copy of {dso['name']} at {path}")
            elif (digest := files.sha256(path)) != dso["sha256"]:
                (report.copies if label == "vendors/dist" else report.mirrors).append(StaleCopy(
                    dso["name"], path, f"{dso['name']}: {label} copy {path} has sha256 {digest}, the artifact "
                                       f"{dso['sha256']}"))


def verify(artifact: Path, vendor_dist: Path, home: Path, public_key: Any = None,
           key_option: str = "--pubkey PEM") -> Report:
    """Check ``artifact`` against its MANIFEST.json, then its SBOM and provenance Statement (their signature with
    ``public_key``: signing_keys.load_public_key; ``key_option``: how the user gives one, for the line that says a
    signature went unchecked); the report says what was found."""
    report = Report()
    manifest_file = manifests.manifest_path(artifact)
    if not artifact.is_file():
        report.refused = why_not_an_artifact(artifact)
        return report
    try:
        manifest = manifests.read(manifest_file)
    except manifests.ManifestError as exc:  # no artifact of ours, or one whose manifest is gone: one line either way
        report.refused = why_not_an_artifact(artifact) or str(exc)
        return report  # with a manifest, a damaged artifact (truncated, no zip store left) gets the full report
    sha = files.sha256(artifact)
    size = artifact.stat().st_size
    entries = _check_entries(artifact, manifest, report)
    report.lines += [f"$ sha256sum {artifact}", f"{sha}  {artifact}",
                     f"$ jq -r .sha256 {manifest_file}", str(manifest.get("sha256"))]
    if sha != manifest.get("sha256"):
        report.problems.append(f"{artifact}: sha256 {sha}, manifest says {manifest.get('sha256')}")
    if size != manifest.get("size"):
        report.problems.append(f"{artifact}: size {size}, manifest says {manifest.get('size')}")
    _check_dso_copies(manifest, vendor_dist, home, report)
    mismatch = provenance.why_not_matching(artifact, sha, entries)
    statement = provenance.statement_path(artifact)
    if mismatch:
        report.problems.append(mismatch)  # the first one: the rest follow from it or from the problems above
    elif statement.is_file():
        matched = f"provenance: {provenance.sbom_path(artifact).name} and {statement.name} match the artifact"
        if public_key is not None:
            bad = intoto.why_not_verified(statement, public_key)
            if bad:
                report.signature.append(bad)
            else:
                report.lines.append(f"{matched} (signature verified)")
        elif intoto.is_signed(statement):
            report.lines.append(f"{matched}; its signature was NOT checked (no public key: {key_option})")
        else:
            report.lines.append(f"{matched}; the Statement is not signed (no signature to check)")
    return report


def print_report(artifact: Path, report: Report, out: Callable[[str], None] = print,
                 key: str = "the public key given") -> int:
    """Print ``report``: its lines and notes, a FAIL line per problem, then the verdict: OK, or a FAILED line for each
    kind of problem with the fix that fits it (``key``: the public key as the user gave it)."""
    if report.refused:
        out(f"FAILED: {report.refused}")
        return 1
    for line in report.lines + report.notes:
        out(line)
    for problem in report.problems + report.signature + [c.problem for c in report.copies + report.mirrors]:
        out(f"FAIL: {problem}")
    manifest_name = manifests.manifest_path(artifact).name
    if report.problems:
        # `scons package` rewrites whatever no longer is the file its last run recorded (site_tools/exact_outputs)
        out(f"FAILED: {artifact} does not match {manifest_name}; run `scons package` with the same variables "
            "to rewrite it and its manifest")
    intact = f"{artifact} matches {manifest_name}" if not report.problems else f"{artifact}:"
    if report.signature:
        out(f"FAILED: {intact}, but its provenance signature does not verify with {key}: a signature failure, not "
            "a changed artifact; give the public half of the SIGNING_KEY it was packaged with (repackaging with "
            "another key signs it anew)")
    if report.copies:
        names = ", ".join(f"{c.path} is not the {c.name} inside it" for c in report.copies)
        out(f"FAILED: {intact}, but {names}: that DSO was rebuilt after packaging (another CUDA_PATH, ROCM_PATH, "
            "VULKAN_SDK, *_ARCHS or source); `scons package` with the variables of that build packages the new "
            "one, or rebuild the DSO with the variables this artifact was packaged with")
    if report.mirrors:
        names = ", ".join(f"{c.path} is not the {c.name} inside it" for c in report.mirrors)
        out(f"FAILED: {intact}, but {names}, and llamafile loads that copy first: delete it, or build with "
            "MIRROR=1 to put the DSO just built there")
    if not report.failed:
        out(f"OK: {artifact} matches {manifest_name}")
    return 1 if report.failed else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="opencoti-build verify", description="check artifacts against their MANIFEST.json")
    parser.add_argument("artifacts", nargs="+", type=Path, metavar="ARTIFACT")
    parser.add_argument("--vendor-dist", type=Path, default=PROJECT / "vendors" / "dist",
                        help="BACKEND_DIST_DIR holding llamafile/<backend>/<ver>/ggml-<backend>.so (default: %(default)s)")
    parser.add_argument("--home", type=Path, default=Path(os.path.expanduser("~")),
                        help="home whose .llamafile/v/<ver>/ mirror is checked (default: %(default)s)")
    parser.add_argument("--pubkey", type=Path, metavar="PEM",
                        help="public key the provenance Statement's DSSE signature must verify with")
    ns = parser.parse_args(argv)
    try:
        public_key = signing_keys.load_public_key(ns.pubkey) if ns.pubkey else None
    except signing_keys.KeyFileError as exc:
        print(f"FAILED: {exc}")
        return 1
    status = 0
    for artifact in ns.artifacts:
        status |= print_report(artifact, verify(artifact, ns.vendor_dist, ns.home, public_key),
                               key=f"--pubkey {ns.pubkey}")
    return status


def pin_line(artifact: Path, sha256: str) -> str:
    """The vendors/pin/embedder.txt line for a local artifact of digest ``sha256`` (the downloader's `file:` mode)."""
    shown = str(artifact) if artifact.is_absolute() or str(artifact).startswith(".") else f"./{artifact}"
    return f"file:{shown}  v0  {PIN_ASSET}  {sha256}"


def pin_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="opencoti-build pin", description="print the file: pin line for an artifact")
    parser.add_argument("artifact", type=Path, metavar="ARTIFACT")
    ns = parser.parse_args(argv)
    artifact: Path = ns.artifact
    # hashed only when it may be pinned: a file with a manifest, or one that is an artifact
    claimed = manifests.manifest_path(artifact).is_file()
    problem = None if claimed else why_not_an_artifact(artifact)
    digest = files.sha256(artifact) if not problem and artifact.is_file() else ""
    problem = problem or _why_not_pinned(artifact, digest)
    if problem:
        print(f"pin: {problem}", file=sys.stderr)
        return 1
    print(pin_line(artifact, digest))
    return 0


def _why_not_pinned(artifact: Path, digest: str) -> WhyNot:
    """Why ``artifact`` (of SHA-256 ``digest``) cannot be pinned: it differs from its manifest (said first: the
    more precise answer for an artifact changed since it was packaged), or it is no llamafile artifact."""
    manifest_file = manifests.manifest_path(artifact)
    if digest and manifest_file.is_file():
        try:
            recorded = manifests.read(manifest_file).get("sha256")
        except manifests.ManifestError as exc:
            return str(exc)
        if recorded != digest:
            return (f"{artifact} no longer matches {manifest_file.name} (sha256 {recorded}); "
                    "run `opencoti-build verify` or repackage")
    return why_not_an_artifact(artifact)
