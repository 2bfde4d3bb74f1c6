"""The pinned sources and the provisioned cosmocc (opencoti_build.config.provision), against a loopback server."""
from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencoti_build.config import provision, upstream_pin
from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR

from scons_runs import MINI_TREE, PROJECT, scons

VERSION = upstream_pin.COSMOCC_VERSION
SERVER = PROJECT / "tests" / "loopback_server.py"


def toolchain_zip(path: Path) -> Path:
    """A cosmocc-shaped zip: bin/cosmocc, cosmoc++, ar.ape (0755) handing over to the stand-in's."""
    with zipfile.ZipFile(path, "w") as zf:
        for tool in ("cosmocc", "cosmoc++", "ar.ape"):
            info = zipfile.ZipInfo(f"bin/{tool}", date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 << 16)
            zf.writestr(info, f'#!/bin/sh\nexec "{SHIM_DIR}/bin/{tool}" "$@"\n')
        zf.writestr("README.md", "made by the test\n")
    return path


class Server:
    def __init__(self, work: Path, body: Path, mode: str) -> None:
        self.log = work / f"{mode}.log"
        port_file = work / f"{mode}.port"
        self.proc = subprocess.Popen([sys.executable, str(SERVER), str(body), mode, str(port_file), str(self.log)])
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, "loopback server did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{port_file.read_text()}/cosmocc-{VERSION}.zip"

    def requests(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=10)


@pytest.fixture
def body(tmp_path: Path) -> Path:
    return toolchain_zip(tmp_path / "toolchain.zip")


@pytest.fixture
def serve(tmp_path: Path, body: Path) -> Iterator:
    started: list[Server] = []

    def start(mode: str = "good") -> Server:
        started.append(Server(tmp_path, body, mode))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def left_behind(home: Path) -> list[str]:
    """What a failed provisioning left: anything but the lock file."""
    return sorted(p.name for p in home.iterdir() if not p.name.endswith(".lock")) if home.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_good_download_is_unpacked_with_its_modes_and_never_fetched_again(tmp_path: Path, body: Path, serve) -> None:
    server, home, said = serve(), tmp_path / "home", []
    assert provision.ensure(home, VERSION, [server.url], sha(body), said.append) is True
    assert os.access(home / VERSION / "bin" / "cosmoc++", os.X_OK)
    assert (home / VERSION / "README.md").read_text() == "made by the test\n"
    assert said == [f"toolchain: downloading cosmocc {VERSION} from {server.url}"]
    assert provision.ensure(home, VERSION, [server.url], sha(body), said.append) is False
    assert server.requests() == 1 and left_behind(home) == [VERSION]


@pytest.mark.parametrize("mode", ["bad-checksum", "truncate", "die", "refused"])
def test_a_failed_download_is_one_line_and_leaves_nothing(tmp_path: Path, body: Path, serve, mode: str) -> None:
    home = tmp_path / "home"
    if mode == "refused":
        url = f"http://127.0.0.1:{free_port()}/cosmocc.zip"
    else:
        url = serve("good" if mode == "bad-checksum" else mode).url
    digest = "0" * 64 if mode == "bad-checksum" else sha(body)
    with pytest.raises(provision.ProvisionError) as caught:
        provision.ensure(home, VERSION, [url], digest, lambda line: None)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"cannot download cosmocc {VERSION} ({url}: ")
    assert message.endswith(provision.WAYS_OUT)
    expected = {"bad-checksum": f"is not the pinned {'0' * 64}", "truncate": "bytes", "die": "bytes",
                "refused": "refused"}[mode]
    assert expected in message
    assert left_behind(home) == []


def test_a_killed_downloads_temporary_dir_is_swept_by_the_next(tmp_path: Path, body: Path, serve) -> None:
    home = tmp_path / "home"
    (home / f".{VERSION}.tmp.dead" / "tree" / "bin").mkdir(parents=True)
    provision.ensure(home, VERSION, [serve().url], sha(body), lambda line: None)
    assert left_behind(home) == [VERSION]


def _scons_provisioning(tmp_path: Path, name: str, url: str, digest: str, *args: str,
                        background: bool = False) -> subprocess.CompletedProcess[str] | subprocess.Popen[str]:
    from scons_runs import scons_command

    extra = {"OPENCOTI_COSMOCC": "", provision.TEST_URL: url, provision.TEST_SHA256: digest,
             provision.TEST_HOME: str(tmp_path / "home")}
    # compile_commands.json alone, no compile (a dry run downloads nothing): the toolchain is had while reading
    argv, env = scons_command("compiledb", f"SRC={MINI_TREE}", *args, build=tmp_path / name,
                              env_extra=extra)
    if background:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def test_scons_with_empty_cosmocc_downloads_the_pinned_one_once_and_says_so(tmp_path: Path, body: Path, serve) -> None:
    server = serve()
    first = _scons_provisioning(tmp_path, "a", server.url, sha(body))
    assert first.returncode == 0, first.stderr
    root = tmp_path / "home" / VERSION
    assert f"toolchain: downloading cosmocc {VERSION} from {server.url}" in first.stdout
    assert f"toolchain: cosmocc at {root} (pinned {VERSION}, downloaded)" in first.stdout
    # the compiles use it (the database names the x86-64 half's compiler, as clangd needs)
    assert f'"{root}/bin/x86_64-unknown-cosmo-cc"' in (tmp_path / "a" / "compile_commands.json").read_text()
    second = _scons_provisioning(tmp_path, "b", server.url, sha(body))
    assert f"toolchain: cosmocc at {root} (pinned {VERSION}, present)" in second.stdout
    assert "downloading" not in second.stdout and server.requests() == 1


def test_two_builds_at_once_download_once(tmp_path: Path, body: Path, serve) -> None:
    server = serve()
    runs = [_scons_provisioning(tmp_path, name, server.url, sha(body), background=True) for name in ("a", "b")]
    outs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outs
    assert server.requests() == 1
    assert sum("downloading" in out for out, _ in outs) == 1
    assert left_behind(tmp_path / "home") == [VERSION]


def test_no_network_and_no_toolchain_is_one_line_naming_both_ways_out(tmp_path: Path) -> None:
    proc = _scons_provisioning(tmp_path, "a", f"http://127.0.0.1:{free_port()}/x.zip", "0" * 64)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"scons: error: cannot download cosmocc {VERSION}")
    assert "COSMOCC=DIR" in lines[0] and "COSMOCC=stand-in" in lines[0]
    assert left_behind(tmp_path / "home") == []


def test_stand_in_is_selected_explicitly(tmp_path: Path) -> None:
    proc = scons("-n", f"SRC={MINI_TREE}", "COSMOCC=stand-in", build=tmp_path / "b")
    assert "toolchain: cosmocc stand-in" in proc.stdout


def test_the_submodule_gitlink_names_the_pinned_commit() -> None:
    tree = subprocess.run(["git", "-C", str(PROJECT), "ls-tree", "HEAD", upstream_pin.LLAMAFILE_PATH],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tree[:3] == ["160000", "commit", upstream_pin.LLAMAFILE_COMMIT]
    modules = subprocess.run(["git", "-C", str(PROJECT), "config", "-f", ".gitmodules", "--get-regexp", "submodule"],
                             capture_output=True, text=True, check=True).stdout
    assert f"submodule.{upstream_pin.LLAMAFILE_PATH}.path {upstream_pin.LLAMAFILE_PATH}" in modules
    assert f"submodule.{upstream_pin.LLAMAFILE_PATH}.url {upstream_pin.LLAMAFILE_URL}" in modules


def test_clean_never_downloads(tmp_path: Path) -> None:
    from scons_runs import scons_command

    extra = {"OPENCOTI_COSMOCC": "", provision.TEST_URL: f"http://127.0.0.1:{free_port()}/x.zip",
             provision.TEST_SHA256: "0" * 64, provision.TEST_HOME: str(tmp_path / "home")}
    argv, env = scons_command("-c", f"SRC={MINI_TREE}", build=tmp_path / "b", env_extra=extra)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "downloading" not in proc.stdout, proc.stdout + proc.stderr
    assert left_behind(tmp_path / "home") == []


def test_a_dry_run_never_downloads_and_says_so_in_one_line(tmp_path: Path) -> None:
    from scons_runs import scons_command

    extra = {"OPENCOTI_COSMOCC": "", provision.TEST_URL: f"http://127.0.0.1:{free_port()}/x.zip",
             provision.TEST_SHA256: "0" * 64, provision.TEST_HOME: str(tmp_path / "home")}
    argv, env = scons_command("-n", f"SRC={MINI_TREE}", build=tmp_path / "b", env_extra=extra)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "downloading" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"scons: error: cosmocc {VERSION} is not downloaded yet ({tmp_path / 'home' / VERSION}) and a dry run writes "
        f"nothing: run a build once to download it, or {provision.WAYS_OUT}"]
    assert not (tmp_path / "home").exists() and [p.name for p in (tmp_path / "b").iterdir()] == ["home"]


@pytest.mark.skipif((PROJECT / upstream_pin.LLAMAFILE_PATH / "llamafile" / "version.h").exists(),
                    reason="this checkout has the submodule")
@pytest.mark.parametrize("target", ["apply", "host"])
def test_a_fresh_clones_build_and_apply_say_to_init_the_submodule(tmp_path: Path, target: str) -> None:
    proc = scons(target, build=tmp_path / "b", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"run `git submodule update --init --recursive {upstream_pin.LLAMAFILE_PATH}`" in proc.stderr
