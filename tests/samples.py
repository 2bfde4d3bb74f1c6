"""Small inputs the tests write, shared by a module's unit and integration halves: zip-append entries, a SPIR-V
module, a stand-in program, the web UI's assets."""
from __future__ import annotations

import struct
from pathlib import Path

from opencoti_build.formats import spirv, zipappend
from opencoti_build.formats.zipappend import Entry
from opencoti_build.tree import webui

from packaging_support import GGUF_MAGIC, write_gguf

EPOCH = 1700000000  # 2023-11-14 22:13:20 UTC: the packaged entries' SOURCE_DATE_EPOCH in the zip-append tests
OP_NOP, OP_CAPABILITY, OP_FUNCTION_END = 0, 17, 56
# Bytes no text transform keeps: every byte value, NUL and CR/LF included.
WEBUI_ASSETS = {"index.html": b"<!doctype html><title>mini UI</title>\r\n", "bundle.js": bytes(range(256)) * 2,
                "bundle.css": b"body{color:red}", "loading.html": b"<p>loading</p>\n\0"}


def appended_entries(tmp_path: Path) -> list[Entry]:
    """A model, its magic file, an executable script under bin/ and an .args blob, written under ``tmp_path``."""
    model = write_gguf(tmp_path / "tiny.gguf")
    (tmp_path / "gguf.magic").write_text(GGUF_MAGIC)
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    return [
        Entry.file(model), Entry.file(tmp_path / "gguf.magic"), Entry.file(script, name="bin/hello.sh"),
        Entry.blob(".args", b"--strace\n"),
    ]


def assert_aligned(result: zipappend.AppendResult, align: int) -> None:
    appended = [info for info in result.entries if info.appended]
    assert appended
    for info in appended:
        assert info.data_offset % align == 0 and info.method == "stored", info


def spirv_module(bound: int = 8, version: int = 0x00010500, extra_words: int = 0) -> bytes:
    """A minimal well-formed SPIR-V stream: header, OpCapability Shader, OpNops, OpFunctionEnd."""
    words = [spirv.MAGIC, version, 0x000D000B, bound, 0, (2 << 16) | OP_CAPABILITY, 1]
    words += [(1 << 16) | OP_NOP] * extra_words
    words += [(1 << 16) | OP_FUNCTION_END]
    return struct.pack(f"<{len(words)}I", *words)


def program(path: Path, script: str = "#!/bin/sh\nexit 0\n") -> Path:
    """An executable script at ``path`` (a stand-in nvcc, glslc ...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    return path


def give_webui_assets(tree: Path) -> None:
    public = tree / webui.PUBLIC
    public.mkdir(parents=True)
    for name, data in WEBUI_ASSETS.items():
        (public / name).write_bytes(data)
