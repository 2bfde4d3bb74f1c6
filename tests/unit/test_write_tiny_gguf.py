"""scripts/write-tiny-gguf, the demo's model: the gguf package's bytes from the standard library alone, and a real
--help (it once wrote a model named --help)."""
from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

import gguf
import numpy as np
import pytest

from scons_runs import PROJECT


def script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("write_tiny_gguf", str(PROJECT / "scripts" / "write-tiny-gguf"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_the_model_is_what_the_gguf_package_writes(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(str(tmp_path / "reference.gguf"), "llama")
    writer.add_name("opencoti demo embedder")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert script().main([str(tmp_path / "tiny.gguf")]) == 0
    assert (tmp_path / "tiny.gguf").read_bytes() == (tmp_path / "reference.gguf").read_bytes()
    read = gguf.GGUFReader(str(tmp_path / "tiny.gguf"))
    assert [t.name for t in read.tensors] == ["token_embd.weight"]


def test_help_is_help_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        script().main(["--help"])
    assert stopped.value.code == 0 and capsys.readouterr().out.startswith("usage: scripts/write-tiny-gguf [-h] OUT.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_model_it_cannot_write_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert script().main([str(tmp_path / "absent" / "tiny.gguf")]) == 1
    assert capsys.readouterr().err == f"write-tiny-gguf: cannot write {tmp_path / 'absent' / 'tiny.gguf'}: " \
                                      "No such file or directory\n"
