"""An upstream llama.cpp checkout read through the description (opencoti_build.tree.upstream, host_tree): which
checkouts are taken, what the host lane compiles from one, and the wrappers that give each fat half its kernels.

The real builds: tests/integration/test_checkout_host.py (the fixture's llama.cpp) and tests/realtree/.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from opencoti_build.tree import host_tree, sources, upstream

from scons_runs import MINI_TREE

MINI_CHECKOUT = MINI_TREE / "llama.cpp"


def checkout_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "llama.cpp"
    shutil.copytree(MINI_CHECKOUT, copy)
    return copy


def test_description_paths_map_onto_the_checkout() -> None:
    assert upstream.tree_path("llama.cpp/ggml/src/ggml.c", "/x/lc") == "/x/lc/ggml/src/ggml.c"
    with pytest.raises(ValueError, match="outside llama.cpp/"):
        upstream.tree_path("llamafile/sgemm.cpp", "/x/lc")


def test_a_checkout_must_hold_ggml_and_src(tmp_path: Path) -> None:
    (tmp_path / "ggml").mkdir()
    with pytest.raises(upstream.CheckoutError) as raised:
        upstream.checkout_dir(str(tmp_path), "/unused", "/unused")
    assert str(raised.value) == (f"LLAMACPP={tmp_path} is not a llama.cpp checkout (no src/); "
                                 "point LLAMACPP= at the root of a llama.cpp tree")
    assert upstream.checkout_dir("", str(MINI_TREE), "/unused") == str(MINI_CHECKOUT)  # SRC's own: no version asked
    assert upstream.checkout_dir("tests/fixtures/llamafile-mini/llama.cpp", "/unused", str(MINI_TREE.parents[2])) \
        == str(MINI_CHECKOUT)


def test_a_checkout_without_a_ggml_version_is_refused_naming_what_was_looked_for(tmp_path: Path) -> None:
    copy = checkout_copy(tmp_path)
    (copy / "ggml" / "CMakeLists.txt").unlink()
    with pytest.raises(upstream.CheckoutError) as raised:
        upstream.checkout_dir(str(copy), "/unused", "/unused")
    assert str(raised.value) == (
        f"LLAMACPP={copy} names no ggml version (looked for GGML_VERSION_MAJOR/MINOR/PATCH in ggml/CMakeLists.txt); "
        "known to work: ggml 0.25.x (the llama.cpp of llama-cpp-python 0.3.36)")


@pytest.mark.parametrize("minor", ["24", "26"])
def test_a_checkout_too_old_or_too_new_is_refused_naming_the_versions_known_to_work(tmp_path: Path,
                                                                                     minor: str) -> None:
    copy = checkout_copy(tmp_path)
    cmake = copy / "ggml" / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace("GGML_VERSION_MINOR 25", f"GGML_VERSION_MINOR {minor}"))
    with pytest.raises(upstream.CheckoutError) as raised:
        upstream.checkout_dir(str(copy), "/unused", "/unused")
    assert str(raised.value) == (
        f"LLAMACPP={copy} is ggml 0.{minor}.3, whose sources the description does not know (known to work: "
        "ggml 0.25.x (the llama.cpp of llama-cpp-python 0.3.36)); check out a known version")


def test_the_llamafile_trees_own_llamacpp_is_not_asked_for_a_version(tmp_path: Path) -> None:
    src = tmp_path / "src"
    copy = checkout_copy(src)
    (copy / "ggml" / "CMakeLists.txt").unlink()
    assert upstream.checkout_dir("", str(src), "/unused") == str(copy)
    with pytest.raises(upstream.CheckoutError, match="names no ggml version"):
        upstream.checkout_dir(str(copy), "/unused", "/unused")


def test_the_checkouts_version_names_its_artifacts() -> None:
    assert sources.ggml_version(MINI_CHECKOUT) == "0.25.3"
    assert upstream.artifact_version(str(MINI_CHECKOUT)) == "llama.cpp-0.25.3"


def test_the_checkouts_packages_drop_the_llamafile_trees_code_paths() -> None:
    packages = {p.name: p for p in upstream.packages()}
    assert list(packages) == ["llamafile", "server", "mtmd", "common", "llama", "ggml", "httplib"]
    for package in packages.values():
        assert not upstream.TREE_ONLY_DEFINES & set(package.defines), package.name
        assert package.inherits == sources.COMPILE_DEFAULTS  # CMake's one profile
    assert packages["llamafile"].defines == ("COSMOCC=1",)  # no LLAMAFILE_TUI: the server's main stays main
    assert "GGML_USE_CPU" in packages["ggml"].defines and "-mgcc" in packages["ggml"].per_file[0].flags  # fat flags kept
    assert not any("/arch/" in s for s in packages["ggml"].sources)  # the fat lane's kernels come through wrappers
    assert packages["ggml"].defines[-1] == "_GNU_SOURCE"  # ggml's CMake: CPU affinity, SCHED_BATCH, mremap
    assert "_GNU_SOURCE" not in packages["llama"].defines
    native_ggml = {p.name: p for p in upstream.packages(["x86"])}["ggml"]
    assert "llama.cpp/ggml/src/ggml-cpu/arch/x86/*.c" in native_ggml.sources


def test_a_source_is_compiled_by_the_first_package_that_has_it() -> None:
    claimed = dict((p.name, rels) for p, rels in upstream.claimed(upstream.packages(), str(MINI_CHECKOUT)))
    assert claimed["llamafile"] == ["llama.cpp/tools/server/server.cpp"]
    assert "llama.cpp/tools/server/server.cpp" not in claimed["server"]
    assert claimed["server"] == ["llama.cpp/tools/server/server-common.cpp"]
    everything = [r for rels in claimed.values() for r in rels]
    assert len(everything) == len(set(everything))


def test_each_wrapper_gives_each_half_its_own_architectures_file() -> None:
    wrappers = {w.name: w for w in upstream.arch_wrappers(str(MINI_CHECKOUT))}
    assert list(wrappers) == ["quants.c", "repack.cpp"]
    assert wrappers["quants.c"].includes == {"x86_64": "llama.cpp/ggml/src/ggml-cpu/arch/x86/quants.c",
                                             "aarch64": "llama.cpp/ggml/src/ggml-cpu/arch/arm/quants.c"}
    assert wrappers["quants.c"].text.splitlines()[1:] == [
        "#if defined(__x86_64__)", '#include "ggml-cpu/arch/x86/quants.c"',
        "#elif defined(__aarch64__)", '#include "ggml-cpu/arch/arm/quants.c"',
        "#else", '#error "a fat compile has an x86-64 and an aarch64 half only"', "#endif"]
    # arm alone has repack.cpp here: the x86-64 half compiles nothing of it, any other target is an error
    assert wrappers["repack.cpp"].text.splitlines()[1:] == [
        "#if defined(__aarch64__)", '#include "ggml-cpu/arch/arm/repack.cpp"',
        "#elif !defined(__x86_64__)", '#error "a fat compile has an x86-64 and an aarch64 half only"', "#endif"]


def test_a_cpu_feats_file_gets_no_wrapper(tmp_path: Path) -> None:
    copy = checkout_copy(tmp_path)
    (copy / "ggml" / "src" / "ggml-cpu" / "arch" / "x86" / "cpu-feats.cpp").write_text("int x;\n")
    assert [w.name for w in upstream.arch_wrappers(str(copy))] == ["quants.c", "repack.cpp"]


def test_the_host_tree_of_a_checkout(tmp_path: Path) -> None:
    tree = host_tree.checkout_tree(str(MINI_CHECKOUT))
    assert tree.checkout and tree.zip_paths == () and tree.iquote == ()
    assert tree.program.output == "llama.cpp/tools/server/llama-server"
    assert tree.objdir == "checkout"
    assert tree.path("llama.cpp/ggml/src/ggml.c") == str(MINI_CHECKOUT / "ggml" / "src" / "ggml.c")
    assert [w.name for w in tree.arch_wrappers] == ["quants.c", "repack.cpp"]
    llamafile = host_tree.llamafile_tree(str(MINI_TREE))
    assert not llamafile.checkout and llamafile.objdir == "" and llamafile.program is sources.HOST_PROGRAM
    assert llamafile.path("llama.cpp/ggml/src/ggml.c") == str(MINI_TREE / "llama.cpp" / "ggml" / "src" / "ggml.c")


def test_a_checkout_without_a_core_source_or_a_required_package_is_refused(tmp_path: Path) -> None:
    copy = checkout_copy(tmp_path)
    (copy / "ggml" / "src" / "ggml-alloc.c").unlink()
    with pytest.raises(upstream.CheckoutError) as raised:
        host_tree.checkout_tree(str(copy))
    assert str(raised.value) == (f"LLAMACPP={copy} lacks ggml/src/ggml-alloc.c, a ggml core source; "
                                 "point LLAMACPP= at a complete llama.cpp checkout")
    copy = checkout_copy(tmp_path / "again")
    shutil.rmtree(copy / "common")
    with pytest.raises(upstream.CheckoutError, match=r"has no sources of package 'common' \(expected common/arg.cpp\); "
                                                     r"known to work: ggml 0.25.x"):
        host_tree.checkout_tree(str(copy))
