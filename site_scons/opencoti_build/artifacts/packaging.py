"""The two artifacts of `scons package`: names, contents, checks, and the record the manifest step reads.

The artifact step writes the .llamafile and a record of what it wrote (entries, offsets, digests);
the manifest step turns that record plus the build's identity into MANIFEST.json. Splitting them
lets a new git commit rewrite only the manifest, never a multi-GiB artifact.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opencoti_build.artifacts import embed_args
from opencoti_build.bulkcopy import zipwriter
from opencoti_build.config import values
from opencoti_build.config.versioning import Identity
from opencoti_build.errors import UserError
from opencoti_build.formats import gguf_model, host_strings, zipappend, zipstore
from opencoti_build.formats.executables import APE_MAGIC
from opencoti_build.formats.zipappend import AppendResult, Entry, EntryInfo


class PackageError(UserError):
    """Packaging refused. One line naming the input and the fix."""


# Every refusal packaging can raise: one line each, shown to the user as is (ZipAppendError is
# zipappend's own; every other one is a UserError).
ERRORS: tuple[type[Exception], ...] = (UserError, zipappend.ZipAppendError)


def normalise_arch(machine: str | None = None) -> str:
    """x86_64 or aarch64 for this machine (or ``machine``: aliases amd64, x64, arm64); anything else refused."""
    return values.arch(machine or "")


def bare_name(identity: Identity) -> str:
    return f"opencoti-llamafile-{identity.llamafile_version}-{identity.tag}-{identity.arch}.llamafile"


def embedder_name(identity: Identity) -> str:
    return f"opencoti-embedder-{identity.llamafile_version}-{identity.arch}.llamafile"


def run_line(artifact: Path, shown: str, embeds_model: bool) -> str:
    """How to run ``artifact`` (named ``shown``), printed at the end of `scons package`: an APE through ``sh``
    (executed directly it fails with ENOEXEC where binfmt_misc does not know APE), the stand-in's plain ELF as it is
    (``sh`` would read that as a script); the bare runtime needs a model, the embedder carries its own."""
    with open(artifact, "rb") as f:
        ape = f.read(len(APE_MAGIC)) == APE_MAGIC
    command = f"sh {shown}" if ape else shown
    if embeds_model:
        return f"run: {command}   (its model and arguments are inside it: /zip/.args)"
    return f"run: {command} --server -m MODEL.gguf"


def integer(name: str, value: str) -> int:
    """A numeric build variable, or a PackageError naming it."""
    try:
        return int(str(value), 0)
    except ValueError:
        raise PackageError(f"{name}={value!r} is not a whole number") from None


# Entries that make a zip store a packaged artifact rather than a thin llamafile binary.
def packaged_entries(names: Collection[str]) -> list[str]:
    return sorted(n for n in names if n == embed_args.ARGS_ENTRY or n.lower().endswith(".gguf"))


@dataclass(frozen=True)
class Host:
    """A prebuilt HOST, checked: its llamafile version and the names in its zip store."""

    path: Path
    version: str
    names: frozenset[str]


def check_host(host: Path | str, *, repackage: bool = False) -> Host:
    """HOST checked to be a llamafile: a "llamafile vX.Y.Z" string, a zip store, no .args/model unless ``repackage``."""
    host = Path(host)
    if not host.exists():
        raise PackageError(f"HOST={host}: no such file; point HOST= at a thin llamafile binary "
                           "(a build's $BUILD_DIR/o/llamafile/llamafile)")
    if host.is_dir():
        raise PackageError(f"HOST={host} is a directory; point HOST= at the llamafile binary inside it")
    if host.stat().st_size == 0:
        raise PackageError(f"HOST={host} is an empty file; point HOST= at a thin llamafile binary")
    version = host_strings.llamafile_version(host)  # HostError when it cannot be read
    if version is None:
        raise PackageError(f"HOST={host} is not a llamafile (no 'llamafile vX.Y.Z' version string in it); "
                           "point HOST= at a thin llamafile binary")
    try:
        store = zipstore.read_zip_store(host)
    except zipstore.ZipStoreError as exc:
        raise PackageError(f"HOST={exc}; a llamafile carries a zip store: point HOST= at one linked by cosmocc") from None
    names = frozenset(r.name for r in store.records)
    packaged = packaged_entries(names)
    if packaged and not repackage:
        raise PackageError(f"HOST={host} is already a packaged artifact (it holds {', '.join(packaged)}); point HOST= at "
                           "the thin llamafile binary it was made from, or pass REPACKAGE=1 to package it as it is")
    return Host(host, version, names)


def host_version(host: Host, tree_version: str | None) -> tuple[str, str | None]:
    """(llamafile version, warning) for a checked prebuilt HOST.

    The binary's own "llamafile vX.Y.Z" string wins: the runtime keys its DSO cache
    (~/.llamafile/v/<ver>/) by the version compiled into it, not by whatever tree SRC points at.
    """
    if tree_version and host.version != tree_version:
        return host.version, (f"HOST={host.path} says llamafile v{host.version} but SRC's version.h says "
                              f"{tree_version}; using {host.version}")
    return host.version, None


@dataclass(frozen=True)
class Contents:
    """What one artifact holds besides the host: DSOs (backend -> file), and for the embedder a model + .args."""

    host: Path
    dsos: Mapping[str, Path] = field(default_factory=dict)
    model: Path | None = None
    args_file: Path | None = None
    server: str = "llamafile"  # what the host runs, which the generated .args is for (embed_args.SERVER_OPTIONS)

    def args_text(self) -> str | None:
        """The .args to embed: ARGS= verbatim, else the generated default; None without a model."""
        if self.model is None:
            return None
        if self.args_file is None:
            return embed_args.default_args(self.model.name, self.server)
        try:
            return self.args_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PackageError(f"ARGS={self.args_file}: no such file; point ARGS= at a .args file, "
                               "or leave ARGS out for the generated one") from None
        except IsADirectoryError:
            raise PackageError(f"ARGS={self.args_file} is a directory; point ARGS= at a .args file") from None
        except UnicodeDecodeError:
            raise PackageError(f"ARGS={self.args_file} is not UTF-8 text; write the .args as UTF-8 text") from None
        except OSError as exc:
            raise PackageError(f"ARGS={self.args_file}: cannot read: {exc.strerror or exc}") from exc

    def entry_names(self, args_text: str | None) -> set[str]:
        """The names :meth:`entries` gives, without reading any file."""
        names = {Path(p).name for p in self.dsos.values()}
        if self.model is not None:
            names.add(self.model.name)
        if args_text is not None:
            names.add(embed_args.ARGS_ENTRY)
        return names

    def entries(self, args_text: str | None) -> list[Entry]:
        """DSOs (by backend name, bare file names as cosmo_dlopen looks them up), model, .args."""
        entries = [Entry.file(self.dsos[b]) for b in sorted(self.dsos)]
        if self.model is not None:
            entries.append(Entry.file(self.model, mode=0o644))
        if args_text is not None:
            entries.append(Entry.blob(embed_args.ARGS_ENTRY, args_text.encode("utf-8")))
        return entries


def check(contents: Contents, *, host_names: Collection[str] | None = None,
          host_ready: bool = True) -> tuple[int | None, str | None]:
    """Refuse bad inputs before anything is written: (GGUF version or None, .args text or None).

    The model is parsed whole; the .args must not be empty, must load ``-m /zip/<model>`` and use only
    options the host has (when ``host_ready``: a host this run builds is checked once it exists), and
    may point only at entries the artifact holds. ``host_names`` (a prebuilt host's zip entries) must
    not clash with the entries added.
    """
    if contents.args_file is not None and contents.model is None:
        raise PackageError(f"ARGS={contents.args_file} needs MODEL=: the .args goes into the embedder artifact only")
    version = gguf_model.gguf_version(contents.model) if contents.model is not None else None
    text = contents.args_text()
    added = contents.entry_names(text)
    if host_names is not None:
        clash = sorted(added & set(host_names))
        if clash:
            raise PackageError(f"HOST={contents.host} already holds {clash[0]}, which this artifact adds too; "
                               "point HOST= at the thin llamafile binary it was made from")
    if text is not None:
        origin = f"ARGS={contents.args_file}" if contents.args_file else "the generated .args"
        words = embed_args.parse_words(text, origin)
        assert contents.model is not None  # args_text() gives no .args without a model
        embed_args.check_loads_model(words, contents.model.name, origin)
        if host_ready:
            embed_args.check_against_host(text, contents.host, origin)
        names = added | set(host_names or ())
        for ref in embed_args.zip_paths(words):
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


def write_artifact(contents: Contents, output: Path, *, align: int, epoch: int, claims: Sequence[Path] = (),
                   on_digest: zipwriter.Digest | None = None, known: zipwriter.DigestLookup | None = None) -> Packaged:
    """Check the inputs, then write ``output``; nothing is written when a check fails.

    ``claims`` (the files that describe the artifact: its MANIFEST.json, SBOM and provenance Statement) are removed
    just before the new artifact takes the old one's place: a run killed before the steps that write them again
    leaves an artifact with no manifest, never one describing other bytes. ``on_digest`` and ``known`` as for
    zipwriter.append.
    """
    version, text = check(contents)

    def drop_claims() -> None:
        for claim in claims:
            claim.unlink(missing_ok=True)

    result = zipwriter.append(contents.host, contents.entries(text), output, align=align, epoch=epoch,
                              before_replace=drop_claims, on_digest=on_digest, known=known)
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
