"""The specs of `scons package` (opencoti_build/artifacts/specs.py): which packages a run makes, what each artifact,
manifest and attestation holds, and the JSON the steps sign, read back as it was written."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from opencoti_build.artifacts import specs
from opencoti_build.artifacts.provenance import Source
from opencoti_build.config.versioning import Identity

IDENTITY = Identity("0.10.1", "oc1", "x86_64", "a" * 40)
ATTESTATION = specs.Attestation(sources=[Source("llamafile", "0.10.1", "b" * 40, "MIT")],
                                parameters={"targets": ["package"], "variables": {}},
                                toolchains={"python": {"uri": "pkg:generic/python@3.11"}}, signing_key="")


def _packages(tmp_path: Path, **given) -> list[specs.Package]:
    inputs = dict(identity=IDENTITY, host="/b/o/llamafile", host_prebuilt=False, checkout=False,
                  dsos={"cuda": "/v/ggml-cuda.so"}, model=None, args=None, align=65536, epoch=0,
                  applied_series=str(tmp_path / "no-record.json"), toolchains={"python": "3.11.7"},
                  attestation=ATTESTATION, dist="/d/llamafile", build_dir="/b")
    return specs.packages(**{**inputs, **given})


def test_a_run_without_a_model_makes_the_bare_runtime_alone(tmp_path: Path) -> None:
    (bare,) = _packages(tmp_path)
    name = "opencoti-llamafile-0.10.1-oc1-x86_64.llamafile"
    assert (bare.artifact_path, bare.record_path, bare.manifest_path) == (
        f"/d/llamafile/{name}", f"/b/package/{name}.record.json", f"/d/llamafile/{name}.MANIFEST.json")
    assert bare.artifact == specs.ArtifactSpec("/b/o/llamafile", {"cuda": "/v/ggml-cuda.so"}, None, None, 65536, 0,
                                               "llamafile")
    assert bare.manifest == specs.ManifestSpec(IDENTITY, False, [], {"python": "3.11.7"}, 0)  # no apply recorded
    assert bare.attestation is ATTESTATION


def test_a_model_adds_the_embedder_with_its_args_and_the_same_manifest_and_attestation(tmp_path: Path) -> None:
    bare, embedder = _packages(tmp_path, model="/m/tiny.gguf", args="/m/tiny.args")
    assert embedder.artifact_path == "/d/llamafile/opencoti-embedder-0.10.1-x86_64.llamafile"
    assert embedder.artifact == dataclasses.replace(bare.artifact, model="/m/tiny.gguf", args="/m/tiny.args")
    assert embedder.artifact.contents().model == Path("/m/tiny.gguf")
    assert (embedder.manifest, embedder.attestation) == (bare.manifest, bare.attestation)


@pytest.mark.parametrize(("host_prebuilt", "checkout", "server"), [(True, False, "llamafile"),
                                                                   (False, True, "llama-server")])
def test_a_prebuilt_host_or_a_checkouts_server_carries_no_patch_series(tmp_path: Path, host_prebuilt: bool,
                                                                       checkout: bool, server: str) -> None:
    record = tmp_path / "applied.json"
    record.write_text("not read")  # neither reads the apply record
    (bare,) = _packages(tmp_path, host_prebuilt=host_prebuilt, checkout=checkout, applied_series=str(record))
    assert (bare.manifest.patches, bare.manifest.host_prebuilt, bare.artifact.server) == ([], host_prebuilt, server)


def test_each_spec_is_signed_as_the_json_its_step_reads_back(tmp_path: Path) -> None:
    _, embedder = _packages(tmp_path, model="/m/tiny.gguf")
    assert specs.ArtifactSpec.from_json(embedder.artifact.to_json()) == embedder.artifact
    assert specs.ManifestSpec.from_json(embedder.manifest.to_json()) == embedder.manifest
    assert specs.Attestation.from_json(embedder.attestation.to_json()) == embedder.attestation
    # the keys the steps have always signed: an unchanged package is not repackaged after this code changes
    assert json.loads(embedder.artifact.to_json()) == {"host": "/b/o/llamafile", "dsos": {"cuda": "/v/ggml-cuda.so"},
                                                       "model": "/m/tiny.gguf", "args": None, "align": 65536,
                                                       "epoch": 0, "server": "llamafile"}
    assert sorted(json.loads(embedder.manifest.to_json())) == ["epoch", "hostPrebuilt", "identity", "patches",
                                                              "toolchains"]
    assert sorted(json.loads(embedder.attestation.to_json())) == ["parameters", "signingKey", "sources", "toolchains"]
