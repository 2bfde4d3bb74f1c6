"""Helpers of the real-tree tests: the llama-cpp-python sdist's llama.cpp, a tiny llama GGUF, a free port, a server's
embedding, a private copy of the tree."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.llamacpp_sdist import DOWNLOAD, sdist_llamacpp  # noqa: F401 (the tests' import point)

from scons_runs import MINI_TREE, scons

WARM_STAMP = ".opencoti-realtree-warm"


@dataclass(frozen=True)
class PersistentBuild:
    """A fixed output directory and CacheDir kept between runs (outside any test's tmp dir)."""

    cache: Path
    build: Path

    @property
    def warm(self) -> bool:
        return (self.cache / WARM_STAMP).is_file()

    def mark_warm(self) -> None:
        (self.cache / WARM_STAMP).write_text("a real-tree build completed over this cache\n")


N_EMBD, N_HEAD, N_FF, N_CTX = 64, 4, 128, 256
SPECIAL = ("<unk>", "<s>", "</s>")
WORDS = ("\u2581hello", "\u2581world", "\u2581the")


def write_tiny_llama(path: Path, seed: int = 0) -> None:
    """A valid llama-architecture GGUF: one block, SentencePiece vocabulary with byte fallback, random f32 weights."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = list(SPECIAL) + [f"<0x{b:02X}>" for b in range(256)] + list(WORDS)
    types = ([gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.BYTE] * 256
             + [gguf.TokenType.NORMAL] * len(WORDS))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), N_EMBD))
    for name, shape in (("attn_q", (N_EMBD, N_EMBD)), ("attn_k", (N_EMBD, N_EMBD)), ("attn_v", (N_EMBD, N_EMBD)),
                        ("attn_output", (N_EMBD, N_EMBD)), ("ffn_gate", (N_FF, N_EMBD)), ("ffn_up", (N_FF, N_EMBD)),
                        ("ffn_down", (N_EMBD, N_FF))):
        writer.add_tensor(f"blk.0.{name}.weight", weight(*shape))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request(url: str, body: dict | None = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def served_embedding(argv: list[str], model: Path | None, log: Path, startup_s: float = 120) -> list[float]:
    """Start the server ``argv`` on 127.0.0.1 with ``model`` (None: the one its own .args names), wait for
    ``/health``, and return ``/embedding``'s vector for "hello world" (mean pooling); the server is stopped by PID
    whatever happens. Its output: ``log``."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([*argv, *(["-m", str(model)] if model else []), "--host", "127.0.0.1", "--port",
                                 str(port), "--embedding", "--pooling", "mean", "-c", "256", "-t", "1", "-np", "1"],
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + startup_s
            status = 0
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status, _ = _request(f"http://127.0.0.1:{port}/health")
                except (urllib.error.URLError, ConnectionError):
                    status = 0
                if status == 200:
                    break
                time.sleep(0.5)
            assert status == 200, log.read_text()
            status, answer = _request(f"http://127.0.0.1:{port}/embedding", {"content": "hello world"})
            assert status == 200, log.read_text()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    vector = answer[0]["embedding"] if isinstance(answer, list) else answer["embedding"]  # type: ignore[index]
    return vector[0] if vector and isinstance(vector[0], list) else vector


def private_checkout(where: Path, edited: tuple[str, ...] = ()) -> Path:
    """A copy of the sdist's llama.cpp at ``where/llama.cpp``, kept between runs (its objects sit in a persistent
    cache), for tests that edit it; each file of ``edited`` is first put back as the sdist has it (a test killed
    between its edit and its restore leaves nothing behind for the next run)."""
    sdist = sdist_llamacpp(download=True)
    assert sdist is not None
    copy = where / "llama.cpp"
    if not copy.is_dir():
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=where, prefix=".copy-") as scratch:
            shutil.copytree(sdist, Path(scratch) / "llama.cpp", symlinks=True)
            (Path(scratch) / "llama.cpp").rename(copy)  # whole, or not there
    for rel in edited:
        if (copy / rel).read_bytes() != (sdist / rel).read_bytes():
            shutil.copy2(sdist / rel, copy / rel)
    return copy


BUILD_TIMEOUT_S = 4 * 3600  # a cold real-tree build on 2 shared cores


def native_server(persistent: PersistentBuild) -> Path:
    """The native lane's llama-server of the sdist's llama.cpp, built (or found current) over ``persistent``."""
    llamacpp = sdist_llamacpp(download=True)
    assert llamacpp is not None
    scons("-j2", "native", f"SRC={MINI_TREE}", f"LLAMACPP={llamacpp}", "CPU_ONLY=1", f"CACHE_DIR={persistent.cache}",
          build=persistent.build, timeout=BUILD_TIMEOUT_S)
    persistent.mark_warm()
    return persistent.build / "out" / "native" / "bin" / "llama-server"
