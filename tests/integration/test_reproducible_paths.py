"""Path-independent outputs: the same commit built in two checkouts of different paths gives the same bytes.

Two copies of what the build needs (SConstruct, the SConscripts, site_scons, vendors, the miniature tree)
at paths of different lengths, each with SRC inside it, built cold (no cache): every object, archive,
thin binary, DSO and artifact must equal its twin byte for byte, debug info included, and name neither
checkout. The miniature tree has no ``__FILE__``, so each copy gets the same few lines that use it (host
and device code): without the prefix maps they would embed the checkout's path.
"""
from __future__ import annotations

import glob
import shutil
from pathlib import Path

from opencoti_build.artifacts import intoto, provenance

from scons_runs import clone, scons

COMPARED = ("build/o", "build/backends", "dist", "vendors/dist")


def have_gpu_toolchain() -> bool:
    return bool(shutil.which("glslc") or shutil.which("hipcc") or shutil.which("nvcc")
                or glob.glob("/usr/local/cuda*/bin/nvcc"))


def build(checkout: Path, *args: str) -> None:
    """A cold build in ``checkout`` with every output inside it; the tree is SRC's copy inside it too."""
    scons(
        "-j2", f"SRC={checkout / 'tests' / 'fixtures' / 'llamafile-mini'}", f"BUILD_DIR={checkout / 'build'}",
        "CACHE_DIR=", f"DIST_DIR={checkout / 'dist'}", f"BACKEND_DIST_DIR={checkout / 'vendors' / 'dist'}",
        f"COMPILEDB={checkout / 'compile_commands.json'}", *args,
        build=checkout, home=checkout.parent / "home", project=checkout,
    )


def outputs(checkout: Path) -> dict[str, Path]:
    found = {}
    for top in COMPARED:
        for path in sorted((checkout / top).rglob("*")):
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(checkout))] = path
    return found


def test_two_checkouts_at_different_paths_build_byte_identical_outputs(tmp_path: Path) -> None:
    checkouts = [clone(tmp_path / "a" / "x"), clone(tmp_path / "bbbbbbbbbbbbbbb" / "checkout-two")]
    gpu = [] if have_gpu_toolchain() else ["CPU_ONLY=1"]
    for checkout in checkouts:
        # the host, every backend whose toolchain is here (CUDA for one arch), the artifact embedding them
        build(checkout, "package", "CUDA_ARCHS=80", *gpu)
    first, second = (outputs(c) for c in checkouts)
    assert sorted(first) == sorted(second), "the two builds wrote different files"
    assert any(name.endswith(".llamafile") for name in first), sorted(first)
    differ = [name for name in first if first[name].read_bytes() != second[name].read_bytes()]
    assert not differ, f"{len(differ)} of {len(first)} outputs differ between the checkouts: {differ}"
    named = [name for checkout, files in zip(checkouts, (first, second)) for name, path in files.items()
             if str(checkout).encode() in path.read_bytes()]
    assert not named, f"outputs naming their checkout's path: {named}"
    # SRC lies inside each checkout, no git checkout's root: the Statements (equal above) name it by the digest of
    # its files, which is the same at both paths, and every toolchain by a digest of its own
    for name in (n for n in first if n.endswith(provenance.STATEMENT_SUFFIX)):
        document, _ = intoto.read_statement(first[name])
        dependencies = {d["name"]: d for d in document["predicate"]["buildDefinition"]["resolvedDependencies"]}
        assert set(dependencies["source:llamafile"]["digest"]) == {"dirHash"}, name
        assert all(d.get("digest") for n, d in dependencies.items() if n.startswith("toolchain:")), name
    dsos = sorted(name for name in first if name.endswith(".so"))
    print(f"{len(first)} outputs identical, DSOs among them: {dsos or 'none (no GPU toolchain)'}")


def test_src_at_two_outside_paths_builds_the_same_thin_binary(tmp_path: Path) -> None:
    """SRC outside the checkout, at two paths of different lengths (one checkout): the same host outputs."""
    checkout = clone(tmp_path / "checkout")
    results = []
    for src in (tmp_path / "t", tmp_path / "elsewhere" / "second-tree"):
        shutil.copytree(checkout / "tests" / "fixtures" / "llamafile-mini", src)
        out = tmp_path / f"out-{src.name}"
        scons("-j2", f"SRC={src}", f"BUILD_DIR={out}", "CACHE_DIR=", build=tmp_path, home=tmp_path / "home",
              project=checkout)
        files = {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "o").rglob("*")) if p.is_file()}
        assert not [name for name, data in files.items() if str(src).encode() in data or str(out).encode() in data]
        results.append(files)
    assert sorted(results[0]) == sorted(results[1])
    differ = [name for name in results[0] if results[0][name] != results[1][name]]
    assert not differ, f"{len(differ)} of {len(results[0])} host outputs differ with SRC moved: {differ}"
