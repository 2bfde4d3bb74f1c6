"""The artifacts' and manifests' steps and the packaging decider (the SCons side of site_tools/llamafile_package.py, over
opencoti_build.artifacts.packaging)."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import SCons.Errors
from SCons.Script import Action

from opencoti_build.artifacts import intoto, packaging, provenance, verify
from opencoti_build.artifacts import manifest as manifests
from opencoti_build.artifacts.specs import ArtifactSpec, Attestation, ManifestSpec, Package
from opencoti_build.cache import file_digests
from opencoti_build.config import signing_keys, versioning
from opencoti_build.incremental import import_closure
from opencoti_build.report import summary
from opencoti_scons.progress import count_as

_UNREAD = "unread: the packager signs it"  # a signature no file has; never left in a node past the decision


def _write_artifact(target, source, env):
    spec = ArtifactSpec.from_json(source[-1].read())
    contents = spec.contents()
    manifest = Path(target[0].abspath + manifests.MANIFEST_SUFFIX)
    try:  # the manifest step compares the tag with the old one, which goes away before the new artifact lands
        previous = manifests.read(manifest) if manifest.is_file() else None
    except manifests.ManifestError:
        previous = None
    digests = env["FILE_DIGESTS"]
    digests.keep_in(Path(env["BUILD_DIR"], file_digests.RECORD_NAME))  # an unchanged model's digests: read once, not twice
    try:
        artifact = Path(target[0].abspath)
        packaged = provenance.import_beside(lambda: packaging.write_artifact(
            contents, artifact, align=spec.align, epoch=spec.epoch,
            claims=[manifest, provenance.sbom_path(artifact), provenance.statement_path(artifact)],
            on_digest=digests.remember, known=digests.entry))
    except packaging.ERRORS as exc:
        raise SCons.Errors.BuildError(node=target[0], errstr=str(exc)) from exc
    digests.save()
    for node in source:
        if getattr(node.attributes, "read_by_packager", False):
            csig = env["FILE_DIGESTS"].known(node.abspath)  # None when it changed after the packager read it
            if csig is not None:
                node.get_ninfo().csig = csig
    extra = {
        "host": contents.host.name,
        "dsos": {b: p.name for b, p in contents.dsos.items()},
        "dsoPaths": {b: str(p) for b, p in contents.dsos.items()},
        "model": None if contents.model is None else {"name": contents.model.name, "ggufVersion": packaged.gguf_version},
        "args": packaged.args_text,
        "previousManifest": previous,
    }
    Path(target[1].abspath).write_text(packaging.record_json(packaged.result, extra), encoding="utf-8")
    return 0


def decide(dependency, target, prev_ni, repo_node=None) -> bool:
    """content-timestamp, except that an input the packager reads whole is not hashed to decide.

    Its stamp unchanged, it is current (as under content-timestamp); its stamp changed, it counts
    as changed, and the packager's one read signs it. A touched model is therefore repackaged
    rather than hashed: one read either way.
    """
    if not getattr(dependency.attributes, "read_by_packager", False):
        return dependency.changed_timestamp_then_content(target, prev_ni, repo_node)
    ninfo = dependency.get_ninfo()
    if not hasattr(ninfo, "csig"):
        ninfo.csig = _UNREAD  # what SCons' content check compares instead of reading the file
    changed = dependency.changed_timestamp_then_content(target, prev_ni, repo_node)
    if getattr(ninfo, "csig", None) == _UNREAD:
        del ninfo.csig  # not recorded: the packager's digest replaces it, or nothing does
    return changed


def _manifest_data(record_node, meta_node) -> tuple[dict, dict]:
    """(the manifest, the artifact step's record) from that record and the manifest's Value: what the manifest
    step writes and the provenance step describes."""
    result, record = packaging.load_record(Path(record_node.abspath).read_text(encoding="utf-8"))
    meta = ManifestSpec.from_json(meta_node.read())
    model = record["model"]
    data = manifests.build(
        result, meta.identity, host_name=record["host"], host_prebuilt=meta.host_prebuilt,
        dsos=record["dsos"], dso_archs={b: manifests.dso_architectures(p) for b, p in record["dsoPaths"].items()},
        model=None if model is None else (model["name"], model["ggufVersion"]), args_text=record["args"],
        patches=list(meta.patches), toolchains=dict(meta.toolchains), epoch=meta.epoch,
    )
    return data, record


def _write_manifest(target, source, env):
    data, record = _manifest_data(source[0], source[1])
    identity = ManifestSpec.from_json(source[1].read()).identity
    out = Path(target[0].abspath)
    conflicts = manifests.tag_conflicts(out.parent, data, previous={out.name: record.get("previousManifest")})
    if conflicts:
        bump = versioning.next_tag(identity.tag)
        bar = "!" * 78
        sys.stderr.write(
            f"{bar}\nWARNING: {identity.version_string} already names other bytes in {out.parent}: {'; '.join(conflicts)}\n"
            f"WARNING: two different cuts must not share a version: bump vendors/llamafile/OPENCOTI_TAG "
            f"from {identity.tag} to {bump}\n{bar}\n"
        )
    try:
        manifests.write(out, data)
    except manifests.ManifestError as exc:
        raise SCons.Errors.BuildError(node=target[0], errstr=str(exc)) from exc
    return 0


def _write_provenance(target, source, env):
    """The SBOM and the provenance Statement (signed with SIGNING_KEY) of the artifact, from what its manifest says
    (written before the manifest, which is the artifact's claim: a run killed between them leaves no manifest)."""
    manifest, _ = _manifest_data(source[0], source[1])
    attestation = Attestation.from_json(source[2].read())
    sources = list(attestation.sources)
    artifact = Path(target[0].abspath[: -len(provenance.SBOM_SUFFIX)])
    try:
        signer = signing_keys.load_private_key(Path(attestation.signing_key)) if attestation.signing_key else None
        statement = provenance.statement(manifest, sources, attestation.parameters, attestation.toolchains)
        provenance.write(artifact, provenance.sbom(manifest, sources), intoto.statement_line(statement, signer))
    except (signing_keys.KeyFileError, provenance.ProvenanceError) as exc:
        raise SCons.Errors.BuildError(node=target[0], errstr=str(exc)) from exc
    env["FILE_DIGESTS"].save()  # what the reading hashed of the toolchains, kept for the next run
    return 0


def _verify_all(artifacts, pubkey: tuple[str, str]):
    """The verify step's action: check each of ``artifacts()`` (a list of paths, taken when the step runs), the
    provenance signature with ``pubkey`` ((PUBKEY as given, its absolute path); empty: not checked, and said so)."""
    def verify_all(target, source, env):
        found = artifacts()
        if not found:
            raise SCons.Errors.BuildError(errstr=f"verify: no artifact in {os.path.join(env['DIST_DIR'], 'llamafile')}; "
                                                 "run `scons package` first")
        given, path = pubkey
        try:  # checked before anything was read (buildvars.validate): this fails only if it changed since
            key = signing_keys.load_public_key(Path(path), "PUBKEY=") if path else None
        except signing_keys.KeyFileError as exc:
            raise SCons.Errors.BuildError(errstr=str(exc)) from None
        failed = []
        for artifact in found:
            report = verify.verify(artifact, Path(env["BACKEND_DIST_DIR"]), Path(env["ENV"]["HOME"]), key,
                                   key_option="PUBKEY=PEM")
            if verify.print_report(artifact, report, key=f"PUBKEY={given}"):
                failed.append(artifact.name)
        if failed:
            raise SCons.Errors.BuildError(errstr=f"verify: {', '.join(failed)} failed (the FAILED lines above say how)")
        return 0
    return verify_all


@functools.lru_cache(maxsize=1)
def _code(digests: file_digests.Digests) -> tuple[list[str], list[str], list[str]]:
    """The code that decides the artifact's bytes, the manifest's and the provenance's (this file writes the last
    two): an edit of any of it redoes them. ``digests`` (the run's) remembers what each source imports; the same
    for every artifact of a run."""
    def closure(*modules: str) -> list[str]:
        return [str(p) for p in import_closure.source_files(*modules, memo=digests)]

    return (closure(packaging.__name__), closure(manifests.__name__, packaging.__name__) + [__file__],
            closure(provenance.__name__) + [__file__])


def LlamafileArtifact(env, package: Package, sources):
    """Build the package's artifact (+ its step's record) from the file nodes ``sources`` and its ArtifactSpec, then
    its manifest from its ManifestSpec, then the SBOM and the provenance Statement from the manifest and its
    Attestation (opencoti_build.artifacts.specs); each spec is a Value node of its step, so a change of one redoes
    only what it goes into."""
    spec = package.artifact
    digests = env["FILE_DIGESTS"]
    digests.keep_in(Path(env["BUILD_DIR"], file_digests.RECORD_NAME))
    artifact_code, manifest_code, provenance_code = _code(digests)
    for node in sources:  # the model and a prebuilt host: sources the packager reads whole and signs
        if not node.has_builder() and node.abspath in (spec.host, spec.model):
            node.attributes.read_by_packager = True
    artifact = package.artifact_path
    built = env.Command(
        [artifact, package.record_path], list(sources) + [env.Value(spec.to_json())],
        Action(_write_artifact, "PACKAGE $TARGET"),
    )
    env.Depends(built, artifact_code)
    meta_value = env.Value(package.manifest.to_json())
    signing_key = package.attestation.signing_key
    key = [env.File(signing_key)] if signing_key else []  # a new key signs again
    attested = env.Command(
        [str(provenance.sbom_path(artifact)), str(provenance.statement_path(artifact))],
        [built[1], meta_value, env.Value(package.attestation.to_json())] + key,
        Action(_write_provenance, "PROVENANCE $TARGET"),
    )
    env.Depends(attested, [built[0]] + manifest_code + provenance_code)
    written = env.Command(
        package.manifest_path, [built[1], meta_value],
        Action(_write_manifest, "MANIFEST $TARGET"),
    )
    env.Depends(written, [built[0], *attested] + manifest_code)  # the manifest, the artifact's claim, comes last
    # a failed or interrupted packaging must leave the previous artifact in place (SCons would
    # otherwise delete targets before building them), and multi-GiB artifacts stay out of CacheDir
    env.Precious(built + written + attested)
    env.NoCache(built + written + attested)
    count_as(built + written + attested, summary.PACKAGED)  # the summary counts them apart from compiles
    return [built[0], written[0], *attested]


def LlamafileVerify(env, name, manifest_nodes, pubkey: tuple[str, str], attested=()):
    """Alias ``name``: package, then check each manifest's artifact (and its SBOM and Statement, ``attested``) as it
    lies in the dist dir (``package verify``); always runs. ``pubkey``: see :func:`_verify_all`."""
    paths = [Path(node.abspath[: -len(manifests.MANIFEST_SUFFIX)]) for node in manifest_nodes]
    alias = env.Alias(name, [*manifest_nodes, *attested],
                      Action(_verify_all(lambda: paths, pubkey), "VERIFY " + " ".join(map(str, paths))))
    env.AlwaysBuild(alias)
    return alias


def DistVerify(env, name, dist_dir: str, pubkey: tuple[str, str]):
    """Alias ``name`` (`scons verify` without `package`): check every artifact in ``dist_dir`` as it lies there
    (verify.artifacts_in, listed when the step runs); always runs, reads and never writes: an artifact changed by
    hand is reported, not silently redone. It needs no source tree and probes no toolchain."""
    alias = env.Alias(name, [], Action(_verify_all(lambda: verify.artifacts_in(Path(dist_dir)), pubkey),
                                       f"VERIFY {dist_dir}"))
    env.AlwaysBuild(alias)
    return alias
