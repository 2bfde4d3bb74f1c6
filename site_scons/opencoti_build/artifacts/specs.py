"""What `scons package` makes, as typed, frozen specs: one :class:`Package` per artifact, holding what its artifact
step writes (:class:`ArtifactSpec`), what its manifest records (:class:`ManifestSpec`) and what its SBOM and
provenance Statement add (:class:`Attestation`). :func:`packages` makes them from the checked inputs (package/SConscript
gathers those; unit tests call it directly); each step reads its spec back from the JSON of its Value node, whose
bytes are what an edit of the spec is seen by (the keys are those the steps have always signed).
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opencoti_build.artifacts import manifest, packaging
from opencoti_build.artifacts.provenance import Source
from opencoti_build.config.versioning import Identity

RECORD_SUFFIX = ".record.json"  # the artifact step's record, in BUILD_DIR/package


@dataclass(frozen=True)
class ArtifactSpec:
    """The artifact's bytes: the host binary, the DSOs (backend -> path), the model and .args (paths; the embedder
    only), the alignment of stored entries, the zip entries' time, and the server the generated .args is for."""

    host: str
    dsos: Mapping[str, str]
    model: str | None
    args: str | None
    align: int
    epoch: int
    server: str

    def contents(self) -> packaging.Contents:
        return packaging.Contents(host=Path(self.host), dsos={b: Path(p) for b, p in self.dsos.items()},
                                  model=Path(self.model) if self.model else None,
                                  args_file=Path(self.args) if self.args else None, server=self.server)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ArtifactSpec:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class ManifestSpec:
    """What the manifest says beyond the artifact step's record: who the artifact is, whether its host was prebuilt,
    the patch series it carries, the toolchains that made it, SOURCE_DATE_EPOCH."""

    identity: Identity
    host_prebuilt: bool
    patches: Sequence[Mapping[str, str]]
    toolchains: Mapping[str, Any]
    epoch: int

    def to_json(self) -> str:
        return json.dumps({"identity": dataclasses.asdict(self.identity), "hostPrebuilt": self.host_prebuilt,
                           "patches": list(self.patches), "toolchains": dict(self.toolchains), "epoch": self.epoch},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ManifestSpec:
        data = json.loads(text)
        return cls(Identity(**data["identity"]), data["hostPrebuilt"], data["patches"], data["toolchains"],
                   data["epoch"])


@dataclass(frozen=True)
class Attestation:
    """The SBOM's and the provenance Statement's inputs beyond the manifest: the source trees, the Statement's
    external parameters, each toolchain as a resource, and the key that signs it (a PEM file, or "": unsigned)."""

    sources: Sequence[Source]
    parameters: Mapping[str, Any]
    toolchains: Mapping[str, Any]
    signing_key: str

    def to_json(self) -> str:
        return json.dumps({"sources": [dataclasses.asdict(s) for s in self.sources], "parameters": dict(self.parameters),
                           "toolchains": dict(self.toolchains), "signingKey": self.signing_key}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Attestation:
        data = json.loads(text)
        return cls([Source(**s) for s in data["sources"]], data["parameters"], data["toolchains"], data["signingKey"])


@dataclass(frozen=True)
class Package:
    """One artifact of `scons package`: where it, its step's record and its manifest go, and the specs of each."""

    artifact_path: str
    record_path: str
    manifest_path: str
    artifact: ArtifactSpec
    manifest: ManifestSpec
    attestation: Attestation


def packages(*, identity: Identity, host: str, host_prebuilt: bool, checkout: bool, dsos: Mapping[str, str],
             model: str | None, args: str | None, align: int, epoch: int, applied_series: str,
             toolchains: Mapping[str, Any], attestation: Attestation, dist: str, build_dir: str) -> list[Package]:
    """The bare runtime's package, and the embedder's with a ``model`` (and its ``args``, None: the generated .args).
    A prebuilt host was not built from this tree, and a checkout's server (``checkout``: LLAMACPP=) is built from the
    checkout as it is: neither carries the applied patch series (``applied_series``: its record)."""
    meta = ManifestSpec(identity, host_prebuilt,
                        [] if host_prebuilt or checkout else manifest.applied_patches(applied_series),
                        toolchains, epoch)
    common = ArtifactSpec(host, dict(dsos), None, None, align, epoch, "llama-server" if checkout else "llamafile")
    specs = [(packaging.bare_name(identity), common)]
    if model:
        specs.append((packaging.embedder_name(identity), dataclasses.replace(common, model=model, args=args)))
    return [Package(os.path.join(dist, name), os.path.join(build_dir, "package", name + RECORD_SUFFIX),
                    os.path.join(dist, name + manifest.MANIFEST_SUFFIX), spec, meta, attestation)
            for name, spec in specs]
