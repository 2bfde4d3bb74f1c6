"""The thin binary's own zip store: the tree files llamafile/*.c open as /zip/<path> (opencoti_build.tree.zip_sources)."""
from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

from opencoti_build.bulkcopy import zipwriter
from opencoti_build.formats import zipappend
from opencoti_build.report import summary
from opencoti_build.tree import zip_sources

from packaging_support import FILE_ELF, copy_exe, run, write_gguf
from scons_runs import MINI_TREE, compiled, scons

METAL = "llama.cpp/ggml/src/ggml-metal/ggml-metal.metal"


def check_store(artifact: Path, tree: Path) -> zipfile.ZipFile:
    archive = zipfile.ZipFile(artifact)
    for path in zip_sources.zip_paths(tree):
        info = archive.getinfo(path)
        assert info.compress_type == zipfile.ZIP_STORED and info.external_attr >> 16 == 0o100644
        assert archive.read(path) == (tree / path).read_bytes(), path
    assert "No errors detected" in run("unzip", "-t", artifact).stdout
    return archive


def test_the_thin_binary_holds_them_with_the_trees_bytes(built_mini: Path) -> None:
    check_store(built_mini / "out/o/llamafile/llamafile", MINI_TREE)
    # the linker's companions sit beside it, as before
    for suffix in (".com.dbg", ".aarch64.elf"):
        assert (built_mini / f"out/o/llamafile/llamafile{suffix}").read_bytes() == \
            (built_mini / f"out/o/llamafile/linked/llamafile{suffix}").read_bytes()


def test_editing_a_metal_source_rewrites_the_store_and_nothing_else(tree: Path, tmp_path: Path, built_mini: Path) -> None:
    build = tmp_path / "b"
    scons(f"SRC={tree}", f"CACHE_DIR={built_mini / 'cache'}", build=build)  # warm: restored, not compiled
    binary = build / "out/o/llamafile/llamafile"
    linked = (build / "out/o/llamafile/linked/llamafile").stat().st_mtime_ns
    with (tree / METAL).open("a") as fh:
        fh.write("// an edit\n")
    proc = scons(f"SRC={tree}", f"CACHE_DIR={built_mini / 'cache'}", build=build)
    steps = [m.group(1) for line in summary.unprefixed(proc.stdout)  # FATCC, FATLINK, ZIPSTORE …
             if (m := re.match(r"([A-Z]+) ", line))]
    assert compiled(proc) == [] and steps == ["ZIPSTORE"], proc.stdout
    assert (build / "out/o/llamafile/linked/llamafile").stat().st_mtime_ns == linked
    assert zipfile.ZipFile(binary).read(METAL).endswith(b"// an edit\n")


def test_the_store_is_reproducible_and_path_independent(tree: Path, tmp_path: Path, built_mini: Path) -> None:
    scons(f"SRC={tree}", f"CACHE_DIR={built_mini / 'cache'}", build=tmp_path / "b")
    assert (tmp_path / "b/out/o/llamafile/llamafile").read_bytes() == \
        (built_mini / "out/o/llamafile/llamafile").read_bytes()


def test_packaged_artifacts_keep_the_store_and_list_it(tmp_path: Path, built_mini: Path) -> None:
    model = write_gguf(tmp_path / "tiny.gguf")
    argv = ("package", "verify", f"SRC={MINI_TREE}", "CPU_ONLY=1", "ARCH=x86_64", f"MODEL={model}",
            f"CACHE_DIR={built_mini / 'cache'}")
    proc = scons(*argv, build=tmp_path / "b", home=tmp_path / "home")
    dist = tmp_path / "b" / "dist" / "llamafile"
    paths = zip_sources.zip_paths(MINI_TREE)
    artifacts = sorted(p for p in dist.iterdir() if p.suffix == ".llamafile")
    assert len(artifacts) == 2
    for artifact in artifacts:
        check_store(artifact, MINI_TREE)
        manifest = json.loads(Path(f"{artifact}.MANIFEST.json").read_text())
        listed = {e["name"]: e for e in manifest["entries"]}
        for path in paths:
            assert listed[path]["appended"] is False and listed[path]["size"] == (MINI_TREE / path).stat().st_size
        assert f"OK: {artifact} matches {artifact.name}.MANIFEST.json" in proc.stdout
    assert METAL in proc.stdout  # verify's listing names the Metal sources


def test_the_cosmopolitan_runtime_reads_a_metal_source_back_through_zip(tmp_path: Path) -> None:
    # the same store on a real cosmopolitan program (the stand-in's binary is a plain ELF), then packaged on
    stored = tmp_path / "file.com"
    zipwriter.append(copy_exe(FILE_ELF, tmp_path / "file.elf"), zip_sources.store_entries(MINI_TREE, [METAL]),
                     stored, align=zip_sources.ALIGN)
    packaged = tmp_path / "packaged.com"
    zipwriter.append(stored, [zipappend.Entry.file(write_gguf(tmp_path / "tiny.gguf"))], packaged)
    magic = tmp_path / "metal.magic"
    magic.write_text("0\tstring\t//\\ Miniature\\ of\\ ggml's\\ Metal\\ shaders\tmini Metal shaders\n")
    proc = run(packaged, "-m", magic, f"/zip/{METAL}")
    assert proc.returncode == 0 and f"/zip/{METAL}: mini Metal shaders" in proc.stdout, proc.stdout + proc.stderr
