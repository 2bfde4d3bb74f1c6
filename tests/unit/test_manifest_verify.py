"""MANIFEST.json, `opencoti-build verify` and `opencoti-build pin`, on artifacts made from real APEs."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
import zlib
from pathlib import Path

import pytest

from opencoti_build import cli, files
from opencoti_build.artifacts import intoto, manifest, packaging, provenance, verify
from opencoti_build.config import signing_keys
from opencoti_build.config.versioning import Identity
from opencoti_build.gpu import backends

from packaging_support import PLEDGE, as_llamafile, copy_exe, make_sparse, write_gguf
from scons_runs import MINI_VERSION, dso_paths

IDENTITY = Identity(MINI_VERSION, "c2", "x86_64", "0" * 40)


def _package(tmp_path: Path, dsos: dict[str, bytes] | None = None, *, align: int = 4096,
             host: Path | None = None, model: Path | None = None, signer=None) -> tuple[Path, dict]:
    """A packaged embedder with ``dsos`` (backend -> bytes; one CUDA DSO unless told), its manifest beside it,
    as `scons package` writes them."""
    dsos = {"cuda": b"\x7fELF cuda dso"} if dsos is None else dsos
    paths = {backend: _dso(tmp_path, backend, data) for backend, data in dsos.items()}
    (tmp_path / "args").write_text("-m /zip/model.gguf --strace\n")  # options the host has
    contents = packaging.Contents(
        host=host or as_llamafile(PLEDGE, tmp_path / "host"), dsos=paths,
        model=model or write_gguf(tmp_path / "model.gguf"),
        args_file=tmp_path / "args",
    )
    out = tmp_path / "dist" / packaging.embedder_name(IDENTITY)
    packaged = packaging.write_artifact(contents, out, align=align, epoch=0)
    data = manifest.build(
        packaged.result, IDENTITY, host_name="host", host_prebuilt=True, dsos={b: p.name for b, p in paths.items()},
        dso_archs={"cuda": ["sm_90"]}, model=("model.gguf", packaged.gguf_version), args_text=packaged.args_text,
        patches=[{"name": "0001-x.patch", "sha256": "ab" * 32, "series": "opencoti"}], toolchains={"nvcc": "13.0"},
        epoch=0,
    )
    manifest.write(manifest.manifest_path(out), data)
    sources = [provenance.Source("llamafile", MINI_VERSION, None, "Apache-2.0", "5e" * 32)]
    statement = provenance.statement(data, sources, {"targets": ["package"], "variables": {}},
                                     {"nvcc": {"digest": {"sha256": "7c" * 32}}})
    provenance.write(out, provenance.sbom(data, sources), intoto.statement_line(statement, signer))
    return out, data


def _dso(tmp_path: Path, backend: str, data: bytes) -> Path:
    """``data`` as ggml-<backend>.so where a build with outputs under ``tmp_path`` puts it."""
    dso = dso_paths(backend, tmp_path)[0]
    dso.parent.mkdir(parents=True, exist_ok=True)
    dso.write_bytes(data)
    return dso


def _verify(out: Path, tmp_path: Path, capsys) -> tuple[int, list[str]]:
    """verify's exit status and its FAIL lines, DSO copies looked for where _package put them."""
    status = verify.main([str(out), "--vendor-dist", str(tmp_path / "vendors-dist"), "--home", str(tmp_path / "home")])
    return status, [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL: ")]


def _sha256_at(path: Path, offset: int, size: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return hashlib.sha256(f.read(size)).hexdigest()


def test_manifest_records_what_was_embedded(tmp_path: Path) -> None:
    out, data = _package(tmp_path)
    text = manifest.manifest_path(out).read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"
    assert data["versionString"] == f"opencoti-{MINI_VERSION}-c2" and data["opencotiTag"] == "c2"
    assert data["size"] == out.stat().st_size
    assert data["sha256"] == files.sha256(out)
    assert data["dsos"] == [{"backend": "cuda", "name": "ggml-cuda.so", "architectures": ["sm_90"],
                             "sha256": files.sha256(dso_paths("cuda", tmp_path)[0])}]
    assert data["model"] == {"name": "model.gguf", "ggufVersion": 3, "sha256": files.sha256(tmp_path / "model.gguf")}
    assert data["args"] == "-m /zip/model.gguf --strace\n"
    appended = [e for e in data["entries"] if e["appended"]]
    assert [e["name"] for e in appended] == ["ggml-cuda.so", "model.gguf", ".args"]
    assert all(e["offset"] % 4096 == 0 and e["method"] == "stored" for e in appended)


def test_every_manifest_field_has_its_documented_name_and_value(tmp_path: Path) -> None:
    # docs/packaging.md lists these fields: tools read them by name
    out, data = _package(tmp_path)
    host, model = tmp_path / "host", tmp_path / "model.gguf"
    assert {k: v for k, v in data.items() if k != "entries"} == {
        "artifact": out.name, "versionString": f"opencoti-{MINI_VERSION}-c2", "llamafileVersion": MINI_VERSION,
        "opencotiTag": "c2",
        "gitCommit": "0" * 40, "arch": "x86_64", "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "size": out.stat().st_size, "align": 4096, "sourceDateEpoch": 0,
        "host": {"name": "host", "sha256": hashlib.sha256(host.read_bytes()).hexdigest(), "prebuilt": True},
        "patches": [{"name": "0001-x.patch", "sha256": "ab" * 32, "series": "opencoti"}],
        "dsos": [{"backend": "cuda", "name": "ggml-cuda.so", "architectures": ["sm_90"],
                  "sha256": hashlib.sha256(b"\x7fELF cuda dso").hexdigest()}],
        "model": {"name": "model.gguf", "ggufVersion": 3, "sha256": hashlib.sha256(model.read_bytes()).hexdigest()},
        "args": "-m /zip/model.gguf --strace\n", "toolchains": {"nvcc": "13.0"},
    }
    with zipfile.ZipFile(out) as archive:  # every entry, the host's own first, as a zip reader lists them
        listed = [(i.filename, i.file_size, i.compress_size, "deflate" if i.compress_type else "stored")
                  for i in archive.infolist()]
    assert [(e["name"], e["size"], e["compressedSize"], e["method"]) for e in data["entries"]] == listed
    assert {frozenset(e) for e in data["entries"]} == {
        frozenset({"name", "offset", "size", "compressedSize", "sha256", "method", "appended"})}
    assert [e["name"] for e in data["entries"] if e["appended"]] == ["ggml-cuda.so", "model.gguf", ".args"]


def test_a_bare_artifact_manifest_has_no_model_or_args(tmp_path: Path) -> None:
    contents = packaging.Contents(host=as_llamafile(PLEDGE, tmp_path / "host"))
    out = tmp_path / packaging.bare_name(IDENTITY)
    packaged = packaging.write_artifact(contents, out, align=4096, epoch=0)
    assert (packaged.gguf_version, packaged.args_text) == (None, None)
    data = manifest.build(packaged.result, IDENTITY, host_name="host", host_prebuilt=False, dsos={}, dso_archs={},
                          model=None, args_text=None, patches=[], toolchains={}, epoch=1700000000)
    assert (data["model"], data["args"], data["dsos"], data["sourceDateEpoch"]) == (None, None, [], 1700000000)
    assert data["host"]["prebuilt"] is False and not any(e["appended"] for e in data["entries"])


def test_each_dso_carries_its_own_digest(tmp_path: Path, capsys) -> None:
    dsos = {"cuda": b"\x7fELF the cuda dso", "vulkan": b"\x7fELF the vulkan dso, longer"}
    out, data = _package(tmp_path, dsos)
    entries = {e["name"]: e for e in data["entries"]}
    assert [(d["backend"], d["name"]) for d in data["dsos"]] == [("cuda", "ggml-cuda.so"), ("vulkan", "ggml-vulkan.so")]
    for dso in data["dsos"]:
        digest = hashlib.sha256(dsos[dso["backend"]]).hexdigest()
        entry = entries[dso["name"]]
        assert dso["sha256"] == entry["sha256"] == digest, dso["backend"]
        assert _sha256_at(out, entry["offset"], entry["size"]) == digest  # the bytes stored under that name
    assert _verify(out, tmp_path, capsys) == (0, [])  # the vendors/dist copies agree


def test_sparse_inputs_are_hashed_as_the_zeros_they_read_as(tmp_path: Path, capsys, monkeypatch) -> None:
    # holes longer than the writer's 4 MiB buffer, in the host's zip store and in the model
    host = as_llamafile(PLEDGE, tmp_path / "host", extra=(make_sparse(tmp_path / "padding", 9 << 20),))
    model = make_sparse(write_gguf(tmp_path / "model.gguf"), 9 << 20)
    assert os.stat(model).st_blocks * 512 < 1 << 20 and os.stat(host).st_blocks * 512 < 8 << 20  # really sparse
    out, data = _package(tmp_path, host=host, model=model)
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert data["sha256"] == digest and data["size"] == out.stat().st_size
    assert data["host"]["sha256"] == hashlib.sha256(host.read_bytes()).hexdigest()
    assert data["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    entry = next(e for e in data["entries"] if e["name"] == "model.gguf")
    assert _sha256_at(out, entry["offset"], entry["size"]) == data["model"]["sha256"]
    assert _verify(out, tmp_path, capsys) == (0, [])
    monkeypatch.chdir(out.parent)
    assert cli.main(["pin", out.name]) == 0
    assert capsys.readouterr().out.split() == [f"file:./{out.name}", "v0", verify.PIN_ASSET, digest]


def test_verify_refuses_entry_data_off_the_alignment(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path, align=1)  # each entry's data right after its local header
    data["align"] = 4096  # what the runtime's mmap needs, and the artifact does not give
    manifest.write(manifest.manifest_path(out), data)
    off = [e for e in data["entries"] if e["appended"] and e["offset"] % 4096]
    assert off  # (every other field of the manifest still matches)
    assert _verify(out, tmp_path, capsys) == (
        1, [f"FAIL: {e['name']}: data offset {e['offset']} is not a multiple of 4096" for e in off])


def test_verify_passes_and_prints_the_checklist(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    home = tmp_path / "home"
    assert verify.main([str(out), "--vendor-dist", str(tmp_path / "vendors-dist"), "--home", str(home)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"$ unzip -l {out} | grep ggml-" in printed
    assert any(line.endswith("   ggml-cuda.so") for line in printed)
    assert f"{data['sha256']}  {out}" in printed
    assert printed.count(data["sha256"]) == 1  # what `jq -r .sha256` printed
    assert not any("mirror" in line for line in printed)  # made with MIRROR=1 only: its absence is no news
    assert printed[-1].startswith("OK: ")


def test_verify_reports_each_mismatch_on_one_line(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    mirror = dso_paths("cuda", tmp_path)[1]
    mirror.parent.mkdir(parents=True)
    mirror.write_bytes(b"a stale DSO")
    entry = next(e for e in data["entries"] if e["name"] == "model.gguf")
    raw = bytearray(out.read_bytes())
    raw[entry["offset"] + 8] ^= 0xFF  # flip a byte inside the embedded model
    out.write_bytes(bytes(raw))
    status = verify.main([str(out), "--vendor-dist", str(tmp_path / "vendors-dist"), "--home", str(tmp_path / "home")])
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL: ")]
    assert status == 1
    assert any(line.startswith("FAIL: model.gguf: sha256 ") for line in fails)
    assert any(f"{out}: sha256 " in line for line in fails)
    assert any("~/.llamafile mirror copy" in line and str(mirror) in line for line in fails)


def _verdict(out: Path, tmp_path: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    """verify's exit status and every line it printed from the FAIL lines on (the failures, then the verdicts)."""
    status = verify.main([str(out), "--vendor-dist", str(tmp_path / "vendors-dist"), "--home", str(tmp_path / "home"),
                          *extra])
    printed = capsys.readouterr().out.splitlines()
    return status, [line for line in printed if line.startswith(("FAIL", "OK: ", "provenance: "))]


def test_an_intact_artifact_beside_a_rebuilt_dso_is_told_apart_from_a_changed_artifact(tmp_path: Path, capsys) -> None:
    """The same toolkit under another CUDA_PATH (before toolkits were compared as real paths) rebuilt vendors/dist's
    DSO: the artifact still matches its manifest, and verify says which file is not which, and what fits."""
    out, data = _package(tmp_path)
    rebuilt, mirror = dso_paths("cuda", tmp_path)
    rebuilt.write_bytes(b"\x7fELF cuda dso, rebuilt")
    digest = hashlib.sha256(rebuilt.read_bytes()).hexdigest()
    manifest_name = f"{out.name}.MANIFEST.json"
    status, said = _verdict(out, tmp_path, capsys)
    assert status == 1 and said == [
        f"provenance: {out.name}.cdx.json and {out.name}.intoto.jsonl match the artifact; the Statement is not "
        "signed (no signature to check)",
        f"FAIL: ggml-cuda.so: vendors/dist copy {rebuilt} has sha256 {digest}, the artifact {data['dsos'][0]['sha256']}",
        f"FAILED: {out} matches {manifest_name}, but {rebuilt} is not the ggml-cuda.so inside it: that DSO was "
        "rebuilt after packaging (another CUDA_PATH, ROCM_PATH, VULKAN_SDK, *_ARCHS or source); `scons package` with "
        "the variables of that build packages the new one, or rebuild the DSO with the variables this artifact was "
        "packaged with"]
    assert not any("does not match" in line for line in said)
    rebuilt.write_bytes(b"\x7fELF cuda dso")  # as packaged again; the ~/.llamafile copy llamafile loads first is stale
    mirror.parent.mkdir(parents=True)
    mirror.write_bytes(b"an older mirror")
    status, said = _verdict(out, tmp_path, capsys)
    assert status == 1 and said[-1] == (
        f"FAILED: {out} matches {manifest_name}, but {mirror} is not the ggml-cuda.so inside it, and llamafile loads "
        "that copy first: delete it, or build with MIRROR=1 to put the DSO just built there")


def test_a_signature_is_verified_said_unchecked_or_failed_as_a_signature(tmp_path: Path, capsys) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key, stranger = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    for name, k in (("key.pub", key), ("stranger.pub", stranger)):
        (tmp_path / name).write_bytes(k.public_key().public_bytes(serialization.Encoding.PEM,
                                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    out, _ = _package(tmp_path, signer=signing_keys.load_private_key(tmp_path / "key.pem"))
    matched = f"provenance: {out.name}.cdx.json and {out.name}.intoto.jsonl match the artifact"
    assert _verdict(out, tmp_path, capsys) == (0, [
        f"{matched}; its signature was NOT checked (no public key: --pubkey PEM)", f"OK: {out} matches {out.name}"
        ".MANIFEST.json"])
    assert _verdict(out, tmp_path, capsys, "--pubkey", str(tmp_path / "key.pub"))[1][0] == (
        f"{matched} (signature verified)")
    wrong = tmp_path / "stranger.pub"
    assert _verdict(out, tmp_path, capsys, "--pubkey", str(wrong)) == (1, [
        f"FAIL: {out}.intoto.jsonl: its signature does not verify with the public key given",
        f"FAILED: {out} matches {out.name}.MANIFEST.json, but its provenance signature does not verify with --pubkey "
        f"{wrong}: a signature failure, not a changed artifact; give the public half of the SIGNING_KEY it was "
        "packaged with (repackaging with another key signs it anew)"])


def test_what_scons_verify_checks_is_every_artifact_in_the_dist_dir(tmp_path: Path) -> None:
    dist = tmp_path / "dist" / "llamafile"
    assert verify.artifacts_in(dist) == []
    dist.mkdir(parents=True)
    for name in ("a.llamafile", "a.llamafile.MANIFEST.json", "a.llamafile.cdx.json", "b.llamafile",
                 "c.llamafile.MANIFEST.json", ".a.llamafile.x1.tmp", "notes.txt"):
        (dist / name).write_text("")
    # b has no manifest, c's artifact is gone: both are checked, and verify names what is missing
    assert verify.artifacts_in(dist) == [dist / "a.llamafile", dist / "b.llamafile", dist / "c.llamafile"]


def test_verify_catches_a_manifest_that_lies_about_offsets(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    for e in data["entries"]:
        if e["name"] == ".args":
            e["offset"] += 1
            e["method"] = "deflate"
    data["entries"] = [e for e in data["entries"] if e["name"] != "ggml-cuda.so"]
    manifest.write(manifest.manifest_path(out), data)
    assert verify.main([str(out), "--vendor-dist", str(tmp_path / "vendors-dist"), "--home", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL: .args: data offset" in printed
    assert "FAIL: .args: method stored, manifest says deflate" in printed
    assert "entry 'ggml-cuda.so' is not in the manifest" in printed


def test_verify_names_each_field_the_manifest_gets_wrong(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    entries = {e["name"]: e for e in data["entries"]}
    model, args, dso = entries["model.gguf"], entries[".args"], entries["ggml-cuda.so"]
    actual = dict(model), dict(args), dict(dso)
    model["size"] += 1
    args["sha256"] = "0" * 64
    dso["offset"] += 4096  # still aligned: only the offset is wrong
    manifest.write(manifest.manifest_path(out), data)
    assert _verify(out, tmp_path, capsys) == (1, [
        f"FAIL: ggml-cuda.so: data offset {actual[2]['offset']}, manifest says {dso['offset']}",
        f"FAIL: model.gguf: size {actual[0]['size']}, manifest says {model['size']}",
        f"FAIL: .args: sha256 {actual[1]['sha256']}, manifest says {'0' * 64}",
    ])


def test_verify_checks_every_entry_past_a_damaged_one(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    entries = {e["name"]: e for e in data["entries"]}
    model, args = entries["model.gguf"], entries[".args"]
    raw = bytearray(out.read_bytes())
    header = model["offset"] - 30 - len("model.gguf")  # its local header (no extra field)
    assert raw[header:header + 4] == b"PK\x03\x04"
    raw[header + 3] = 0  # its signature gone
    raw[args["offset"]] ^= 0xFF  # and a later entry's first byte flipped
    out.write_bytes(bytes(raw))
    flipped = zlib.crc32(raw[args["offset"]:args["offset"] + args["size"]])
    recorded = zlib.crc32(data["args"].encode())
    status, fails = _verify(out, tmp_path, capsys)
    assert status == 1 and fails[:2] == [
        f"FAIL: {out}: corrupt zip store: entry 'model.gguf' has no local header at {header}",
        f"FAIL: .args: CRC-32 {flipped:08x} does not match its zip record {recorded:08x}",
    ]


def test_verify_of_a_manifest_without_entries_names_every_entry(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    names = [e["name"] for e in data.pop("entries")]
    manifest.write(manifest.manifest_path(out), data)
    status, fails = _verify(out, tmp_path, capsys)
    assert status == 1 and fails == [f"FAIL: {out}: entry {name!r} is not in the manifest" for name in names]


def test_verify_without_manifest_fails_clearly(tmp_path: Path, capsys) -> None:
    out = copy_exe(PLEDGE, tmp_path / "x.llamafile")
    assert cli.main(["verify", str(out)]) == 1
    assert capsys.readouterr().out == f"FAILED: {out}.MANIFEST.json: no such manifest; run `scons package` to write it\n"


@pytest.mark.parametrize(("content", "why"), [
    (b"root:x:0:0:root:/root:/bin/bash\n", "is not a llamafile artifact (neither an APE nor an ELF executable)"),
    (None, "is not a llamafile artifact (an executable without a zip store)"),
])
def test_verify_and_pin_refuse_what_is_no_artifact_in_one_line(tmp_path: Path, capsys, content: bytes | None,
                                                               why: str) -> None:
    path = tmp_path / "x.llamafile"
    if content is None:
        shutil.copyfile("/bin/true", path)
    else:
        path.write_bytes(content)
    assert cli.main(["verify", str(path)]) == 1
    assert capsys.readouterr().out == f"FAILED: {path} {why}; name a .llamafile file\n"
    assert cli.main(["pin", str(path)]) == 1
    assert capsys.readouterr() == ("", f"pin: {path} {why}; name a .llamafile file\n")
    assert cli.main(["pin", str(tmp_path / "absent")]) == 1
    assert capsys.readouterr().err == f"pin: {tmp_path / 'absent'}: no such artifact; run `scons package` first\n"


def test_pin_prints_the_file_line(tmp_path: Path, capsys, monkeypatch) -> None:
    out, data = _package(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["pin", str(out.relative_to(tmp_path))]) == 0
    line = capsys.readouterr().out.strip()
    assert line == f"file:./dist/{out.name}  v0  opencoti-embedder.llamafile  {data['sha256']}"
    out.write_bytes(out.read_bytes() + b"tampered")
    assert cli.main(["pin", str(out)]) == 1
    assert "no longer matches" in capsys.readouterr().err


def test_same_version_with_other_bytes_is_a_tag_conflict(tmp_path: Path) -> None:
    out, data = _package(tmp_path)
    same = manifest.tag_conflicts(out.parent, data)
    rebuilt_dso = dict(data, dsos=[dict(data["dsos"][0], sha256="f" * 64)])
    other_host = dict(data, host=dict(data["host"], sha256="e" * 64))
    next_cut = dict(other_host, versionString=f"opencoti-{MINI_VERSION}-c3")
    assert same == []
    assert manifest.tag_conflicts(out.parent, rebuilt_dso) == [f"{out.name}.MANIFEST.json (ggml-cuda.so)"]
    assert manifest.tag_conflicts(out.parent, other_host) == [f"{out.name}.MANIFEST.json (host binary)"]
    assert manifest.tag_conflicts(out.parent, next_cut) == []


def test_patches_come_from_the_apply_record(tmp_path: Path) -> None:
    record = tmp_path / "applied-series.json"
    assert manifest.applied_patches(record) == []
    record.write_text(json.dumps({
        "format": 1, "state": "applied", "patches": [{"name": "0001-a.patch", "sha256": "cd" * 32, "series": "opencoti"}],
    }))
    assert manifest.applied_patches(record) == [{"name": "0001-a.patch", "sha256": "cd" * 32, "series": "opencoti"}]


@pytest.mark.parametrize("machine, arch", [("AMD64", "x86_64"), ("x86_64", "x86_64"), ("arm64", "aarch64"),
                                           ("aarch64", "aarch64")])
def test_arch_names_are_normalised(machine: str, arch: str) -> None:
    assert packaging.normalise_arch(machine) == arch


def test_args_pointing_outside_the_artifact_are_refused(tmp_path: Path) -> None:
    (tmp_path / "args").write_text("-m /zip/model.gguf --strace /zip/other.gguf\n")
    contents = packaging.Contents(host=as_llamafile(PLEDGE, tmp_path / "host"), model=write_gguf(tmp_path / "model.gguf"), args_file=tmp_path / "args")
    with pytest.raises(packaging.PackageError, match="points at /zip/other.gguf, which the artifact does not hold"):
        packaging.check(contents)


def test_dsos_are_required_unless_cpu_only(tmp_path: Path) -> None:
    built = {"cuda": tmp_path / "ggml-cuda.so"}
    assert backends.embedded_dsos(built, cpu_only=False) == built
    assert backends.embedded_dsos(built, cpu_only=True) == {}  # CPU_ONLY=1 embeds none, even if some were built
    assert backends.embedded_dsos({}, cpu_only=True) == {}
    with pytest.raises(backends.NoBackendBuilt) as refused:
        backends.embedded_dsos({}, cpu_only=False)
    assert str(refused.value) == ("package: no GPU backend DSO was built: no CUDA, ROCm or Vulkan toolchain was found "
                                  "(see the WARN lines); install one, point CUDA_PATH/ROCM_PATH/VULKAN_SDK at it, "
                                  "or pass CPU_ONLY=1")


def test_numeric_variables_are_checked() -> None:
    assert packaging.integer("ALIGN", "0x1000") == 4096
    with pytest.raises(packaging.PackageError, match="ALIGN='64k' is not a whole number"):
        packaging.integer("ALIGN", "64k")


def test_tag_conflicts_also_weigh_removed_manifests_and_skip_unreadable_ones(tmp_path: Path) -> None:
    out, data = _package(tmp_path)
    (out.parent / "0-broken.llamafile.MANIFEST.json").write_text("{not json")  # read first: the others still are
    (out.parent / "other.txt").write_text(json.dumps(dict(data, host={"sha256": "0" * 64})))  # not a manifest name
    gone = dict(data, dsos=[])  # the packager removed it just before replacing its artifact
    previous = {"gone.llamafile.MANIFEST.json": gone, "never.llamafile.MANIFEST.json": None}
    assert manifest.tag_conflicts(out.parent, data, previous) == ["gone.llamafile.MANIFEST.json (ggml-cuda.so)"]
    both = dict(data, host=dict(data["host"], sha256="e" * 64), dsos=[])
    assert manifest.tag_conflicts(out.parent, both) == [f"{out.name}.MANIFEST.json (host binary, ggml-cuda.so)"]


def test_a_manifest_is_sorted_json_with_a_newline_and_mode_0644(tmp_path: Path) -> None:
    path = tmp_path / "a.llamafile.MANIFEST.json"
    manifest.write(path, {"b": 1, "a": {"d": [], "c": None}})
    assert path.read_text() == '{\n  "a": {\n    "c": null,\n    "d": []\n  },\n  "b": 1\n}\n'
    assert path.stat().st_mode & 0o777 == 0o644
    assert manifest.read(path) == {"a": {"c": None, "d": []}, "b": 1}
    assert manifest.manifest_path(tmp_path / "x.llamafile") == tmp_path / "x.llamafile.MANIFEST.json"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_manifest_that_cannot_be_written_is_one_line_and_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manifest.os, "replace", full)
    path = tmp_path / "a.MANIFEST.json"
    with pytest.raises(manifest.ManifestError, match=f"^cannot write {path}: No space left on device$"):
        manifest.write(path, {"a": 1})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("text", "message"), [
    (None, "no such manifest; run `scons package` to write it"),
    ("{not json", r"cannot read it as JSON \(.*\); run `scons package` to rewrite it"),
    ("[1, 2]", r"not a manifest \(a JSON object was expected\); run `scons package` to rewrite it"),
])
def test_an_unreadable_manifest_is_one_line_naming_the_file_and_the_fix(tmp_path: Path, text: str | None,
                                                                       message: str) -> None:
    path = tmp_path / "a.MANIFEST.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(manifest.ManifestError, match=f"^{path}: {message}$"):
        manifest.read(path)


def test_a_dso_without_a_backend_or_digest_still_counts_as_one(tmp_path: Path) -> None:
    out, data = _package(tmp_path)
    unnamed = dict(data, dsos=[{"name": "ggml-x.so"}])
    assert manifest.tag_conflicts(out.parent, unnamed) == [f"{out.name}.MANIFEST.json (ggml-?.so, ggml-cuda.so)"]


def test_a_record_without_patches_applied_none(tmp_path: Path) -> None:
    record = tmp_path / "applied-series.json"
    record.write_text(json.dumps({"format": 1, "state": "applied"}))
    assert manifest.applied_patches(record) == []
