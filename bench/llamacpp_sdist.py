"""The real llama.cpp tree the native-lane test and the benchmark build: the llama-cpp-python sdist's vendor/llama.cpp.

Downloaded once (``pip download --no-binary :all:``) into a cache directory and extracted beside the tarball,
so reruns neither download nor extract again. ``LLAMA_CPP_PYTHON_SDIST_DIR`` moves the cache.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}"
SDIST_CACHE = Path(os.environ.get("LLAMA_CPP_PYTHON_SDIST_DIR", Path.home() / ".cache" / "opencoti" / "sdists"))


def download_command(dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
            f"llama-cpp-python=={SDIST_VERSION}", "-d", str(dest)]


DOWNLOAD = " ".join(download_command(SDIST_CACHE))  # what to run by hand


def sdist_llamacpp(download: bool) -> Path | None:
    """The sdist's vendor/llama.cpp, extracted beside the cached tarball; None if not cached and not downloading.

    The tarball and the tree appear under their names whole (written in a scratch directory, then renamed),
    so a process that finds them (a test on another worker) never reads half of one."""
    tarball = SDIST_CACHE / f"{SDIST_NAME}.tar.gz"
    tree = SDIST_CACHE / SDIST_NAME / "vendor" / "llama.cpp"
    if tree.is_dir():
        return tree
    if not tarball.is_file():
        if not download:
            return None
        SDIST_CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=SDIST_CACHE, prefix=".download-") as scratch:
            subprocess.run(download_command(Path(scratch)), check=True)
            os.replace(Path(scratch) / tarball.name, tarball)
    with tempfile.TemporaryDirectory(dir=SDIST_CACHE, prefix=".extract-") as scratch:
        with tarfile.open(tarball) as archive:
            archive.extractall(scratch, filter="data")
        try:
            os.replace(Path(scratch) / SDIST_NAME, SDIST_CACHE / SDIST_NAME)
        except OSError:
            if not tree.is_dir():  # not another process's extraction that got there first
                raise
    return tree
