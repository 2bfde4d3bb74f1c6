"""Part 3: packaging a multi-GiB GGUF into an embedder artifact, against `cp` of the same file.

The model is a GGUF v3 header followed by dense data (a repeated random block, so no filesystem
hole or compression shortcut flatters either side). Every timed command starts after ``sync``. Each run:
``cp`` the model to the same disk, ``cp`` then ``sync`` of the copy (the bytes on the disk, as the
packager's fsync leaves its artifact), and the by-hand way: ``cp``, ``sync``, then ``openssl dgst -sha256`` of
the copy (coreutils' sha256sum is several times slower here, so openssl is the anchor), and ``openssl dgst
-sha256`` of the model alone (the floor of a packager that records the artifact's SHA-256: one stream over the
model's bytes, which no second core shortens); change 8 bytes of the
model (new content, new stamp) and ``scons package HOST=<pledge> MODEL=… CPU_ONLY=1 ARGS=…`` (the first run
writes the bare artifact too; later ones repackage only the embedder, as a changed model does), then
``opencoti-build verify`` of the embedder; then a new host binary with the model unchanged and ``scons package``
again (the binary-only repackage: the model's CRC-32 and SHA-256 are recorded, so it is copied and read once,
the artifact hashed as written); each change also through the build server, right after the one-shot run
(``serve`` started once for the same variables, with outputs of its own, its C client asking for ``package``: no
interpreter start, no imports; each request 2 s after the command before it and 2 s before the next, untimed, as a
user's pause, in which the server's reader reads ahead); ``scons package`` with nothing changed, one-shot and
through the server, against ``scons -Q`` on an empty SConstruct (the floor under any SCons run); and ``zipwriter.append`` alone in a child
Python. Peak RSS is the child's (``wait4`` rusage); the smallest model's is the baseline the RSS growth is taken
from. Every multi-GiB file is deleted before returning.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

from bench.measure import median, run
from opencoti_build.bulkcopy import zipwriter
from opencoti_build.formats import zipappend
from opencoti_build.server import native_client, protocol

_BLOCK = 4 << 20
GIB = 1 << 30
# zipwriter.append alone (no SCons): host + the model, as the artifact step calls it.
_DIRECT = ("import sys; from opencoti_build.bulkcopy import zipwriter; from opencoti_build.formats import zipappend; "
           "zipwriter.append(sys.argv[1], [zipappend.Entry.file(sys.argv[2])], sys.argv[3])")


def write_model(path: Path, size: int) -> None:
    """A ``size``-byte GGUF: the v3 header (no tensors, no metadata), then dense bytes."""
    block = bytearray(os.urandom(_BLOCK))
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
        left = size - f.tell()
        while left:
            n = min(left, _BLOCK)
            f.write(memoryview(block)[:n])
            left -= n


def change_model(path: Path, run: int) -> None:
    """New content and a new stamp: 8 bytes just after the GGUF header hold the run's number."""
    with open(path, "r+b") as f:
        f.seek(24)
        f.write(struct.pack("<Q", run + 1))


def _pledge() -> Path:
    import cosmo_file

    return Path(cosmo_file.__file__).parent / "data" / "pledge"


def bench_size(project: Path, work: Path, size: int, runs: int) -> dict:
    """cp, package and verify one ``size``-byte model ``runs`` times; medians and peak RSS."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model = work / "model.gguf"
    host = work / "pledge"
    make_host(host, 0)
    args = work / "bench.args"
    args.write_text(f"-m /zip/{model.name}\n--strace\n")
    build = work / "b"
    empty_dir = work / "empty"  # the floor under any SCons run: an empty SConstruct
    empty_dir.mkdir()
    (empty_dir / "SConstruct").touch()

    def variables(outputs: Path) -> list[str]:
        return ["CPU_ONLY=1", "ARCH=x86_64", "COSMOCC=stand-in", f"HOST={host}", f"MODEL={model}", f"ARGS={args}",
                f"BUILD_DIR={outputs / 'out'}", f"CACHE_DIR={outputs / 'cache'}", f"DIST_DIR={outputs / 'dist'}",
                f"BACKEND_DIST_DIR={outputs / 'vd'}", f"SRC={project / 'tests' / 'fixtures' / 'llamafile-mini'}"]

    # one-shot scons and the server each have their outputs of their own (as in part "server"): a one-shot run's
    # writes would have the server's reader read the graph again while the next one-shot run waits for its lock
    served_vars = variables(work / "s")
    argv = [sys.executable, "-m", "SCons", "-C", str(project), "-Q", "package", *variables(build)]
    env = dict(os.environ, PYTHONPATH=str(project / "site_scons"))
    client = [protocol.server_dir(project, served_vars) / native_client.NAME, "-Q", "package", *served_vars]
    rows = []
    try:
        write_model(model, size)
        subprocess.run([sys.executable, "-m", "opencoti_build", "serve", "--detach", *served_vars], cwd=project,
                       env=env, check=True, capture_output=True)
        for i in range(runs):
            copy = settled(["cp", model, work / "copy.gguf"])
            (work / "copy.gguf").unlink()
            # the same bytes on the disk, as the packager leaves its artifact (coreutils' `sync FILE`: fsync)
            durable_copy = settled(["sh", "-c", 'cp "$0" "$1" && sync "$1"', model, work / "copy.gguf"])
            (work / "copy.gguf").unlink()
            by_hand = settled(["sh", "-c", 'cp "$0" "$1" && sync "$1" && openssl dgst -sha256 "$1"', model,
                               work / "copy.gguf"])
            (work / "copy.gguf").unlink()
            # the floor of any packager that records the artifact's SHA-256: one stream over the model's bytes
            digest_only = settled(["openssl", "dgst", "-sha256", model])
            # each change is built one-shot, then through the server (each has outputs of its own)
            change_model(model, i)
            package = settled(argv, env=env)
            served_model = asked(client, env, project)
            for how, proc in (("", package), (" through the server", served_model)):
                if proc.returncode != 0 or "PACKAGE" not in proc.output:
                    raise RuntimeError(f"the changed model{how} did not repackage:\n{proc.output[-2000:]}")
            make_host(host, i + 1)  # a new binary, the same model
            host_only = settled(argv, env=env)
            served = asked(client, env, project)
            for how, proc in (("", host_only), (" through the server", served)):
                if proc.returncode != 0 or "PACKAGE" not in proc.output:
                    raise RuntimeError(f"the binary-only package{how} did not repackage:\n{proc.output[-2000:]}")
            null = settled(argv, env=env)  # nothing changed since: the null build's fast path
            _check_null(null, "one-shot")
            served_null = asked(client, env, project)  # a null answer
            _check_null(served_null, "through the server")
            empty = settled([sys.executable, "-m", "SCons", "-C", str(empty_dir), "-Q"], env=env)
            embedder = next((build / "dist" / "llamafile").glob("opencoti-embedder-*.llamafile"))
            direct = settled([sys.executable, "-c", _DIRECT, host, model, work / "direct.llamafile"], env=env)
            (work / "direct.llamafile").unlink(missing_ok=True)
            if direct.returncode != 0:
                raise RuntimeError(f"zipwriter.append failed:\n{direct.output[-2000:]}")
            verify = settled([sys.executable, "-m", "opencoti_build", "verify", embedder], env=env)
            if verify.returncode != 0:
                raise RuntimeError(f"verify failed:\n{verify.output[-2000:]}")
            rows.append({"cp_wall": copy.wall, "cp_fsync_wall": durable_copy.wall, "by_hand_wall": by_hand.wall,
                         "sha256_wall": digest_only.wall,
                         "package_wall": package.wall, "package_rss_kib": package.max_rss_kib,
                         "host_only_wall": host_only.wall, "host_only_rss_kib": host_only.max_rss_kib,
                         "served_host_only_wall": served.wall, "served_model_wall": served_model.wall,
                         "null_wall": null.wall, "served_null_wall": served_null.wall, "empty_wall": empty.wall,
                         "append_wall": direct.wall, "append_rss_kib": direct.max_rss_kib,
                         "verify_wall": verify.wall, "verify_rss_kib": verify.max_rss_kib,
                         "artifact_bytes": embedder.stat().st_size})
    finally:
        subprocess.run([sys.executable, "-m", "opencoti_build", "stop", *served_vars], cwd=project, env=env,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: median([r[k] for r in rows]) for k in rows[0]}
    return {
        "size": size, "runs": rows, "medians": med,
        "cp_gib_s": size / GIB / med["cp_wall"], "package_gib_s": size / GIB / med["package_wall"],
        "append_gib_s": size / GIB / med["append_wall"], "verify_gib_s": size / GIB / med["verify_wall"],
        "cp_fsync_gib_s": size / GIB / med["cp_fsync_wall"],
        "ratios": [r["package_wall"] / r["cp_wall"] for r in rows],
        "ratio_median": median([r["package_wall"] / r["cp_wall"] for r in rows]),
        "fsync_ratios": [r["package_wall"] / r["cp_fsync_wall"] for r in rows],
        "fsync_ratio_median": median([r["package_wall"] / r["cp_fsync_wall"] for r in rows]),
        "by_hand_ratios": [r["package_wall"] / r["by_hand_wall"] for r in rows],
        "by_hand_ratio_median": median([r["package_wall"] / r["by_hand_wall"] for r in rows]),
        "host_only_ratios": [r["host_only_wall"] / r["cp_fsync_wall"] for r in rows],
        "host_only_ratio_median": median([r["host_only_wall"] / r["cp_fsync_wall"] for r in rows]),
        "host_only_floor_ratios": [r["host_only_wall"] / max(r["cp_fsync_wall"], r["sha256_wall"]) for r in rows],
        "host_only_floor_ratio_median": median([r["host_only_wall"] / max(r["cp_fsync_wall"], r["sha256_wall"])
                                                for r in rows]),
        "served_model_by_hand_ratios": [r["served_model_wall"] / r["by_hand_wall"] for r in rows],
        "served_model_by_hand_ratio_median": median([r["served_model_wall"] / r["by_hand_wall"] for r in rows]),
        "served_host_only_floor_ratio_median": median([r["served_host_only_wall"]
                                                       / max(r["cp_fsync_wall"], r["sha256_wall"]) for r in rows]),
        "null_ratios": [r["null_wall"] / r["empty_wall"] for r in rows],
        "null_ratio_median": median([r["null_wall"] / r["empty_wall"] for r in rows]),
        "served_null_ratio_median": median([r["served_null_wall"] / r["empty_wall"] for r in rows]),
        "served_host_only_ratios": [r["served_host_only_wall"] / r["cp_fsync_wall"] for r in rows],
        "served_host_only_ratio_median": median([r["served_host_only_wall"] / r["cp_fsync_wall"] for r in rows]),
    }


def _check_null(proc, how: str) -> None:
    """A package run with nothing changed succeeded and packaged nothing."""
    if proc.returncode != 0 or "PACKAGE" in proc.output:
        raise RuntimeError(f"the null package run {how} packaged:\n{proc.output[-2000:]}")


def make_host(host: Path, serial: int) -> None:
    """The pledge APE made to pass for a thin llamafile (a version string and the options the .args uses); a new
    ``serial`` gives a new binary."""
    strings = b"\0llamafile v0.10.3\0-m\0--strace\0build " + str(serial).encode() + b"\0"
    zipwriter.append(_pledge(), [zipappend.Entry.blob("llamafile-strings", strings)], host)
    os.chmod(host, 0o755)


# untimed, before and after each request to the server: a user's pause, in which its reader reads ahead
SERVER_PAUSE = 2.0


def asked(client: list, env: dict, project: Path):
    """A request through the server's C client, :data:`SERVER_PAUSE` after the last command, and the next command
    as long after it: after each request the server's reader reads the graph ahead of the next one (0.3-0.5 s of
    a core), which a one-shot command started at once would share the 2 cores with."""
    time.sleep(SERVER_PAUSE)
    answer = settled(client, env=env, cwd=project)
    time.sleep(SERVER_PAUSE)
    return answer


def settled(argv: list, env: dict | None = None, cwd: Path | None = None):
    """``run(argv)`` once the disk has taken every earlier write (`sync`): the writeback of one command's
    output is not timed as part of the next."""
    subprocess.run(["sync"], check=True)
    return run(argv, env=env, cwd=cwd)
