"""`scons native` on a real llama.cpp nobody here wrote: the one inside the llama-cpp-python sdist.

The real-tree tier (tests/realtree/conftest.py): run where its persistent cache is warm, or with ``--long``;
alone: `python3 -m pytest --long tests/realtree`. The sdist is downloaded once into the cache
(bench/llamacpp_sdist.py); objects go through a persistent CacheDir (``OPENCOTI_NATIVE_CACHE``, default
~/.cache/opencoti/native-cache) from a fixed output directory (``OPENCOTI_NATIVE_BUILD``, default
~/.cache/opencoti/native-realtree; CacheDir keys include each target's path, so a fresh tmp dir per run would
never hit): a rerun only links.
"""
from __future__ import annotations

from pathlib import Path

from native_support import N_EMBD, PersistentBuild, native_server, served_embedding, write_tiny_llama


def test_llama_server_from_the_sdist_serves_embeddings(tmp_path: Path, native_realtree: PersistentBuild) -> None:
    server = native_server(native_realtree)
    model = tmp_path / "tiny-llama.gguf"
    write_tiny_llama(model)
    vector = served_embedding([str(server)], model, tmp_path / "server.log")
    assert len(vector) == N_EMBD and all(isinstance(x, float) for x in vector)
    assert any(x != 0.0 for x in vector)
