"""What the fat host lane compiles and links: the llamafile tree at ``SRC``, or llama.cpp's own ``llama-server``
from an upstream checkout (``LLAMACPP=``).

Both are the same description (opencoti_build.tree.sources) read two ways; the builders are the same. The llamafile
tree compiles every package of sources.HOST_PROGRAM and stores llamafile's ``/zip/`` sources in the binary. A
checkout compiles the llama.cpp part of those packages as opencoti_build.tree.upstream reads it, with ggml-cpu's
per-architecture kernels through one wrapper per file (upstream.arch_wrappers: the x86-64 half of each fat object
holds ``arch/x86``'s kernels, the aarch64 half ``arch/arm``'s), and links llama.cpp's server with its own ``main``,
which the project's ARGS_MAIN runs after reading the artifact's ``/zip/.args``.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from opencoti_build.tree import sources, upstream, zip_sources

# The checkout's server, under the lane's object directory (upstream make's layout: o/$(MODE)/llama.cpp/...).
CHECKOUT_OUTPUT = "llama.cpp/tools/server/llama-server"
# llama.cpp's server reads no /zip/.args: a checkout's is linked with --wrap=main and this main of the project's,
# which reads it first (the file says how), so its embedder artifact starts as llamafile's does.
ARGS_MAIN = "host/zip_args.c"
ARGS_MAIN_LINK_FLAGS = ("-Wl,--wrap=main",)
# Headers a checkout includes where __linux__ is not defined (cosmocc never defines it; the file says which),
# found on every checkout package's -isystem path after its own.
CHECKOUT_COMPAT_INCLUDE = "host/cosmo-compat"
# The checkout's objects lie apart from the llamafile tree's (the same description paths, other flags), so
# building one after the other rebuilds neither.
CHECKOUT_OBJDIR = "checkout"


@dataclasses.dataclass(frozen=True)
class HostTree:
    """The sources, flags and layout of one host build."""

    root: str  # SRC, or the checkout
    llama: str | None  # where description paths llama.cpp/... lie when not under root/llama.cpp: the checkout
    program: sources.Program
    packages: tuple[tuple[sources.Package, tuple[str, ...]], ...]  # link order, each with its sources present
    zip_paths: tuple[str, ...]  # the binary's own /zip/ sources (zip_sources)
    iquote: tuple[str, ...]  # description dirs on every inheriting package's -iquote path (config.mk's -iquote.)
    arch_wrappers: tuple[upstream.ArchWrapper, ...]  # compiled by the ggml package
    objdir: str  # under $BUILD_DIR/o/$MODE: "" or CHECKOUT_OBJDIR
    args_main: str | None = None  # project-relative source linked before the packages (ARGS_MAIN), if any
    compat_include: str | None = None  # project-relative -isystem dir of every package (CHECKOUT_COMPAT_INCLUDE)
    portcosmo_sources: tuple[str, ...] = ()  # compiled from lowered copies (upstream.PORTCOSMO_SOURCES)
    portcosmo_headers: Mapping[str, str] = dataclasses.field(default_factory=dict)  # upstream.PORTCOSMO_HEADERS

    @property
    def checkout(self) -> bool:
        """An upstream llama.cpp checkout, not the llamafile tree."""
        return self.llama is not None

    def path(self, rel: str) -> str:
        """Where a description path lies."""
        return os.path.normpath(sources.tree_file(self.root, rel, self.llama))


def llamafile_tree(src: str) -> HostTree:
    """The llamafile tree at ``src``; MissingSourcesError or ZipSourceError (one line) for an incomplete one."""
    resolved = sources.host_sources(src)
    program = sources.HOST_PROGRAM
    return HostTree(root=src, llama=None, program=program,
                    packages=tuple((p, tuple(resolved[p.name])) for p in program.packages),
                    zip_paths=tuple(zip_sources.zip_paths(src)), iquote=sources.DEFAULT_IQUOTE, arch_wrappers=(),
                    objdir="")


def checkout_tree(llamacpp: str) -> HostTree:
    """llama.cpp's server from the checkout ``llamacpp`` (upstream.checkout_dir checked it); CheckoutError when it
    lacks a ggml core source or every source of a required package."""
    missing = [s for s in sources.GGML_CORE_SOURCES if not Path(upstream.tree_path(s, llamacpp)).is_file()]
    if missing:
        raise upstream.CheckoutError(f"LLAMACPP={llamacpp} lacks {missing[0][len(upstream.LLAMA_PREFIX):]}, a ggml core "
                                     f"source; point LLAMACPP= at a complete llama.cpp checkout")
    program = dataclasses.replace(sources.HOST_PROGRAM, output=CHECKOUT_OUTPUT, packages=tuple(upstream.packages()),
                                  link_flags=sources.HOST_PROGRAM.link_flags + ARGS_MAIN_LINK_FLAGS)
    packages = upstream.claimed(program.packages, llamacpp)
    for package, rels in packages:
        if not rels and not package.optional:
            raise upstream.CheckoutError(f"LLAMACPP={llamacpp} has no sources of package {package.name!r} (expected "
                                         f"{package.sources[0][len(upstream.LLAMA_PREFIX):]}); "
                                         f"known to work: {upstream.known_versions()}")
    return HostTree(root=llamacpp, llama=llamacpp, program=program,
                    packages=tuple((p, tuple(rels)) for p, rels in packages), zip_paths=(), iquote=(),
                    arch_wrappers=tuple(upstream.arch_wrappers(llamacpp)), objdir=CHECKOUT_OBJDIR,
                    args_main=ARGS_MAIN, compat_include=CHECKOUT_COMPAT_INCLUDE,
                    portcosmo_sources=upstream.PORTCOSMO_SOURCES, portcosmo_headers=upstream.PORTCOSMO_HEADERS)
