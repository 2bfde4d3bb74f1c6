"""The llamafile source tree as data: every package the host binary and the GPU DSOs compile.

Paths are relative to the source tree root (``SRC``, a llamafile-0.10-shaped checkout whose
``llama.cpp/`` is the patched llama.cpp submodule). Patterns are globs where upstream globs
(``**`` descends); explicit lists where upstream's BUILD.mk lists. This module is the one place
a reader looks to learn what gets compiled with which flags; docs/source-description.md maps it
to upstream's BUILD.mk files.
"""
from __future__ import annotations

import fnmatch
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from opencoti_build.errors import UserError

LLAMA = "llama.cpp"
CXX_SUFFIXES: tuple[str, ...] = (".cpp", ".cc", ".cxx")


def _listed(directory: str, names: str, suffix: str = ".cpp") -> tuple[str, ...]:
    """``directory/<name><suffix>`` for each whitespace-separated name: an upstream list, compactly."""
    return tuple(f"{directory}/{name}{suffix}" for name in names.split())


# The ggml core every self-contained DSO compiles into itself (cosmo_dlopen cannot resolve
# symbols from the host process) and the host binary links. ggml.c's type_traits table points at
# every type's CPU to_float/from_float, resolved eagerly at dlopen: a core .c added here lands in
# the host and in every DSO at once. A listed file that the tree lacks is skipped (older trees).
GGML_CORE_SOURCES: tuple[str, ...] = (
    f"{LLAMA}/ggml/src/ggml.c",
    f"{LLAMA}/ggml/src/ggml-alloc.c",
    f"{LLAMA}/ggml/src/ggml-backend.cpp",
    f"{LLAMA}/ggml/src/ggml-backend-meta.cpp",
    f"{LLAMA}/ggml/src/ggml-quants.c",
    f"{LLAMA}/ggml/src/ggml-threading.cpp",
)

# Include directories of the ggml core, for the DSOs' host-compiled copy of it.
GGML_CORE_INCLUDES: tuple[str, ...] = (f"{LLAMA}/ggml/include", f"{LLAMA}/ggml/src")

LLAMA_IQUOTE: tuple[str, ...] = tuple(
    f"{LLAMA}/{d}"
    for d in ("common", "include", "ggml/include", "ggml/src", "ggml/src/ggml-cpu", "src", "tools/mtmd")
)

# llama.cpp/BUILD.mk's "base flags" of the llama.cpp library objects (ggml, llama, common) and the
# server's objects; mtmd and httplib do not get them upstream.
CPU_DEFINES: tuple[str, ...] = (
    "COSMOCC=1", "GGML_MULTIPLATFORM", "GGML_USE_LLAMAFILE", "GGML_USE_CPU", "GGML_USE_CPU_REPACK",
    "GGML_USE_OPENMP", "GGML_CPU_GENERIC", "GGML_SCHED_MAX_COPIES=4",
)
# Upstream adds -DNDEBUG to the llama and common objects only: ggml keeps its assert()s.
LLAMA_DEFINES: tuple[str, ...] = CPU_DEFINES + ("NDEBUG",)

# Which of build/config.mk's defaults a compile line carries. Upstream has three recipes:
# rules.mk's COMPILE.c/COMPILE.cc (CCFLAGS, CPPFLAGS_ with `-iquote.`, TARGET_ARCH) for llama.cpp,
# httplib, stb and the gperf tables; llamafile/BUILD.mk's pattern rules for llamafile's own sources
# (`$(CXX) $(CXXFLAGS) $(LLAMAFILE_CPPFLAGS)`: none of them, so no -O2/-g/-mclang/-mcosmo); and
# the TinyBLAS static pattern rule (CCFLAGS and TARGET_ARCH, not CPPFLAGS_). llamafile's recipe keeps
# TARGET_ARCH all the same: it only tunes, and a build's TARGET_ARCH= is meant for every compile.
COMPILE_DEFAULTS: tuple[str, ...] = ("CCFLAGS", "CPPFLAGS", "TARGET_ARCH")
LLAMAFILE_RECIPE: tuple[str, ...] = ("TARGET_ARCH",)
TINYBLAS_RECIPE: tuple[str, ...] = ("CCFLAGS", "TARGET_ARCH")

# Version stamps: `-D<NAME>_VERSION="…" -D<NAME>_COMMIT="…"`, with values read from the tree.
STAMPS: tuple[str, ...] = ("GGML", "LLAMA")


def tree_file(root: Path | str, rel: str, llama: Path | str | None = None) -> Path:
    """Where the description path ``rel`` lies: under ``root``, or, for a ``llama.cpp/`` path, under
    ``llama`` when it is given (the native lane's LLAMACPP=, a llama.cpp checkout of any name)."""
    if llama is not None and rel.startswith(f"{LLAMA}/"):
        return Path(llama) / rel[len(LLAMA) + 1:]
    return Path(root) / rel


def tree_glob(root: Path | str, pattern: str, llama: Path | str | None = None) -> list[str]:
    """The description paths of the files matching the glob ``pattern`` (``**`` descends), sorted;
    ``llama`` as in tree_file."""
    if llama is not None and pattern.startswith(f"{LLAMA}/"):
        prefix, base = f"{LLAMA}/", Path(llama)
    else:
        prefix, base = "", Path(root)
    return sorted(prefix + p.relative_to(base).as_posix() for p in base.glob(pattern[len(prefix):]) if p.is_file())


@dataclass(frozen=True)
class FileFlags:
    """Flags for the files of a package matching ``pattern`` (fnmatch on the tree-relative path).

    ``flags`` are appended after the package's (gcc takes the last ``-O``); ``target_arch`` is
    appended to the build's TARGET_ARCH (upstream's ``private TARGET_ARCH +=`` for the TinyBLAS
    CPU variants); ``stamp`` adds that version stamp's defines (one of STAMPS).
    """

    pattern: str
    flags: tuple[str, ...] = ()
    target_arch: tuple[str, ...] | None = None
    stamp: str | None = None


@dataclass(frozen=True)
class Package:
    """One group of translation units compiled with one set of flags into one fat archive."""

    name: str
    sources: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    iquote: tuple[str, ...] = ()
    isystem: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    per_file: tuple[FileFlags, ...] = ()
    optional: bool = False  # a tree may lack it entirely (mtmd in older trees)
    inherits: tuple[str, ...] = COMPILE_DEFAULTS  # the config.mk defaults its recipe carries
    stamp: str | None = None  # one of STAMPS, for every file of the package

    def resolve(self, root: Path, llama: Path | None = None) -> list[str]:
        """The package's sources present under ``root``, sorted, tree-relative, excludes removed.

        ``llama``: where ``llama.cpp/`` lies when it is not ``root/llama.cpp`` (see tree_file)."""
        found: set[str] = set()
        for pattern in self.sources:
            if any(ch in pattern for ch in "*?["):
                found.update(tree_glob(root, pattern, llama))
            elif tree_file(root, pattern, llama).is_file():
                found.add(pattern)
        return sorted(s for s in found if not any(fnmatch.fnmatchcase(s, x) for x in self.exclude))

    def file_flags(self, source: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
        """(extra flags, TARGET_ARCH override or None) for one tree-relative source."""
        flags: list[str] = []
        target_arch = None
        for rule in self.per_file:
            if fnmatch.fnmatchcase(source, rule.pattern):
                flags.extend(rule.flags)
                if rule.target_arch is not None:
                    target_arch = rule.target_arch
        return tuple(flags), target_arch

    def stamp_defines(self, source: str, stamps: Mapping[str, str]) -> tuple[str, ...]:
        """The version defines one source gets, from ``stamps`` (see tree_stamps)."""
        names = [self.stamp] + [r.stamp for r in self.per_file if fnmatch.fnmatchcase(source, r.pattern)]
        return tuple(f'{n}_{what}="{stamps[f"{n}_{what}"]}"'
                     for n in names if n is not None for what in ("VERSION", "COMMIT"))


def ggml_version(checkout: Path | str) -> str | None:
    """``MAJOR.MINOR.PATCH`` of the llama.cpp checkout's ggml (its ggml/CMakeLists.txt), or None when it names none."""
    cmake = Path(checkout) / "ggml" / "CMakeLists.txt"
    if not cmake.is_file():
        return None
    text = cmake.read_text(encoding="utf-8", errors="replace")
    parts = [re.search(rf"GGML_VERSION_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) if all(parts) else None


def tree_stamps(root: Path, llama: Path | None = None) -> dict[str, str]:
    """The values of the version stamps for the tree at ``root``, reproducible from its content.

    Upstream greps GGML_VERSION from ggml/CMakeLists.txt (kept) and takes the commits from git;
    its LLAMA_VERSION is `git describe --tags`, which depends on the tags a clone fetched, so here
    it is the commit too. Commits are the llama.cpp checkout's HEAD cut to 7 hex digits (a fixed
    length: `--short` grows with the repository's object count). A tree that is not its own git
    checkout (the mini tree lives inside this project's repository) says "unknown". ``llama`` as in tree_file.
    """
    checkout = tree_file(root, f"{LLAMA}/", llama)
    version = ggml_version(checkout) or "unknown"
    commit = "unknown"
    if (checkout / ".git").exists():
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
        commit = head[:7] or commit
    return {"GGML_VERSION": version, "GGML_COMMIT": commit, "LLAMA_VERSION": commit, "LLAMA_COMMIT": commit}


_FAST = ("-O3", "-mgcc")  # upstream builds ggml's hot loops with gcc at -O3
_SMALL = ("-Os",)
_GCC = ("-mgcc",)

# llama.cpp/BUILD.mk's GGML_SRCS_C + GGML_SRCS_CPP.
GGML = Package(
    name="ggml",
    sources=GGML_CORE_SOURCES + _listed(f"{LLAMA}/ggml/src", "ggml ggml-backend-dl ggml-backend-reg ggml-opt gguf")
    + _listed(f"{LLAMA}/ggml/src/ggml-cpu", "ggml-cpu quants", ".c")
    + _listed(f"{LLAMA}/ggml/src/ggml-cpu", "binary-ops ggml-cpu hbm ops repack traits unary-ops vec")
    + _listed(f"{LLAMA}/ggml/src/ggml-cpu/amx", "amx mmq"),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=CPU_DEFINES,
    flags=("-fopenmp",),
    stamp="GGML",
    per_file=(
        FileFlags(f"{LLAMA}/ggml/src/ggml.c", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-quants.c", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/quants.c", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/vec.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/ops.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/binary-ops.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-cpu/unary-ops.cpp", _FAST),
        FileFlags(f"{LLAMA}/ggml/src/ggml-alloc.c", _GCC),
        FileFlags(f"{LLAMA}/ggml/src/ggml-backend.cpp", _GCC),
        FileFlags(f"{LLAMA}/ggml/src/ggml-backend-reg.cpp", _SMALL),
    ),
)

# llama.cpp/BUILD.mk's LLAMA_SRCS_CPP.
LLAMA_LIB = Package(
    name="llama",
    sources=_listed(f"{LLAMA}/src", """
        llama llama-adapter llama-arch llama-batch llama-chat llama-context llama-cparams llama-grammar
        llama-graph llama-hparams llama-impl llama-io llama-kv-cache llama-kv-cache-iswa llama-memory
        llama-memory-hybrid llama-memory-hybrid-iswa llama-memory-recurrent llama-mmap llama-model
        llama-model-loader llama-model-saver llama-quant llama-sampler llama-vocab unicode unicode-data
    """) + _listed(f"{LLAMA}/src/models", """
        afmoe apertus arcee arctic arwkv7 baichuan bailingmoe bailingmoe2 bert bitnet bloom chameleon
        chatglm codeshell cogvlm cohere2-iswa command-r dbrx deci deepseek deepseek2 delta-net-base dots1
        dream ernie4-5 ernie4-5-moe eurobert exaone exaone-moe exaone4 falcon falcon-h1 gemma
        gemma-embedding gemma2-iswa gemma3 gemma3n-iswa gemma4-iswa glm4 glm4-moe gpt2 gptneox granite
        granite-hybrid grok grovemoe hunyuan-dense hunyuan-moe internlm2 jais jais2 jamba kimi-linear lfm2
        llada llada-moe llama llama4 maincoder mamba mamba-base mimo2-iswa minicpm3 minimax-m2 mistral3
        modern-bert mpt nemotron nemotron-h neo-bert olmo olmo2 olmoe openai-moe-iswa openelm orion
        paddleocr pangu-embedded phi2 phi3 plamo plamo2 plamo3 plm qwen qwen2 qwen2moe qwen2vl qwen3
        qwen35 qwen35moe qwen3moe qwen3next qwen3vl qwen3vl-moe refact rnd1 rwkv6 rwkv6-base rwkv6qwen2
        rwkv7 rwkv7-base seed-oss smallthinker smollm3 stablelm starcoder starcoder2 step35-iswa t5
        t5encoder wavtokenizer-dec xverse
    """),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES,
    flags=("-fopenmp",),
    stamp="LLAMA",
    per_file=(FileFlags(f"{LLAMA}/src/unicode-data.cpp", _GCC),),
)

# llama.cpp/BUILD.mk's COMMON_SRCS_CPP (upstream adds a build-info.cpp generated with `date`).
COMMON = Package(
    name="common",
    sources=_listed(f"{LLAMA}/common", """
        arg chat chat-auto-parser-generator chat-auto-parser-helpers chat-diff-analyzer chat-peg-parser
        common console debug download fit hf-cache json-partial json-schema-to-grammar license llguidance
        log ngram-cache ngram-map ngram-mod peg-parser preset reasoning-budget regex-partial sampling
        speculative unicode
    """) + _listed(f"{LLAMA}/common/jinja", "caps lexer parser runtime string value"),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    defines=LLAMA_DEFINES + ("LLAMA_USE_HTTPLIB",),
    flags=("-fopenmp",),
    per_file=(
        FileFlags(f"{LLAMA}/common/arg.cpp", _SMALL),
        FileFlags(f"{LLAMA}/common/log.cpp", _SMALL),
    ),
)

# llama.cpp/BUILD.mk's MTMD_SRCS_CPP: include paths only, none of the base defines.
MTMD = Package(
    name="mtmd",
    sources=_listed(f"{LLAMA}/tools/mtmd", "clip mtmd mtmd-audio mtmd-helper mtmd-image")
    + _listed(f"{LLAMA}/tools/mtmd/models", """
        cogvlm conformer deepseekocr dotsocr gemma4a gemma4v glm4v hunyuanocr internvl kimik25 kimivl
        llama4 llava minicpmv mobilenetv5 nemotron-v2-vl paddleocr pixtral qwen2vl qwen3a qwen3vl siglip
        step3vl whisper-enc yasa2 youtuvl
    """),
    iquote=LLAMA_IQUOTE,
    isystem=(f"{LLAMA}/vendor",),
    optional=True,
)

# Upstream compiles httplib with rules.mk's defaults and nothing else.
HTTPLIB = Package(
    name="httplib",
    sources=(f"{LLAMA}/vendor/cpp-httplib/httplib.cpp",),
    optional=True,
)

# llamafile/BUILD.mk's LLAMAFILE_SERVER_SUPPORT_OBJS, built with llama.cpp/BUILD.mk's TOOL_SERVER
# flags; server.cpp itself is compiled with llamafile's flags (LLAMAFILE below). Upstream also
# passes -DLLAMA_BUILD_WEBUI and `-iquote o/$(MODE)/llama.cpp/tools/server` for the web UI's
# generated headers: left out, as the UI assets are a download (docs/source-description.md).
SERVER = Package(
    name="server",
    sources=_listed(f"{LLAMA}/tools/server", """
        server-chat server-common server-context server-http server-models server-queue server-task
        server-tools
    """),
    iquote=LLAMA_IQUOTE + ("llamafile",),
    isystem=(f"{LLAMA}/vendor",),
    defines=CPU_DEFINES,
    flags=("-fopenmp",),
)

# llamafile/BUILD.mk's LLAMAFILE_INCLUDES (`-iquote llamafile` first, then llama.cpp's list).
LLAMAFILE_IQUOTE: tuple[str, ...] = ("llamafile",) + LLAMA_IQUOTE
LLAMAFILE_ISYSTEM: tuple[str, ...] = (f"{LLAMA}/vendor", "third_party")

# llamafile's own sources (LLAMAFILE_SRCS_C/_CPP, main.cpp) and llama.cpp's server.cpp, whose main()
# -DLLAMAFILE_TUI renames to server_main() for llamafile's main to call. The highlight lexers are
# listed upstream one by one; they are exactly the directory's .cpp files less its three tests.
LLAMAFILE = Package(
    name="llamafile",
    sources=_listed("llamafile", "bestline cuda llamafile metal vulkan zip", ".c")
    + _listed("llamafile", """
        args chatbot_api chatbot_cli chatbot_comm chatbot_comp chatbot_direct chatbot_eval chatbot_file
        chatbot_help chatbot_hint chatbot_hist chatbot_logo chatbot_main chatbot_repl compute datauri
        extract_data_uris image llama main string xterm
    """) + ("llamafile/highlight/*.cpp", f"{LLAMA}/tools/server/server.cpp"),
    exclude=("llamafile/highlight/*_test.cpp",),
    iquote=LLAMAFILE_IQUOTE,
    isystem=LLAMAFILE_ISYSTEM,
    defines=("LLAMAFILE_TUI", "COSMOCC=1"),
    inherits=LLAMAFILE_RECIPE,
    per_file=(FileFlags("llamafile/metal.c", stamp="GGML"),),  # it compiles ggml-metal at run time
)

# TinyBLAS CPU kernels (TINYBLAS_CPU_SRCS): the dispatcher plus one TU per CPU variant, each compiled
# for its own instruction set; arm80 and `unsupported` get no extra TARGET_ARCH. Upstream's per-variant
# -Xx86_64-mtune=… (sandybridge … znver4) is left out: a tuning hint only, and znver4 is unknown to the
# gcc 12 of the cosmocc stand-in; the build's TARGET_ARCH tuning applies to every variant.
def _tune(cpu: str) -> tuple[str, ...]:
    return (f"-Xx86_64-mtune={cpu}",)


_AVX = ("-Xx86_64-mavx", "-Xx86_64-mf16c")
_FMA = _AVX + ("-Xx86_64-mfma",)
_AVX2 = _FMA + ("-Xx86_64-mavx2",)
_AVX512 = _AVX2 + ("-Xx86_64-mavx512f",)
_ZEN4 = _AVX512 + ("-Xx86_64-mavx512vl", "-Xx86_64-mavx512vnni", "-Xx86_64-mavx512bf16")
_ARM82 = ("-Xaarch64-march=armv8.2-a+dotprod+fp16",)
_VARIANTS = "amd_avx amd_fma amd_avx2 amd_avxvnni amd_avx512f amd_zen4 arm80 arm82"
TINYBLAS = Package(
    name="tinyblas",
    sources=("llamafile/sgemm.cpp",)
    + _listed("llamafile", " ".join(f"tinyblas_cpu_sgemm_{v}" for v in _VARIANTS.split()))
    + ("llamafile/tinyblas_cpu_unsupported.cpp",)
    + _listed("llamafile", " ".join(f"tinyblas_cpu_mixmul_{v}" for v in _VARIANTS.split()))
    + _listed("llamafile", "iqk_mul_mat_amd_avx2 iqk_mul_mat_amd_zen4 iqk_mul_mat_arm82"),
    iquote=LLAMAFILE_IQUOTE,
    isystem=LLAMAFILE_ISYSTEM,
    defines=("COSMOCC=1", "GGML_USE_LLAMAFILE"),
    flags=("-O3", "-fopenmp", "-mgcc"),  # -mgcc: GCC's SIMD intrinsics
    inherits=TINYBLAS_RECIPE,
    per_file=(
        # upstream's `private TARGET_ARCH += -Xx86_64-mtune=<cpu> …` per variant (tuning.py fits the names)
        FileFlags("llamafile/tinyblas_cpu_*_amd_avx.cpp", target_arch=_tune("sandybridge") + _AVX),
        FileFlags("llamafile/tinyblas_cpu_*_amd_fma.cpp", target_arch=_tune("bdver2") + _FMA),
        FileFlags("llamafile/tinyblas_cpu_*_amd_avx2.cpp", target_arch=_tune("skylake") + _AVX2),
        FileFlags("llamafile/tinyblas_cpu_*_amd_avxvnni.cpp",
                  target_arch=_tune("alderlake") + _AVX2 + ("-Xx86_64-mavxvnni",)),
        FileFlags("llamafile/tinyblas_cpu_*_amd_avx512f.cpp", target_arch=_tune("cannonlake") + _AVX512),
        FileFlags("llamafile/tinyblas_cpu_*_amd_zen4.cpp", target_arch=_tune("znver4") + _ZEN4),
        FileFlags("llamafile/tinyblas_cpu_*_arm82.cpp", target_arch=_ARM82),
        FileFlags("llamafile/iqk_mul_mat_amd_avx2.cpp", target_arch=_tune("skylake") + _AVX2),
        FileFlags("llamafile/iqk_mul_mat_amd_zen4.cpp", target_arch=_tune("skylake") + _AVX512 + (
            "-Xx86_64-mavx512vl", "-Xx86_64-mavx512vnni", "-Xx86_64-mavx512bw", "-Xx86_64-mavx512dq")),
        FileFlags("llamafile/iqk_mul_mat_arm82.cpp", target_arch=_ARM82),
    ),
)

# The highlighters' gperf keyword tables (``*.gperf`` → C in the build dir, then compiled with
# rules.mk's defaults, as upstream's `$(wildcard llamafile/highlight/*.gperf)`).
HIGHLIGHT = Package(
    name="highlight",
    sources=("llamafile/highlight/*.gperf",),
    optional=True,
)

# The binary links one stb object (LLAMAFILE_DEPS), not third_party/stb's whole archive.
STB = Package(
    name="stb",
    sources=("third_party/stb/stb_image_resize2.c",),
    optional=True,
)


@dataclass(frozen=True)
class Program:
    """A fat program ``output`` linked from its packages' archives, in link order, with ``link_flags`` and ``libs``."""

    output: str
    packages: tuple[Package, ...]
    link_flags: tuple[str, ...] = field(default=("-fopenmp",))
    libs: tuple[str, ...] = ("-lm",)


# Link order: dependents before what they depend on, as the archives are searched once.
HOST_PROGRAM = Program(
    output="llamafile/llamafile",
    packages=(LLAMAFILE, SERVER, MTMD, COMMON, LLAMA_LIB, GGML, TINYBLAS, HIGHLIGHT, HTTPLIB, STB),
)

class MissingSourcesError(UserError):
    """SRC lacks a ggml core source or every source of a required package."""


def host_sources(root: Path | str) -> dict[str, list[str]]:
    """Each package of HOST_PROGRAM -> its sources present under ``root`` (see Package.resolve).

    Refused (MissingSourcesError) when ``root`` lacks one of GGML_CORE_SOURCES (the host links the
    core and every DSO compiles it: a tree without one is broken, not older) or every source of a
    package that is not optional.
    """
    root = Path(root)
    missing = [s for s in GGML_CORE_SOURCES if not (root / s).is_file()]
    if missing:
        raise MissingSourcesError(
            f"SRC={root} lacks {missing[0]}, a ggml core source (GGML_CORE_SOURCES in site_scons/opencoti_build/tree/"
            "sources.py); restore it (`scons apply` for the vendored tree) or point SRC= at a complete llamafile tree")
    found = {}
    for package in HOST_PROGRAM.packages:
        found[package.name] = package.resolve(root)
        if not found[package.name] and not package.optional:
            raise MissingSourcesError(f"SRC={root} has no sources of package {package.name!r} (expected "
                                      f"{package.sources[0]}); point SRC= at a llamafile-0.10 tree")
    return found


def core_sources(root: Path | str, llama: Path | str | None = None) -> list[str]:
    """The ggml core sources present in ``root``: the DSOs' self-contained copy (``llama`` as in tree_file)."""
    return [s for s in GGML_CORE_SOURCES if tree_file(root, s, llama).is_file()]


# build/config.mk's defaults, on every fat compile whose recipe inherits them (Package.inherits);
# packages append to them. CXXFLAGS go to every C++ compile, as upstream's recipes all carry them.
# One addition, -gno-column-info: a distributed compile (distcc, sccache-dist) preprocesses here and compiles
# the text there, and gcc -E moves tokens to other columns, so the debug info's column numbers were the one
# thing in which its objects differed from a local build's; without them they are the same bytes (line
# numbers stay, through -E's line markers). tests/integration/test_launchers.py compares both lanes' outputs.
DEFAULT_CCFLAGS: tuple[str, ...] = ("-O2", "-g", "-gno-column-info", "-fexceptions", "-ffunction-sections",
                                    "-fdata-sections", "-mclang")
DEFAULT_CXXFLAGS: tuple[str, ...] = ("-frtti", "-std=gnu++23")
DEFAULT_CPPFLAGS: tuple[str, ...] = ("-mcosmo", "-DGGML_MULTIPLATFORM", "-Wno-attributes", "-DLLAMAFILE_DEBUG")
DEFAULT_IQUOTE: tuple[str, ...] = (".",)  # upstream's `-iquote.`: the tree root
