"""MANIFEST.json, `opencoti-build verify` and `opencoti-build pin`, on artifacts made from real APEs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging_support import PLEDGE, as_llamafile, copy_exe, write_gguf

from opencoti_build import cli, manifest, packaging, verify
from opencoti_build.manifest import Identity

IDENTITY = Identity("0.10.3", "c2", "x86_64", "0" * 40)
VERSION = IDENTITY.llamafile_version


def _package(tmp_path: Path, dso_bytes: bytes = b"\x7fELF cuda dso") -> tuple[Path, dict]:
    """A packaged embedder with one DSO, its manifest written beside it, as `scons package` does."""
    dso = tmp_path / "vendors-dist" / "llamafile" / "cuda" / VERSION / "ggml-cuda.so"
    dso.parent.mkdir(parents=True, exist_ok=True)
    dso.write_bytes(dso_bytes)
    (tmp_path / "args").write_text("-m /zip/model.gguf --strace\n")  # options the host has
    contents = packaging.Contents(
        host=as_llamafile(PLEDGE, tmp_path / "host"), dsos={"cuda": dso}, model=write_gguf(tmp_path / "model.gguf"),
        args_file=tmp_path / "args",
    )
    out = tmp_path / "dist" / packaging.embedder_name(IDENTITY)
    packaged = packaging.write_artifact(contents, out, align=4096, epoch=0)
    data = manifest.build(
        packaged.result, IDENTITY, host_name="host", host_prebuilt=True, dsos={"cuda": "ggml-cuda.so"},
        dso_archs={"cuda": ["sm_90"]}, model=("model.gguf", packaged.gguf_version), args_text=packaged.args_text,
        patches=[{"name": "0001-x.patch", "sha256": "ab" * 32, "series": "opencoti"}], toolchains={"nvcc": "13.0"},
        epoch=0,
    )
    manifest.write(manifest.manifest_path(out), data)
    return out, data


def test_manifest_records_what_was_embedded(tmp_path: Path) -> None:
    out, data = _package(tmp_path)
    text = manifest.manifest_path(out).read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"
    assert data["versionString"] == "opencoti-0.10.3-c2" and data["opencotiTag"] == "c2"
    assert data["size"] == out.stat().st_size
    assert data["sha256"] == verify.file_sha256(out)
    assert data["dsos"] == [{"backend": "cuda", "name": "ggml-cuda.so", "architectures": ["sm_90"],
                             "sha256": verify.file_sha256(tmp_path / "vendors-dist/llamafile/cuda/0.10.3/ggml-cuda.so")}]
    assert data["model"] == {"name": "model.gguf", "ggufVersion": 3, "sha256": verify.file_sha256(tmp_path / "model.gguf")}
    assert data["args"] == "-m /zip/model.gguf --strace\n"
    appended = [e for e in data["entries"] if e["appended"]]
    assert [e["name"] for e in appended] == ["ggml-cuda.so", "model.gguf", ".args"]
    assert all(e["offset"] % 4096 == 0 and e["method"] == "stored" for e in appended)


def test_verify_passes_and_prints_the_checklist(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    home = tmp_path / "home"
    assert verify.main([str(out), "--vendor-dist", str(tmp_path / "vendors-dist"), "--home", str(home)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"$ unzip -l {out} | grep ggml-" in printed
    assert any(line.endswith("   ggml-cuda.so") for line in printed)
    assert f"{data['sha256']}  {out}" in printed
    assert printed.count(data["sha256"]) == 1  # what `jq -r .sha256` printed
    assert any(line.startswith("note: no ~/.llamafile mirror copy of ggml-cuda.so") for line in printed)
    assert printed[-1].startswith("OK: ")


def test_verify_reports_each_mismatch_on_one_line(tmp_path: Path, capsys) -> None:
    out, data = _package(tmp_path)
    mirror = tmp_path / "home" / ".llamafile" / "v" / VERSION / "ggml-cuda.so"
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


def test_verify_without_manifest_fails_clearly(tmp_path: Path, capsys) -> None:
    out = copy_exe(PLEDGE, tmp_path / "x.llamafile")
    assert cli.main(["verify", str(out)]) == 1
    assert "x.llamafile.MANIFEST.json: no such manifest; run `scons package`" in capsys.readouterr().out


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
    next_cut = dict(other_host, versionString="opencoti-0.10.3-c3")
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
    assert packaging.embedded_dsos(built, cpu_only=False) == built
    assert packaging.embedded_dsos(built, cpu_only=True) == {}  # CPU_ONLY=1 embeds none, even if some were built
    assert packaging.embedded_dsos({}, cpu_only=True) == {}
    with pytest.raises(packaging.PackageError, match="no GPU backend DSO was built.*or pass CPU_ONLY=1"):
        packaging.embedded_dsos({}, cpu_only=False)


def test_numeric_variables_are_checked() -> None:
    assert packaging.integer("ALIGN", "0x1000") == 4096
    with pytest.raises(packaging.PackageError, match="ALIGN='64k' is not a whole number"):
        packaging.integer("ALIGN", "64k")
