"""MANIFEST.json beside each artifact: what was embedded, with digests, so a binary describes itself.

Written with sorted keys and a trailing newline, atomically; the same inputs give the same bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from opencoti_build import tempfiles
from opencoti_build.config.versioning import Identity
from opencoti_build.errors import UserError
from opencoti_build.formats.zipappend import AppendResult
from opencoti_build.gpu import backends
from opencoti_build.tree import patch_series

MANIFEST_SUFFIX = ".MANIFEST.json"


class ManifestError(UserError):
    """A manifest cannot be read or written. One line naming the file."""


def manifest_path(artifact: Path | str) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + MANIFEST_SUFFIX)


def git_commit(project: Path | str) -> str:
    """HEAD of the project checkout, or "unknown" outside a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and len(commit) >= 40 else "unknown"


def applied_patches(record: Path | str) -> list[dict[str, str]]:
    """The patch series of the last apply (name, sha256, series), from patch_series' record; [] if none."""
    found = patch_series.read_record(Path(record))
    if not found:
        return []
    return [{k: str(p[k]) for k in ("name", "sha256", "series") if k in p} for p in found.get("patches", [])]


def dso_architectures(path: Path | str) -> list[str]:
    """GPU architectures compiled into a DSO, as every backend's device-code reader names them."""
    return sorted(backends.dso_architectures(path))


def build(result: AppendResult, identity: Identity, *, host_name: str, host_prebuilt: bool, dsos: Mapping[str, str],
          dso_archs: Mapping[str, Sequence[str]], model: tuple[str, int] | None, args_text: str | None,
          patches: Sequence[Mapping[str, str]], toolchains: Mapping[str, str], epoch: int) -> dict[str, Any]:
    """The manifest of one artifact. ``dsos`` maps backend -> entry name; ``model`` is (entry name, GGUF version).

    ``host_prebuilt``: the host came from HOST= (so ``patches`` cannot vouch for it and is passed empty).
    """
    entries = result.entries
    return {
        "artifact": result.path.name,
        "versionString": identity.version_string,
        "llamafileVersion": identity.llamafile_version,
        "opencotiTag": identity.tag,
        "gitCommit": identity.git_commit,
        "arch": identity.arch,
        "sha256": result.sha256,
        "size": result.size,
        "align": result.align,
        "sourceDateEpoch": epoch,
        "host": {"name": host_name, "sha256": result.base_sha256, "prebuilt": host_prebuilt},
        "patches": [dict(p) for p in patches],
        "entries": [
            {"name": e.name, "offset": e.data_offset, "size": e.size, "compressedSize": e.compressed_size,
             "sha256": e.sha256, "method": e.method, "appended": e.appended}
            for e in entries
        ],
        "dsos": [
            {"backend": backend, "name": name, "sha256": result.entry(name).sha256,
             "architectures": list(dso_archs.get(backend, ()))}
            for backend, name in sorted(dsos.items())
        ],
        "model": None if model is None else {
            "name": model[0], "sha256": result.entry(model[0]).sha256, "ggufVersion": model[1],
        },
        "args": args_text,
        "toolchains": dict(toolchains),
    }


def render(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True, indent=2) + "\n"


def write(path: Path | str, manifest: Mapping[str, Any]) -> None:
    """Write ``manifest`` to ``path`` through a temporary file beside it, so no reader sees half of it."""
    path = Path(path)
    fd, tmp = tempfiles.create(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(render(manifest))
            f.flush()
            os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)  # while the lock is held: no sweeper takes it for a dead writer's
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ManifestError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def read(path: Path | str) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such manifest; run `scons package` to write it") from None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: cannot read it as JSON ({exc}); run `scons package` to rewrite it") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: not a manifest (a JSON object was expected); run `scons package` to rewrite it")
    return data


def _fingerprint(manifest: Mapping[str, Any]) -> tuple[str | None, dict[str, str]]:
    host = manifest.get("host") or {}
    return host.get("sha256"), {d.get("backend", "?"): d.get("sha256", "") for d in manifest.get("dsos") or []}


def tag_conflicts(dist: Path | str, new: Mapping[str, Any],
                  previous: Mapping[str, Mapping[str, Any] | None] | None = None) -> list[str]:
    """Manifests in ``dist`` with ``new``'s versionString but another host binary or other DSOs.

    The tag must change whenever those bytes change (two different cuts must never share a
    name); the caller turns a non-empty answer into a loud warning naming the tag to bump to.
    ``previous`` (manifest file name -> its content) stands in for manifests no longer in ``dist``:
    the packager removes an artifact's manifest just before replacing the artifact.
    """
    host, dsos = _fingerprint(new)
    found = []
    manifests: dict[str, Mapping[str, Any]] = {name: m for name, m in (previous or {}).items() if m is not None}
    for other in sorted(Path(dist).glob(f"*{MANIFEST_SUFFIX}")):
        try:
            manifests[other.name] = read(other)
        except ManifestError:
            continue  # an unreadable manifest describes nothing to compare against
    for name, old in sorted(manifests.items()):
        if old.get("versionString") != new.get("versionString"):
            continue
        old_host, old_dsos = _fingerprint(old)
        changed = (["host binary"] if old_host != host else []) + [
            f"ggml-{b}.so" for b in sorted(set(old_dsos) | set(dsos)) if old_dsos.get(b) != dsos.get(b)
        ]
        if changed:
            found.append(f"{name} ({', '.join(changed)})")
    return found
