"""compile_commands.json: its entries for clangd, one per file, and how a run's entries replace the old.

Rules (docs/ide.md):

- one entry per source file: when a file is compiled twice (the host's fat build and a backend DSO's
  ggml core, or ggml-cuda.cu by both CUDA and ROCm), the entry registered first wins, and the host is
  read first: clangd then shows the code as the shipped llamafile compiles it;
- nvcc and hipcc lines are rewritten into the clang CUDA / HIP driver arguments clangd understands
  (``-x cuda --cuda-gpu-arch=sm_XX --cuda-path=…``, ``-x hip --offload-arch=…``); nvcc-only flags are
  dropped, since clangd reports each as an error;
- a build that reads only some lanes (a plain ``scons`` reads no backend) replaces the entries of the
  files it registered and keeps the others; ``scons compiledb`` reads every lane.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator

Entry = dict  # {"directory", "file", "output", "arguments"}

# nvcc options whose value is the next argument and that clang has no use for.
_NVCC_DROP_WITH_VALUE = frozenset(("-Xcudafe", "-Xptxas", "-Xnvlink", "-Xfatbin", "-Xarchive", "-gencode",
                                   "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code",
                                   "-ccbin", "--compiler-bindir", "--threads", "-t", "--compress-mode",
                                   "-maxrregcount", "--maxrregcount"))
_KEEP_PREFIXES = ("-D", "-U", "-I", "-std=", "-O", "-f", "-W", "-m", "-g", "-isystem", "-iquote", "-include")
_SM = re.compile(r"(?:code|arch)=(?:sm|compute)_(\d+)[a-z]?")


def _host_flags(text: str) -> list[str]:
    """``-Xcompiler a,b`` / ``--compiler-options=a,b``: the host compiler's flags, as clang takes them."""
    return [flag for flag in text.split(",") if flag.startswith(_KEEP_PREFIXES)]


def _took_gpu_or_host_flags(arg: str, it: Iterator[str], sms: list[int], kept: list[str]) -> bool:
    """nvcc's GPU architectures (``-gencode``, ``-arch``: their SM numbers into ``sms``) and host compiler flags
    (``-Xcompiler``: into ``kept``), each with its value as the next argument or after ``=``; False for any other."""
    name, eq, value = arg.partition("=")
    if arg in ("-gencode", "--generate-code"):
        sms += [int(m) for m in _SM.findall(next(it, ""))]
    elif name in ("-arch", "--gpu-architecture", "-gencode", "--generate-code") and eq:
        sms += [int(m) for m in _SM.findall(value)]
    elif arg in ("-Xcompiler", "--compiler-options"):
        kept += _host_flags(next(it, ""))
    elif name in ("-Xcompiler", "--compiler-options") and eq:
        kept += _host_flags(value)
    else:
        return False
    return True


def clang_cuda_arguments(argv: list[str], cuda_root: str) -> list[str]:
    """An nvcc compile line as clang's CUDA driver arguments (clangd parses the host side and one GPU arch)."""
    kept: list[str] = []
    sms: list[int] = []
    output = source = None
    it = iter(argv[1:])
    for arg in it:
        if _took_gpu_or_host_flags(arg, it, sms, kept):
            continue
        if arg in _NVCC_DROP_WITH_VALUE:
            next(it, None)
        elif arg == "-o":
            output = next(it, None)
        elif arg in ("-I", "-D", "-U", "-isystem", "-include"):
            kept += [arg, next(it, "")]
        elif arg == "-c":
            continue
        elif arg.startswith("--") or arg.startswith("-X") or arg in ("-rdc", "-dc", "-lineinfo", "-G", "-objtemp"):
            continue  # nvcc's own options (--use_fast_math, --extended-lambda, -objtemp, ...)
        elif arg.startswith(_KEEP_PREFIXES):
            kept.append(arg)
        elif not arg.startswith("-"):
            source = arg
    sm = min(sms) if sms else 75
    out = ["clang++", "-x", "cuda", f"--cuda-gpu-arch=sm_{sm}", f"--cuda-path={cuda_root}",
           "-Wno-unknown-cuda-version", *kept, "-c"]
    return out + (["-o", output] if output else []) + ([source] if source else [])


def clang_hip_arguments(argv: list[str]) -> list[str]:
    """A hipcc compile line as clang's HIP driver arguments (one offload arch; no device libraries needed)."""
    kept: list[str] = []
    archs: list[str] = []
    output = source = None
    it = iter(argv[1:])
    for arg in it:
        if arg.startswith("--offload-arch="):
            archs.append(arg.split("=", 1)[1])
        elif arg == "-x":
            next(it, None)
        elif arg == "-o":
            output = next(it, None)
        elif arg in ("-I", "-D", "-U", "-isystem", "-include"):
            kept += [arg, next(it, "")]
        elif arg == "-c" or arg.startswith("--offload-compress"):
            continue
        elif arg.startswith(_KEEP_PREFIXES):
            kept.append(arg)
        elif not arg.startswith("-"):
            source = arg
    arch = archs[0] if archs else "gfx906"
    # ROCm's headers before 6.x read __AMDGCN_WAVEFRONT_SIZE, which clang 21+ no longer defines: say it
    # (64 on gfx9 and older, 32 from gfx10) so a newer clangd parses them as the older hipcc did.
    wave = 64 if re.match(r"gfx[0-9]$|gfx[0-9][0-9a-f]{2}$", arch.split(":")[0]) else 32
    out = ["clang++", "-x", "hip", f"--offload-arch={arch}", "-nogpulib", f"-D__AMDGCN_WAVEFRONT_SIZE={wave}",
           "-Wno-builtin-macro-redefined", *kept, "-c"]
    return out + (["-o", output] if output else []) + ([source] if source else [])


def one_per_file(entries: Iterable[Entry]) -> list[Entry]:
    """The first entry of each file, in the given order (the host's registrations come first)."""
    seen: dict[str, Entry] = {}
    for entry in entries:
        seen.setdefault(entry["file"], entry)
    return list(seen.values())


def merged(old: Iterable[Entry], new: Iterable[Entry]) -> list[Entry]:
    """``new`` plus the ``old`` entries of files ``new`` does not name and of objects it does not write (lanes this
    run did not read); an object is one compile's, so an old entry for it from another file (the same build
    directory used from another checkout) is stale."""
    new = list(new)
    files, outputs = {entry["file"] for entry in new}, {entry["output"] for entry in new}
    kept = [e for e in old if e.get("file") not in files and e.get("output") not in outputs]
    return sorted(new + kept, key=lambda e: (e["file"], e["output"]))


def render(entries: list[Entry]) -> str:
    return json.dumps(entries, indent=2) + "\n"


def read(path: str) -> list[Entry]:
    """The entries of an existing database; none when it is missing or not ours to merge with."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    return [e for e in data if isinstance(e, dict) and {"file", "output", "arguments"} <= e.keys()] \
        if isinstance(data, list) else []
