"""`scons native` on a real llama.cpp nobody here wrote: the one inside the llama-cpp-python sdist.

The real-tree tier (tests/realtree/conftest.py): run where its persistent cache is warm, or with ``--long``;
alone: `python3 -m pytest --long tests/realtree`. The sdist is downloaded once into the cache
(bench/llamacpp_sdist.py); objects go through a persistent CacheDir (``OPENCOTI_NATIVE_CACHE``, default
~/.cache/opencoti/native-cache) from a fixed output directory (``OPENCOTI_NATIVE_BUILD``, default
~/.cache/opencoti/native-realtree; CacheDir keys include each target's path, so a fresh tmp dir per run would
never hit): a rerun only links.
"""
from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from native_support import N_EMBD, PersistentBuild, free_port, sdist_llamacpp, write_tiny_llama
from scons_runs import MINI_TREE, scons

BUILD_TIMEOUT_S = 4 * 3600  # a cold build on 2 shared cores


def get(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def test_llama_server_from_the_sdist_serves_embeddings(tmp_path: Path, native_realtree: PersistentBuild) -> None:
    llamacpp = sdist_llamacpp(download=True)
    assert llamacpp is not None
    build = native_realtree.build
    scons("-j2", "native", f"SRC={MINI_TREE}", f"LLAMACPP={llamacpp}", "CPU_ONLY=1",
          f"CACHE_DIR={native_realtree.cache}", build=build, timeout=BUILD_TIMEOUT_S)
    native_realtree.mark_warm()
    server = build / "out" / "native" / "bin" / "llama-server"
    model = tmp_path / "tiny-llama.gguf"
    write_tiny_llama(model)
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                             "--embedding", "--pooling", "mean", "-c", "256", "-t", "1", "-np", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        status = 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, _ = get(f"http://127.0.0.1:{port}/health")
            except (urllib.error.URLError, ConnectionError):
                status = 0
            if status == 200:
                break
            time.sleep(0.5)
        assert status == 200, (tmp_path / "server.log").read_text()
        status, answer = get(f"http://127.0.0.1:{port}/embedding", {"content": "hello world"})
        assert status == 200, (tmp_path / "server.log").read_text()
        vector = answer[0]["embedding"] if isinstance(answer, list) else answer["embedding"]
        vector = vector[0] if vector and isinstance(vector[0], list) else vector
        assert len(vector) == N_EMBD and all(isinstance(x, float) for x in vector)
        assert any(x != 0.0 for x in vector)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
