"""Bad inputs: each is refused by the real scons in one line, exit 2, and nothing is written.

One baseline per session (the miniature tree built, then packaged with CPU_ONLY=1 and a model), then
one scons run per row of TABLE: the exact `scons: error: …` line, exit status 2, no traceback, and the
same sha256 of every file under BUILD_DIR, DIST_DIR, BACKEND_DIST_DIR, CACHE_DIR and the source trees
before and after (BUILD_DIR/.lock excepted: it names the last run's pid). docs/reliability.md, "Bad inputs".
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opencoti_build.config import targets
from opencoti_build.report import summary
from opencoti_build.tree import sources

from packaging_support import write_gguf
from scons_runs import MINI_TREE, PROJECT, scons

ARCH = "x86_64"
PACKAGE = ("package", "CPU_ONLY=1", f"ARCH={ARCH}")
EMBEDDER = "dist/llamafile/opencoti-embedder-0.10.3-x86_64.llamafile"
NAMES = ", ".join(targets.NAMES)
SKIPPED = {".lock"}  # the build lock's file: it holds the pid of the last run


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The baseline build and every bad input; returns the substitutions of TABLE's strings."""
    root = tmp_path_factory.mktemp("bad-inputs")
    src = root / "src"
    shutil.copytree(MINI_TREE, src)
    into = root / "in"
    into.mkdir()
    model = write_gguf(into / "tiny.gguf")
    scons(f"SRC={src}", build=root)
    scons(*PACKAGE, f"SRC={src}", f"MODEL={model}", build=root)

    good = model.read_bytes()
    write(into / "truncated.gguf", good[:100])  # the reported case: magic and version pass, the rest is gone
    write(into / "cut.gguf", good[:-1])  # every header whole, the tensor's last byte missing
    write(into / "v7.gguf", b"GGUF" + (7).to_bytes(4, "little") + bytes(16))
    write(into / "big-endian.gguf", b"GGUF" + (3).to_bytes(4, "big") + bytes(16))
    write(into / "notgguf", b"\x7fELF not a model")
    write(into / "afile", "a file where a directory belongs\n")
    write(into / "empty", b"")
    write(into / "empty.args", "")
    write(into / "comments.args", "# only a comment\n")
    write(into / "nomodel.args", "--server\n--embedding\n")
    write_gguf(into / "new\nline.gguf")
    write(into / "bogus.args", "-m /zip/tiny.gguf\n--bogus-option\n")
    write(into / "other.args", "-m /zip/tiny.gguf\n--model /zip/other.gguf\n")
    write(into / "quote.args", "-m '/zip/tiny.gguf\n")
    write(into / "latin1.args", "-m /zip/tiny.gguf --alias caf\xe9\n".encode("latin-1"))
    (into / "adir").mkdir()
    # /bin/true with a zip store appended: a zip store, but no llamafile
    true = into / "true"
    shutil.copyfile("/bin/true", true)
    subprocess.run(["python3", "-m", "zipfile", "-c", str(into / "x.zip"), str(into / "afile")], check=True)
    write(true, true.read_bytes() + (into / "x.zip").read_bytes())
    write(into / "versioned", b"\x7fELF\0llamafile v0.10.3\0" + bytes(64))  # a version string, no zip store
    # trees that are not llamafile trees, or are missing a part
    write(into / "spaced tree/llamafile/version.h", (MINI_TREE / "llamafile/version.h").read_text())
    write(into / "badver/llamafile/version.h", "#define LLAMAFILE_MAJOR 0\n#define LLAMAFILE_MINOR 10\n")
    broken = root / "broken"  # the mini tree without ggml/src/ggml.c
    shutil.copytree(MINI_TREE, broken)
    (broken / sources.GGML_CORE_SOURCES[0]).unlink()
    bare = root / "bare"  # version.h and the ggml core only: no sources of llamafile's own package
    for rel in ("llamafile/version.h", *sources.GGML_CORE_SOURCES):
        write(bare / rel, (MINI_TREE / rel).read_bytes())
    return {"root": str(root), "src": str(src), "in": str(into), "broken": str(broken), "bare": str(bare),
            "project": str(PROJECT), "cut": str(len(good) - 1), "cut_end": str(len(good)), "names": NAMES,
            "built": str(root / "out/o/llamafile/llamafile")}


def checksums(base: dict[str, str]) -> dict[str, str]:
    root = Path(base["root"])
    found = {}
    for top in [root / d for d in ("out", "dist", "vendors-dist", "cache", "home")] + [
            Path(base[k]) for k in ("src", "broken", "bare", "in")]:
        for path in sorted(top.rglob("*")):
            if path.is_file() and path.name not in SKIPPED:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


# (row id, arguments, message after "scons: error: "); {names} are substituted from the `base` fixture.
TABLE: list[tuple[str, tuple[str, ...], str]] = [
    # --- variables, checked by buildvars.validate before anything is created ----------------------
    ("build-dir-empty", ("BUILD_DIR=",),
     "BUILD_DIR= is empty; name a path, or leave BUILD_DIR out for its default (build)"),
    ("dist-dir-empty", ("DIST_DIR=",),
     "DIST_DIR= is empty; name a path, or leave DIST_DIR out for its default (dist)"),
    ("backend-dist-dir-empty", ("BACKEND_DIST_DIR=",),
     "BACKEND_DIST_DIR= is empty; name a path, or leave BACKEND_DIST_DIR out for its default (vendors/dist)"),
    ("build-dir-file", ("BUILD_DIR={in}/afile",),
     "BUILD_DIR={in}/afile is a file, not a directory; point BUILD_DIR= at a directory"),
    ("dist-dir-file", ("DIST_DIR={in}/afile",),
     "DIST_DIR={in}/afile is a file, not a directory; point DIST_DIR= at a directory"),
    ("cache-dir-file", ("CACHE_DIR={in}/afile",),
     "CACHE_DIR={in}/afile is a file, not a directory; point CACHE_DIR= at a directory"),
    ("backend-dist-dir-below-a-file", ("BACKEND_DIST_DIR={in}/afile/sub",),
     "BACKEND_DIST_DIR={in}/afile/sub: {in}/afile is a file, not a directory; point BACKEND_DIST_DIR= at a directory"),
    ("build-dir-with-a-space", ("BUILD_DIR={root}/with space",),
     "BUILD_DIR='{root}/with space' contains whitespace, and cosmocc refuses a TMPDIR with a space (the build keeps "
     "its TMPDIR under BUILD_DIR); choose a BUILD_DIR path without spaces"),
    ("build-dir-is-the-checkout", ("BUILD_DIR=.",),
     "BUILD_DIR=. is the checkout's root; name a directory of its own (the default is build)"),
    ("build-dir-renamed-twice", ("BUILD_DIR=build/o",),
     "BUILD_DIR=build/o: inside the checkout under the name its files are given in debug info, gcc would rename some "
     "of them twice (opencoti_build.cosmo.prefix_maps); choose another path"),
    ("compiledb-empty", ("compiledb", "COMPILEDB="),  # a plain build with COMPILEDB= empty writes no database
     "`scons compiledb` with COMPILEDB= empty (which turns the database off); name the file, or leave COMPILEDB "
     "out for its default (compile_commands.json)"),
    ("compiledb-directory", ("COMPILEDB={in}/adir",),
     "COMPILEDB={in}/adir is a directory; name a file (the default is compile_commands.json)"),
    ("applied-series-empty", ("APPLIED_SERIES=",),
     "APPLIED_SERIES= is empty; name a path, or leave APPLIED_SERIES out for its default (vendors/applied-series.json)"),
    ("applied-series-below-a-file", ("APPLIED_SERIES={in}/afile/record.json",),
     "APPLIED_SERIES={in}/afile/record.json: {in}/afile is a file, not a directory; name a file in a directory"),
    ("src-empty", ("SRC=",),
     "SRC= is empty; name a path, or leave SRC out for its default (vendors/sources/llamafile)"),
    ("src-file", ("SRC={in}/afile",),
     "SRC={in}/afile is a file; point SRC= at a llamafile-0.10 tree (a directory)"),
    ("patch-series-empty", ("PATCH_SERIES=",),
     "PATCH_SERIES= is empty; name a path, or leave PATCH_SERIES out for its default (vendors/patches/llamafile)"),
    ("patch-series-missing", ("PATCH_SERIES={in}/no-such-series",),
     "PATCH_SERIES={in}/no-such-series: no such directory; point it at the folder of opencoti *.patch files, "
     "or leave PATCH_SERIES out for vendors/patches/llamafile"),
    ("patch-series-file", ("PATCH_SERIES={in}/afile",),
     "PATCH_SERIES={in}/afile is a file, not a directory; point it at the folder of *.patch files"),
    ("arch-sparc", ("ARCH=sparc",),
     "ARCH=sparc is not an architecture llamafile ships; use ARCH=x86_64 or ARCH=aarch64"),
    ("arch-i386", ("ARCH=i386",),
     "ARCH=i386 is not an architecture llamafile ships; use ARCH=x86_64 or ARCH=aarch64"),
    ("epoch-letters", ("SOURCE_DATE_EPOCH=abc",),
     "SOURCE_DATE_EPOCH='abc' is not a whole number of seconds since 1970 (0 to 253402300799); "
     "set it to e.g. 0 or the last commit's `git log -1 --format=%ct`"),
    ("epoch-negative", ("SOURCE_DATE_EPOCH=-1",),
     "SOURCE_DATE_EPOCH='-1' is not a whole number of seconds since 1970 (0 to 253402300799); "
     "set it to e.g. 0 or the last commit's `git log -1 --format=%ct`"),
    ("epoch-float", ("SOURCE_DATE_EPOCH=1.5e9",),
     "SOURCE_DATE_EPOCH='1.5e9' is not a whole number of seconds since 1970 (0 to 253402300799); "
     "set it to e.g. 0 or the last commit's `git log -1 --format=%ct`"),
    ("epoch-in-the-package-step-too", PACKAGE + ("SOURCE_DATE_EPOCH=abc",),
     "SOURCE_DATE_EPOCH='abc' is not a whole number of seconds since 1970 (0 to 253402300799); "
     "set it to e.g. 0 or the last commit's `git log -1 --format=%ct`"),
    ("align-not-a-power-of-two", ("ALIGN=3",),
     "ALIGN='3' is not a power of two between 1 and 2**30; use e.g. ALIGN=65536"),
    ("align-not-a-number", ("ALIGN=64k",),
     "ALIGN='64k' is not a power of two between 1 and 2**30; use e.g. ALIGN=65536"),
    ("unknown-variable", ("CUDA_ARCH=80",),
     "unknown variable CUDA_ARCH=80; `scons -h` lists the variables"),
    # --- targets ---------------------------------------------------------------------------------
    ("misspelled-target", ("pakage",),
     "unknown target 'pakage': no such target or file; the targets are {names} or a path the build writes "
     "(`scons -h` says what each target builds)"),
    ("target-path-nowhere", ("no/such/thing",),
     "unknown target 'no/such/thing': no such target or file; the targets are {names} or a path the build writes "
     "(`scons -h` says what each target builds)"),
    ("apply-and-reset", ("apply", "reset"),
     "`apply` and `reset` undo each other; give one of them"),
    ("apply-on-no-checkout", ("apply",),
     "apply: SRC={src} is not a git checkout; clone llamafile there (git clone --recurse-submodules) "
     "or point SRC at one"),
    # --- the source tree and the toolchain ----------------------------------------------------------
    ("src-nowhere", ("SRC={in}/nowhere",),
     "no llamafile source tree at {in}/nowhere (looked for llamafile/version.h); point SRC= at a llamafile checkout"),
    ("src-with-a-space", ("SRC={in}/spaced tree",),
     "SRC path {in}/spaced tree contains a space, which cosmocc refuses in any argument; "
     "move the tree or reach it through a symlink without spaces"),
    ("version-h-without-patch", ("SRC={in}/badver",),
     "{in}/badver/llamafile/version.h defines no LLAMAFILE_PATCH; expected '#define LLAMAFILE_PATCH <n>'"),
    ("tree-missing-ggml-c", ("SRC={broken}",),
     "SRC={broken} lacks llama.cpp/ggml/src/ggml.c, a ggml core source (GGML_CORE_SOURCES in "
     "site_scons/opencoti_build/tree/sources.py); restore it (`scons apply` for the vendored tree) or point SRC= at a "
     "complete llamafile tree"),
    ("tree-without-a-package", ("SRC={bare}",),
     "SRC={bare} has no sources of package 'llamafile' (expected llamafile/bestline.c); "
     "point SRC= at a llamafile-0.10 tree"),
    ("cosmocc-without-a-driver", ("COSMOCC={in}/adir",),
     "COSMOCC={in}/adir has no executable bin/cosmocc; point COSMOCC at an unpacked cosmocc release "
     "(the directory holding bin/cosmocc), leave it empty for the pinned one, or COSMOCC=stand-in"),
    # --- package: MODEL -------------------------------------------------------------------------------
    ("model-truncated", PACKAGE + ("MODEL={in}/truncated.gguf",),
     "MODEL={in}/truncated.gguf is truncated: metadata 'llama.block_count' runs past its end (100 bytes); "
     "download or convert the model again"),
    ("model-tensor-cut-short", PACKAGE + ("MODEL={in}/cut.gguf",),
     "MODEL={in}/cut.gguf is truncated: tensor 'weights' data (it ends at byte {cut_end}) runs past its end "
     "({cut} bytes); download or convert the model again"),
    ("model-name-with-a-newline", PACKAGE + ("MODEL={in}/new\nline.gguf",),
     "MODEL='{in}/new\\nline.gguf': its file name cannot be embedded (entry name 'new\\nline.gguf' is empty or "
     "holds a backslash, NUL or newline; use a plain relative name); rename or link the model to a plain file name"),
    ("model-missing", PACKAGE + ("MODEL={in}/absent.gguf",),
     "MODEL={in}/absent.gguf: no such file; point MODEL= at a .gguf file"),
    ("model-directory", PACKAGE + ("MODEL={in}/adir",),
     "MODEL={in}/adir is a directory; point MODEL= at the .gguf file inside it"),
    ("model-not-gguf", PACKAGE + ("MODEL={in}/notgguf",),
     "MODEL={in}/notgguf is not a GGUF file (no 'GGUF' magic); convert it with llama.cpp's convert_hf_to_gguf.py"),
    ("model-version-7", PACKAGE + ("MODEL={in}/v7.gguf",),
     "MODEL={in}/v7.gguf has GGUF version 7; llamafile reads versions 1 to 3"),
    ("model-big-endian", PACKAGE + ("MODEL={in}/big-endian.gguf",),
     "MODEL={in}/big-endian.gguf is a big-endian GGUF; llamafile needs a little-endian one"),
    # --- package: HOST ----------------------------------------------------------------------------------
    ("host-not-a-llamafile", PACKAGE + ("HOST={in}/true",),
     "HOST={in}/true is not a llamafile (no 'llamafile vX.Y.Z' version string in it); "
     "point HOST= at a thin llamafile binary"),
    ("host-missing", PACKAGE + ("HOST={in}/absent",),
     "HOST={in}/absent: no such file; point HOST= at a thin llamafile binary (a build's $BUILD_DIR/o/llamafile/llamafile)"),
    ("host-directory", PACKAGE + ("HOST={in}/adir",),
     "HOST={in}/adir is a directory; point HOST= at the llamafile binary inside it"),
    ("host-empty", PACKAGE + ("HOST={in}/empty",),
     "HOST={in}/empty is an empty file; point HOST= at a thin llamafile binary"),
    ("host-without-zip-store", PACKAGE + ("HOST={in}/versioned",),
     "HOST={in}/versioned: no zip store (no end-of-central-directory record at the end of the file); "
     "a llamafile carries a zip store: point HOST= at one linked by cosmocc"),
    ("host-already-packaged", PACKAGE + ("HOST={root}/" + EMBEDDER,),
     "HOST={root}/" + EMBEDDER + " is already a packaged artifact (it holds .args, tiny.gguf); point HOST= at "
     "the thin llamafile binary it was made from, or pass REPACKAGE=1 to package it as it is"),
    ("host-repackaged-with-a-second-model", PACKAGE + ("HOST={root}/" + EMBEDDER, "REPACKAGE=1", "MODEL={in}/tiny.gguf"),
     "HOST={root}/" + EMBEDDER + " already holds .args, which this artifact adds too; "
     "point HOST= at the thin llamafile binary it was made from"),
    # --- package: ARGS ---------------------------------------------------------------------------------
    ("args-empty", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/empty.args"),
     "ARGS={in}/empty.args holds no arguments; the embedder needs at least `-m /zip/tiny.gguf` "
     "(or leave ARGS out for the generated .args)"),
    ("args-only-comments", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/comments.args"),
     "ARGS={in}/comments.args holds no arguments; the embedder needs at least `-m /zip/tiny.gguf` "
     "(or leave ARGS out for the generated .args)"),
    ("args-without-the-model", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/nomodel.args"),
     "ARGS={in}/nomodel.args does not load the embedded model; add `-m /zip/tiny.gguf` to it"),
    ("args-unknown-option", PACKAGE + ("HOST={built}", "MODEL={in}/tiny.gguf", "ARGS={in}/bogus.args"),
     "ARGS={in}/bogus.args uses unknown option(s) --bogus-option: host binary {built} has no such option; "
     "fix or remove it in that file"),
    ("args-pointing-outside", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/other.args"),
     "ARGS={in}/other.args points at /zip/other.gguf, which the artifact does not hold (it holds .args, tiny.gguf)"),
    ("args-unbalanced-quote", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/quote.args"),
     "ARGS={in}/quote.args: cannot parse: No closing quotation; balance its quotes"),
    ("args-not-utf8", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/latin1.args"),
     "ARGS={in}/latin1.args is not UTF-8 text; write the .args as UTF-8 text"),
    ("args-missing", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/absent.args"),
     "ARGS={in}/absent.args: no such file; point ARGS= at a .args file, or leave ARGS out for the generated one"),
    ("args-directory", PACKAGE + ("MODEL={in}/tiny.gguf", "ARGS={in}/adir"),
     "ARGS={in}/adir is a directory; point ARGS= at a .args file"),
    ("args-without-model", PACKAGE + ("ARGS={in}/bogus.args",),
     "ARGS={in}/bogus.args needs MODEL=: the .args goes into the embedder artifact only"),
]


def test_the_table_is_big_enough() -> None:
    assert len(TABLE) >= 40 and len({row[0] for row in TABLE}) == len(TABLE)


@pytest.mark.parametrize("args, message", [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(base: dict[str, str], args: tuple[str, ...],
                                                         message: str) -> None:
    argv = [a.format(**base) for a in args]
    if not any(a.startswith("SRC=") for a in argv):
        argv.append(f"SRC={base['src']}")
    before = checksums(base)
    proc = scons(*argv, build=Path(base["root"]), check=False, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert [line for line in proc.stderr.splitlines() if line.startswith("scons:")] == [
        "scons: error: " + message.format(**base)], output
    assert "Traceback" not in output and "scons: ***" not in output
    assert checksums(base) == before


def test_a_model_name_that_cannot_be_embedded_is_refused_before_the_thin_artifact_is_written(
        base: dict[str, str]) -> None:
    dist = Path(base["root"]) / "dist-newline"  # empty: the thin artifact would be written first
    proc = scons(*PACKAGE, f"SRC={base['src']}", f"MODEL={base['in']}/new\nline.gguf", f"DIST_DIR={dist}",
                 build=Path(base["root"]), check=False, timeout=120)
    assert proc.returncode == 2 and "cannot be embedded" in proc.stderr, proc.stdout + proc.stderr
    assert not dist.exists()


def test_args_against_a_host_this_run_builds_is_checked_before_either_artifact_is_written(base: dict[str, str]) -> None:
    root = Path(base["root"])
    dist = root / "dist-args"  # empty: both artifacts would be written
    proc = scons("-j1", *PACKAGE, f"SRC={base['src']}", f"MODEL={base['in']}/tiny.gguf",  # -j1: one refusal, the first
                 f"ARGS={base['in']}/bogus.args", f"DIST_DIR={dist}", build=root, check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("scons:")] == [
        f"scons: *** [{dist}/llamafile/opencoti-llamafile-0.10.3-c1-x86_64.llamafile] ARGS={base['in']}/bogus.args "
        f"uses unknown option(s) --bogus-option: host binary {base['built']} has no such option; fix or remove it in "
        "that file"]
    assert not [p for p in dist.rglob("*") if p.is_file()]


def _no_twin_toolchain(root: Path) -> Path:
    """A COSMOCC whose driver compiles with the stand-in, then throws the .aarch64 twin away."""
    from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR

    for tool in ("cosmocc", "cosmoc++", "ar.ape"):
        script = write(root / "bin" / tool, f"""#!{sys.executable}
import os, subprocess, sys
code = subprocess.call(["/bin/sh"] * {tool == "ar.ape"} + [{str(SHIM_DIR / 'bin' / tool)!r}] + sys.argv[1:])
if code == 0 and "-c" in sys.argv:
    out = sys.argv[sys.argv.index("-o") + 1]
    os.unlink(os.path.join(os.path.dirname(out), ".aarch64", os.path.basename(out)))
sys.exit(code)
""")
        script.chmod(0o755)
    return root


def test_a_cosmocc_that_writes_no_twin_is_an_error_naming_the_object(tmp_path: Path) -> None:
    toolchain = _no_twin_toolchain(tmp_path / "cosmocc")
    proc = scons("-j1", f"SRC={MINI_TREE}", f"COSMOCC={toolchain}", "TARGET_ARCH=-Xx86_64-mtune=generic",  # -j1: one failure; gcc 12: no znver4
                 build=tmp_path / "b", check=False, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors_ = [line for line in proc.stderr.splitlines() if line.startswith("scons:")]
    assert len(errors_) == 1, proc.stderr
    obj = errors_[0].split("[", 1)[1].split("]", 1)[0]
    twin = str(Path(obj).parent / ".aarch64" / Path(obj).name)
    source = next(line for line in summary.unprefixed(proc.stdout) if line.startswith("FATCC "))
    assert errors_[0].startswith(f"scons: *** [{obj}] COSMOCC={toolchain} compiled ")
    assert errors_[0].endswith(f" but wrote no {twin} (a fat compile writes X.o and .aarch64/X.o); point COSMOCC at a "
                               "cosmocc release whose driver builds both, or COSMOCC=stand-in for the stand-in")
    assert source.split()[1] == obj and "Traceback" not in proc.stderr
    # neither half is kept, and nothing went to the cache
    assert not Path(obj).exists() and not Path(twin).exists()
    assert not [p for p in (tmp_path / "b" / "cache").rglob("*") if p.is_file() and p.name != "config"]
