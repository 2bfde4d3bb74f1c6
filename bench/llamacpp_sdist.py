"""The real llama.cpp tree the native-lane test and the benchmark build: the llama-cpp-python sdist's vendor/llama.cpp.

Downloaded once (``pip download --no-binary :all:``) into a cache directory and extracted beside the tarball,
so reruns neither download nor extract again. ``LLAMA_CPP_PYTHON_SDIST_DIR`` moves the cache.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{SDIST_VERSION}"
SDIST_CACHE = Path(os.environ.get("LLAMA_CPP_PYTHON_SDIST_DIR", Path.home() / ".cache" / "opencoti" / "sdists"))
DOWNLOAD = (f"{sys.executable} -m pip download --no-binary :all: --no-deps llama-cpp-python=={SDIST_VERSION} "
            f"-d {SDIST_CACHE}")


def sdist_llamacpp(download: bool) -> Path | None:
    """The sdist's vendor/llama.cpp, extracted beside the cached tarball; None if not cached and not downloading."""
    tarball = SDIST_CACHE / f"{SDIST_NAME}.tar.gz"
    tree = SDIST_CACHE / SDIST_NAME / "vendor" / "llama.cpp"
    if tree.is_dir():
        return tree
    if not tarball.is_file():
        if not download:
            return None
        SDIST_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(DOWNLOAD.split(), check=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(SDIST_CACHE, filter="data")
    return tree
