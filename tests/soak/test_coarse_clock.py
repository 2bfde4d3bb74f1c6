"""Same-second edits on a filesystem with whole-second timestamps: git's racily-clean rule, end to end.

ext2 with 128-byte inodes keeps whole seconds (so do ext3 and some NFS servers; FAT two). A header edited (same
size), read by a build and put back within the second keeps its whole stat identity: size, inode, mtime, ctime.
Before the rule, the build after it called the tree current (the null build's record and SCons's stamps alike)
and kept the object compiled against the edit; `scons -q` said current.

Each trial checks the project out onto such a filesystem (a loop mount of ``mkfs.ext2 -I 128``, made once for the
module; skipped in one line where it cannot be mounted), builds one translation unit, then, at a seeded moment
just after a second begins: edits its header (one byte), builds through the build server or one-shot scons (by
the seed), and puts the header back as soon as both objects are written, while that second lasts (the revert counts
only when the header's stat is exactly the edit's; a try that missed the second is built again and tried anew,
through the server; after TRIES misses the trial is skipped in one line). Then `scons -q` must say not
current, the next build (server or one-shot, by the seed) must leave the objects equal to a clean build's, and
`scons -q` must then say current.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from inotify_simple import INotify, flags

from opencoti_build.server import protocol, request_loop, supervisor

from scons_runs import clone, scons_command
from server_runs import Server, client

TRIALS, TRIALS_PER_RUN = 12, 1
TRIES = 6  # tries at editing, building and reverting within one second
TU = "llamafile/highlight/highlight.cpp"
HEADER = "llamafile/highlight/highlight.h"
OBJECTS = ("o/llamafile/highlight/highlight.cpp.o", "o/llamafile/highlight/.aarch64/highlight.cpp.o")
MARK = "#define OPENCOTI_RACY_VALUE 0\n"  # appended to the header; the TU compiles it into its object


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def coarse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A mounted ext2 filesystem with 128-byte inodes (whole-second timestamps), or the module skipped."""
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("mkfs.ext2", "losetup", "mount")):
        pytest.skip("same-second edits need a loop mount of mkfs.ext2 -I 128 (root, e2fsprogs, util-linux)")
    root = tmp_path_factory.mktemp("coarse-clock")
    image, mount = root / "ext2.img", root / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(384 << 20)
    made = _run("mkfs.ext2", "-q", "-F", "-I", "128", str(image))
    attached = _run("losetup", "--find", "--show", str(image)) if made.returncode == 0 else made
    device = attached.stdout.strip()
    mounted = attached.returncode == 0 and _run("mount", device, str(mount))
    if not mounted or mounted.returncode != 0:
        if device:
            _run("losetup", "-d", device)
        why = (attached.stderr or (mounted.stderr if mounted else "") or "mount failed").strip().splitlines()
        pytest.skip(f"cannot loop-mount an ext2 image here: {why[0][:120] if why else 'mount failed'}")
    try:
        yield mount
    finally:
        for _ in range(40):  # the build server's last processes may still be leaving the mount
            if _run("umount", str(mount)).returncode == 0:
                break
            time.sleep(0.25)
        else:
            _run("umount", "-l", str(mount))
        _run("losetup", "-d", device)
        image.unlink(missing_ok=True)


class Tree:
    """A checkout on the coarse filesystem, building one translation unit, one-shot or through its server."""

    def __init__(self, root: Path) -> None:
        self.root = clone(root)
        self.src = self.root / "tests" / "fixtures" / "llamafile-mini"
        header, tu = self.src / HEADER, self.src / TU
        header.write_text(header.read_text() + MARK)
        tu.write_text(tu.read_text() + "int opencoti_racy_value = OPENCOTI_RACY_VALUE;\n")
        self.server: Server | None = None

    def command(self, *extra: str, out: str = "out") -> tuple[list[str], dict[str, str]]:
        argv, env = scons_command(f"SRC={self.src}", "CACHE_DIR=", "compile", f"FILE={TU}", *extra,
                                  build=self.root / out, project=self.root)
        return argv, env

    def one_shot(self, *extra: str, out: str = "out") -> subprocess.CompletedProcess[str]:
        argv, env = self.command(*extra, out=out)
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)

    def serve(self) -> Server:
        """The build server for this build (started on first use)."""
        if self.server is None:
            argv, env = self.command()
            variables = protocol.configuration(argv[5:])
            served = client(self.root, "serve", "--detach", "--idle-timeout", "900", *variables, env=env)
            assert served.returncode == 0, served.stdout + served.stderr
            self.server = Server(self.root, variables, env)
        return self.server

    def start(self, through_server: bool) -> subprocess.Popen[str]:
        """Start building the unit one-shot, or through the build server."""
        argv, env = self.command()
        if through_server:
            self.serve()
            argv = [sys.executable, "-m", "opencoti_build", "build", *argv[5:]]  # the client runs in the checkout
        return subprocess.Popen(argv, cwd=self.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def build(self, through_server: bool) -> subprocess.CompletedProcess[str]:
        """Build the unit one-shot, or through the build server."""
        proc = self.start(through_server)
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, out + err
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def reader_ready(self) -> None:
        """Wait (a few seconds at most) for the server's reader to have read ahead of the next request: a request
        it cannot take runs in a forked child, which reads the SConscripts first."""
        server, deadline = self.serve(), time.monotonic() + 5
        while time.monotonic() < deadline:
            lines = server.log.read_text().splitlines() if server.log.exists() else []
            last_build = max((n for n, line in enumerate(lines) if " build " in line), default=-1)
            if any(supervisor.READER_READY in line for line in lines[last_build + 1:]):
                return
            time.sleep(0.02)

    def objects(self, out: str = "out") -> list[bytes]:
        return [(self.root / out / "out" / name).read_bytes() for name in OBJECTS]


@pytest.fixture(scope="module")
def tree(coarse: Path) -> Iterator[Tree]:
    t = Tree(coarse / "checkout")
    try:
        yield t
    finally:
        if t.server is not None:
            t.server.stop()


def _same_second_edit(tree: Tree, rng: random.Random, through_server: bool) -> tuple[bool, float]:
    """Edit the header, build, put the header back within the same second, as soon as the objects are written:
    (built through the server, the seconds to the objects). A try that misses the second is built again and tried
    anew, through the server (no reading of the SConscripts: the quickest way)."""
    header = tree.src / HEADER
    pristine = header.read_bytes()
    edited = pristine.replace(MARK.encode(), MARK.replace(" 0", " 1").encode())
    assert len(edited) == len(pristine) and edited != pristine
    took = 0.0
    for _ in range(TRIES):
        tree.build(through_server)  # what a missed try left is undone; a server's reader reads ahead
        if through_server:
            tree.reader_ready()
        time.sleep(1 - time.time() % 1 + rng.uniform(0.001, 0.05))  # just after a second begins
        with open(header, "r+b") as f:  # in place: the same inode, as an editor that writes through does
            f.write(edited)
        seen = os.stat(header)
        started = time.monotonic()
        with INotify() as written:  # put back as soon as both objects are written, while the build ends
            for obj in OBJECTS:
                written.add_watch(str(tree.root / "out" / "out" / os.path.dirname(obj)),
                                  flags.CLOSE_WRITE | flags.MOVED_TO)
            build = tree.start(through_server)
            objects: set[int] = set()
            while len(objects) < len(OBJECTS) and build.poll() is None:
                objects |= {event.wd for event in written.read(timeout=10) if event.name == "highlight.cpp.o"}
            took = time.monotonic() - started
            with open(header, "r+b") as f:
                f.write(pristine)
        out, err = build.communicate(timeout=600)
        assert build.returncode == 0, out + err
        back = os.stat(header)
        if (back.st_mtime_ns, back.st_ctime_ns, back.st_size, back.st_ino) == (
                seen.st_mtime_ns, seen.st_ctime_ns, seen.st_size, seen.st_ino):
            assert seen.st_ctime_ns % 1_000_000_000 == 0, "not a filesystem with whole-second timestamps"
            return through_server, took
        through_server = True
    pytest.skip(f"no build compiled within the second of its edit in {TRIES} tries (the last took {took:.2f} s)")


@pytest.mark.xdist_group("coarse-clock")
@pytest.mark.trials(full=TRIALS, per_run=TRIALS_PER_RUN)
def test_a_same_second_edit_and_revert_is_seen_by_the_next_build(tree: Tree, trial: int, seed: int) -> None:
    rng = random.Random(f"{seed}-coarse-clock-{trial}")
    edit_via, rebuild_via = rng.random() < 0.5, rng.random() < 0.5  # True: through the build server
    edit_via, took = _same_second_edit(tree, rng, edit_via)
    label = (f"seed {seed} trial {trial} (the edit built {'through the server' if edit_via else 'one-shot'} in "
             f"{took:.2f} s, rebuilt {'through the server' if rebuild_via else 'one-shot'})")
    question = tree.one_shot("-q")
    assert question.returncode == 1, f"{label}: scons -q calls the tree current with an object of the edit"
    rebuilt = tree.build(rebuild_via)
    if rebuild_via:
        assert tree.server is not None and tree.server.answers()[-1] != request_loop.NULL_ANSWER, \
            f"{label}: the server answered from the record: {tree.server.build_lines()[-1]}"
    clean_out = f"clean-{trial}"
    tree.one_shot(out=clean_out)
    try:
        assert tree.objects() == tree.objects(clean_out), \
            f"{label}: the objects differ from a clean build's:\n{rebuilt.stdout}{rebuilt.stderr}"
    finally:
        shutil.rmtree(tree.root / clean_out, ignore_errors=True)
    assert tree.one_shot("-q").returncode == 0, f"{label}: scons -q finds work after the build"
