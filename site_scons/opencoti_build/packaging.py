"""The two artifacts of `scons package`: names, contents, checks, and the record the manifest step reads.

The artifact step writes the .llamafile and a record of what it wrote (entries, offsets, digests);
the manifest step turns that record plus the build's identity into MANIFEST.json. Splitting them
lets a new git commit rewrite only the manifest, never a multi-GiB artifact.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opencoti_build import embed_args, gguf_model, host_strings, zipappend
from opencoti_build.manifest import Identity
from opencoti_build.zipappend import AppendResult, Entry, EntryInfo
from opencoti_build.errors import UserError

_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


class PackageError(UserError):
    """Packaging refused. One line naming the input and the fix."""


# Every refusal packaging can raise: one line each, shown to the user as is.
ERRORS: tuple[type[Exception], ...] = (
    PackageError, gguf_model.ModelError, embed_args.ArgsError, host_strings.HostError,
    zipappend.ZipAppendError, zipappend.ZipStoreError,
)


def normalise_arch(machine: str | None = None) -> str:
    """x86_64 or aarch64 for this machine (or ``machine``); other names pass through lower-cased."""
    name = (machine or platform.machine()).strip().lower()
    arch = _ARCHES.get(name, name)
    if not re.fullmatch(r"[a-z0-9_]+", arch):
        raise PackageError(f"ARCH={machine!r} is not a plain architecture name; use x86_64 or aarch64")
    return arch


def bare_name(identity: Identity) -> str:
    return f"opencoti-llamafile-{identity.llamafile_version}-{identity.tag}-{identity.arch}.llamafile"


def embedder_name(identity: Identity) -> str:
    return f"opencoti-embedder-{identity.llamafile_version}-{identity.arch}.llamafile"


def integer(name: str, value: str) -> int:
    """A numeric build variable, or a PackageError naming it."""
    try:
        return int(str(value), 0)
    except ValueError:
        raise PackageError(f"{name}={value!r} is not a whole number") from None


def embedded_dsos(built: Mapping[str, Any], cpu_only: bool) -> dict[str, Any]:
    """The DSOs to embed (backend -> DSO): none with CPU_ONLY=1; refused when none were built otherwise."""
    if cpu_only:
        return {}
    if not built:
        raise PackageError(
            "package: no GPU backend DSO was built (no CUDA, ROCm or Vulkan toolchain found, see the WARN lines); "
            "install one, point CUDA_PATH/ROCM_PATH/VULKAN_SDK at it, or pass CPU_ONLY=1")
    return dict(built)


def host_version(host: Path, tree_version: str | None) -> tuple[str, str | None]:
    """(llamafile version, warning) for a prebuilt HOST binary.

    The binary's own "llamafile vX.Y.Z" string wins: the runtime keys its DSO cache
    (~/.llamafile/v/<ver>/) by the version compiled into it, not by whatever tree SRC points at.
    """
    try:
        found = host_strings.llamafile_version(host)
    except host_strings.HostError as exc:
        raise PackageError(str(exc)) from exc
    if found and tree_version and found != tree_version:
        return found, f"HOST={host} says llamafile v{found} but SRC's version.h says {tree_version}; using {found}"
    if found or tree_version:
        return str(found or tree_version), None
    raise PackageError(f"HOST={host} names no llamafile version and SRC has no llamafile/version.h; "
                       "point SRC= at the tree the binary was built from")


@dataclass(frozen=True)
class Contents:
    """What one artifact holds besides the host: DSOs (backend -> file), and for the embedder a model + .args."""

    host: Path
    dsos: Mapping[str, Path] = field(default_factory=dict)
    model: Path | None = None
    args_file: Path | None = None

    def args_text(self) -> str | None:
        """The .args to embed: ARGS= verbatim, else the generated default; None without a model."""
        if self.model is None:
            return None
        if self.args_file is None:
            return embed_args.default_args(self.model.name)
        try:
            return self.args_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            raise PackageError(f"ARGS={self.args_file}: cannot read: {reason}") from exc

    def entries(self, args_text: str | None) -> list[Entry]:
        """DSOs (by backend name, bare file names as cosmo_dlopen looks them up), model, .args."""
        entries = [Entry.file(self.dsos[b]) for b in sorted(self.dsos)]
        if self.model is not None:
            entries.append(Entry.file(self.model, mode=0o644))
        if args_text is not None:
            entries.append(Entry.blob(embed_args.ARGS_ENTRY, args_text.encode("utf-8")))
        return entries


def check(contents: Contents) -> tuple[int | None, str | None]:
    """Refuse bad inputs before anything is written: (GGUF version or None, .args text or None)."""
    if contents.args_file is not None and contents.model is None:
        raise PackageError(f"ARGS={contents.args_file} needs MODEL=: the .args goes into the embedder artifact only")
    version = gguf_model.gguf_version(contents.model) if contents.model is not None else None
    text = contents.args_text()
    if text is not None:
        origin = f"ARGS={contents.args_file}" if contents.args_file else "the generated .args"
        embed_args.check_against_host(text, contents.host, origin)
        names = {e.name for e in contents.entries(None)} | {embed_args.ARGS_ENTRY}
        for ref in embed_args.zip_paths(embed_args.parse_words(text, origin)):
            if ref not in names:
                raise PackageError(f"{origin} points at /zip/{ref}, which the artifact does not hold "
                                   f"(it holds {', '.join(sorted(names))})")
    return version, text


@dataclass(frozen=True)
class Packaged:
    """One written artifact: the writer's result, and what the manifest says about the model and .args."""

    result: AppendResult
    gguf_version: int | None
    args_text: str | None


def write_artifact(contents: Contents, output: Path, *, align: int, epoch: int, manifest: Path | None = None) -> Packaged:
    """Check the inputs, then write ``output``; nothing is written when a check fails.

    ``manifest`` (the artifact's MANIFEST.json) is removed just before the new artifact takes the
    old one's place: a run killed before its manifest step leaves an artifact with no manifest,
    never a manifest describing other bytes.
    """
    version, text = check(contents)

    def drop_manifest() -> None:
        if manifest is not None:
            manifest.unlink(missing_ok=True)

    result = zipappend.append(contents.host, contents.entries(text), output, align=align, epoch=epoch,
                              before_replace=drop_manifest)
    return Packaged(result, version, text)


def record_json(result: AppendResult, extra: Mapping[str, Any]) -> str:
    """The artifact step's record: the append result plus what the manifest step needs to know."""
    data = dataclasses.asdict(result)
    data["path"] = str(result.path)
    return json.dumps({"result": data, **extra}, sort_keys=True, indent=1) + "\n"


def load_record(text: str) -> tuple[AppendResult, dict[str, Any]]:
    data = json.loads(text)
    raw = data.pop("result")
    entries = tuple(EntryInfo(**e) for e in raw.pop("entries"))
    return AppendResult(**{**raw, "path": Path(raw["path"]), "entries": entries}), data
