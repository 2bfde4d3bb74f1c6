"""`scons package` / `scons verify` end to end, packaging prebuilt cosmopolitan executables (HOST=)."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from opencoti_build.config import versioning
from opencoti_build.incremental import null_build
from opencoti_build.report import summary
from opencoti_build.server import protocol, request_loop

from packaging_support import FILE_ELF, PLEDGE, as_llamafile, run, write_gguf
from scons_runs import MINI_TREE, PROJECT, dso_paths, scons, scons_command
from server_runs import Server, client

VERSION = versioning.llamafile_version(MINI_TREE)
TAG = versioning.opencoti_tag(PROJECT / "vendors" / "llamafile" / "OPENCOTI_TAG")
ARCH = "x86_64"
BARE = f"opencoti-llamafile-{VERSION}-{TAG}-{ARCH}.llamafile"
EMBEDDER = f"opencoti-embedder-{VERSION}-{ARCH}.llamafile"


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    args = tmp_path / "in" / "strace.args"
    args.parent.mkdir()
    args.write_text("# the model, then options every cosmopolitan binary knows\n-m /zip/tiny.gguf\n--strace\n--ftrace\n")
    # real cosmopolitan programs, made to pass for llamafiles (a version string, -m), still runnable
    return {
        "pledge": as_llamafile(PLEDGE, tmp_path / "in" / "pledge", VERSION),
        "file": as_llamafile(FILE_ELF, tmp_path / "in" / "file.elf", VERSION),
        "model": write_gguf(tmp_path / "in" / "tiny.gguf"),
        "args": args,
    }


def package(tmp_path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return scons("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", *args, build=tmp_path / "b",
                 home=tmp_path / "home", check=check)


def dist(tmp_path: Path) -> Path:
    return tmp_path / "b" / "dist" / "llamafile"


def test_package_writes_both_artifacts_that_run_and_verify(tmp_path: Path, inputs: dict[str, Path]) -> None:
    packaged = package(tmp_path, f"HOST={inputs['pledge']}", f"MODEL={inputs['model']}", f"ARGS={inputs['args']}")
    # CPU_ONLY=1 embeds no DSO: no backend is read, no GPU toolchain probed (nor lief imported)
    said = packaged.stdout + packaged.stderr
    assert not [line for line in said.splitlines() if line.startswith(("WARN: cuda", "WARN: rocm", "WARN: vulkan",
                                                                        "NOTE: rocm"))], said
    out = dist(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        name + suffix for name in (BARE, EMBEDDER) for suffix in ("", ".MANIFEST.json", ".cdx.json", ".intoto.jsonl"))
    # how to run each, said at the end: an APE through sh (Linux without binfmt_misc)
    assert [line for line in packaged.stdout.splitlines() if line.startswith("run: ")] == [
        f"run: sh {out / BARE} --server -m MODEL.gguf",
        f"run: sh {out / EMBEDDER}   (its model and arguments are inside it: /zip/.args)"]
    for name in (BARE, EMBEDDER):
        proc = run("sh", f"./{name}", "-h", cwd=out)
        assert "usage: pledge" in proc.stdout + proc.stderr
        assert "No errors detected" in run("unzip", "-t", name, cwd=out).stdout
    bare = json.loads((out / f"{BARE}.MANIFEST.json").read_text())
    embedder = json.loads((out / f"{EMBEDDER}.MANIFEST.json").read_text())
    assert bare["versionString"] == f"opencoti-{VERSION}-{TAG}" and bare["model"] is None and bare["args"] is None
    assert bare["dsos"] == [] and bare["host"]["prebuilt"] is True and bare["patches"] == []
    assert embedder["model"]["name"] == "tiny.gguf" and embedder["model"]["ggufVersion"] == 3
    assert embedder["args"] == inputs["args"].read_text()
    assert [e["name"] for e in embedder["entries"] if e["appended"]] == ["tiny.gguf", ".args"]
    assert all(e["offset"] % 65536 == 0 for e in embedder["entries"] if e["appended"])

    # `scons verify` checks every artifact in DIST_DIR as it lies: no source tree (a fresh machine, a CI job that only
    # downloaded dist/), no toolchain probed, nothing packaged
    verified = scons("verify", f"SRC={tmp_path / 'no-tree-here'}", build=tmp_path / "b", home=tmp_path / "home")
    assert [line for line in verified.stdout.splitlines() if line.startswith(("OK: ", "FAIL", "provenance: "))] == [
        f"provenance: {name}.cdx.json and {name}.intoto.jsonl match the artifact; the Statement is not signed (no "
        f"signature to check)" if i == 0 else f"OK: {out / name} matches {name}.MANIFEST.json"
        for name in sorted((BARE, EMBEDDER)) for i in (0, 1)]
    assert "PACKAGE" not in verified.stdout and "no llamafile source tree" not in verified.stderr
    assert not [line for line in verified.stderr.splitlines() if line.startswith("WARN")], verified.stderr
    assert not (tmp_path / "no-tree-here").exists()


GPU_TOOLCHAINS = [shutil.which("glslc"), shutil.which("hipcc") or glob.glob("/opt/rocm/bin/hipcc"),
                  shutil.which("nvcc") or glob.glob("/usr/local/cuda*/bin/nvcc")]


@pytest.mark.skipif(sum(map(bool, GPU_TOOLCHAINS)) < 2, reason="needs two of glslc, hipcc, nvcc")
def test_a_stand_in_artifact_is_run_as_it_is_and_verify_says_what_it_checks(tmp_path: Path) -> None:
    packaged = package(tmp_path)  # the host built from the miniature tree by the stand-in: a plain ELF
    artifact = dist(tmp_path) / BARE
    assert [line for line in packaged.stdout.splitlines() if line.startswith("run: ")] == [
        f"run: {artifact} --server -m MODEL.gguf"]
    assert subprocess.run([str(artifact), "--version"], capture_output=True).returncode == 0
    verified = scons("package", "verify", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", build=tmp_path / "b",
                     home=tmp_path / "home")
    assert ("NOTE: verify checks the bare artifact only (no MODEL=): the embedder is made and checked with "
            "MODEL=model.gguf") in verified.stdout
    assert f"OK: {artifact} matches {BARE}.MANIFEST.json" in verified.stdout


def test_each_embedded_dso_is_the_one_its_backend_built(tmp_path: Path, inputs: dict[str, Path]) -> None:
    # every backend whose toolchain is here (CUDA for one arch), built from the miniature tree and embedded
    package(tmp_path, f"HOST={inputs['pledge']}", "CPU_ONLY=0", "CUDA_ARCHS=80")
    artifact = dist(tmp_path) / BARE
    data = json.loads((dist(tmp_path) / f"{BARE}.MANIFEST.json").read_text())
    assert len(data["dsos"]) >= 2, data["dsos"]
    entries = {e["name"]: e for e in data["entries"]}
    with open(artifact, "rb") as raw:
        for dso in data["dsos"]:
            built = dso_paths(dso["backend"], tmp_path / "b")[0]
            digest = hashlib.sha256(built.read_bytes()).hexdigest()
            entry = entries[dso["name"]]
            raw.seek(entry["offset"])
            assert dso["name"] == built.name and dso["sha256"] == entry["sha256"] == digest, dso
            assert hashlib.sha256(raw.read(entry["size"])).hexdigest() == digest, dso  # the bytes under that name
    verified = scons("verify", f"SRC={MINI_TREE}", f"ARCH={ARCH}", f"HOST={inputs['pledge']}", "CUDA_ARCHS=80",
                     build=tmp_path / "b", home=tmp_path / "home")
    assert f"OK: {artifact} matches {BARE}.MANIFEST.json" in verified.stdout


def test_cosmopolitan_runtime_reads_the_embedded_model(tmp_path: Path, inputs: dict[str, Path]) -> None:
    args = tmp_path / "in" / "file.args"
    args.write_text("-m /zip/tiny.gguf -b\n")  # options file.elf has (it reads no .args itself)
    package(tmp_path, f"HOST={inputs['file']}", f"MODEL={inputs['model']}", f"ARGS={args}")
    artifact = dist(tmp_path) / EMBEDDER
    proc = run(artifact, "/zip/tiny.gguf", "/zip/.args")
    assert proc.returncode == 0 and "cannot open" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1].startswith("/zip/.args:") and "text" in proc.stdout.splitlines()[1]


def test_repackaging_happens_only_when_inputs_change_and_is_byte_identical(tmp_path: Path, inputs: dict[str, Path]) -> None:
    argv = (f"HOST={inputs['pledge']}", f"MODEL={inputs['model']}", f"ARGS={inputs['args']}")
    package(tmp_path, *argv)
    first = {p.name: p.read_bytes() for p in dist(tmp_path).iterdir()}
    current = package(tmp_path, *argv)  # nothing to do; recorded (the first run made the directories it read)
    assert "PACKAGE" not in current.stdout and "MANIFEST" not in current.stdout
    full = package(tmp_path, *argv, "--debug=explain")  # never recorded: SCons evaluates the graph, finds it current
    record = tmp_path / "b" / "out" / null_build.RECORD_NAME
    recorded = record.stat()
    again = package(tmp_path, *argv)  # a null build: answered from the record, which stays as it was
    assert (record.stat().st_mtime_ns, record.stat().st_ino) == (recorded.st_mtime_ns, recorded.st_ino)
    assert [line for line in again.stdout.splitlines() if line.startswith("run: ")] == [
        line for line in full.stdout.splitlines() if line.startswith("run: ")] != []
    assert summary.parse(again.stdout) == summary.parse(full.stdout) and again.stderr == full.stderr
    for p in dist(tmp_path).iterdir():
        p.unlink()
    package(tmp_path, *argv)
    assert {p.name: p.read_bytes() for p in dist(tmp_path).iterdir()} == first

    write_gguf(inputs["model"], values=32)  # only the embedder holds the model
    changed = package(tmp_path, *argv)
    assert [line.split()[1] for line in summary.unprefixed(changed.stdout) if line.startswith("PACKAGE ")] == [
        str(dist(tmp_path) / EMBEDDER)]


def test_a_package_request_with_nothing_changed_is_answered_by_the_server_from_the_record(
        tmp_path: Path, inputs: dict[str, Path]) -> None:
    argv, env = scons_command("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", f"HOST={inputs['pledge']}",
                              f"MODEL={inputs['model']}", f"ARGS={inputs['args']}", build=tmp_path / "b",
                              home=tmp_path / "home")
    args = argv[argv.index(str(PROJECT)) + 1:]  # the request: scons's arguments less -C (the client runs there)
    variables = protocol.configuration(args)
    started = client(PROJECT, "serve", "--detach", "--idle-timeout", "300", *variables, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    server = Server(PROJECT, variables, env)
    try:
        requests = [client(PROJECT, "build", *args, env=env) for _ in range(3)]  # the first makes the directories
        assert [r.returncode for r in requests] == [0, 0, 0], requests[-1].stdout + requests[-1].stderr
        assert server.answers()[-1] == request_loop.NULL_ANSWER, server.build_lines()[-1]
        assert [line for line in requests[-1].stdout.splitlines() if line.startswith("run: ")] == [
            line for line in requests[0].stdout.splitlines() if line.startswith("run: ")] != []
        verified = client(PROJECT, "build", *args, "verify", env=env)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "(never recorded: verify reads every artifact whole, each time)" in server.build_lines()[-1]
    finally:
        server.stop()


def test_a_new_host_binary_or_model_through_the_server_is_built_by_the_reader_as_a_one_shot_run_builds_it(
        tmp_path: Path, inputs: dict[str, Path]) -> None:
    """The reading takes only facts from HOST, MODEL and ARGS (the host's version and entries, the GGUF version, the
    .args): new bytes that give the same facts are built by the reader without reading the SConscripts again; a host
    that says another version is not (a forked run reads them)."""
    argv, env = scons_command("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", f"HOST={inputs['pledge']}",
                              f"MODEL={inputs['model']}", f"ARGS={inputs['args']}", build=tmp_path / "b",
                              home=tmp_path / "home")
    args = argv[argv.index(str(PROJECT)) + 1:]
    variables = protocol.configuration(args)
    started = client(PROJECT, "serve", "--detach", "--idle-timeout", "300", *variables, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    server = Server(PROJECT, variables, env)
    try:
        assert client(PROJECT, "build", *args, env=env).returncode == 0
        changes = [lambda: as_llamafile(PLEDGE, inputs["pledge"], VERSION, options=("-m", "a new build")),
                   lambda: write_gguf(inputs["model"], values=32)]
        for n, change in enumerate(changes):
            server.reader_ready(n)
            change()
            built = client(PROJECT, "build", *args, env=env)
            assert built.returncode == 0, built.stdout + built.stderr
            assert server.answers()[-1] == request_loop.READ_AHEAD, server.build_lines()[-1]
            assert "PACKAGE" in built.stdout
        one_shot = scons("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", f"HOST={inputs['pledge']}",
                         f"MODEL={inputs['model']}", f"ARGS={inputs['args']}", build=tmp_path / "one-shot",
                         home=tmp_path / "home")
        assert one_shot.returncode == 0
        assert {p.name: p.read_bytes() for p in dist(tmp_path).iterdir()} == {
            p.name: p.read_bytes() for p in (tmp_path / "one-shot" / "dist" / "llamafile").iterdir()}
        assert client(PROJECT, "build", *args, env=env).returncode == 0
        assert server.answers()[-1] == request_loop.NULL_ANSWER, server.build_lines()[-1]
        server.reader_ready(len(changes))
        as_llamafile(PLEDGE, inputs["pledge"], "0.10.4")  # another version: another artifact name, read again
        assert client(PROJECT, "build", *args, env=env).returncode == 0
        assert server.answers()[-1] == request_loop.FORKED_RUN
        assert f"{inputs['pledge']} changed" in server.build_lines()[-1]
    finally:
        server.stop()


def test_default_args_are_refused_by_a_host_without_the_patch_series(tmp_path: Path, inputs: dict[str, Path]) -> None:
    # upstream llamafile's options, not the two the opencoti series adds
    host = as_llamafile(PLEDGE, tmp_path / "in" / "upstream", VERSION,
                        ("-m", "--server", "--embedding", "--pooling", "--ctx-size", "--parallel"))
    package(tmp_path, f"HOST={host}", f"MODEL={inputs['model']}", f"ARGS={inputs['args']}")
    previous = (dist(tmp_path) / EMBEDDER).read_bytes()
    proc = package(tmp_path, f"HOST={host}", f"MODEL={inputs['model']}", check=False)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.startswith("scons:")] == [
        f"scons: error: the generated .args uses --slot-initial-ctx, --slot-shrink-idle-ms, which host binary {host} "
        "does not know: the opencoti patch series is not compiled into it (run `scons apply` and rebuild, or package "
        "with ARGS= naming only its options)"]
    assert (dist(tmp_path) / EMBEDDER).read_bytes() == previous
    assert not [p for p in dist(tmp_path).iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("model, complaint", [
    ("absent.gguf", "no such file"), ("dir", "is a directory"), ("notgguf", "is not a GGUF file"),
])
def test_bad_model_is_refused_and_nothing_is_written(tmp_path: Path, inputs: dict[str, Path], model: str,
                                                    complaint: str) -> None:
    (tmp_path / "in" / "dir").mkdir()
    (tmp_path / "in" / "notgguf").write_bytes(b"\x7fELF")
    proc = package(tmp_path, f"HOST={inputs['pledge']}", f"MODEL={tmp_path / 'in' / model}",
                   f"ARGS={inputs['args']}", check=False)
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if complaint in line]
    assert len(error) == 1 and str(tmp_path / "in" / model) in error[0], proc.stderr
    assert not (dist(tmp_path) / EMBEDDER).exists()


def test_host_without_zip_store_is_refused(tmp_path: Path, inputs: dict[str, Path]) -> None:
    plain = tmp_path / "in" / "plain"
    plain.write_bytes(b"\x7fELF\0llamafile v0.10.3\0" + bytes(4096))
    proc = package(tmp_path, f"HOST={plain}", check=False)
    assert proc.returncode == 2 and f"scons: error: HOST={plain}: no zip store" in proc.stderr
    assert not (dist(tmp_path) / BARE).exists()


def test_changed_host_under_the_same_tag_warns_loudly(tmp_path: Path, inputs: dict[str, Path]) -> None:
    package(tmp_path, f"HOST={inputs['pledge']}")
    proc = package(tmp_path, f"HOST={inputs['file']}")
    assert f"WARNING: opencoti-{VERSION}-{TAG} already names other bytes" in proc.stderr
    assert f"bump vendors/llamafile/OPENCOTI_TAG from {TAG} to {versioning.next_tag(TAG)}" in proc.stderr
    assert "(host binary)" in proc.stderr


def test_args_without_model_is_refused(tmp_path: Path, inputs: dict[str, Path]) -> None:
    proc = package(tmp_path, f"HOST={inputs['pledge']}", f"ARGS={inputs['args']}", check=False)
    assert proc.returncode != 0 and "needs MODEL=" in proc.stderr
    assert not dist(tmp_path).exists()


def _bytes_read(log: Path, path: Path, calls: str = "read|pread64|preadv2?") -> int:
    """Bytes that read, pread64 and preadv(2) calls (or ``calls``) returned from ``path``, in an ``strace -f -y`` log.

    A call another thread interrupts is logged in two lines: ``<unfinished ...>``, then ``resumed``. Reads of
    ``path``'s temporary sibling (``.NAME.XXXX.tmp``, an output while it is written) count as reads of it.
    """
    temporary = re.escape(str(path.parent / f".{path.name}.")) + r"\w+\.tmp"
    call = re.compile(rf"^(\d+) +(?:{calls})\(\d+<(?:{re.escape(str(path))}|{temporary})>")
    resumed = re.compile(rf"^(\d+) +<\.\.\. (?:{calls}) resumed>.*\) += (\d+)$")  # strace pads before "="
    total, pending = 0, set()
    for line in log.read_text().splitlines():
        if m := call.search(line):
            if line.endswith("<unfinished ...>"):
                pending.add(m.group(1))
            else:
                total += int(line.rsplit(" = ", 1)[1])
        elif (m := resumed.search(line)) and m.group(1) in pending:
            pending.discard(m.group(1))
            total += int(m.group(2))
    return total


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_scons_package_reads_a_new_model_twice_a_recorded_one_once_and_the_artifact_never(tmp_path: Path, inputs: dict[str, Path]) -> None:
    """Every read of the model and the artifact by the whole scons process tree, SCons' own signatures included."""
    model = write_gguf(tmp_path / "in" / "big.gguf", values=4 << 20)  # 16 MiB, far above SCons' 64 KiB chunk
    args = tmp_path / "in" / "big.args"
    args.write_text("-m /zip/big.gguf\n--strace\n")
    headers = 1 << 20  # what the GGUF checks read (the header and tensor table), at most

    def traced(log: Path) -> subprocess.CompletedProcess[str]:
        argv, env = scons_command("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", f"HOST={inputs['pledge']}",
                                  f"MODEL={model}", f"ARGS={args}", build=tmp_path / "b", home=tmp_path / "home")
        strace = ["strace", "-f", "-qq", "-y", "-s", "0", "-e", "trace=read,pread64,preadv,preadv2,copy_file_range", "-e", "signal=none",
                  "-o", str(log)]
        proc = subprocess.run(strace + argv, capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    size = model.stat().st_size
    first = traced(tmp_path / "first.log")  # first sight: no record of the model yet
    assert "PACKAGE" in first.stdout
    # first sight: read for its CRC-32 (the header must be final before the data), then as copied, for its own
    # SHA-256 and the artifact's
    assert 2 * size <= _bytes_read(tmp_path / "first.log", model) < 2 * size + headers
    assert _bytes_read(tmp_path / "first.log", dist(tmp_path) / EMBEDDER) < headers  # nothing read back
    write_gguf(model, values=(4 << 20) + 16)  # a changed model
    changed = traced(tmp_path / "changed.log")
    assert f"PACKAGE {dist(tmp_path) / EMBEDDER}" in changed.stdout
    size = model.stat().st_size
    assert 2 * size <= _bytes_read(tmp_path / "changed.log", model) < 2 * size + headers
    # the artifact's digest is taken as it is written, and SCons signs the artifact with it: nothing reads it back
    assert _bytes_read(tmp_path / "changed.log", dist(tmp_path) / EMBEDDER) < headers
    current = traced(tmp_path / "current.log")  # nothing changed: the model is not read at all
    assert "PACKAGE" not in current.stdout
    assert _bytes_read(tmp_path / "current.log", model) < headers
    args.write_text("-m /zip/big.gguf\n--strace\n--strace\n")  # the artifact changes, the model does not
    repackaged = traced(tmp_path / "repackaged.log")
    assert f"PACKAGE {dist(tmp_path) / EMBEDDER}" in repackaged.stdout
    # the model's CRC-32 and SHA-256 are recorded: its header is final before its data, so the artifact's SHA-256
    # is taken as it is written (nothing read back from it); the model is read once, for that digest, beside the
    # kernel's copy of it into the artifact's temporary
    assert _bytes_read(tmp_path / "repackaged.log", model) < model.stat().st_size + headers
    assert _bytes_read(tmp_path / "repackaged.log", model, calls="copy_file_range") == model.stat().st_size
    assert _bytes_read(tmp_path / "repackaged.log", dist(tmp_path) / EMBEDDER) < headers
    verified = scons("verify", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", f"HOST={inputs['pledge']}",
                     f"MODEL={model}", f"ARGS={args}", build=tmp_path / "b", home=tmp_path / "home")
    assert f"OK: {dist(tmp_path) / EMBEDDER} matches {EMBEDDER}.MANIFEST.json" in verified.stdout


def test_install_copies_the_binaries_and_artifacts_under_destdir_and_prefix(tmp_path: Path) -> None:
    stage, prefix = tmp_path / "stage", "/opt/opencoti"
    args = ("install", f"SRC={MINI_TREE}", "CPU_ONLY=1", f"ARCH={ARCH}", f"PREFIX={prefix}", f"DESTDIR={stage}")
    installed = scons(*args, build=tmp_path / "b", home=tmp_path / "home")
    bindir = stage / "opt" / "opencoti" / "bin"
    assert sorted(p.name for p in bindir.iterdir()) == sorted(["llamafile", BARE])
    assert (bindir / BARE).read_bytes() == (dist(tmp_path) / BARE).read_bytes()
    assert (bindir / "llamafile").read_bytes() == (tmp_path / "b" / "out/o/llamafile/llamafile").read_bytes()
    assert all(os.access(p, os.X_OK) for p in bindir.iterdir())
    assert sorted(line.split()[1] for line in summary.unprefixed(installed.stdout) if line.startswith("INSTALL ")) == \
        sorted(str(p) for p in bindir.iterdir())
    # the summary counts the compiles apart: the artifact, its SBOM and Statement, its manifest; the two copies
    counts = summary.parse(installed.stdout)
    assert (counts["packaged"], counts["installed"]) == (3, 2), installed.stdout
    words = [line.split("] ", 1)[1].split(" ", 1)[0] for line in installed.stdout.splitlines()
             if summary.PROGRESS.match(line)]
    assert sorted(w for w in words if w in ("PACKAGE", "PROVENANCE", "MANIFEST", "INSTALL")) == \
        ["INSTALL", "INSTALL", "MANIFEST", "PACKAGE", "PROVENANCE"]
    assert counts["compiled"] + counts["cached"] == len(words) - 5 > 0
    again = scons(*args, build=tmp_path / "b", home=tmp_path / "home")
    assert summary.parse(again.stdout)["compiled"] == 0  # installed files are current: nothing copied again
    refused = scons(*args[:-1], f"DESTDIR={stage}", "PREFIX=relative/prefix", build=tmp_path / "b",
                    home=tmp_path / "home", check=False)
    assert refused.returncode == 2 and refused.stderr == (
        f"scons: error: PREFIX=relative/prefix is relative, but DESTDIR={stage} stages an installation of an absolute "
        "PREFIX; give PREFIX as an absolute path (e.g. /usr/local)\n")
    built = {p: p.read_bytes() for top in ("dist", "out/o") for p in (tmp_path / "b" / top).rglob("*") if p.is_file()}
    assert dist(tmp_path) / f"{BARE}.MANIFEST.json" in built and tmp_path / "b" / "out/o/llamafile/llamafile" in built
    cleaned = scons("-c", *args, build=tmp_path / "b", home=tmp_path / "home")
    assert list(bindir.iterdir()) == []  # `scons -c install` removes what install wrote...
    assert sorted(line.rsplit("/", 1)[-1] for line in cleaned.stdout.splitlines() if line.startswith("Removed ")) == \
        sorted(["llamafile", BARE])
    # ...and nothing else: the objects, the thin binary, the artifacts and their manifests, SBOMs and Statements stay
    assert {p: p.read_bytes() for top in ("dist", "out/o") for p in (tmp_path / "b" / top).rglob("*")
            if p.is_file()} == built
