"""The build's command-line variables, defined once: name, default, help, validation.

`scons -h` prints them; SConstruct refuses any KEY=VALUE not declared here.
"""
from __future__ import annotations

import os
import platform
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opencoti_build import project
from opencoti_build.cache import launchers, remote_cache, signing
from opencoti_build.config import signing_keys, upstream_pin
from opencoti_build.cosmo import prefix_maps
from opencoti_build.errors import UserError, os_error_line
from opencoti_build.formats import zipappend
from opencoti_build.gpu.toolchains import cuda
from opencoti_build.native import native_lane
from opencoti_build.tree import patch_series, upstream

PROJECT = project.ROOT
DEFAULT_SRC = upstream_pin.LLAMAFILE_PATH
MINI_TREE = "tests/fixtures/llamafile-mini"  # the miniature llamafile tree the tests build: a first try without the submodule

HELP_TARGETS = """\
opencoti llamafile build

Targets:
  (default)     the thin llamafile binary ($BUILD_DIR/o/llamafile/llamafile, with .com.dbg and .aarch64.elf);
                with LLAMACPP=DIR, llama.cpp's own llama-server from that checkout, fat, CPU only
                ($BUILD_DIR/o/checkout/llama.cpp/tools/server/llama-server; docs/checkout.md)
  host          same as the default
  compiledb     compile_commands.json (every TU: fat, CUDA, HIP, Vulkan) and the generated sources it names;
                every build that compiles also keeps it current (COMPILEDB= empty: off; docs/ide.md)
  compile       FILE=path/to/source.c: every object made from that one source, nothing else (IDE "build active file")
  apply         reset vendors/sources/llamafile, init submodules, apply llamafile's and opencoti's patches
  reset         restore the pristine vendored tree (refuses to discard foreign edits without FORCE=1)
  cuda          ggml-cuda.so  (nvcc; CUDA_PATH)
  rocm          ggml-rocm.so  (hipcc; ROCM_PATH)
  vulkan        ggml-vulkan.so (glslc; VULKAN_SDK)
  backends      every backend whose toolchain is present (fails if none built, unless CPU_ONLY=1)
  package       dist/llamafile/opencoti-llamafile-<ver>-<tag>-<arch>.llamafile (+ embedder with MODEL=), each with
                its MANIFEST.json, CycloneDX SBOM (.cdx.json) and SLSA provenance (.intoto.jsonl; SIGNING_KEY signs)
  verify        check every artifact in $DIST_DIR/llamafile against its manifest, SBOM and Statement (PUBKEY: its
                signature; no source tree needed); with package or install: package first, check what was made
  install       what `package` makes, the thin binary and the embedded DSOs, copied to $DESTDIR$PREFIX/bin
                (`scons -c install`: removes those copies only)
  native        the native-ELF lane: $BUILD_DIR/native/bin/llama-server + lib/ (host gcc; LLAMACPP)
  native-cuda   the native lane's libraries only (libggml-base.so, libggml-cuda.so)

Options: --cache-disable turns the object cache off (CACHE_DIR= does the same).
         -j N runs N steps at once; without -j, one per CPU. --debug=explain says why each step runs.

A resident build server: `python3 -m opencoti_build serve --detach [VARS]` once, then
`python3 -m opencoti_build build [TARGETS] [VARS]` for each build, or its C client that serve compiles,
`$BUILD_DIR/server/opencoti-client [TARGETS] [VARS]` (a plain scons run when none serves; docs/server.md).

Variables (KEY=VALUE on the command line; an unknown KEY is an error):
"""


def _env_default(name: str, fallback: str) -> str:
    return os.environ.get(name, fallback)


@dataclass(frozen=True)
class Variable:
    """One KEY=VALUE of the command line: a bool ``default`` makes a yes/no variable, ``allowed`` a choice."""

    name: str
    help: str
    default: str | bool
    allowed: tuple[str, ...] = ()


# Every variable of the build, in `scons -h` order (SConstruct declares them to SCons).
VARIABLES: tuple[Variable, ...] = (
    Variable("SRC", "llamafile source tree (llamafile-0.10 layout)", DEFAULT_SRC),
    Variable("VERBOSE", "print whole command lines instead of one short line per step", False),
    Variable("COSMOCC", f"cosmocc toolchain dir (bin/cosmocc, bin/cosmoc++, bin/ar.ape); `stand-in`: the gcc-based stand-in; "
        f"empty: the pinned cosmocc {upstream_pin.COSMOCC_VERSION} in .cosmocc/{upstream_pin.COSMOCC_VERSION}, "
        "downloaded (sha256-checked) when absent",
        _env_default("OPENCOTI_COSMOCC", "")),
    Variable("MODE", "cosmocc MODE (selects its runtime libraries; objects go to $BUILD_DIR/o/$MODE)", ""),
    Variable("TARGET_ARCH", "per-arch tuning flags for every fat compile; empty: the toolchain's default", ""),
    Variable("BUILD_DIR", "objects and intermediates", "build"),
    Variable("DIST_DIR", "packaged artifacts go to $DIST_DIR/llamafile", "dist"),
    Variable("BACKEND_DIST_DIR", "backend DSOs go to $BACKEND_DIST_DIR/llamafile/<backend>/<ver>", "vendors/dist"),
    Variable("MIRROR", "also copy each built DSO to $HOME/.llamafile/v/<ver>/, where the llamafile runtime loads "
             "DSOs from (to run a thin binary against them); off, checkouts sharing a HOME never overwrite each "
             "other's copies", False),
    Variable("CACHE_DIR", "object cache (SCons CacheDir); empty: no cache", ".opencoti/cache"),
    Variable("CACHE_URL", f"shared cache tier behind CACHE_DIR: Redis, {remote_cache.URL_FORMS} (a token only "
        "from $OPENCOTI_CACHE_TOKEN or the file $OPENCOTI_CACHE_TOKEN_FILE names); default $OPENCOTI_CACHE_URL; "
        "empty: none (docs/scale.md)", _env_default("OPENCOTI_CACHE_URL", "")),
    Variable("CACHE_SIGNING_KEY", "PEM private key (ed25519 or ECDSA P-256) signing every cache entry this build "
             "writes, over its key and bytes; a shared tier (CACHE_URL, a CACHE_DIR others can write) is pushed to "
             "only signed; default $OPENCOTI_CACHE_SIGNING_KEY; empty: entries unsigned (docs/scale.md)",
             _env_default("OPENCOTI_CACHE_SIGNING_KEY", "")),
    Variable("CACHE_TRUSTED_KEYS", "PEM file of one or more public keys: an entry of a shared tier is used only when "
             "one of them signed it; default $OPENCOTI_CACHE_TRUSTED_KEYS; empty: a shared tier is not read "
             "(docs/scale.md)", _env_default("OPENCOTI_CACHE_TRUSTED_KEYS", "")),
    # A plain variable, not a choice: an unknown launcher gets the build's own one-line error (launchers.find).
    Variable("CCWRAPPER", f"compiler launcher ({'|'.join(launchers.LAUNCHERS)}) run in front of every compiler, each "
        "half of a fat compile included, as CMake's *_COMPILER_LAUNCHER (docs/scale.md); empty: none", ""),
    Variable("TRACE", "write this run's steps as a Chrome trace-event JSON to this file (Perfetto, chrome://tracing: "
             "one event per step, a track per worker); empty: none", ""),
    Variable("COMPILEDB", "compile_commands.json for clangd: written by `scons compiledb`, kept current by every build "
        "that compiles; empty: none", "compile_commands.json"),
    Variable("COMPILEDB_ARCH", "which half of the fat compiles the database shows clangd", "x86_64",
             allowed=("x86_64", "aarch64")),
    Variable("SOURCE_DATE_EPOCH", "timestamp baked into outputs and zip entries",
        _env_default("SOURCE_DATE_EPOCH", "0")),
    Variable("CUDA_PATH", f"CUDA toolkit; empty: $OPENCOTI_CUDA_PATH, {cuda.DEFAULT_CUDA_PATH}, other usual places, "
             "nvcc on PATH",
        _env_default("OPENCOTI_CUDA_PATH", "")),
    Variable("CUDA_ARCHS", "comma-separated CUDA archs overriding the toolkit's table (e.g. 80,90,120f)", ""),
    Variable("CUBLAS", "build ggml-cuda against cuBLAS instead of TinyBLAS", False),
    Variable("FA_ALL_QUANTS", "compile every fattn-vec K/V instance (GGML_CUDA_FA_ALL_QUANTS / GGML_CUDA_FA_QUANTS=all; "
        "opencoti's turbo/TCQ KV tiers need it)", True),
    Variable("ROCM_PATH", "ROCm install; empty: $OPENCOTI_ROCM_PATH, /opt/rocm, hipcc on PATH",
        _env_default("OPENCOTI_ROCM_PATH", "")),
    Variable("OFFLOAD_ARCH", "comma-separated gfx targets overriding the upstream list", ""),
    Variable("VULKAN_SDK", "Vulkan SDK; empty: $OPENCOTI_VULKAN_SDK, glslc on PATH", _env_default("OPENCOTI_VULKAN_SDK", "")),
    Variable("CPU_ONLY", "package without GPU DSOs / let `backends` build none", False),
    Variable("MODEL", "GGUF to embed in the embedder artifact", ""),
    Variable("SIGNING_KEY", "PEM private key (ed25519 or ECDSA P-256) signing each artifact's provenance Statement as "
             "a DSSE envelope (<artifact>.intoto.jsonl); empty: the Statement unsigned", ""),
    Variable("PUBKEY", "PEM public key (SIGNING_KEY's public half) `scons verify` checks each provenance Statement's "
             "signature with; empty: signatures are not checked (verify says so)", ""),
    Variable("PREFIX", "`scons install` copies the binaries, artifacts and DSOs to $PREFIX/bin", "/usr/local"),
    Variable("DESTDIR", "staging root put before PREFIX by `scons install` (packagers' DESTDIR)",
             _env_default("DESTDIR", "")),
    Variable("ARGS", ".args file to embed instead of the generated one", ""),
    Variable("ARCH", "architecture in artifact names (x86_64, aarch64); empty: this machine's", ""),
    Variable("HOST", "package this prebuilt thin binary instead of building one", ""),
    Variable("ALIGN", "zip data alignment of stored entries", "65536"),
    Variable("FORCE", "let apply/reset discard changes a previous apply did not make", False),
    Variable("REPACKAGE", "let HOST= name an already-packaged artifact (one holding .args or a model)", False),
    Variable("PATCH_SERIES", "the opencoti patch series applied after llamafile's own", patch_series.OPENCOTI_PATCHES),
    Variable("APPLIED_SERIES", "record of the last apply (patches, commits), read by the manifest",
        patch_series.DEFAULT_RECORD),
    Variable("LLAMACPP", f"an upstream llama.cpp checkout ({', '.join(f'ggml {s}.x' for s in upstream.KNOWN_GGML_SERIES)}): "
             "the host lane and `package` build its llama-server instead of llamafile; the native lane's tree "
             "(empty: $SRC/llama.cpp)", ""),
    Variable("NATIVE_LINKER", "linker of the native lane's links: auto (gold when ld.gold is on PATH, else the "
        "compiler's default), bfd, gold", "auto", allowed=native_lane.LINKERS),
    Variable("FILE", "the source `scons compile` builds the objects of (relative to the project or to SRC)", ""),
)


class SourceTreeError(UserError):
    """SRC names no usable llamafile tree."""


def source_tree(env: Mapping[str, Any]) -> str:
    """Absolute path of SRC (relative paths are from the project root), whether or not it exists."""
    src = Path(env["SRC"])
    return str(src if src.is_absolute() else PROJECT / src)


def checked_source_tree(env: Mapping[str, Any]) -> str:
    """:func:`source_tree`, checked to hold a llamafile tree that cosmocc can be given."""
    src = Path(source_tree(env))
    if not (src / "llamafile" / "version.h").is_file():
        hint = (f"it is a git submodule (llamafile {upstream_pin.LLAMAFILE_VERSION} at {upstream_pin.LLAMAFILE_COMMIT[:7]}): "
                f"run `git submodule update --init --recursive {DEFAULT_SRC}` or clone with --recursive "
                f"(or try the build first on the miniature tree: SRC={MINI_TREE})"
                if env["SRC"] == DEFAULT_SRC else "point SRC= at a llamafile checkout")
        raise SourceTreeError(f"no llamafile source tree at {src} (looked for llamafile/version.h); {hint}")
    if " " in str(src):
        raise SourceTreeError(f"SRC path {src} contains a space, which cosmocc refuses in any argument; "
                              "move the tree or reach it through a symlink without spaces")
    if "$" in str(src):
        raise SourceTreeError(f"SRC path {src} contains '$', which SCons would expand; rename the directory")
    return str(src)


def command_environment(os_environ: Mapping[str, str], env: Mapping[str, Any], create: bool = True) -> dict[str, str]:
    """The environment every build command runs with: deliberate, reproducible, no leakage.

    Creates ``$BUILD_DIR/tmp`` unless ``create`` is false (a dry run writes nothing): call :func:`validate` first,
    so that a bad variable writes nothing.
    """
    tmpdir = Path(env["BUILD_DIR"]) / "tmp"
    try:
        if create:
            tmpdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(os_error_line(exc, f"BUILD_DIR={env['BUILD_DIR']}: cannot create {tmpdir}")) from None
    return {
        "PATH": os_environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os_environ.get("HOME", "/"),
        "TMPDIR": str(tmpdir),
        "SOURCE_DATE_EPOCH": str(env["SOURCE_DATE_EPOCH"]),
        "LC_ALL": "C",
        "HIP_PLATFORM": "amd",
        **({"MODE": env["MODE"]} if env["MODE"] else {}),  # cosmocc picks its runtime libraries by MODE
        # Only the diagnostics' colours read these (docs/ide.md); no output depends on them.
        **{k: os_environ[k] for k in ("TERM", "NO_COLOR", "CLICOLOR_FORCE") if k in os_environ},
        **launcher_environment(os_environ, env),
    }


def launcher_argv(env: Mapping[str, Any], os_environ: Mapping[str, str]) -> list[str]:
    """CCWRAPPER's command (its absolute path), or [] without one; UserError when it is unknown or missing."""
    name = str(env.get("CCWRAPPER") or "")
    return [launchers.find(name, os_environ.get("PATH", "/usr/bin:/bin"))] if name else []


def launcher_environment(os_environ: Mapping[str, str], env: Mapping[str, Any]) -> dict[str, str]:
    """CCWRAPPER's variables for every command (opencoti_build.cache.launchers), the stand-in driver's hand-off included."""
    argv = launcher_argv(env, os_environ)
    if not argv:
        return {}
    roots = [str(PROJECT), source_tree(env), str(env["BUILD_DIR"])]
    return {**launchers.environment(str(env["CCWRAPPER"]), os_environ, roots), launchers.FAT_LAUNCHER_ENV: argv[0]}


# --- validation: every variable checked before anything is created (SConstruct calls validate first) --

ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
EPOCH_MAX = 253402300799  # 9999-12-31T23:59:59Z, the latest SOURCE_DATE_EPOCH gcc accepts
ALIGN_MAX = 1 << 30
# Directories the build writes into: (variable, may be empty). An empty CACHE_DIR turns the cache off.
OUTPUT_DIRS = (("BUILD_DIR", False), ("DIST_DIR", False), ("BACKEND_DIST_DIR", False), ("CACHE_DIR", True))
# Variables that say where outputs go or how a run reports, never what an artifact holds: left out of the
# provenance Statement's external parameters, so that a build laid out elsewhere attests the same.
NOT_SHAPING = frozenset(("BUILD_DIR", "DIST_DIR", "BACKEND_DIST_DIR", "CACHE_DIR", "CACHE_URL", "CACHE_SIGNING_KEY",
                         "CACHE_TRUSTED_KEYS", "COMPILEDB", "COMPILEDB_ARCH", "TRACE", "VERBOSE", "CCWRAPPER",
                         "MIRROR", "PREFIX", "DESTDIR", "SIGNING_KEY", "PUBKEY", "APPLIED_SERIES", "FILE"))
# Variables naming a file or directory the build reads: where it lies is the layout's; what it holds is in the
# provenance Statement's resolved dependencies (the source's commit, the host's, the model's and the DSOs' digests).
INPUT_PATHS = frozenset(("SRC", "LLAMACPP", "HOST", "MODEL", "ARGS", "PATCH_SERIES", "COSMOCC", "CUDA_PATH",
                         "ROCM_PATH", "VULKAN_SDK"))


def shaping_parameters(arguments: Mapping[str, str]) -> dict[str, str]:
    """The command line's variables the provenance Statement records as external parameters: those that shape an
    artifact and are no path (NOT_SHAPING, INPUT_PATHS), so a build laid out elsewhere attests the same bytes."""
    return {name: value for name, value in sorted(arguments.items())
            if name not in NOT_SHAPING and name not in INPUT_PATHS}


# Files the build writes: an empty value (but TRACE's: no trace) or a directory there is refused.
OUTPUT_FILES = ("APPLIED_SERIES", "COMPILEDB", "TRACE")
DEFAULTS = {"PREFIX": "/usr/local", "BUILD_DIR": "build", "DIST_DIR": "dist", "BACKEND_DIST_DIR": "vendors/dist", "CACHE_DIR": ".opencoti/cache",
            "COMPILEDB": "compile_commands.json", "SRC": DEFAULT_SRC, "PATCH_SERIES": patch_series.OPENCOTI_PATCHES,
            "APPLIED_SERIES": patch_series.DEFAULT_RECORD}


def _resolved(value: str, project: Path | str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else Path(project) / path


def _file_in_the_way(path: Path) -> Path | None:
    """``path`` or the nearest of its parents that exists, when that is not a directory."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return None if candidate.is_dir() else candidate
    return None


def _empty(name: str) -> UserError:
    return UserError(f"{name}= is empty; name a path, or leave {name} out for its default ({DEFAULTS[name]})")


def _not_a_directory(name: str, value: str, path: Path, blocker: Path) -> UserError:
    if blocker == path:
        return UserError(f"{name}={value} is a file, not a directory; point {name}= at a directory")
    return UserError(f"{name}={value}: {blocker} is a file, not a directory; point {name}= at a directory")


def source_date_epoch(value: object) -> int:
    """SOURCE_DATE_EPOCH as an int: decimal seconds since 1970 (the reproducible-builds definition)."""
    text = str(value).strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) > EPOCH_MAX:
        raise UserError(f"SOURCE_DATE_EPOCH={value!r} is not a whole number of seconds since 1970 (0 to {EPOCH_MAX}); "
                        "set it to e.g. 0 or the last commit's `git log -1 --format=%ct`")
    return int(text)


def install_bin(env: Mapping[str, Any], project: Path | str = PROJECT) -> Path:
    """Where `scons install` copies to: ``$DESTDIR$PREFIX/bin`` (a relative PREFIX without DESTDIR is from the
    project, as every path variable is); UserError for an empty PREFIX, a relative one under DESTDIR, or a file in
    the way."""
    prefix, destdir = str(env["PREFIX"]).strip(), str(env["DESTDIR"]).strip()
    if not prefix:
        raise _empty("PREFIX")
    if destdir and not os.path.isabs(prefix):
        raise UserError(f"PREFIX={prefix} is relative, but DESTDIR={destdir} stages an installation of an absolute "
                        "PREFIX; give PREFIX as an absolute path (e.g. /usr/local)")
    root = _resolved(destdir, project) / prefix.lstrip("/") if destdir else _resolved(prefix, project)
    bindir = root / "bin"
    blocker = _file_in_the_way(bindir)
    if blocker is not None:
        raise UserError(f"cannot install into {bindir}: {blocker} is a file, not a directory; choose another PREFIX")
    return bindir


def align(value: object) -> int:
    """ALIGN as an int: a power of two from 1 to 2**30 (decimal or 0x…)."""
    try:
        number = int(str(value).strip(), 0)
    except ValueError:
        number = -1
    if number < 1 or number & (number - 1) or number > ALIGN_MAX:
        raise UserError(f"ALIGN={value!r} is not a power of two between 1 and 2**30; use e.g. ALIGN=65536")
    return number


def arch(value: str, machine: str | None = None) -> str:
    """ARCH as x86_64 or aarch64 (aliases amd64, x64, arm64 accepted); empty: this machine's."""
    name = (value or machine or platform.machine()).strip()
    found = ARCHES.get(name.lower())
    if found is None:
        if value:
            raise UserError(f"ARCH={value} is not an architecture llamafile ships; use ARCH=x86_64 or ARCH=aarch64")
        raise UserError(f"this machine is {name}, which llamafile does not ship for; pass ARCH=x86_64 or ARCH=aarch64")
    return found


def compile_file(env: Mapping[str, Any], project: Path | str = PROJECT) -> str:
    """FILE= of `scons compile`, absolute: an existing file, relative to the project or else to SRC."""
    value = str(env.get("FILE", "")).strip()
    if not value:
        raise UserError("`scons compile` needs FILE=path/to/source.c (relative to the project or to SRC)")
    candidates = [_resolved(value, project), _resolved(value, _resolved(str(env["SRC"]), project))]
    for path in candidates:
        if path.is_file():
            return os.path.realpath(path)
    raise UserError(f"FILE={value}: no such file in the project or in SRC={env['SRC']}")


def validate(env: Mapping[str, Any], project: Path | str = PROJECT, targets: Iterable[object] = ()) -> None:
    """Refuse a bad variable (UserError, one line naming it and the fix) before anything is created.

    Relative paths are from ``project``. Checked: the output directories (not empty, not a file or
    below one; BUILD_DIR not the checkout's root), the output files (not empty, not a directory),
    SRC and PATCH_SERIES (not empty; PATCH_SERIES an existing directory), SRC, BUILD_DIR and LLAMACPP not where
    gcc's debug info would rename their files twice (prefix_maps.renamed_twice), LLAMACPP (a llama.cpp checkout of a known
    ggml: opencoti_build.tree.upstream.checkout_dir), ARCH, SOURCE_DATE_EPOCH, ALIGN, CACHE_URL (a Redis or REAPI URL, and
    a REAPI cache's credentials from the environment), and for the ``install`` target PREFIX and DESTDIR (:func:`install_bin`); SIGNING_KEY and CACHE_SIGNING_KEY (a key that
    signs), PUBKEY and CACHE_TRUSTED_KEYS (public keys that verify).
    COMPILEDB may be empty (no database), except for the ``compiledb`` target among ``targets``.
    """
    for name, may_be_empty in OUTPUT_DIRS:
        value = str(env[name])
        if not value.strip():
            if may_be_empty:
                continue
            raise _empty(name)
        if name == "BUILD_DIR" and any(c.isspace() for c in value):
            # the build's TMPDIR is under BUILD_DIR, and cosmocc (its stand-in too) refuses a TMPDIR with a space
            raise UserError(f"BUILD_DIR={value!r} contains whitespace, and cosmocc refuses a TMPDIR with a space "
                            "(the build keeps its TMPDIR under BUILD_DIR); choose a BUILD_DIR path without spaces")
        path = _resolved(value, project)
        blocker = _file_in_the_way(path)
        if blocker is not None:
            raise _not_a_directory(name, value, path, blocker)
    if os.path.normpath(_resolved(str(env["BUILD_DIR"]), project)) == os.path.normpath(project):
        raise UserError(f"BUILD_DIR={env['BUILD_DIR']} is the checkout's root; name a directory of its own "
                        f"(the default is {DEFAULTS['BUILD_DIR']})")
    for name in OUTPUT_FILES:
        value = str(env[name])
        if not value.strip() and name == "TRACE":
            continue  # no trace
        if not value.strip() and name == "COMPILEDB":
            if "compiledb" in map(str, targets):
                raise UserError("`scons compiledb` with COMPILEDB= empty (which turns the database off); "
                                "name the file, or leave COMPILEDB out for its default (compile_commands.json)")
            continue
        if not value.strip():
            raise _empty(name)
        path = _resolved(value, project)
        if path.is_dir():
            default = f" (the default is {DEFAULTS[name]})" if name in DEFAULTS else ""
            raise UserError(f"{name}={value} is a directory; name a file{default}")
        blocker = _file_in_the_way(path.parent)
        if blocker is not None:
            raise UserError(f"{name}={value}: {blocker} is a file, not a directory; name a file in a directory")
    src = str(env["SRC"])
    if not src.strip():
        raise _empty("SRC")
    if _resolved(src, project).is_file():
        raise UserError(f"SRC={src} is a file; point SRC= at a llamafile-0.10 tree (a directory)")
    twice = prefix_maps.renamed_twice(str(project), src, str(env["BUILD_DIR"]), str(env["LLAMACPP"]) or None)
    if twice is not None:
        raise UserError(f"{twice}: inside the checkout under the name its files are given in debug info, gcc would "
                        "rename some of them twice (opencoti_build.cosmo.prefix_maps); choose another path")
    series = str(env["PATCH_SERIES"])
    if not series.strip():
        raise _empty("PATCH_SERIES")
    path = _resolved(series, project)
    if not path.exists():
        raise UserError(f"PATCH_SERIES={series}: no such directory; point it at the folder of opencoti *.patch files, "
                        f"or leave PATCH_SERIES out for {DEFAULTS['PATCH_SERIES']}")
    if not path.is_dir():
        raise UserError(f"PATCH_SERIES={series} is a file, not a directory; point it at the folder of *.patch files")
    if "compile" in map(str, targets):
        compile_file(env, project)
    if "install" in map(str, targets):
        install_bin(env, project)
    if env.get("SIGNING_KEY"):  # a key that cannot sign is refused before the artifacts are written
        signing_keys.load_private_key(_resolved(str(env["SIGNING_KEY"]), project))
    if env.get("PUBKEY"):  # and one that cannot verify before anything is read
        signing_keys.load_public_key(_resolved(str(env["PUBKEY"]), project), "PUBKEY=")
    launcher_argv(env, os.environ)
    if env["LLAMACPP"]:  # a checkout of a ggml the description does not know, refused before a byte is written
        upstream.checkout_dir(str(env["LLAMACPP"]), str(_resolved(src, project)), str(project))
    if env.get("MODEL"):  # its file name is a zip entry's: refused before the thin artifact is written
        try:
            zipappend.check_name(Path(str(env["MODEL"])).name)
        except zipappend.ZipAppendError as exc:
            raise UserError(f"MODEL={env['MODEL']!r}: its file name cannot be embedded ({exc}); rename or link the "
                            "model to a plain file name") from None
    if env["ARCH"]:
        arch(str(env["ARCH"]))
    source_date_epoch(env["SOURCE_DATE_EPOCH"])
    align(env["ALIGN"])
    if env.get("CACHE_URL"):
        remote_cache.check_url(str(env["CACHE_URL"]))
    cache_keys(env, project)


def public_key(env: Mapping[str, Any], project: Path | str = PROJECT) -> tuple[str, str]:
    """PUBKEY as given and as an absolute path (relative to the project, like every path variable); ("", "") when
    empty: verify then says that signatures were not checked."""
    value = str(env.get("PUBKEY") or "").strip()
    return (value, str(_resolved(value, project))) if value else ("", "")


def cache_keys(env: Mapping[str, Any], project: Path | str = PROJECT, check: bool = True) -> tuple[str, str]:
    """CACHE_SIGNING_KEY and CACHE_TRUSTED_KEYS as absolute paths ("" where empty), with ``check`` each checked to
    hold a key that signs, or public keys that verify (UserError naming the file and the fix)."""
    found = []
    for name, load in (("CACHE_SIGNING_KEY", signing.load_signer), ("CACHE_TRUSTED_KEYS", signing.load_trusted)):
        value = str(env.get(name) or "").strip()
        path = str(_resolved(value, project)) if value else ""
        if path and check:
            load(path, name)
        found.append(path)
    return found[0], found[1]
