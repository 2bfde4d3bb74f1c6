"""A private checkout of the project and the miniature tree, built by scons: what the null build's tests
(tests/integration/test_null_build.py, the differential test in tests/soak/test_null_build.py) mutate."""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import SCons

from opencoti_build.incremental import null_build

from scons_runs import clone, scons_command

RUNNING = null_build.interpreter(SCons.__version__)
TREE = Path("tests/fixtures/llamafile-mini")
COMPARED = ("o/llamafile/llamafile", "o/llamafile/linked/llamafile.aarch64.elf", "o/llamafile/linked/llamafile.com.dbg")
VARIANT = b"# a variant of the driver\n"


@dataclass
class Checkout:
    """A private checkout, its build's variables and environment, and what the mutations left behind."""

    root: Path
    variables: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    added: list[Path] = field(default_factory=list)
    deleted: dict[Path, bytes] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)
    serial: int = 0
    cache: Path | None = None  # CACHE_DIR (default: the checkout's own)

    @property
    def tree(self) -> Path:
        return self.root / TREE

    def command(self, *extra: str, out: str = "out") -> tuple[list[str], dict[str, str]]:
        variables = dict(self.variables, SRC=str(self.tree), BUILD_DIR=str(self.root / out),
                         CACHE_DIR=str(self.cache or self.root / "cache"), DIST_DIR=str(self.root / f"{out}-dist"),
                         BACKEND_DIST_DIR=str(self.root / f"{out}-vendors"),
                         COMPILEDB=str(self.root / f"{out}-compile_commands.json"))
        return scons_command("-j2", *[f"{k}={v}" for k, v in variables.items()], "host", "vulkan", *extra,
                             build=self.root, home=Path(self.env.get("HOME", self.root / "home")),
                             project=self.root, env_extra=self.env)

    def run(self, *extra: str, out: str = "out", check: bool = False) -> subprocess.CompletedProcess[str]:
        argv, env = self.command(*extra, out=out)
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def why_not_fast(self) -> str | None:
        """Why the next plain run would take the full path (None: it takes the fast path)."""
        record = null_build.Record.load(str(self.root / "out" / null_build.RECORD_NAME))
        if record is None:
            return "no record"
        argv, env = self.command()
        return null_build.difference(record, argv[3:], str(self.root), env, RUNNING)

    def record_stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.root / "out" / ".null-build")
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def pick(self, *patterns: str) -> Path:
        return self.rng.choice(sorted(p for pattern in patterns for p in self.tree.glob(pattern)))

    def next(self) -> int:
        self.serial += 1
        return self.serial


def append_text(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


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
