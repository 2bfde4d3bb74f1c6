"""A stand-in for cosmocc's fat driver on top of gcc (x86-64) and aarch64-linux-gnu-gcc.

It honours the contract of cosmopolitan's ``tool/cosmocc/bin/cosmocc`` that builds depend on:
one ``-c -o dir/foo.o`` writes ``dir/foo.o`` and ``dir/.aarch64/foo.o``; dep
files land beside each; ``-Xx86_64…``/``-Xaarch64…`` flags reach one compiler; the same refusals;
links need every input's ``.aarch64`` twin and keep ``OUT.com.dbg`` and ``OUT.aarch64.elf``.

What it cannot be is cosmopolitan: objects are glibc ELF objects, and ``OUT`` is the static x86-64
program carrying a small zip store (the shape the packager appends to), not an APE.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field

from opencoti_build.cache.launchers import FAT_LAUNCHER_ENV
from opencoti_build.cosmo import diagnostics
from opencoti_build.errors import os_error_line

ARCHES = ("x86_64", "aarch64")
COMPILERS = {
    "cosmocc": {"x86_64": "gcc", "aarch64": "aarch64-linux-gnu-gcc"},
    "cosmoc++": {"x86_64": "g++", "aarch64": "aarch64-linux-gnu-g++"},
}
ARCHIVERS = {"x86_64": "ar", "aarch64": "aarch64-linux-gnu-ar"}
# Defined by cosmocc on every compile.
COSMO_DEFINES = ("-D__COSMOPOLITAN__", "-D__COSMOCC__", "-D__FATCOSMOCC__")
# What cosmocc's libc/integral/normalize.inc, included first by every compile, undefines: a cosmopolitan program
# is no Linux program (code under `#ifdef __linux__` is not compiled for it), so neither is the stand-in's.
NORMALIZE_UNDEFINES = ("-Uunix", "-Ulinux", "-U__linux", "-U__linux__", "-U__gnu_linux__")
# Fatal in cosmocc's fat mode, in its words (tool/cosmocc/bin/cosmocc 4.0.2).
REFUSED_FLAGS = {
    "-shared": "-shared flag not supported",
    "-r": "-r flag not supported",
    "-pie": "-pie flag not supported",
    "-nostdlib": "-nostdlib flag not supported",
    "-S": "-S flag not supported",
    "-march=native": "-march=native can't be used when building fat binaries",
}
REFUSED_SUFFIXES = {".s": "assembler input files", ".S": "assembler input files",
                    ".so": "dynamic shared object input files"}
# What cosmocc's -E/-M/-MM takes away from the x86-64 compiler's view: the CPU and Linux macros (unix stays).
PREPROCESS_UNDEFINES = tuple("-U" + m for m in (
    "__k8", "__k8__", "__amd64", "__amd64__", "__x86_64", "__x86_64__", "__MMX__", "__MMX_WITH_SSE__", "__SSE_MATH__",
    "__SEG_FS", "__SEG_GS", "__SSE__", "__FXSR__", "__SSE2__", "__SSE2_MATH__", "linux", "__linux", "__linux__",
    "__gnu_linux__")) + ("-mno-red-zone", "-mlong-double-64")
# Flags whose value is the next argument (so it is not taken for an input file).
VALUE_FLAGS = frozenset(("-MT", "-I", "-iquote", "-isystem", "-idirafter", "-include", "-imacros", "-D", "-U", "-x", "-Xlinker", "-Xpreprocessor", "-u", "-T"))
ELF_MACHINE_AARCH64 = 183
SHIM_NOTE = "opencoti cosmocc stand-in: this file is the static x86-64 ELF; the aarch64 ELF is OUT.aarch64.elf\n"


class FatError(Exception):
    """A refusal or failure, reported as ``cosmocc: <message>``."""


@dataclass
class Invocation:
    mode: str  # compile | preprocess | link
    output: str | None = None
    dep_file: str | None = None
    inputs: list[str] = field(default_factory=list)
    common: list[str] = field(default_factory=list)
    per_arch: dict[str, list[str]] = field(default_factory=lambda: {a: [] for a in ARCHES})


def twin(path: str) -> str:
    """``dir/foo.o`` → ``dir/.aarch64/foo.o``."""
    head, tail = os.path.split(path)
    return os.path.join(head, ".aarch64", tail)


def parse(args: list[str]) -> Invocation:
    for arg in args:
        if " " in arg:
            raise FatError(f"arguments containing spaces unsupported: {arg}")
    inv = Invocation(mode="link")
    it = iter(args)
    for arg in it:
        if arg in REFUSED_FLAGS:
            raise FatError(REFUSED_FLAGS[arg])
        if not _took_mode_or_output(inv, arg, it):
            _take_flag_or_input(inv, arg, it)
    return inv


def _took_mode_or_output(inv: Invocation, arg: str, it: Iterator[str]) -> bool:
    """What the driver does (-c, -E/-M/-MM) and where it writes (-o, -MF/-MQ); False for any other argument."""
    if arg == "-c":
        inv.mode = "compile"
    elif arg in ("-E", "-M", "-MM"):
        inv.mode = "preprocess"
        inv.common.append(arg)
    elif arg == "-o":
        inv.output = next(it, None)
    elif arg.startswith("-o") and len(arg) > 2:
        inv.output = arg[2:]
    elif arg in ("-MF", "-MQ"):  # cosmocc handles -MQ as -MF; so do we
        inv.dep_file = next(it, None)
    else:
        return False
    return True


def _take_flag_or_input(inv: Invocation, arg: str, it: Iterator[str]) -> None:
    """A flag for one architecture or both (with its value, the next argument, where it takes one), or an input."""
    if arg.startswith("-Xx86_64"):
        inv.per_arch["x86_64"].append(arg[len("-Xx86_64"):])
    elif arg.startswith("-Xaarch64"):
        inv.per_arch["aarch64"].append(arg[len("-Xaarch64"):])
    elif arg == "-mcosmo":
        inv.common.append("-D_COSMO_SOURCE")
    elif arg in ("-mclang", "-mgcc", "-fPIC"):
        return  # both arches compile with gcc here; cosmocc ignores -fPIC
    elif arg == "-L":
        inv.common.append("-L" + next(it, ""))
    elif arg in VALUE_FLAGS:
        inv.common += [arg, next(it, "")]
    elif not arg.startswith("-") and not arg.startswith("@"):
        suffix = os.path.splitext(arg)[1]
        if suffix in REFUSED_SUFFIXES:
            raise FatError(f"{arg}: {REFUSED_SUFFIXES[suffix]} not supported")
        inv.inputs.append(arg)
    else:
        inv.common.append(arg)


def _tmpdir_check() -> None:
    if " " in os.environ.get("TMPDIR", ""):
        raise FatError("$TMPDIR containing spaces not supported")


def _log(argv: list[str]) -> None:
    log = os.environ.get("BUILDLOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(" ".join(argv) + "\n")


def _run_parallel(commands: dict[str, list[str]], capture: bool = False) -> tuple[dict[str, int], dict[str, str]]:
    """Run each architecture's command at once; with ``capture``, their stdout+stderr are returned."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for arch, argv in commands.items():
        _log(argv)
        try:
            procs[arch] = subprocess.Popen(argv, stdout=subprocess.PIPE if capture else None,
                                           stderr=subprocess.STDOUT if capture else None)
        except FileNotFoundError as exc:
            raise FatError(f"{argv[0]} not found; install it (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu)") from exc
    outputs = {}
    if capture:  # each pipe read to its end (gcc writes all of it before exiting; no deadlock on two pipes)
        import threading

        def read(arch: str) -> None:
            pipe = procs[arch].stdout
            assert pipe is not None  # capture: stdout=PIPE
            outputs[arch] = pipe.read().decode(errors="replace")

        readers = [threading.Thread(target=read, args=(arch,)) for arch in procs]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
    return {arch: proc.wait() for arch, proc in procs.items()}, outputs


def compile_commands(driver: str, args: list[str]) -> dict[str, list[str]]:
    """The per-architecture compiler commands a fat compile runs (what ``VERBOSE=1`` prints)."""
    return _compile_argvs(driver, parse(args))[0]


def half_compile_command(driver: str, args: list[str], arch: str, compiler: str | None = None) -> list[str]:
    """One architecture's half of a fat compile, as a plain compiler sees it (for compile_commands.json)."""
    inv = parse(args)
    output = inv.output or "a.o"
    undefines = () if compiler else NORMALIZE_UNDEFINES  # a cosmocc compiler includes normalize.inc itself
    return [compiler or COMPILERS[driver][arch], *COSMO_DEFINES, *undefines, *inv.common, *inv.per_arch[arch],
            "-c", "-o", output if arch == "x86_64" else twin(output), *inv.inputs]


def _compile_argvs(driver: str, inv: Invocation) -> tuple[dict[str, list[str]], dict[str, str] | None]:
    if len(inv.inputs) != 1:
        raise FatError("-c takes exactly one source file in fat mode")
    source = inv.inputs[0]
    output = inv.output or os.path.splitext(os.path.basename(source))[0] + ".o"
    outputs = {"x86_64": output, "aarch64": twin(output)}
    deps = None
    if inv.dep_file is not None:
        deps = {"x86_64": inv.dep_file, "aarch64": twin(inv.dep_file)}
    elif any(f in inv.common for f in ("-MD", "-MMD")):
        # cosmocc names them after -o (foo.o.d), or after the source without one (foo.d)
        base = inv.output + ".d" if inv.output else os.path.splitext(output)[0] + ".d"
        deps = {"x86_64": base, "aarch64": twin(base)}
    commands = {}
    for arch in ARCHES:
        argv = [COMPILERS[driver][arch], *COSMO_DEFINES, *NORMALIZE_UNDEFINES, *inv.common, *inv.per_arch[arch],
                "-c", "-o", outputs[arch]]
        if deps:
            argv += ["-MF", deps[arch]]
        commands[arch] = argv + [source]
    return commands, deps


def _compile(driver: str, inv: Invocation) -> int:
    commands, deps = _compile_argvs(driver, inv)
    os.makedirs(os.path.dirname(twin(commands["x86_64"][commands["x86_64"].index("-o") + 1])) or ".", exist_ok=True)
    for path in (deps or {}).values():
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    # Both compilers' output captured and merged: a shared diagnostic once, a one-sided one labelled.
    if diagnostics.colour_wanted(os.environ, sys.stderr.isatty()):
        commands = {arch: [argv[0], "-fdiagnostics-color=always", *argv[1:]] for arch, argv in commands.items()}
    launcher = os.environ.get(FAT_LAUNCHER_ENV)  # CCWRAPPER: each half runs as `launcher gcc …` (launchers.py)
    if launcher:
        commands = {arch: [launcher, *argv] for arch, argv in commands.items()}
    status, outputs = _run_parallel(commands, capture=True)
    report = diagnostics.merge(outputs)
    failed = [arch for arch in ARCHES if status[arch] != 0]
    if len(failed) == 1:
        other = "aarch64" if failed[0] == "x86_64" else "x86_64"
        report += f"{driver}: {other} succeeded but {failed[0]} failed to build object\n"
    if report:
        sys.stderr.write(report)  # one write: another step's output cannot land inside it
        sys.stderr.flush()
    return 0 if not failed else 1


def _preprocess(driver: str, inv: Invocation) -> int:
    argv = [COMPILERS[driver]["x86_64"], *PREPROCESS_UNDEFINES, *COSMO_DEFINES, *inv.common]
    if inv.dep_file:
        argv += ["-MF", inv.dep_file]
    if inv.output:
        argv += ["-o", inv.output]
    _log(argv + inv.inputs)
    return subprocess.call(argv + inv.inputs)


def _link_argv(driver: str, args: list[str], arch: str, elf: str) -> list[str]:
    """One architecture's link line, in the caller's order: inputs become their twins for aarch64."""
    other = "aarch64" if arch == "x86_64" else "x86_64"
    argv = [COMPILERS[driver][arch], "-static"]  # cosmo programs are static; static ELFs also run under qemu
    it = iter(args)
    for arg in it:
        if arg == "-o":
            next(it, None)
        elif arg.startswith("-X" + other) or arg in ("-mcosmo", "-mclang", "-mgcc", "-fPIC"):
            continue
        elif arg.startswith("-X" + arch):
            argv.append(arg[len("-X" + arch):])
        elif arg.startswith("-L") and arch == "aarch64":
            argv.append("-L" + twin((arg[2:] or next(it, "")).rstrip("/") + "/"))
        elif arch == "aarch64" and not arg.startswith("-") and arg.endswith((".o", ".a")):
            argv.append(twin(arg))
        else:
            argv.append(arg)
    return argv + ["-o", elf]


def _link(driver: str, inv: Invocation, args: list[str]) -> int:
    output = inv.output or "a.out"
    for item in inv.inputs:
        if item.endswith((".o", ".a")) and not os.path.exists(twin(item)):
            raise FatError(f"{item}: linker input missing concomitant {twin(item)} file")
    elfs = {"x86_64": output + ".com.dbg", "aarch64": output + ".aarch64.elf"}
    status, _ = _run_parallel({arch: _link_argv(driver, args, arch, elfs[arch]) for arch in ARCHES})
    if any(status.values()):
        return 1
    _apelink(elfs["x86_64"], output)
    return 0


def _apelink(x86_elf: str, output: str) -> None:
    """The stand-in for apelink: the x86-64 program plus a zip store, written in place as the linker
    writes its outputs (a build that is killed meanwhile finds a file its record does not describe)."""
    shutil.copyfile(x86_elf, output)
    os.chmod(output, 0o755)
    with zipfile.ZipFile(output, "a") as store:
        info = zipfile.ZipInfo(".cosmocc-stand-in", date_time=(1980, 1, 1, 0, 0, 0))
        info.create_system = 3
        info.external_attr = 0o100644 << 16
        store.writestr(info, SHIM_NOTE)


def archive(args: list[str]) -> int:
    """``ar.ape rcsD lib.a objs…``: GNU ar of the objects' architecture, deterministic."""
    if len(args) < 2:
        raise FatError("usage: ar.ape rcsD ARCHIVE OBJ...")
    members = args[2:]
    arch = "x86_64"
    if members and _elf_machine(members[0]) == ELF_MACHINE_AARCH64:
        arch = "aarch64"
    argv = [ARCHIVERS[arch], *args]
    _log(argv)
    return subprocess.call(argv)


def _elf_machine(path: str) -> int | None:
    with open(path, "rb") as fh:
        header = fh.read(20)
    if header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "little")


def main(driver: str, args: list[str]) -> int:
    try:
        if driver == "ar.ape":
            return archive(args)
        if args in (["--version"], ["-v"]):
            print(f"{driver} (opencoti stand-in over {COMPILERS[driver]['x86_64']} and {COMPILERS[driver]['aarch64']})")
            return 0
        _tmpdir_check()
        inv = parse(args)
        if inv.mode == "compile":
            return _compile(driver, inv)
        if inv.mode == "preprocess":
            return _preprocess(driver, inv)
        return _link(driver, inv, args)
    except FatError as exc:
        print(f"{driver}: fatal error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # disk full, permission denied: one line, no traceback
        print(f"{driver}: fatal error: {os_error_line(exc, exc.filename or 'output')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C reaches every compiler of the build: scons says so once, as for gcc
        return 130


def launcher(driver: str, args: list[str]) -> None:
    """Entry point of the shim's bin/ scripts, which start Python with SIGINT ignored (see them): from here on a
    Ctrl-C stops the driver with exit 130 and no traceback, and reaches the compilers it starts."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    status = main(driver, args)
    sys.exit(128 - status if status < 0 else status)  # a compiler killed by signal N: 128 + N, as a shell says


if __name__ == "__main__":
    launcher(sys.argv[1], sys.argv[2:])
