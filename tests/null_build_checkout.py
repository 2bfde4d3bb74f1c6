"""A private checkout of the project and the miniature tree, built by scons: what the null build's tests
(tests/integration/test_null_build.py, the differential test in tests/soak/test_null_build.py) mutate."""
from __future__ import annotations

import os
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import SCons

from opencoti_build.incremental import null_build

from scons_runs import scons_command

RUNNING = null_build.interpreter(SCons.__version__)
TREE = Path("tests/fixtures/llamafile-mini")


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
