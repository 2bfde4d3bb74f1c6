"""`scons package` writes each artifact's SBOM and provenance Statement (signed with SIGNING_KEY), and `verify` holds
them against the artifact's bytes: through the real scons, packaging a real cosmopolitan executable (HOST=)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from opencoti_build.artifacts import intoto, provenance
from opencoti_build.config import signing_keys, versioning

from packaging_support import PLEDGE, as_llamafile, write_gguf
from scons_runs import MINI_TREE, PROJECT, scons

VERSION = versioning.llamafile_version(MINI_TREE)
EMBEDDER = f"opencoti-embedder-{VERSION}-x86_64.llamafile"


def keypair(where: Path, key) -> tuple[Path, Path]:
    private, public = where / f"{where.name}.pem", where / f"{where.name}.pub"
    where.mkdir(parents=True, exist_ok=True)
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("provenance")
    (root / "in").mkdir()
    (root / "in" / "strace.args").write_text("-m /zip/tiny.gguf\n--strace\n")  # options the prebuilt host knows
    signing, public = keypair(root / "signing", ed25519.Ed25519PrivateKey.generate())
    _, stranger = keypair(root / "stranger", ed25519.Ed25519PrivateKey.generate())
    return {"root": root, "host": as_llamafile(PLEDGE, root / "in" / "pledge", VERSION),
            "model": write_gguf(root / "in" / "tiny.gguf"), "args": root / "in" / "strace.args", "key": signing, "pub": public, "stranger": stranger}


def package(inputs: dict[str, Path], build: str, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return scons("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", "ARCH=x86_64", f"HOST={inputs['host']}",
                 f"MODEL={inputs['model']}", f"ARGS={inputs['args']}", f"SIGNING_KEY={inputs['key']}", *extra, build=inputs["root"] / build,
                 check=check)


def verify(artifact: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opencoti_build", "verify", str(artifact), *extra],
                          capture_output=True, text=True, cwd=PROJECT / "site_scons")


def test_every_artifact_gets_a_valid_sbom_and_a_signed_statement_that_verify_checks(inputs) -> None:
    packaged = package(inputs, "a")
    dist = inputs["root"] / "a" / "dist" / "llamafile"
    artifacts = sorted(p for p in dist.iterdir() if p.name.endswith(".llamafile"))
    assert len(artifacts) == 2 and "PROVENANCE" in packaged.stdout
    for artifact in artifacts:
        assert provenance.why_not_valid_sbom(provenance.sbom_path(artifact).read_text()) is None
        envelope = json.loads(provenance.statement_path(artifact).read_text())
        assert envelope["payloadType"] == intoto.PAYLOAD_TYPE and len(envelope["signatures"]) == 1
        checked = verify(artifact, "--pubkey", str(inputs["pub"]))
        assert checked.returncode == 0, checked.stdout
        assert (f"provenance: {artifact.name}.cdx.json and {artifact.name}.intoto.jsonl match the artifact "
                "(signature verified)") in checked.stdout
    # every resource the Statement names has a uri or a digest: the toolchains (a prebuilt HOST has no cosmocc)
    document, _ = intoto.read_statement(provenance.statement_path(dist / EMBEDDER))
    dependencies = {d["name"]: d for d in document["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert [n for n, d in dependencies.items() if not (d.get("uri") or d.get("digest"))] == []
    assert dependencies["toolchain:python"]["digest"] == {"sha256": hashlib.sha256(
        Path(os.path.realpath(sys.executable)).read_bytes()).hexdigest()}  # the tests' python runs scons
    assert dependencies["toolchain:scons"]["uri"].startswith("pkg:pypi/scons@4.11")
    refused = verify(dist / EMBEDDER, "--pubkey", str(inputs["stranger"]))
    fails = [line for line in refused.stdout.splitlines() if line.startswith("FAIL: ")]
    assert refused.returncode == 1 and fails == [
        f"FAIL: {dist / EMBEDDER}.intoto.jsonl: its signature does not verify with the public key given"]

    # `scons verify` the same, with PUBKEY=; no source tree needed, and a line says when no signature was checked
    def scons_verify(*extra: str) -> subprocess.CompletedProcess[str]:
        return scons("verify", f"SRC={inputs['root'] / 'no-tree'}", *extra, build=inputs["root"] / "a", check=False)

    def said(proc: subprocess.CompletedProcess[str]) -> list[str]:
        return [line for line in proc.stdout.splitlines() if line.startswith(("provenance: ", "FAIL", "OK: "))]

    matched = [f"provenance: {a.name}.cdx.json and {a.name}.intoto.jsonl match the artifact" for a in artifacts]
    unchecked = scons_verify()
    assert unchecked.returncode == 0 and said(unchecked) == [
        line for m, a in zip(matched, artifacts) for line in (
            f"{m}; its signature was NOT checked (no public key: PUBKEY=PEM)", f"OK: {a} matches {a.name}.MANIFEST.json")]
    checked = scons_verify(f"PUBKEY={inputs['pub']}")
    assert checked.returncode == 0 and [line for line in said(checked) if line.startswith("provenance: ")] == [
        f"{m} (signature verified)" for m in matched]
    wrong = scons_verify(f"PUBKEY={inputs['stranger']}")
    assert wrong.returncode == 2 and said(wrong) == [line for a in artifacts for line in (
        f"FAIL: {a}.intoto.jsonl: its signature does not verify with the public key given",
        f"FAILED: {a} matches {a.name}.MANIFEST.json, but its provenance signature does not verify with "
        f"PUBKEY={inputs['stranger']}: a signature failure, not a changed artifact; give the public half of the "
        "SIGNING_KEY it was packaged with (repackaging with another key signs it anew)")]
    assert "run `scons package`" not in wrong.stdout + wrong.stderr
    not_a_key = scons_verify(f"PUBKEY={inputs['key']}")  # the private half: refused in one line, before anything
    assert not_a_key.returncode == 2 and not_a_key.stderr.startswith(
        f"scons: error: PUBKEY={inputs['key']} is not a PEM public key (") and "VERIFY" not in not_a_key.stdout


def test_two_builds_of_the_same_inputs_attest_byte_identically(inputs) -> None:
    package(inputs, "b")
    package(inputs, "c")  # another build directory, dist and cache: none of them is a parameter of the artifact
    for name in (EMBEDDER + provenance.SBOM_SUFFIX, EMBEDDER + provenance.STATEMENT_SUFFIX):
        first, second = (inputs["root"] / d / "dist" / "llamafile" / name for d in ("b", "c"))
        assert first.read_bytes() == second.read_bytes(), name
    document, signed = intoto.read_statement(inputs["root"] / "b" / "dist" / "llamafile" /
                                                 (EMBEDDER + provenance.STATEMENT_SUFFIX),
                                                 signing_keys.load_public_key(inputs["pub"]))
    definition = document["predicate"]["buildDefinition"]
    assert signed and definition["externalParameters"] == {"targets": ["package"],
                                                           "variables": {"ARCH": "x86_64", "CPU_ONLY": "1"}}
    # the inputs named by a path are there by what they hold, not where they lie
    assert {d["name"]: d["digest"]["sha256"] for d in definition["resolvedDependencies"] if d["name"].startswith(
        "model:")} == {"model:tiny.gguf": hashlib.sha256(inputs["model"].read_bytes()).hexdigest()}


def test_a_tampered_zip_entry_is_named_by_the_sbom_check(inputs) -> None:
    package(inputs, "d")
    artifact = inputs["root"] / "d" / "dist" / "llamafile" / EMBEDDER
    manifest = json.loads(Path(f"{artifact}.MANIFEST.json").read_text())
    entry = next(e for e in manifest["entries"] if e["name"] == "tiny.gguf")
    raw = bytearray(artifact.read_bytes())
    raw[entry["offset"] + 40] ^= 0xFF
    artifact.write_bytes(bytes(raw))
    fails = [line for line in verify(artifact).stdout.splitlines() if line.startswith("FAIL: ")]
    assert any(line.startswith(f"FAIL: {artifact}.cdx.json: entry 'tiny.gguf' has sha256 {entry['sha256']}, the "
                               "artifact's holds ") for line in fails), fails


def test_a_key_that_cannot_sign_is_refused_before_anything_is_written(inputs, tmp_path: Path) -> None:
    key = tmp_path / "rsa.pem"
    key.write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    refused = package(inputs, "e", f"SIGNING_KEY={key}", check=False)
    assert refused.returncode == 2 and refused.stderr == (
        f"scons: error: SIGNING_KEY={key} is a RSAPrivateKey; DSSE signing here takes an ed25519 or ECDSA P-256 key\n")
    assert not (inputs["root"] / "e" / "out").exists() and not (inputs["root"] / "e" / "dist").exists()


@pytest.mark.parametrize("text, spdx", [
    ("MIT License\n\nCopyright (c) 2023-2024 The ggml authors\n\nPermission is hereby granted, free of charge, to any "
     "person obtaining a copy\n", "MIT"),
    ("                                 Apache License\n                           Version 2.0, January 2004\n", "Apache-2.0"),
    ("All rights reserved.\n", None),
])
def test_a_source_tree_is_described_by_its_license_and_its_own_commit(tmp_path: Path, text: str, spdx: str | None) -> None:
    tree = tmp_path / "tree"
    (tree / "inner").mkdir(parents=True)
    (tree / "LICENSE").write_text(text)
    (tree / "inner" / "LICENSE").write_text(text)
    # no checkout: the tree by the digest of its files
    assert provenance.source("t", "1.0", tree) == provenance.Source("t", "1.0", None, spdx, provenance.tree_digest(tree))
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t"]):
        subprocess.run(["git", "-C", str(tree), *argv], check=True)
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert provenance.source("t", "1.0", tree) == provenance.Source("t", "1.0", head, spdx) and len(head) == 40
    # a tree inside another checkout has no commit of its own: its files' digest
    assert provenance.source("t", "1.0", tree / "inner") == provenance.Source(
        "t", "1.0", None, spdx, provenance.tree_digest(tree / "inner"))


def test_the_validator_builds_the_iri_grammar_only_when_an_iri_is_checked_and_then_checks_it() -> None:
    """rfc3987_syntax builds an Earley parser at import (1.1 s, every packaging run); it is deferred, not dropped."""
    if importlib.util.find_spec("rfc3987_syntax") is None:
        pytest.skip("rfc3987_syntax is not installed: jsonschema checks no IRI at all")
    script = (
        "import sys\n"
        "from opencoti_build.artifacts import provenance\n"
        "provenance._import_validator()\n"
        "print('rfc3987_syntax.syntax_helpers' in sys.modules, 'rfc3987_syntax' in sys.modules)\n"
        "from jsonschema import Draft7Validator\n"
        "check = Draft7Validator.FORMAT_CHECKER\n"
        "print(check.conforms('http://a.example/b c', 'iri-reference'), check.conforms('http://a.example/b', 'iri'))\n"
        "print(type(sys.modules['rfc3987_syntax'].syntax_helpers.syntax_parser).__name__)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(provenance.__file__).parents[2]))
    shown = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.splitlines() == ["False False", "False True", "Lark"]
