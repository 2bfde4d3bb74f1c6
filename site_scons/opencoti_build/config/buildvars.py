"""The build's command-line variables, defined once: name, default, help, validation.

`scons -h` prints them; SConstruct refuses any KEY=VALUE not declared here.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opencoti_build import project
from opencoti_build.cache import launchers, remote_cache, signing
from opencoti_build.config import signing_keys, upstream_pin
from opencoti_build.config.values import (
    DEFAULTS,
    align,
    arch,
    compile_file,
    empty,
    file_in_the_way,
    install_bin,
    not_a_directory,
    resolved,
    source_date_epoch,
)
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
class Given:
    """What a variable's checker sees: every variable's value, the project relative paths are from, the targets."""

    env: Mapping[str, Any]
    project: Path | str
    targets: frozenset[str]

    def path(self, name: str) -> Path:
        return resolved(str(self.env[name]), self.project)


Checker = Callable[[Given, str], None]  # refuses the named variable's bad value: UserError naming it and the fix


@dataclass(frozen=True)
class Variable:
    """One KEY=VALUE of the command line: a bool ``default`` makes a yes/no variable, ``allowed`` a choice, ``check``
    refuses a bad value before anything is created (:func:`validate`)."""

    name: str
    help: str
    default: str | bool
    allowed: tuple[str, ...] = ()
    check: Checker | None = None


# --- each variable's checker, named in its entry of VARIABLES ---------------------------------------------------

def _output_dir(given: Given, name: str) -> None:
    """A directory the build writes into: not empty (CACHE_DIR: empty turns the cache off), not a file or below one."""
    value = str(given.env[name])
    if not value.strip():
        if name == "CACHE_DIR":
            return
        raise empty(name)
    if name == "BUILD_DIR" and any(c.isspace() for c in value):
        # the build's TMPDIR is under BUILD_DIR, and cosmocc (its stand-in too) refuses a TMPDIR with a space
        raise UserError(f"BUILD_DIR={value!r} contains whitespace, and cosmocc refuses a TMPDIR with a space "
                        "(the build keeps its TMPDIR under BUILD_DIR); choose a BUILD_DIR path without spaces")
    blocker = file_in_the_way(given.path(name))
    if blocker is not None:
        raise not_a_directory(name, value, given.path(name), blocker)
    if name == "BUILD_DIR" and os.path.normpath(given.path(name)) == os.path.normpath(given.project):
        raise UserError(f"BUILD_DIR={value} is the checkout's root; name a directory of its own "
                        f"(the default is {DEFAULTS['BUILD_DIR']})")


def _output_file(given: Given, name: str) -> None:
    """A file the build writes: not empty (TRACE: no trace; COMPILEDB: no database, but for `scons compiledb`), not a
    directory, not below a file."""
    value = str(given.env[name])
    if not value.strip() and name == "TRACE":
        return
    if not value.strip() and name == "COMPILEDB":
        if "compiledb" in given.targets:
            raise UserError("`scons compiledb` with COMPILEDB= empty (which turns the database off); "
                            "name the file, or leave COMPILEDB out for its default (compile_commands.json)")
        return
    if not value.strip():
        raise empty(name)
    path = given.path(name)
    if path.is_dir():
        default = f" (the default is {DEFAULTS[name]})" if name in DEFAULTS else ""
        raise UserError(f"{name}={value} is a directory; name a file{default}")
    blocker = file_in_the_way(path.parent)
    if blocker is not None:
        raise UserError(f"{name}={value}: {blocker} is a file, not a directory; name a file in a directory")


def _source_dir(given: Given, name: str) -> None:
    src = str(given.env[name])
    if not src.strip():
        raise empty(name)
    if given.path(name).is_file():
        raise UserError(f"SRC={src} is a file; point SRC= at a llamafile-0.10 tree (a directory)")


def _patch_series(given: Given, name: str) -> None:
    series = str(given.env[name])
    if not series.strip():
        raise empty(name)
    path = given.path(name)
    if not path.exists():
        raise UserError(f"PATCH_SERIES={series}: no such directory; point it at the folder of opencoti *.patch files, "
                        f"or leave PATCH_SERIES out for {DEFAULTS['PATCH_SERIES']}")
    if not path.is_dir():
        raise UserError(f"PATCH_SERIES={series} is a file, not a directory; point it at the folder of *.patch files")


def _when_asked(target: str, check: Callable[[Mapping[str, Any], Path | str], object]) -> Checker:
    """A checker running ``check(env, project)`` when ``target`` is asked for (compile's FILE=, install's PREFIX and
    DESTDIR)."""
    def checker(given: Given, name: str) -> None:
        if target in given.targets:
            check(given.env, given.project)
    return checker


def _key_file(load: Callable[[Path], object]) -> Checker:
    """A key file, refused before anything is written or read when it holds no key ``load`` takes (SIGNING_KEY:
    one that signs; PUBKEY: one that verifies)."""
    def checker(given: Given, name: str) -> None:
        if given.env.get(name):
            load(given.path(name))
    return checker


def _public_key(path: Path) -> object:
    return signing_keys.load_public_key(path, "PUBKEY=")


def _epoch(given: Given, name: str) -> None:
    source_date_epoch(given.env[name])


def _alignment(given: Given, name: str) -> None:
    align(given.env[name])


def _cache_key_file(given: Given, name: str) -> None:
    """CACHE_SIGNING_KEY (a key that signs), CACHE_TRUSTED_KEYS (public keys that verify): :func:`cache_keys`."""
    value = str(given.env.get(name) or "").strip()
    if value:
        CACHE_KEY_LOADERS[name](str(resolved(value, given.project)), name)


def _launcher(given: Given, name: str) -> None:
    launcher_argv(given.env, os.environ)


def _llamacpp(given: Given, name: str) -> None:
    """A checkout of a ggml the description does not know, refused before a byte is written."""
    if given.env[name]:
        upstream.checkout_dir(str(given.env[name]), str(given.path("SRC")), str(given.project))


def _model(given: Given, name: str) -> None:
    """Its file name is a zip entry's: refused before the thin artifact is written."""
    if given.env.get(name):
        try:
            zipappend.check_name(Path(str(given.env[name])).name)
        except zipappend.ZipAppendError as exc:
            raise UserError(f"MODEL={given.env[name]!r}: its file name cannot be embedded ({exc}); rename or link the "
                            "model to a plain file name") from None


def _arch(given: Given, name: str) -> None:
    if given.env[name]:
        arch(str(given.env[name]))


def _cache_url(given: Given, name: str) -> None:
    if given.env.get(name):
        remote_cache.check_url(str(given.env[name]))


# Every variable of the build, in `scons -h` order (SConstruct declares them to SCons), each with its checker
# (validate runs them in this order).
VARIABLES: tuple[Variable, ...] = (
    Variable("SRC", "llamafile source tree (llamafile-0.10 layout)", DEFAULT_SRC, check=_source_dir),
    Variable("VERBOSE", "print whole command lines instead of one short line per step", False),
    Variable("COSMOCC", f"cosmocc toolchain dir (bin/cosmocc, bin/cosmoc++, bin/ar.ape); `stand-in`: the gcc-based stand-in; "
        f"empty: the pinned cosmocc {upstream_pin.COSMOCC_VERSION} in .cosmocc/{upstream_pin.COSMOCC_VERSION}, "
        "downloaded (sha256-checked) when absent",
        _env_default("OPENCOTI_COSMOCC", "")),
    Variable("MODE", "cosmocc MODE (selects its runtime libraries; objects go to $BUILD_DIR/o/$MODE)", ""),
    Variable("TARGET_ARCH", "per-arch tuning flags for every fat compile; empty: the toolchain's default", ""),
    Variable("BUILD_DIR", "objects and intermediates", "build", check=_output_dir),
    Variable("DIST_DIR", "packaged artifacts go to $DIST_DIR/llamafile", "dist", check=_output_dir),
    Variable("BACKEND_DIST_DIR", "backend DSOs go to $BACKEND_DIST_DIR/llamafile/<backend>/<ver>", "vendors/dist",
             check=_output_dir),
    Variable("MIRROR", "also copy each built DSO to $HOME/.llamafile/v/<ver>/, where the llamafile runtime loads "
             "DSOs from (to run a thin binary against them); off, checkouts sharing a HOME never overwrite each "
             "other's copies", False),
    Variable("CACHE_DIR", "object cache (SCons CacheDir); empty: no cache", ".opencoti/cache", check=_output_dir),
    Variable("CACHE_URL", f"shared cache tier behind CACHE_DIR: Redis, {remote_cache.URL_FORMS} (a token only "
        "from $OPENCOTI_CACHE_TOKEN or the file $OPENCOTI_CACHE_TOKEN_FILE names); default $OPENCOTI_CACHE_URL; "
        "empty: none (docs/scale.md)", _env_default("OPENCOTI_CACHE_URL", ""), check=_cache_url),
    Variable("CACHE_SIGNING_KEY", "PEM private key (ed25519 or ECDSA P-256) signing every cache entry this build "
             "writes, over its key and bytes; a shared tier (CACHE_URL, a CACHE_DIR others can write) is pushed to "
             "only signed; default $OPENCOTI_CACHE_SIGNING_KEY; empty: entries unsigned (docs/scale.md)",
             _env_default("OPENCOTI_CACHE_SIGNING_KEY", ""), check=_cache_key_file),
    Variable("CACHE_TRUSTED_KEYS", "PEM file of one or more public keys: an entry of a shared tier is used only when "
             "one of them signed it; default $OPENCOTI_CACHE_TRUSTED_KEYS; empty: a shared tier is not read "
             "(docs/scale.md)", _env_default("OPENCOTI_CACHE_TRUSTED_KEYS", ""), check=_cache_key_file),
    # A plain variable, not a choice: an unknown launcher gets the build's own one-line error (launchers.find).
    Variable("CCWRAPPER", f"compiler launcher ({'|'.join(launchers.LAUNCHERS)}) run in front of every compiler, each "
        "half of a fat compile included, as CMake's *_COMPILER_LAUNCHER (docs/scale.md); empty: none", "",
             check=_launcher),
    Variable("TRACE", "write this run's steps as a Chrome trace-event JSON to this file (Perfetto, chrome://tracing: "
             "one event per step, a track per worker); empty: none", "", check=_output_file),
    Variable("COMPILEDB", "compile_commands.json for clangd: written by `scons compiledb`, kept current by every build "
        "that compiles; empty: none", "compile_commands.json", check=_output_file),
    Variable("COMPILEDB_ARCH", "which half of the fat compiles the database shows clangd", "x86_64",
             allowed=("x86_64", "aarch64")),
    Variable("SOURCE_DATE_EPOCH", "timestamp baked into outputs and zip entries",
        _env_default("SOURCE_DATE_EPOCH", "0"), check=_epoch),
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
    Variable("MODEL", "GGUF to embed in the embedder artifact", "", check=_model),
    Variable("SIGNING_KEY", "PEM private key (ed25519 or ECDSA P-256) signing each artifact's provenance Statement as "
             "a DSSE envelope (<artifact>.intoto.jsonl); empty: the Statement unsigned", "",
             check=_key_file(signing_keys.load_private_key)),
    Variable("PUBKEY", "PEM public key (SIGNING_KEY's public half) `scons verify` checks each provenance Statement's "
             "signature with; empty: signatures are not checked (verify says so)", "", check=_key_file(_public_key)),
    Variable("PREFIX", "`scons install` copies the binaries, artifacts and DSOs to $PREFIX/bin", "/usr/local",
             check=_when_asked("install", install_bin)),
    Variable("DESTDIR", "staging root put before PREFIX by `scons install` (packagers' DESTDIR)",
             _env_default("DESTDIR", "")),
    Variable("ARGS", ".args file to embed instead of the generated one", ""),
    Variable("ARCH", "architecture in artifact names (x86_64, aarch64); empty: this machine's", "", check=_arch),
    Variable("HOST", "package this prebuilt thin binary instead of building one", ""),
    Variable("ALIGN", "zip data alignment of stored entries", "65536", check=_alignment),
    Variable("FORCE", "let apply/reset discard changes a previous apply did not make", False),
    Variable("REPACKAGE", "let HOST= name an already-packaged artifact (one holding .args or a model)", False),
    Variable("PATCH_SERIES", "the opencoti patch series applied after llamafile's own", patch_series.OPENCOTI_PATCHES,
             check=_patch_series),
    Variable("APPLIED_SERIES", "record of the last apply (patches, commits), read by the manifest",
        patch_series.DEFAULT_RECORD, check=_output_file),
    Variable("LLAMACPP", f"an upstream llama.cpp checkout ({', '.join(f'ggml {s}.x' for s in upstream.KNOWN_GGML_SERIES)}): "
             "the host lane and `package` build its llama-server instead of llamafile; the native lane's tree "
             "(empty: $SRC/llama.cpp)", "", check=_llamacpp),
    Variable("NATIVE_LINKER", "linker of the native lane's links: auto (gold when ld.gold is on PATH, else the "
        "compiler's default), bfd, gold", "auto", allowed=native_lane.LINKERS),
    Variable("FILE", "the source `scons compile` builds the objects of (relative to the project or to SRC)", "",
             check=_when_asked("compile", compile_file)),
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

# Directories and files the build writes into (an empty CACHE_DIR, COMPILEDB or TRACE: none).
OUTPUT_DIRS = tuple(v.name for v in VARIABLES if v.check is _output_dir)
OUTPUT_FILES = tuple(v.name for v in VARIABLES if v.check is _output_file)
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


def validate(env: Mapping[str, Any], project: Path | str = PROJECT, targets: Iterable[object] = ()) -> None:
    """Refuse a bad variable (UserError, one line naming it and the fix) before anything is created: each variable's
    ``check`` (see its entry of :data:`VARIABLES`), in the table's order, then what no one variable decides: SRC,
    BUILD_DIR and LLAMACPP not where gcc's debug info would rename their files twice (prefix_maps.renamed_twice).
    Relative paths are from ``project``; ``targets`` are the run's (compiledb, compile and install check more)."""
    given = Given(env, project, frozenset(map(str, targets)))
    for variable in VARIABLES:
        if variable.check is not None:
            variable.check(given, variable.name)
    twice = prefix_maps.renamed_twice(str(project), str(env["SRC"]), str(env["BUILD_DIR"]), str(env["LLAMACPP"]) or None)
    if twice is not None:
        raise UserError(f"{twice}: inside the checkout under the name its files are given in debug info, gcc would "
                        "rename some of them twice (opencoti_build.cosmo.prefix_maps); choose another path")


def public_key(env: Mapping[str, Any], project: Path | str = PROJECT) -> tuple[str, str]:
    """PUBKEY as given and as an absolute path (relative to the project, like every path variable); ("", "") when
    empty: verify then says that signatures were not checked."""
    value = str(env.get("PUBKEY") or "").strip()
    return (value, str(resolved(value, project))) if value else ("", "")


CACHE_KEY_LOADERS: dict[str, Callable[[str, str], object]] = {
    "CACHE_SIGNING_KEY": signing.load_signer, "CACHE_TRUSTED_KEYS": signing.load_trusted}


def cache_keys(env: Mapping[str, Any], project: Path | str = PROJECT, check: bool = True) -> tuple[str, str]:
    """CACHE_SIGNING_KEY and CACHE_TRUSTED_KEYS as absolute paths ("" where empty), with ``check`` each checked to
    hold a key that signs, or public keys that verify (UserError naming the file and the fix)."""
    found = []
    for name, load in CACHE_KEY_LOADERS.items():
        value = str(env.get(name) or "").strip()
        path = str(resolved(value, project)) if value else ""
        if path and check:
            load(path, name)
        found.append(path)
    return found[0], found[1]
