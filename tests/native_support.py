"""Helpers of the native-lane tests: the llama-cpp-python sdist's llama.cpp, a tiny llama GGUF, a free port."""
from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.llamacpp_sdist import DOWNLOAD, sdist_llamacpp  # noqa: F401 (the tests' import point)

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
