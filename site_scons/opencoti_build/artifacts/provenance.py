"""What went into an artifact, in the formats the supply-chain tools read, made from its MANIFEST.json.

- ``<artifact>.cdx.json``: a CycloneDX 1.6 SBOM (cyclonedx-python-lib): the artifact as the metadata component; a
  component per zip entry and for the host binary, each with its SHA-256; the source trees (commit, license), each
  patch of the series with its digest, and the toolchains with their versions. Every component carries an
  ``opencoti:role`` property (host, entry, source, patch, toolchain) that verify reads back.
- ``<artifact>.intoto.jsonl``: one line, an in-toto v1 Statement (in-toto-attestation) whose subject is the artifact
  and its SHA-256, with a SLSA provenance v1 predicate; with a signing key, a DSSE envelope of that Statement
  (securesystemslib: PAE, ed25519 or ECDSA P-256). Every resource it names has the minimum of the in-toto
  ResourceDescriptor, a ``uri`` or a ``digest``: the source tree its git commit or, when it is no checkout's root,
  the ``dirHash`` of its files (:func:`tree_digest`); each toolchain the digest of the programs that ran (compiler
  drivers, python's executable, SCons's package) or of the pinned cosmocc's release zip, and a purl where there is
  one (:func:`python_resource`, :func:`scons_resource`, :func:`cosmocc_resource`). A Statement is checked
  (opencoti_build.artifacts.intoto.why_not_valid_statement: in-toto-attestation's checks, and that minimum, which the
  library does not check) before it is written, and again by verify (:func:`why_not_matching`).

Both are a function of the manifest and the build's parameters alone: no clock, no random serial (the serial is a
UUIDv5 of the artifact's digest, the times SOURCE_DATE_EPOCH), so the same inputs give the same bytes. An ed25519
signature is deterministic too; an ECDSA one is not (a new nonce each time), the Statement inside it is.
"""
from __future__ import annotations

import datetime
import hashlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
import threading
import types
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from opencoti_build import files, tempfiles
from opencoti_build.artifacts.intoto import (
    DIR_HASH,
    SLSA_PROVENANCE,
    STATEMENT_TYPE,
    ProvenanceError,
    read_statement,
    why_not_valid_statement,
)
from opencoti_build.errors import WhyNot

if TYPE_CHECKING:
    from opencoti_build.cosmo.cosmo_toolchain import Toolchain

T = TypeVar("T")

SBOM_SUFFIX = ".cdx.json"
STATEMENT_SUFFIX = ".intoto.jsonl"
BUILD_TYPE = "https://opencoti.dev/build/llamafile-package/v1"
BUILDER_ID = "https://opencoti.dev/build/scons"
ROLE = "opencoti:role"
# left out of a tree's digest: git's own store and Python's bytecode caches, never a source
NOT_DIGESTED = frozenset((".git", "__pycache__"))
Hasher = Callable[[Path | str], str]  # a file's SHA-256 (hex): files.sha256, or a build's memo of it


@dataclass(frozen=True)
class Source:
    """A source tree an artifact was built from."""

    name: str  # llamafile, llama.cpp
    version: str
    commit: str | None  # its git commit, when it is a git checkout
    license: str | None  # an SPDX id, when the tree's LICENSE file says which
    tree: str | None = None  # the dirHash of its files (tree_digest), when it is not a git checkout's root


# What a tree's LICENSE file says, as an SPDX id: every phrase must appear in its first 4 KiB.
LICENSE_TEXTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Apache-2.0", ("Apache License", "Version 2.0")),
    ("MIT", ("Permission is hereby granted, free of charge",)),
)


def source(name: str, version: str, root: Path, exclude: Iterable[Path | str] = (), sha256: Hasher = files.sha256
           ) -> Source:
    """The source tree at ``root``: its commit when it is the root of a git checkout, else the digest of its files
    (:func:`tree_digest`, less ``exclude``: what the build writes there); its LICENSE's SPDX id."""
    commit = None
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=30, check=False)
        lines = top.stdout.split()
        if top.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == root.resolve():
            commit = lines[1]  # not a tree inside another checkout (the miniature one inside this project)
    except (OSError, subprocess.TimeoutExpired):
        pass
    license_id = None
    for candidate in ("LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING"):
        try:
            head = (root / candidate).read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        license_id = next((spdx for spdx, phrases in LICENSE_TEXTS if all(p in head for p in phrases)), None)
        break
    tree = None
    if commit is None:
        try:
            tree = tree_digest(root, exclude, sha256)
        except OSError as exc:
            raise ProvenanceError(f"cannot digest the files of the {name} tree at {root} for the provenance "
                                  f"Statement: {exc.filename or root}: {exc.strerror or exc}") from None
    return Source(name, version, commit, license_id, tree)


def dir_hash(sums: Mapping[str, str]) -> str:
    """in-toto's ``dirHash`` of the files whose SHA-256s (hex) ``sums`` gives by relative name ('/'-separated):
    Go's dirhash Hash1 in lowercase hex, the SHA-256 of a line ``<sha256>  <name>`` per file in the byte order of
    the names, what ``find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum | sha256sum`` prints in the
    tree. Where the files lie is no part of it: two copies of a tree have the same."""
    summary = hashlib.sha256()
    for name in sorted(sums, key=os.fsencode):
        if "\n" in name:
            raise ProvenanceError(f"{name!r}: a file name with a newline has no dirHash line")
        summary.update(b"%s  %s\n" % (sums[name].encode(), os.fsencode(name)))
    return summary.hexdigest()


def tree_files(root: Path | str, exclude: Iterable[Path | str] = ()) -> dict[str, Path]:
    """The files of the tree at ``root`` by relative name: regular files, and links to one (read through); not
    .git or __pycache__, nor a path of ``exclude`` or what lies below it. A link to a directory is not followed."""
    skipped = {os.path.realpath(p) for p in exclude}
    found: dict[str, Path] = {}

    def walk(directory: str, prefix: str) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name in NOT_DIGESTED or entry.path in skipped:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    walk(entry.path, f"{prefix}{entry.name}/")
                elif entry.is_file():
                    found[prefix + entry.name] = Path(entry.path)

    walk(os.path.realpath(root), "")
    return found


def tree_digest(root: Path | str, exclude: Iterable[Path | str] = (), sha256: Hasher = files.sha256) -> str:
    """The :func:`dir_hash` of the files of the tree at ``root`` (:func:`tree_files`), each hashed by ``sha256``
    (a build passes its memo of them, opencoti_build.cache.file_digests)."""
    return dir_hash({name: sha256(path) for name, path in tree_files(root, exclude).items()})


def file_resource(path: Path | str, uri: str = "", sha256: Hasher = files.sha256) -> dict[str, Any]:
    """A toolchain as the Statement names it (see :func:`statement`): the SHA-256 of the program at ``path`` (a link
    read through), and ``uri``."""
    return {"uri": uri, "digest": {"sha256": sha256(os.path.realpath(path))}}


def files_resource(programs: Mapping[str, Path | str], uri: str = "", sha256: Hasher = files.sha256
                   ) -> dict[str, Any]:
    """A toolchain of several programs (name as run -> path): their :func:`dir_hash`, as though they lay in one
    directory by those names, and each one's SHA-256 in the ``files`` annotation."""
    sums = {name: sha256(os.path.realpath(path)) for name, path in programs.items()}
    return {"uri": uri, "digest": {DIR_HASH: dir_hash(sums)} if sums else {}, "annotations": {"files": sums}}


def python_resource(sha256: Hasher = files.sha256) -> dict[str, Any]:
    """The Python that runs the build: its executable's bytes, and pkg:generic/python@<version>."""
    return file_resource(sys.executable, f"pkg:generic/python@{platform.python_version()}", sha256)


def scons_resource(version: str, package: Path | str, sha256: Hasher = files.sha256) -> dict[str, Any]:
    """SCons, whose import package lies at ``package``: the digest of the package's files, and its PyPI purl."""
    return {"uri": f"pkg:pypi/scons@{version}", "digest": {DIR_HASH: tree_digest(package, sha256=sha256)}}


def cosmocc_resource(toolchain: Toolchain, which: Callable[[str], str | None], sha256: Hasher = files.sha256
                     ) -> dict[str, Any]:
    """The fat toolchain: the pinned cosmocc by its release (purl) and the sha256 its zip was checked against;
    another (COSMOCC=DIR, the stand-in) by the programs it runs (``which``: a name on the build's PATH -> a path)."""
    version = toolchain.pinned_version
    if version and toolchain.archive_sha256:
        return {"uri": f"pkg:generic/cosmocc@{version}", "digest": {"sha256": toolchain.archive_sha256}}
    return files_resource(toolchain.drivers(which), sha256=sha256)


def sbom_path(artifact: Path | str) -> Path:
    return Path(str(artifact) + SBOM_SUFFIX)


def statement_path(artifact: Path | str) -> Path:
    return Path(str(artifact) + STATEMENT_SUFFIX)


def _epoch_time(epoch: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)


def _entry_kind(name: str, dso_names: set[str], model: str | None) -> str:
    if name in dso_names:
        return "library"
    if name == model:
        return "machine-learning-model"
    return "file"


def sbom(manifest: Mapping[str, Any], sources: Sequence[Source]) -> str:
    """The CycloneDX 1.6 JSON of the artifact ``manifest`` describes (validated against the schema)."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.license import DisjunctiveLicense
    from cyclonedx.output.json import JsonV1Dot6

    def sha(digest: str) -> list[HashType]:
        return [HashType(alg=HashAlgorithm.SHA_256, content=digest)]

    def role(value: str) -> list[Property]:
        return [Property(name=ROLE, value=value)]

    dso_names = {d["name"] for d in manifest["dsos"]}
    model = manifest["model"]["name"] if manifest.get("model") else None
    host = manifest["host"]
    components = [Component(name=host["name"], type=ComponentType.APPLICATION, bom_ref="host", hashes=sha(host["sha256"]),
                            version=manifest["versionString"], properties=role("host"))]
    components += [Component(name=e["name"], type=ComponentType(_entry_kind(e["name"], dso_names, model)),
                             bom_ref=f"entry:{e['name']}", hashes=sha(e["sha256"]), properties=role("entry"))
                   for e in manifest["entries"]]
    components += [Component(name=s.name, type=ComponentType.LIBRARY, bom_ref=f"source:{s.name}", version=s.version,
                             licenses=[DisjunctiveLicense(id=s.license)] if s.license else None,
                             properties=role("source") + ([Property(name="opencoti:gitCommit", value=s.commit)]
                                                          if s.commit else []))
                   for s in sources]
    components += [Component(name=p["name"], type=ComponentType.FILE, bom_ref=f"patch:{p['series']}/{p['name']}",
                             group=p["series"], hashes=sha(p["sha256"]), properties=role("patch"))
                   for p in manifest["patches"]]
    components += [Component(name=name, type=ComponentType.APPLICATION, bom_ref=f"toolchain:{name}",
                             version=str(version), properties=role("toolchain"))
                   for name, version in sorted(manifest["toolchains"].items())]
    root = Component(name=manifest["artifact"], type=ComponentType.APPLICATION, bom_ref="artifact",
                     version=manifest["versionString"], hashes=sha(manifest["sha256"]))
    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"opencoti:{manifest['sha256']}"),
              metadata=BomMetaData(timestamp=_epoch_time(manifest["sourceDateEpoch"]), component=root),
              components=components)
    bom.register_dependency(root, components)  # the artifact is made of every one of them
    text: str = JsonV1Dot6(bom).output_as_string(indent=2)
    problem = why_not_valid_sbom(text)
    if problem:
        raise ProvenanceError(f"the SBOM of {manifest['artifact']} does not validate: {problem}")
    return text + "\n"


def import_libraries() -> None:
    """Import what :func:`sbom` and :func:`statement` use (a build server does it once, before it forks a run)."""
    import cyclonedx.output.json  # noqa: F401
    import in_toto_attestation.v1.statement  # noqa: F401
    from google.protobuf import json_format  # noqa: F401

    _import_validator()


def _import_validator() -> None:
    """Import the CycloneDX JSON validator with rfc3987_syntax's grammar deferred to its first use.

    jsonschema's format checker imports rfc3987_syntax at its own import when it is installed (cyclonedx's
    json-validation extra installs it), and that module builds an Earley parser of RFC 3987 on import: 1.1 s of
    the GIL here, every packaging run, for the ``iri``/``iri-reference`` formats, which the SBOMs made here do not
    use. For the length of that import a module whose ``is_valid_syntax`` loads the real one on its first call
    stands in for it, so any IRI is still checked exactly as before."""
    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules \
            or importlib.util.find_spec("rfc3987_syntax") is None:
        import cyclonedx.validation.json  # noqa: F401
        return
    deferred = types.ModuleType("rfc3987_syntax")

    def is_valid_syntax(term: str, value: str) -> bool:
        from rfc3987_syntax import syntax_helpers  # the real module: the stand-in is gone by the time this is called

        return bool(syntax_helpers.is_valid_syntax(term, value))

    deferred.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    sys.modules["rfc3987_syntax"] = deferred
    try:
        import cyclonedx.validation.json  # noqa: F401
    finally:
        if sys.modules.get("rfc3987_syntax") is deferred:
            del sys.modules["rfc3987_syntax"]


def import_beside(work: Callable[[], T]) -> T:
    """Run ``work`` (the artifact step: seconds of copying, in the kernel and in hashlib, which release the GIL)
    while the provenance step's libraries are imported on another thread, so that step does not start by
    importing them. The thread is joined before returning: nothing outlives the step."""
    importer = threading.Thread(target=import_libraries, name="provenance-imports")
    importer.start()
    try:
        return work()
    finally:
        importer.join()


def why_not_valid_sbom(text: str) -> WhyNot:
    """Why ``text`` is not a valid CycloneDX 1.6 JSON document (the library's validator), or None."""
    from cyclonedx.schema import SchemaVersion

    _import_validator()
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else str(error).splitlines()[0]


def statement(manifest: Mapping[str, Any], sources: Sequence[Source], parameters: Mapping[str, Any],
              toolchains: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The in-toto v1 Statement with a SLSA provenance v1 predicate for the artifact ``manifest`` describes.

    ``parameters``: the external parameters (the targets asked for, the variables that shape the artifact).
    ``toolchains``: each of the manifest's toolchains as a resource (``uri``, ``digest`` and ``annotations``, each
    optional: :func:`file_resource`, :func:`files_resource`, ...). A Statement that :func:`why_not_valid_statement` finds
    invalid (a toolchain or a source with neither uri nor digest) is a ProvenanceError, never a file."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    def dependency(name: str, digest: Mapping[str, str] | None, uri: str = "",
                   annotations: Mapping[str, Any] | None = None) -> Any:
        return ResourceDescriptor(name=name, uri=uri, digest=dict(digest or {}),
                                  annotations=dict(annotations) if annotations else None).pb

    resolved = [dependency(f"source:{s.name}", {"gitCommit": s.commit} if s.commit else
                           {DIR_HASH: s.tree} if s.tree else None) for s in sources]
    resolved += [dependency(f"host:{manifest['host']['name']}", {"sha256": manifest["host"]["sha256"]})]
    resolved += [dependency(f"patch:{p['series']}/{p['name']}", {"sha256": p["sha256"]}) for p in manifest["patches"]]
    resolved += [dependency(f"dso:{d['name']}", {"sha256": d["sha256"]}) for d in manifest["dsos"]]
    if manifest.get("model"):
        resolved.append(dependency(f"model:{manifest['model']['name']}", {"sha256": manifest["model"]["sha256"]}))
    for name, version in sorted(manifest["toolchains"].items()):
        found = toolchains.get(name, {})
        resolved.append(dependency(f"toolchain:{name}", found.get("digest"), found.get("uri", ""),
                                   {"version": str(version), **found.get("annotations", {})}))
    when = _epoch_time(manifest["sourceDateEpoch"])
    provenance = provenance_pb2.Provenance()
    provenance.build_definition.build_type = BUILD_TYPE
    provenance.build_definition.external_parameters.update(dict(parameters))
    provenance.build_definition.resolved_dependencies.extend(resolved)
    provenance.run_details.builder.id = f"{BUILDER_ID}@{manifest['gitCommit']}"
    provenance.run_details.metadata.invocation_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"opencoti:{manifest['sha256']}"))
    provenance.run_details.metadata.started_on.FromDatetime(when)
    provenance.run_details.metadata.finished_on.FromDatetime(when)
    subject = ResourceDescriptor(name=manifest["artifact"], digest={"sha256": manifest["sha256"]}).pb
    stmt = Statement([subject], SLSA_PROVENANCE, json_format.MessageToDict(provenance))
    document: dict[str, Any] = json_format.MessageToDict(stmt.pb)
    problem = why_not_valid_statement(document)
    if problem:
        raise ProvenanceError(f"the provenance Statement of {manifest['artifact']} is not valid, so none is written: "
                              f"{problem}")
    return document


def write(artifact: Path, sbom_text: str, statement_text: str) -> None:
    """Write the SBOM and the Statement beside ``artifact``, each by rename (no reader sees half of one)."""
    for path, text in ((sbom_path(artifact), sbom_text), (statement_path(artifact), statement_text)):
        try:
            fd, tmp = tempfiles.create(path)
        except OSError as exc:
            raise ProvenanceError(f"cannot write {path}: {exc.strerror or exc}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except OSError as exc:
            raise ProvenanceError(f"cannot write {path}: {exc.strerror or exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)


def why_not_matching(artifact: Path, sha256: str, entries: Mapping[str, str]) -> WhyNot:
    """The first way the SBOM and the Statement beside ``artifact`` disagree with its bytes (``sha256``: the
    whole file's, ``entries``: each zip entry's SHA-256, as verify read them), or None. The Statement's signature is
    opencoti_build.artifacts.intoto.why_not_verified's."""
    sbom_file, statement_file = sbom_path(artifact), statement_path(artifact)
    for path in (sbom_file, statement_file):
        if not path.is_file():
            return f"{path}: no such file; run `scons package` to write it"
    return _why_not_matching_sbom(sbom_file, sha256, entries) or _why_not_matching_statement(statement_file, artifact, sha256, entries)


def _why_not_matching_sbom(sbom_file: Path, sha256: str, entries: Mapping[str, str]) -> WhyNot:
    text = sbom_file.read_text(encoding="utf-8")
    problem = why_not_valid_sbom(text)
    if problem:
        return f"{sbom_file}: not a valid CycloneDX 1.6 document: {problem}"
    bom = json.loads(text)
    # entry by entry first: a changed entry changes the whole file's digest too, and its name says more
    listed = {c["name"]: _sha256_of(c) for c in bom.get("components", []) if _role(c) == "entry"}
    for name, digest in sorted(entries.items()):
        if name not in listed:
            return f"{sbom_file}: the artifact's entry {name!r} is not in it"
        if listed[name] != digest:
            return f"{sbom_file}: entry {name!r} has sha256 {listed[name]}, the artifact's holds {digest}"
    extra = sorted(set(listed) - set(entries))
    if extra:
        return f"{sbom_file}: lists {extra[0]!r}, which the artifact does not hold"
    described = _sha256_of(bom["metadata"]["component"])
    if described != sha256:
        return f"{sbom_file}: describes an artifact of sha256 {described}, this one's is {sha256}"
    return None


def _why_not_matching_statement(statement_file: Path, artifact: Path, sha256: str, entries: Mapping[str, str]) -> WhyNot:
    try:
        document, _ = read_statement(statement_file)
    except ProvenanceError as exc:
        return str(exc)
    if document.get("_type") != STATEMENT_TYPE or document.get("predicateType") != SLSA_PROVENANCE:
        return f"{statement_file}: not an in-toto v1 Statement of SLSA provenance v1"
    problem = why_not_valid_statement(document)
    if problem:
        return f"{statement_file}: not a valid in-toto Statement: {problem}"
    subjects = document.get("subject") or [{}]
    subject = subjects[0]
    if subject.get("name") != artifact.name or subject.get("digest", {}).get("sha256") != sha256:
        return (f"{statement_file}: its subject is {subject.get('name')!r} of sha256 "
                f"{subject.get('digest', {}).get('sha256')}, the artifact is {artifact.name!r} of sha256 {sha256}")
    for dep in document["predicate"]["buildDefinition"].get("resolvedDependencies", []):
        kind, _, name = dep.get("name", "").partition(":")
        if kind in ("dso", "model") and entries.get(name) != dep.get("digest", {}).get("sha256"):
            return (f"{statement_file}: resolved dependency {dep['name']} has sha256 "
                    f"{dep.get('digest', {}).get('sha256')}, the artifact's entry holds {entries.get(name)}")
    return None


def _sha256_of(component: Mapping[str, Any]) -> str | None:
    return next((h["content"] for h in component.get("hashes", []) if h.get("alg") == "SHA-256"), None)


def _role(component: Mapping[str, Any]) -> str | None:
    return next((p["value"] for p in component.get("properties", []) if p.get("name") == ROLE), None)
