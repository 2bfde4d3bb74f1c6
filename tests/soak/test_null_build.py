"""The null build's fast path (opencoti_build/incremental/null_build/) against a full SCons evaluation.

A differential test: seeded random rounds, each applying one mutation to a private checkout (SConstruct,
SConscripts, site_scons and the miniature tree, in a git repository), then asking a full evaluation
(`scons -q`, which never takes the fast path) whether the targets are current, and building. The fast
path may answer "nothing to do" only when `scons -q` says current; a build after which `scons -q` says
current must have done nothing; the run after a successful build must take the fast path (it is not
merely always off). Every ``CLEAN_EVERY`` rounds and at the end, the outputs equal a clean build's. The
rounds run in ``STREAMS`` streams side by side, each on a checkout of its own with a seed of its own.

A run takes a slice of the 200 rounds under the commit's seed, ``--long`` all of them; ``--seed`` replays a run
(tests/conftest.py, docs/testing.md).
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from null_build_checkout import Checkout, append_text
from scons_runs import clone, summary

ROUNDS, ROUNDS_PER_RUN = 200, 32
STREAMS = 4
CLEAN_EVERY = 25
COMPARED = ("o/llamafile/llamafile", "o/llamafile/linked/llamafile.aarch64.elf", "o/llamafile/linked/llamafile.com.dbg")
VARIANT = b"# a variant of the driver\n"


# Each mutation changes one thing and returns what it did (for the failure message).
def edit_source(co: Checkout) -> str:
    path = co.pick("llamafile/*.c", "llamafile/*.cpp", "llama.cpp/ggml/src/*.c", "llama.cpp/common/*.cpp")
    n = co.next()
    append_text(path, co.rng.choice([f"\n/* round {n} */\n", f"\nint opencoti_round_{n}(void) {{ return {n}; }}\n"]))
    return f"edited {path.name}"


def edit_header(co: Checkout) -> str:
    path = co.pick("llamafile/*.h", "llama.cpp/ggml/src/*.h", "llama.cpp/include/*.h", "llamafile/*.inc",
                   "llama.cpp/ggml/src/ggml-cpu/*.inc")
    n = co.next()
    append_text(path, co.rng.choice([f"\n/* round {n} */\n", f"\n#define OPENCOTI_ROUND_{n} {n}\n"]))
    return f"edited {path.name}"


def edit_device_code(co: Checkout) -> str:
    path = co.pick("llama.cpp/ggml/src/ggml-cuda/*.cu", "llama.cpp/ggml/src/ggml-vulkan/vulkan-shaders/*.comp")
    append_text(path, f"\n// round {co.next()}\n")
    return f"edited {path.name}"


def touch(co: Checkout) -> str:
    path = co.pick("llamafile/*", "llama.cpp/ggml/src/*", "llama.cpp/ggml/src/ggml-vulkan/vulkan-shaders/*.comp")
    os.utime(path)
    return f"touched {path.name}"


def delete_and_restore(co: Checkout) -> str:
    """Delete a source (the build may fail), or put back the one deleted earlier."""
    if co.deleted:
        path, data = co.deleted.popitem()
        path.write_bytes(data)
        return f"restored {path.name}"
    path = co.pick("llamafile/*.c", "llamafile/*.h", "llama.cpp/ggml/src/ggml-cuda/*.cu",
                   "llama.cpp/ggml/src/ggml-vulkan/vulkan-shaders/*.comp", "llamafile/*.inc")
    co.deleted[path] = path.read_bytes()
    path.unlink()
    return f"deleted {path.name}"


def shadow_header(co: Checkout) -> str:
    """A copy of common.h in main.cpp's own directory, which `#include "common.h"` searches first."""
    shadow = co.tree / "llamafile" / "common.h"
    if shadow.exists():
        shadow.unlink()
        return "removed the shadowing common.h"
    shutil.copy(co.tree / "llama.cpp" / "common" / "common.h", shadow)
    return "added a common.h that shadows llama.cpp/common/common.h"


def search_path_shadow(co: Checkout) -> str:
    """A llama.h in llama.cpp/common/, which main.cpp searches before llama.cpp/include/ and no SConscript lists:
    only a full scan finds it (SCons' implicit cache, when a run may use it, must not)."""
    shadow = co.tree / "llama.cpp" / "common" / "llama.h"
    if shadow.exists():
        shadow.unlink()
        return "removed llama.cpp/common/llama.h"
    text = (co.tree / "llama.cpp" / "include" / "llama.h").read_text(encoding="utf-8")
    shadow.write_text(text + f"\n#define OPENCOTI_SHADOW_{co.next()} 1\n", encoding="utf-8")
    return "added a llama.h that shadows llama.cpp/include/llama.h"


def globbed_file(co: Checkout) -> str:
    """A file added to or removed from llamafile/highlight/, which the build globs (*.cpp)."""
    if co.added and co.rng.random() < 0.5:
        path = co.added.pop()
        path.unlink()
        return f"removed {path.name}"
    n = co.next()
    path = co.tree / "llamafile" / "highlight" / f"opencoti_extra_{n}.cpp"
    path.write_text(f'extern "C" int opencoti_extra_{n}(void) {{ return {n}; }}\n', encoding="utf-8")
    co.added.append(path)
    return f"added {path.name}"


def edit_build_code(co: Checkout) -> str:
    path = co.rng.choice([co.root / "SConstruct", co.root / "host" / "SConscript", co.root / "build.SConscript",
                          co.root / "site_scons" / "opencoti_build" / "sources.py",
                          co.root / "site_scons" / "site_tools" / "cosmocc.py"])
    append_text(path, f"\n# round {co.next()}\n")
    return f"edited {path.relative_to(co.root)}"


def variable(co: Checkout) -> str:
    key, value = co.rng.choice([("VERBOSE", "1"), ("COMPILEDB_ARCH", "aarch64"), ("CPU_ONLY", "1")])
    if co.variables.pop(key, None) is None:
        co.variables[key] = value
        return f"{key}={value} on the command line"
    return f"{key} dropped from the command line"


def environment(co: Checkout) -> str:
    key = co.rng.choice(["PATH", "CUDA_PATH", "HOME", "OPENCOTI_UNUSED"])
    if key in co.env:
        del co.env[key]
        return f"{key} back to the default"
    values = {"PATH": f"{co.root / 'empty-bin'}{os.pathsep}{os.environ['PATH']}", "CUDA_PATH": "/nonexistent/cuda",
              "HOME": str(co.root / "home2"), "OPENCOTI_UNUSED": "1"}
    (co.root / "empty-bin").mkdir(exist_ok=True)
    co.env[key] = values[key]
    return f"{key} changed"


def compiler(co: Checkout) -> str:
    """The stand-in cosmocc replaced: by an identical copy (a new file), or by one with an extra comment."""
    path = co.root / "site_scons" / "cosmocc_shim" / "bin" / "cosmocc"
    data = path.read_bytes()
    if co.rng.random() < 0.5:  # toggles between two drivers: the second time, every step comes from the cache
        data = data[:-len(VARIANT)] if data.endswith(VARIANT) else data + VARIANT
    staged = path.with_name("cosmocc.new")
    staged.write_bytes(data)
    os.chmod(staged, 0o755)
    os.replace(staged, path)
    return "replaced the cosmocc driver"


def delete_output(co: Checkout) -> str:
    objects = sorted((co.root / "out" / "o").rglob("*.o"))
    path = co.rng.choice(objects + [co.root / "out" / "o" / "llamafile" / "linked" / "llamafile.aarch64.elf"])
    path.unlink(missing_ok=True)
    return f"deleted output {path.relative_to(co.root)}"


def commit(co: Checkout) -> str:
    git(co.root, "add", "-A")
    git(co.root, "commit", "-q", "--allow-empty", "-m", f"round {co.next()}")
    return "committed in the project"


def series_or_tag(co: Checkout) -> str:
    if co.rng.random() < 0.5:
        append_text(co.root / "vendors" / "patches" / "llamafile" / "README.md", f"\nround {co.next()}\n")
        return "edited the patch series"
    tag = co.root / "vendors" / "llamafile" / "OPENCOTI_TAG"
    tag.write_text(tag.read_text(encoding="utf-8").rsplit("\n", 2)[0] + f"\nc{co.next()}\n", encoding="utf-8")
    return "changed OPENCOTI_TAG"


def stale_home_dso(co: Checkout) -> str:
    home = Path(co.env.get("HOME", co.root / "home"))
    name = co.rng.choice(["ggml-cuda.so", "ggml-vulkan.so"])
    path = home / name
    if path.exists():
        path.unlink()
        return f"removed $HOME/{name}"
    path.write_bytes(b"stale " + str(co.next()).encode())
    return f"created a stale $HOME/{name}"


MUTATIONS: list[Callable[[Checkout], str]] = [
    edit_source, edit_header, edit_device_code, touch, delete_and_restore, shadow_header, search_path_shadow,
    globbed_file,
    edit_build_code, variable, environment, compiler, delete_output, commit, series_or_tag, stale_home_dso,
]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def outputs(co: Checkout, out: str) -> dict[str, bytes]:
    """The thin binary, its aarch64 ELF and debug ELF, and the Vulkan DSO of the build in ``out``."""
    found = {rel: (co.root / out / rel).read_bytes() for rel in COMPARED}
    dso = sorted((co.root / f"{out}-vendors").rglob("ggml-vulkan.so"))
    found["ggml-vulkan.so"] = dso[0].read_bytes() if dso else b""
    return found


def compile_commands(co: Checkout, out: str) -> dict[tuple[str, str], list[str]]:
    """The build's compile_commands.json, by (file, output), with its output directory's name made ``clean``
    (absolute, and relative to the checkout: ``-Iout/…``, ``-ffile-prefix-map=out=build``, ``out/…``)."""
    text = (co.root / f"{out}-compile_commands.json").read_text(encoding="utf-8")
    text = text.replace(str(co.root / out), str(co.root / "clean"))
    entries = json.loads(re.sub(rf'(?<=["=]){out}(?=[/="-])|(?<="-I){out}(?=[/"-])', "clean", text))
    return {(e["file"], e["output"]): e["arguments"] for e in entries}


def assert_equals_clean_build(co: Checkout, label: str) -> None:
    for scratch in ("clean", "clean-vendors", "clean-dist", "clean-compile_commands.json"):
        shutil.rmtree(co.root / scratch, ignore_errors=True)
        (co.root / scratch).unlink(missing_ok=True)
    co.run(out="clean", check=True)  # the same cache: unchanged steps come from it
    built, clean = outputs(co, "out"), outputs(co, "clean")
    differing = [name for name in built if built[name] != clean[name]]
    assert not differing, f"{label}: the incremental build's {differing} differ from a clean build's"
    # the incremental database keeps entries of files this build no longer compiles (compdb.merged)
    kept, fresh = compile_commands(co, "out"), compile_commands(co, "clean")
    stale = sorted((key, arguments) for key, arguments in fresh.items() if kept.get(key) != arguments)
    assert not stale, (f"{label}: compile_commands.json's entries for {len(stale)} files differ from a clean "
                       f"build's; the first, {stale[0][0]}: {kept.get(stale[0][0])} against {stale[0][1]}")


def prepare(root: Path, cache: Path, seed: int, stream: int) -> Checkout:
    """A stream's checkout: the project and the miniature tree in a git repository, built."""
    co = Checkout(clone(root), rng=random.Random(f"{seed}/{stream}"), cache=cache)
    git(co.root, "init", "-q")
    git(co.root, "add", "-A")
    git(co.root, "commit", "-q", "-m", "base")
    co.run(check=True)
    return co


def run_stream(co: Checkout, seed: int, stream: int, rounds: int) -> int:
    """One stream of the differential test: ``rounds`` seeded rounds on its checkout; its fast rounds."""
    fast_rounds = 0
    history: list[str] = []
    for number in range(1, rounds + 1):
        did = co.rng.choice(MUTATIONS)(co)
        history.append(f"{number}: {did}")
        label = f"seed {seed} stream {stream} round {number} ({did}; before: {history[-6:-1]})"
        question = co.run("-q")
        assert question.returncode in (0, 1, 2), label  # 2: the tree no longer builds (a deleted source)
        before = co.record_stat()
        build = co.run()
        fast = before is not None and co.record_stat() == before and build.returncode == 0
        if fast:
            fast_rounds += 1
            assert question.returncode == 0, f"{label}: fast path said nothing to do, scons -q said not current"
        counts = summary.parse(build.stdout)
        if question.returncode == 0:
            assert build.returncode == 0 and counts and counts["compiled"] == counts["cached"] == 0, \
                f"{label}: scons -q said current, the build did work:\n{build.stdout}{build.stderr}"
        if build.returncode != 0:
            assert co.deleted, f"{label}: the build failed:\n{build.stdout}{build.stderr}"
            continue
        after, why = co.record_stat(), co.why_not_fast()
        assert why is None, f"{label}: the run after a successful build would take the full path: {why}"
        if not fast:  # a fast build was itself that run
            assert co.run().returncode == 0 and co.record_stat() == after, \
                f"{label}: the run after a successful build did not take the fast path"
        if question.returncode != 0:  # otherwise the build did nothing (asserted): the tree is as scons -q saw it
            assert co.run("-q").returncode == 0, f"{label}: not current after a successful build"
        if number % CLEAN_EVERY == 0 and not co.deleted:
            assert_equals_clean_build(co, label)
    for path, data in co.deleted.items():
        path.write_bytes(data)
    co.run(check=True)
    assert_equals_clean_build(co, f"seed {seed} stream {stream} end")
    return fast_rounds


@pytest.mark.skipif(not shutil.which("glslc"), reason="the rounds build the Vulkan DSO too (glslc)")
def test_fast_path_agrees_with_a_full_evaluation(tmp_path: Path, seed: int,
                                                  soak_count: Callable[[int, int], int]) -> None:
    # The rounds run as STREAMS independent streams, each its own checkout and seed, side by side: a round is
    # mostly SCons reading the SConscripts on one core, so the streams share the machine's cores. They share
    # one object cache (keys do not depend on the checkout's path), as two checkouts of a team may.
    rounds = soak_count(ROUNDS, ROUNDS_PER_RUN)
    counts = [rounds // STREAMS + (stream < rounds % STREAMS) for stream in range(STREAMS)]
    # The first checkout builds alone: the others' first builds then come from the cache, not four cold builds.
    checkouts = [prepare(tmp_path / "co0", tmp_path / "cache", seed, 0)]
    with ThreadPoolExecutor(max_workers=min(STREAMS, max(2, os.cpu_count() or 2))) as pool:
        checkouts += pool.map(lambda stream: prepare(tmp_path / f"co{stream}", tmp_path / "cache", seed, stream),
                              range(1, STREAMS))
        streams = [pool.submit(run_stream, co, seed, stream, count)
                   for stream, (co, count) in enumerate(zip(checkouts, counts)) if count]
        fast_rounds = [future.result() for future in streams]  # the first failing stream's assertion
    assert sum(counts) == rounds
    assert sum(fast_rounds) > 0, "the fast path never answered in any round"
