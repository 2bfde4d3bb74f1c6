"""What packaging checks before writing: the GGUF model, the .args text, the host binary's strings."""
from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from opencoti_build.artifacts import embed_args
from opencoti_build.artifacts.embed_args import ArgsError
from opencoti_build.formats import gguf_model, host_strings
from opencoti_build.formats.gguf_model import ModelError

from packaging_support import FILE_ELF, PLEDGE, write_gguf


def test_gguf_written_by_the_gguf_package_is_accepted(tmp_path: Path) -> None:
    assert gguf_model.gguf_version(write_gguf(tmp_path / "m.gguf")) == 3


@pytest.mark.parametrize("make, complaint", [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"PK\x03\x04 not a model"), "is not a GGUF file"),
    (lambda p: p.write_bytes(b"GGU"), "is not a GGUF file"),
    # a whole valid GGUF but for the magic's last byte: all four bytes are compared
    (lambda p: p.write_bytes(b"GGUX" + write_gguf(p).read_bytes()[4:]), "is not a GGUF file"),
    (lambda p: p.write_bytes(b"GGUF" + (7).to_bytes(4, "little") + bytes(16)), "GGUF version 7"),
    (lambda p: p.write_bytes(b"GGUF" + (3).to_bytes(4, "big") + bytes(16)), "big-endian"),
    (lambda p: p.write_bytes(write_gguf(p).read_bytes()[:100]), "is truncated: metadata .* runs past its end"),
    (lambda p: p.write_bytes(write_gguf(p).read_bytes()[:-1]), "is truncated: tensor 'weights' data"),
    (lambda p: p.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (1 << 40).to_bytes(8, "little") + bytes(8)),
     "is truncated: tensor info 1 of 1099511627776 runs past its end"),
])
def test_bad_models_are_refused_with_one_line(tmp_path: Path, make, complaint: str) -> None:
    model = tmp_path / "model.gguf"
    make(model)
    with pytest.raises(ModelError, match=complaint) as caught:
        gguf_model.gguf_version(model)
    assert str(model) in str(caught.value) and "\n" not in str(caught.value)


def test_every_metadata_type_is_skipped_to_the_right_byte(tmp_path: Path) -> None:
    # what real models carry: the tokenizer's string and integer arrays, floats, bools, 64-bit values
    model = tmp_path / "typed.gguf"
    writer = gguf.GGUFWriter(str(model), "llama")
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_float64("x.float64", 0.5)
    writer.add_bool("x.bool", True)
    writer.add_int8("x.int8", -1)
    writer.add_uint16("x.uint16", 7)
    writer.add_uint64("x.uint64", 1 << 40)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello"])
    writer.add_array("tokenizer.ggml.token_type", [1, 3, 1])
    writer.add_array("x.nested", [[1, 2], [3]])
    writer.add_tensor("weights", np.arange(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    info = gguf_model.check_gguf(model)
    reader = gguf.GGUFReader(str(model))  # the gguf package's own reader: where the tensor data starts
    assert (info.metadata, info.tensors, info.data_offset) == (len(reader.fields) - 3, 1, reader.data_offset)
    model.write_bytes(model.read_bytes()[:reader.data_offset + 255])  # one byte short of the tensor
    with pytest.raises(ModelError, match="is truncated: tensor 'weights' data"):
        gguf_model.check_gguf(model)


def gguf_v1(tensor_bytes: int = 16) -> bytes:
    """A GGUF version 1 (32-bit counts and lengths, as llama.cpp still reads) with one key and one f32 tensor."""
    def text(s: bytes) -> bytes:
        return struct.pack("<I", len(s)) + s

    head = b"GGUF" + struct.pack("<III", 1, 1, 1)  # version, tensors, metadata entries
    head += text(b"general.name") + struct.pack("<I", 8) + text(b"v1 model")  # type 8: a string
    head += text(b"w") + struct.pack("<IIIQ", 1, 4, 0, 0)  # one dimension of 4, type 0 (f32), data offset 0
    return head.ljust(-(-len(head) // 32) * 32, b"\0") + bytes(tensor_bytes)


def test_gguf_version_1_counts_are_32_bits(tmp_path: Path) -> None:
    model = tmp_path / "v1.gguf"
    model.write_bytes(gguf_v1())
    assert gguf_model.check_gguf(model) == gguf_model.GgufInfo(version=1, tensors=1, metadata=1, data_offset=96,
                                                               file_size=112)
    model.write_bytes(gguf_v1(tensor_bytes=15))
    with pytest.raises(ModelError, match="is truncated: tensor 'w' data .it ends at byte 112. runs past its end .111 bytes"):
        gguf_model.check_gguf(model)


def test_unreadable_model_is_refused(tmp_path: Path, monkeypatch) -> None:
    model = write_gguf(tmp_path / "m.gguf")

    def denied(*args, **kwargs):  # chmod 0 would not stop root, who runs these tests in CI
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(gguf_model, "open", denied, raising=False)
    with pytest.raises(ModelError, match="m.gguf: cannot read: Permission denied"):
        gguf_model.gguf_version(model)


def test_default_args_match_build_embedder_args() -> None:
    text = embed_args.default_args("qwen3-embedding-0.6b.gguf")
    assert embed_args.parse_words(text) == [
        "-m", "/zip/qwen3-embedding-0.6b.gguf", "--server", "--embedding", "--pooling", "last",
        "--ctx-size", "16384", "--parallel", "2", "--slot-initial-ctx", "4096", "--slot-shrink-idle-ms", "30000",
    ]


def test_default_args_for_llama_cpps_server_use_only_its_own_options() -> None:
    """A host built from LLAMACPP= runs llama.cpp's server: no --server, no slot options of the patch series."""
    text = embed_args.default_args("tiny.gguf", "llama-server")
    assert embed_args.parse_words(text) == [
        "-m", "/zip/tiny.gguf", "--load-mode", "none", "--embedding", "--pooling", "last", "--ctx-size", "16384", "--parallel", "2"]
    assert not set(embed_args.options_used(embed_args.parse_words(text))) & set(embed_args.SERIES_OPTIONS)


def test_default_args_quote_a_model_name_with_spaces() -> None:
    words = embed_args.parse_words(embed_args.default_args("my model.gguf"))
    assert words[:2] == ["-m", "/zip/my model.gguf"]


def test_args_parser_handles_comments_quotes_and_the_user_marker() -> None:
    text = (
        "# embedder defaults\n"
        "-m '/zip/a b.gguf'   # the model\n"
        "--pooling=last\n"
        '--alias "x # not a comment"\n'
        "-ngl -1\n"
        "...\n"
        "--server\n--server\n"
    )
    words = embed_args.parse_words(text)
    assert words == ["-m", "/zip/a b.gguf", "--pooling=last", "--alias", "x # not a comment", "-ngl", "-1", "...",
                     "--server", "--server"]
    assert embed_args.options_used(words) == ["-m", "--pooling", "--alias", "-ngl", "--server"]
    assert embed_args.zip_paths(words) == ["a b.gguf"]


def test_unbalanced_quotes_are_refused() -> None:
    with pytest.raises(ArgsError, match="ARGS=x: cannot parse"):
        embed_args.parse_words("--alias 'oops\n", "ARGS=x")


def test_host_strings_find_nul_terminated_options() -> None:
    # cosmopolitan's runtime flags are in every cosmo binary; the embedder's options are not
    assert host_strings.missing_strings(PLEDGE, ["--strace", "--ftrace", "--slot-initial-ctx"]) == ["--slot-initial-ctx"]
    assert host_strings.missing_strings(FILE_ELF, ["-b", "--strace"]) == []


def test_tail_merged_strings_count(tmp_path: Path) -> None:
    host = tmp_path / "host"
    # "-m" stored only as the tail of a longer literal, as the linker's string merging does
    host.write_bytes(b"\x00\x01garbage\x00--model-dir\x00pre-m\x00--server\x00")
    assert host_strings.missing_strings(host, ["-m", "--server", "--model", "--dir"]) == ["--model", "--dir"]


def test_default_args_are_refused_by_a_host_without_the_patch_series(tmp_path: Path) -> None:
    host = tmp_path / "upstream"  # upstream llamafile's options, not the two the opencoti series adds
    host.write_bytes(b"\0-m\0--server\0--embedding\0--pooling\0--ctx-size\0--parallel\0")
    with pytest.raises(ArgsError) as caught:
        embed_args.check_against_host(embed_args.default_args("m.gguf"), host, "the generated .args")
    assert str(caught.value) == (
        f"the generated .args uses --slot-initial-ctx, --slot-shrink-idle-ms, which host binary {host} does not know: "
        "the opencoti patch series is not compiled into it (run `scons apply` and rebuild, or package with ARGS= "
        "naming only its options)")


def test_an_option_no_llamafile_has_is_not_blamed_on_the_patch_series(tmp_path: Path) -> None:
    with pytest.raises(ArgsError) as caught:
        embed_args.check_against_host("--strace --slot-initial-ctx 1 --no-such-option\n", PLEDGE, "ARGS=x.args")
    assert str(caught.value) == (f"ARGS=x.args uses unknown option(s) --no-such-option: host binary {PLEDGE} has no "
                                 "such option; fix or remove it in that file")
    with pytest.raises(ArgsError, match="the generated .args uses unknown option.* point HOST= at a llamafile server"):
        embed_args.check_against_host(embed_args.default_args("m.gguf"), PLEDGE, "the generated .args")


@pytest.mark.parametrize("text, complaint", [
    ("", "holds no arguments; the embedder needs at least `-m /zip/m.gguf`"),
    ("# nothing\n", "holds no arguments"),
    ("--server\n", "does not load the embedded model; add `-m /zip/m.gguf` to it"),
    ("-m /zip/other.gguf\n", "does not load the embedded model"),
])
def test_args_must_load_the_embedded_model(text: str, complaint: str) -> None:
    with pytest.raises(ArgsError, match=complaint):
        embed_args.check_loads_model(embed_args.parse_words(text), "m.gguf", "ARGS=a")


def test_model_paths_accept_both_spellings() -> None:
    words = embed_args.parse_words("-m /zip/a.gguf --model=/zip/b.gguf --model /zip/c.gguf -m\n")
    assert embed_args.model_paths(words) == ["/zip/a.gguf", "/zip/b.gguf", "/zip/c.gguf"]


def test_args_with_known_options_pass(tmp_path: Path) -> None:
    assert embed_args.check_against_host("--strace\n# trace\n--ftrace\n", PLEDGE) == ["--strace", "--ftrace"]


def test_host_version_string(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.write_bytes(b"\x00llamafile v0.10.3\x00")
    assert host_strings.llamafile_version(host) == "0.10.3"
    assert host_strings.llamafile_version(PLEDGE) is None
    with pytest.raises(host_strings.HostError, match="cannot read"):
        host_strings.llamafile_version(tmp_path / "absent")
