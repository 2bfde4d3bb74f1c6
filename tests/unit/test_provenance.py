"""Each artifact's CycloneDX SBOM and in-toto / SLSA provenance Statement, and its DSSE signature, in-process."""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from opencoti_build.artifacts import intoto, provenance
from opencoti_build.config import signing_keys, upstream_pin
from opencoti_build.cosmo import cosmo_toolchain

from scons_runs import MINI_TREE

SHA = {name: bytes([i]).hex() * 32 for i, name in enumerate(("artifact", "host", "dso", "model", "args", "ui", "patch"))}
MANIFEST = {
    "artifact": "opencoti-embedder-0.10.3-x86_64.llamafile", "versionString": "opencoti-0.10.3-c1",
    "sha256": SHA["artifact"], "sourceDateEpoch": 1700000000, "gitCommit": "a" * 40,
    "host": {"name": "llamafile", "sha256": SHA["host"], "prebuilt": False},
    "entries": [{"name": "index.html", "sha256": SHA["ui"]}, {"name": "ggml-cuda.so", "sha256": SHA["dso"]},
                {"name": "tiny.gguf", "sha256": SHA["model"]}, {"name": ".args", "sha256": SHA["args"]}],
    "dsos": [{"backend": "cuda", "name": "ggml-cuda.so", "sha256": SHA["dso"], "architectures": ["sm_90"]}],
    "model": {"name": "tiny.gguf", "sha256": SHA["model"], "ggufVersion": 3},
    "patches": [{"series": "opencoti", "name": "0001-turbo.patch", "sha256": SHA["patch"]}],
    "toolchains": {"python": "3.11.7", "cosmocc": "stand-in", "cuda": "nvcc 13.0"},
}
SOURCES = [provenance.Source("llamafile", "0.10.3", "b" * 40, "Apache-2.0")]
PARAMETERS = {"targets": ["package"], "variables": {"MODEL": "tiny.gguf"}}
TOOLCHAINS = {"python": {"uri": "pkg:generic/python@3.11.7", "digest": {"sha256": "c1" * 32}},
              "cosmocc": {"digest": {"dirHash": "c2" * 32}, "annotations": {"files": {"gcc": "c3" * 32}}},
              "cuda": {"digest": {"sha256": "c4" * 32}}}
ENTRIES = {e["name"]: e["sha256"] for e in MANIFEST["entries"]}


def pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def public_pem(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def written(tmp_path: Path, signer=None) -> Path:
    artifact = tmp_path / MANIFEST["artifact"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    statement = provenance.statement(MANIFEST, SOURCES, PARAMETERS, TOOLCHAINS)
    provenance.write(artifact, provenance.sbom(MANIFEST, SOURCES), intoto.statement_line(statement, signer))
    return artifact


def test_the_sbom_is_valid_cyclonedx_1_6_and_lists_every_part_with_its_digest() -> None:
    text = provenance.sbom(MANIFEST, SOURCES)
    assert provenance.why_not_valid_sbom(text) is None  # the library's validator, against the 1.6 JSON schema
    bom = json.loads(text)
    assert bom["specVersion"] == "1.6" and bom["metadata"]["timestamp"] == "2023-11-14T22:13:20+00:00"
    root = bom["metadata"]["component"]
    assert (root["name"], root["hashes"]) == (MANIFEST["artifact"], [{"alg": "SHA-256", "content": SHA["artifact"]}])
    parts = {(next(p["value"] for p in c["properties"] if p["name"] == provenance.ROLE), c["name"]): c
             for c in bom["components"]}
    for name, digest in ENTRIES.items():
        assert parts[("entry", name)]["hashes"] == [{"alg": "SHA-256", "content": digest}]
    assert parts[("entry", "ggml-cuda.so")]["type"] == "library"
    assert parts[("entry", "tiny.gguf")]["type"] == "machine-learning-model"
    assert parts[("host", "llamafile")]["hashes"][0]["content"] == SHA["host"]
    assert parts[("source", "llamafile")]["licenses"] == [{"license": {"id": "Apache-2.0"}}]
    assert parts[("patch", "0001-turbo.patch")]["hashes"][0]["content"] == SHA["patch"]
    assert parts[("toolchain", "cuda")]["version"] == "nvcc 13.0"
    assert {d["ref"]: len(d.get("dependsOn", [])) for d in bom["dependencies"]}["artifact"] == len(bom["components"])


def test_the_statement_is_an_in_toto_v1_slsa_provenance_of_the_artifact() -> None:
    document = provenance.statement(MANIFEST, SOURCES, PARAMETERS, TOOLCHAINS)
    assert document["_type"] == "https://in-toto.io/Statement/v1"
    assert document["subject"] == [{"name": MANIFEST["artifact"], "digest": {"sha256": SHA["artifact"]}}]
    assert document["predicateType"] == "https://slsa.dev/provenance/v1"
    definition, run = document["predicate"]["buildDefinition"], document["predicate"]["runDetails"]
    assert definition["externalParameters"] == PARAMETERS
    resolved = {d["name"]: d.get("digest") for d in definition["resolvedDependencies"]}
    assert resolved["source:llamafile"] == {"gitCommit": "b" * 40}
    assert resolved["model:tiny.gguf"] == {"sha256": SHA["model"]} and resolved["dso:ggml-cuda.so"] == {"sha256": SHA["dso"]}
    assert resolved["patch:opencoti/0001-turbo.patch"] == {"sha256": SHA["patch"]}
    assert run["metadata"]["startedOn"] == run["metadata"]["finishedOn"] == "2023-11-14T22:13:20Z"  # SOURCE_DATE_EPOCH
    assert run["builder"]["id"].endswith("@" + "a" * 40)


def test_the_same_manifest_gives_the_same_bytes(tmp_path: Path) -> None:
    first = written(tmp_path / "a")
    second = written(tmp_path / "b")
    for path in (provenance.sbom_path, provenance.statement_path):
        assert path(first).read_bytes() == path(second).read_bytes()
    key = ed25519.Ed25519PrivateKey.generate()  # an ed25519 signature is deterministic too
    (tmp_path / "k.pem").write_bytes(pem(key))
    signed = [provenance.statement_path(written(tmp_path / d, signing_keys.load_private_key(tmp_path / "k.pem")))
              for d in ("c", "d")]
    assert signed[0].read_bytes() == signed[1].read_bytes()


def test_a_matching_artifact_passes_and_each_tampering_is_the_first_mismatch(tmp_path: Path) -> None:
    artifact = written(tmp_path)
    assert provenance.why_not_matching(artifact, SHA["artifact"], ENTRIES) is None
    other = "ff" * 32
    assert provenance.why_not_matching(artifact, other, ENTRIES) == (
        f"{provenance.sbom_path(artifact)}: describes an artifact of sha256 {SHA['artifact']}, this one's is {other}")
    assert provenance.why_not_matching(artifact, SHA["artifact"], {**ENTRIES, "tiny.gguf": other}) == (
        f"{provenance.sbom_path(artifact)}: entry 'tiny.gguf' has sha256 {SHA['model']}, the artifact's holds {other}")
    document = json.loads(provenance.statement_path(artifact).read_text())
    tampered = copy.deepcopy(document)
    tampered["subject"][0]["digest"]["sha256"] = other
    provenance.statement_path(artifact).write_text(json.dumps(tampered) + "\n")
    assert provenance.why_not_matching(artifact, SHA["artifact"], ENTRIES) == (
        f"{provenance.statement_path(artifact)}: its subject is '{MANIFEST['artifact']}' of sha256 {other}, the "
        f"artifact is '{MANIFEST['artifact']}' of sha256 {SHA['artifact']}")
    provenance.sbom_path(artifact).write_text("{}")
    assert provenance.why_not_matching(artifact, SHA["artifact"], ENTRIES).startswith(
        f"{provenance.sbom_path(artifact)}: not a valid CycloneDX 1.6 document: ")


@pytest.mark.parametrize("make_key", [ed25519.Ed25519PrivateKey.generate,
                                      lambda: ec.generate_private_key(ec.SECP256R1())])
def test_a_signed_statement_is_a_dsse_envelope_over_pae_that_only_its_key_verifies(tmp_path: Path, make_key) -> None:
    key, stranger = make_key(), make_key()
    for name, k in (("key", key), ("stranger", stranger)):
        (tmp_path / f"{name}.pem").write_bytes(pem(k))
        (tmp_path / f"{name}.pub").write_bytes(public_pem(k))
    artifact = written(tmp_path, signing_keys.load_private_key(tmp_path / "key.pem"))
    envelope = json.loads(provenance.statement_path(artifact).read_text())
    payload = base64.b64decode(envelope["payload"])
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert payload == intoto.canonical(provenance.statement(MANIFEST, SOURCES, PARAMETERS, TOOLCHAINS))
    # the signature is over DSSE's pre-authentication encoding, checked here with cryptography alone
    pae = b"DSSEv1 %d %b %d %b" % (len(envelope["payloadType"]), envelope["payloadType"].encode(), len(payload), payload)
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    if isinstance(key, ed25519.Ed25519PrivateKey):
        key.public_key().verify(signature, pae)
    else:
        from cryptography.hazmat.primitives import hashes
        key.public_key().verify(signature, pae, ec.ECDSA(hashes.SHA256()))
    right, wrong = (signing_keys.load_public_key(tmp_path / f"{n}.pub") for n in ("key", "stranger"))
    statement = provenance.statement_path(artifact)
    assert provenance.why_not_matching(artifact, SHA["artifact"], ENTRIES) is None and intoto.is_signed(statement)
    assert intoto.why_not_verified(statement, right) is None
    assert intoto.why_not_verified(statement, wrong) == (
        f"{statement}: its signature does not verify with the public key given")
    with pytest.raises(intoto.SignatureError):  # a signature failure, told apart from a changed Statement
        intoto.read_statement(statement, wrong)


def test_keys_that_cannot_sign_and_an_unsigned_statement_with_a_key_are_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "rsa.pem").write_bytes(pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    with pytest.raises(signing_keys.KeyFileError, match=r"^SIGNING_KEY=.*rsa.pem is a RSAPrivateKey; DSSE signing "
                                                         r"here takes an ed25519 or ECDSA P-256 key$"):
        signing_keys.load_private_key(tmp_path / "rsa.pem")
    (tmp_path / "junk.pem").write_text("not a key\n")
    with pytest.raises(signing_keys.KeyFileError, match=r"^SIGNING_KEY=.*junk.pem is not an unencrypted PEM private"):
        signing_keys.load_private_key(tmp_path / "junk.pem")
    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "k.pub").write_bytes(public_pem(key))
    artifact = written(tmp_path)
    assert not intoto.is_signed(provenance.statement_path(artifact))
    assert intoto.why_not_verified(provenance.statement_path(artifact),
                                        signing_keys.load_public_key(tmp_path / "k.pub")) == (
        f"{provenance.statement_path(artifact)} is not signed, but a public key was given; package with SIGNING_KEY=")
    (tmp_path / "junk.pub").write_text("not a key\n")
    with pytest.raises(signing_keys.KeyFileError, match=r"^PUBKEY=.*junk.pub is not a PEM public key \(.*\); give "
                                                         r"the public half of the SIGNING_KEY, e\.g\. `openssl pkey "):
        signing_keys.load_public_key(tmp_path / "junk.pub", "PUBKEY=")


def test_the_statement_records_the_variables_that_shape_the_artifact_and_no_path(tmp_path: Path) -> None:
    from opencoti_build.config import buildvars

    arguments = {"SRC": str(tmp_path / "tests/fixtures/llamafile-mini"), "MODEL": "/models/tiny.gguf",
                 "HOST": "prebuilt/llamafile", "BUILD_DIR": str(tmp_path / "build"), "CPU_ONLY": "1",
                 "CUDA_ARCHS": "80,90", "SIGNING_KEY": str(tmp_path / "key.pem"), "TRACE": "t.json"}
    assert buildvars.shaping_parameters(arguments) == {"CPU_ONLY": "1", "CUDA_ARCHS": "80,90"}


def resolved(document: dict) -> dict[str, dict]:
    return {d["name"]: d for d in document["predicate"]["buildDefinition"]["resolvedDependencies"]}


def by_hand_dir_hash(root: Path) -> str:
    """in-toto's dirHash as its spec spells it: `find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum |
    sha256sum`, written out here without the code under test."""
    names = sorted((str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink()),
                   key=str.encode)
    lines = "".join(f"{hashlib.sha256((root / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    return hashlib.sha256(lines.encode()).hexdigest()


def test_every_resolved_dependency_of_a_statement_made_of_this_machines_toolchains_has_a_uri_or_a_digest(
        tmp_path: Path) -> None:
    import SCons

    tree = tmp_path / "llamafile-mini"
    shutil.copytree(MINI_TREE, tree)
    sources = [provenance.Source("llamafile", "0.10.3", None, None, provenance.tree_digest(tree))]  # no checkout
    stand_in = cosmo_toolchain.find_toolchain("stand-in")
    toolchains = {"python": provenance.python_resource(),
                  "scons": provenance.scons_resource(SCons.__version__, Path(SCons.__file__).parent),
                  "cosmocc": provenance.cosmocc_resource(stand_in, shutil.which),
                  "cuda": provenance.file_resource(sys.executable)}  # any program stands for nvcc here
    manifest = {**MANIFEST, "toolchains": {**MANIFEST["toolchains"], "scons": SCons.__version__}}
    document = provenance.statement(manifest, sources, PARAMETERS, toolchains)
    assert intoto.why_not_valid_statement(document) is None
    dependencies = resolved(document)
    missing = [name for name, d in dependencies.items() if not (d.get("uri") or d.get("digest"))]
    assert not missing and {"source:llamafile", "toolchain:python", "toolchain:scons", "toolchain:cosmocc",
                            "toolchain:cuda"} <= set(dependencies)
    assert dependencies["source:llamafile"]["digest"] == {"dirHash": by_hand_dir_hash(tree)}
    python = dependencies["toolchain:python"]
    assert python["uri"] == f"pkg:generic/python@{platform.python_version()}"
    assert python["digest"] == {"sha256": hashlib.sha256(Path(os.path.realpath(sys.executable)).read_bytes()).hexdigest()}
    assert python["annotations"] == {"version": "3.11.7"}  # the manifest's record, beside the resource
    scons = dependencies["toolchain:scons"]
    assert scons["uri"] == f"pkg:pypi/scons@{SCons.__version__}" and len(scons["digest"]["dirHash"]) == 64
    # the stand-in: the compilers its fat compiles run, each by its bytes, and their dirHash as one directory
    cosmocc = dependencies["toolchain:cosmocc"]
    compilers = cosmocc["annotations"]["files"]
    assert compilers and set(compilers) <= {"gcc", "g++", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"}
    for name, digest in compilers.items():
        assert digest == hashlib.sha256(Path(os.path.realpath(shutil.which(name))).read_bytes()).hexdigest()
    lines = "".join(f"{compilers[n]}  {n}\n" for n in sorted(compilers, key=str.encode))
    assert cosmocc["digest"] == {"dirHash": hashlib.sha256(lines.encode()).hexdigest()}


def test_the_pinned_cosmocc_is_its_release_and_zip_and_another_cosmocc_its_drivers_bytes(tmp_path: Path) -> None:
    pinned = cosmo_toolchain.Toolchain("cosmocc", tmp_path, origin=f"pinned {upstream_pin.COSMOCC_VERSION}, present",
                                       archive_sha256=upstream_pin.COSMOCC_SHA256)
    assert provenance.cosmocc_resource(pinned, shutil.which) == {
        "uri": f"pkg:generic/cosmocc@{upstream_pin.COSMOCC_VERSION}", "digest": {"sha256": upstream_pin.COSMOCC_SHA256}}
    bin_dir = tmp_path / "cosmocc" / "bin"
    bin_dir.mkdir(parents=True)
    for name in (*cosmo_toolchain.TOOLS, "x86_64-unknown-cosmo-cc", "aarch64-unknown-cosmo-c++"):
        (bin_dir / name).write_text(f"#!/bin/sh\n# {name}\n")
        (bin_dir / name).chmod(0o755)
    theirs = provenance.cosmocc_resource(cosmo_toolchain.find_toolchain(str(tmp_path / "cosmocc")), shutil.which)
    assert sorted(theirs["annotations"]["files"]) == [
        "bin/aarch64-unknown-cosmo-c++", "bin/cosmoc++", "bin/cosmocc", "bin/x86_64-unknown-cosmo-cc"]
    assert theirs["uri"] == "" and theirs["digest"] == {"dirHash": provenance.dir_hash(theirs["annotations"]["files"])}


def test_a_tree_copied_to_two_paths_has_one_digest_and_any_change_of_its_files_another(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "elsewhere" / "much-longer-name"
    shutil.copytree(MINI_TREE, first)
    shutil.copytree(MINI_TREE, second)
    digest = provenance.tree_digest(first)
    assert digest == provenance.tree_digest(second) == by_hand_dir_hash(first)
    # caches and git's store are no part of a tree, nor are the outputs a build writes there
    (second / "__pycache__").mkdir()
    (second / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (second / ".git").write_text("gitdir: elsewhere\n")
    (second / "build" / "o").mkdir(parents=True)
    (second / "build" / "o" / "main.o").write_bytes(b"\x7fELF")
    assert provenance.tree_digest(second, exclude=[second / "build"]) == digest
    assert provenance.tree_digest(second) != digest
    shutil.rmtree(second / "build")
    some = sorted(p for p in second.rglob("*.c") if p.is_file())[0]
    some.write_bytes(some.read_bytes() + b"\n")  # content
    assert provenance.tree_digest(second) != digest
    some.write_bytes((first / some.relative_to(second)).read_bytes())
    assert provenance.tree_digest(second) == digest
    some.rename(some.with_name("renamed.c"))  # names
    assert provenance.tree_digest(second) != digest


def test_a_statement_with_a_descriptor_that_has_neither_uri_nor_digest_is_refused(tmp_path: Path) -> None:
    document = provenance.statement(MANIFEST, SOURCES, PARAMETERS, TOOLCHAINS)
    assert intoto.why_not_valid_statement(document) is None

    def with_dependency(descriptor: dict) -> dict:
        changed = copy.deepcopy(document)
        changed["predicate"]["buildDefinition"]["resolvedDependencies"].append(descriptor)
        return changed

    # empty: in-toto-attestation's own ResourceDescriptor.validate refuses it; a name alone it takes, the spec not
    assert intoto.why_not_valid_statement(with_dependency({})) == (
        f"resolved dependency #{len(resolved(document))}: At least one of name, URI, or digest need to be set")
    assert intoto.why_not_valid_statement(with_dependency({"name": "toolchain:x", "annotations": {"version": "1"}})) == (
        "resolved dependency toolchain:x has none of uri, digest or content (a ResourceDescriptor must have one)")
    assert intoto.why_not_valid_statement(with_dependency({"name": "x", "digest": {"sha256": "ABC"}})) == (
        "resolved dependency x: its sha256 digest 'ABC' is not 64 lowercase hex digits")
    assert intoto.why_not_valid_statement(with_dependency({"name": "x", "uri": "pkg:generic/x@1"})) is None
    assert 'ResourceDescriptor" has no field named "sha256"' in intoto.why_not_valid_statement(
        with_dependency({"name": "x", "sha256": "ab" * 32}))  # a field the spec does not have
    no_subject = copy.deepcopy(document)
    no_subject["subject"] = []
    assert intoto.why_not_valid_statement(no_subject) == "At least one subject required"
    # made so, the Statement is an error and no file: a toolchain without its resource, a source without its digest
    with pytest.raises(provenance.ProvenanceError, match=(
            r"^the provenance Statement of opencoti-embedder-0\.10\.3-x86_64\.llamafile is not valid, so none is "
            r"written: resolved dependency toolchain:python has none of uri, digest or content")):
        provenance.statement(MANIFEST, SOURCES, PARAMETERS, {k: v for k, v in TOOLCHAINS.items() if k != "python"})
    with pytest.raises(provenance.ProvenanceError, match="resolved dependency source:llamafile has none of uri"):
        provenance.statement(MANIFEST, [provenance.Source("llamafile", "0.10.3", None, None)], PARAMETERS, TOOLCHAINS)
    # and verify says so of one written by another tool (or before this check)
    artifact = written(tmp_path)
    provenance.statement_path(artifact).write_text(json.dumps(with_dependency({"name": "toolchain:scons"})) + "\n")
    assert provenance.why_not_matching(artifact, SHA["artifact"], ENTRIES) == (
        f"{provenance.statement_path(artifact)}: not a valid in-toto Statement: resolved dependency toolchain:scons "
        "has none of uri, digest or content (a ResourceDescriptor must have one)")
