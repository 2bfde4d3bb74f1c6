"""Shared machinery of the self-contained GPU backend DSOs (ggml-cuda.so, ggml-rocm.so, ggml-vulkan.so).

API (after ``env.Tool('ggml_dso')``):

``env.GccCompileEnv(**replace) -> Environment``
    A clone compiling a DSO's C/C++ with the host gcc/g++ (the ggml core, Vulkan's C++): ``replace`` set on
    it, then gcc's ``-ffile-prefix-map`` for the checkout, ``$SRC`` and ``$BUILD_DIR`` after its CCFLAGS
    (``opencoti_build.cosmo.prefix_maps``, spelled for CCWRAPPER by opencoti_scons/compile_maps.py), CCWRAPPER in front
    of gcc/g++ and compile-database entries. Every compile and link of a DSO takes the maps, so the DSO's
    bytes do not depend on where the checkout, the tree or the build directory are.

``env.GgmlDso(spec, objects, *, linker, link_flags=(), libs=(), static_runtime=..., archs=(),
              lib_dirs=(), stub_dirs=(), link_prefix_maps=None) -> Node``
    Links ``objects`` + the ggml core into
    ``$BACKEND_DIST_DIR/llamafile/<backend>/$LLAMAFILE_VERSION/ggml-<backend>.so`` and returns that node;
    ``spec`` is the backend's ``opencoti_build.gpu.backends.Backend``.
    - The ggml core: ``opencoti_build.tree.sources.core_sources($SRC)`` (GGML_CORE_SOURCES) compiled with the
      host gcc/g++ as position-independent objects under ``$BUILD_DIR/backends/ggml-core/``, once per build
      however many backends link it. Every DSO links its own copy because cosmo_dlopen cannot resolve
      symbols from the host process.
    - ``linker``: the driver that links (``'$NVCC'``, ``'$HIPCC'``, ``'g++'``).
    - ``link_flags``: driver flags (``--shared``/``-shared``, arch flags); ``libs``: ``-l`` words, after the objects.
    - ``static_runtime``: the words that link libstdc++/libgcc statically; the default suits gcc-like
      drivers, nvcc passes ``('-Xcompiler=-static-libstdc++,-static-libgcc',)``.
    - ``archs``: the names the build asked for, in ``spec.built_names``' spelling; the link fails if any is missing.
    - ``lib_dirs``/``stub_dirs``: extra directories to resolve DT_NEEDED in (see opencoti_build.formats.elfcheck).
    - ``link_prefix_maps``: the linker's -ffile-prefix-map words (opencoti_build.cosmo.prefix_maps); default the
      gcc/clang spelling, nvcc passes its ``-Xcompiler=`` one (``$NVCCPREFIXMAPS``).
    The link writes ``opencoti_build.gpu.dso_verification.staged_path(output)``; it is renamed to the output
    only after ``verification_error`` finds nothing (the rules: that module). It also defines:
    - with ``MIRROR`` on, the mirror ``$HOME/.llamafile/v/<ver>/ggml-<backend>.so`` (byte-identical copy; HOME from
      ``env['ENV']``),
    - the alias ``<backend>`` (output + mirror if any + a check, run when the DSO or those files change, that WARNs
      when ``$HOME/ggml-<backend>.so`` exists and differs: llamafile's loader may pick it up instead; and, without
      ``MIRROR``, when ``$HOME/.llamafile/v/<ver>/ggml-<backend>.so`` does: llamafile loads that copy first).

Construction variables read: ``SRC``, ``BUILD_DIR``, ``BACKEND_DIST_DIR``, ``MIRROR``, ``LLAMAFILE_VERSION``, ``ENV``
(``HOME``), ``DSOLINKCOMSTR``, ``CCWRAPPER_ARGV`` (the launcher in front of the core's gcc/g++, unsigned). Set on the link step only: ``DSOLINKCOM`` and the ``DSO_*`` variables it and
the verification read.
"""
from __future__ import annotations

import shutil
from typing import Any

from opencoti_scons.dso_builders import GgmlCore, gcc_compile_env, ggml_dso


def generate(env: Any) -> None:
    if hasattr(env, "GgmlDso"):
        return  # loaded on an env this one was cloned from: one ggml core per run
    core = GgmlCore()
    env.AddMethod(gcc_compile_env, "GccCompileEnv")
    env.AddMethod(lambda env, spec, objects, **options: ggml_dso(env, spec, objects, core=core, **options), "GgmlDso")


def exists(env: Any) -> bool:
    """The host compilers of the ggml core, and lief for the verification."""
    try:
        import lief  # noqa: F401
    except ImportError:
        return False
    return shutil.which("gcc") is not None and shutil.which("g++") is not None
