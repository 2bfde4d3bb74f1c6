"""Build logic for opencoti llamafiles that needs no SCons.

SCons tools under ``site_scons/site_tools`` are thin glue over these modules; the tests import them directly.

- ``backends``: the GPU backends, one spec each in build order (variables, probe, device-code reader, entry points).
- ``binary_report``: ``opencoti-build inspect FILE``: what a built DSO or host binary holds.
- ``build_lock``: one build at a time per build directory (an flock on ``BUILD_DIR/.lock``).
- ``buildvars``: the command-line variables as a plain table: name, default, help, validation.
- ``cache_entry``: verified cache entries and path-independent cache keys.
- ``cli``: the ``opencoti-build`` command (inspect, verify, pin).
- ``compdb``: compile_commands.json entries for clangd, and how a run's entries replace the old.
- ``cosmo_toolchain``: which cosmocc a build uses: a real one (``COSMOCC=DIR``) or the stand-in.
- ``cublas``: where cuBLAS is: in the CUDA toolkit or in NVIDIA's ``nvidia-cublas`` wheel.
- ``cuda_archs``: CUDA architecture tables keyed by toolkit version and target arch.
- ``cuda_sources``: the ggml-cuda translation units of ggml-cuda.so (and of ggml-rocm.so).
- ``diagnostics``: one report from a fat compile's two compilers: shared diagnostics once, the rest labelled.
- ``dso_verification``: whether a linked backend DSO may be published, and its publication.
- ``embed_args``: the embedder's ``.args``: the default, a parser, the check against the host binary.
- ``errors``: the one error idiom (``UserError``, ``fail``, ``os_error_line``).
- ``fatcc``: the stand-in for cosmocc's fat driver over gcc and aarch64-linux-gnu-gcc.
- ``file_digests``: SHA-256 digests of files the build has just read or written whole.
- ``formats``: readers and writers of file formats, with no build knowledge (its own index).
- ``import_closure``: a module's source files and those of every module of this package it imports.
- ``launchers``: compiler launchers (``CCWRAPPER``: sccache, ccache, distcc): finding them, their variables.
- ``manifest``: MANIFEST.json beside each artifact.
- ``native_lane``: the native-ELF lane's reading of the source description (host gcc, one architecture).
- ``null_build``: the null build's fast path: a record of everything a run depended on, and its check.
- ``package_flags``: a package's compile flags, assembled once for both lanes.
- ``packaging``: the two artifacts of ``scons package``: names, contents, checks.
- ``patch_series``: the vendored llamafile tree: reset, llamafile's patch step, the opencoti series.
- ``prefix_maps``: prefix maps, so where the build lives never reaches its outputs.
- ``provision``: the pinned cosmocc, fetched the way upstream's make fetches it.
- ``remote_cache``: the object cache's Redis tier (``CACHE_URL``): verified, compressed entries.
- ``rocm_archs``: the gfx targets of ggml-rocm.so: upstream's list, cut to what this ROCm builds.
- ``sources``: the llamafile source tree as data: every package the host and the DSOs compile.
- ``steplines``: the one short line each kind of step prints.
- ``summary``: the last line of every build (``N compiled, M from cache, K up to date in T s``).
- ``targets``: which parts of the build the command line asks for.
- ``tempfiles``: temporaries written beside their destination, renamed into place, swept when dead.
- ``templates``: the files upstream generates from ``*.in`` templates.
- ``toolchains``: finding and interrogating nvcc, hipcc and glslc (``cuda``, ``rocm``, ``vulkan``).
- ``tuning``: TinyBLAS's per-variant ``-mtune`` flags, fitted to the toolchain.
- ``upstream_pin``: the upstream llamafile release and its cosmocc, pinned in one place.
- ``verify``: ``opencoti-build verify`` and ``pin``.
- ``versioning``: version and tag parsing, and an artifact's identity.
- ``vulkan_shaders``: ggml-vulkan.so's C++ source and one SPIR-V module per shader variant.
- ``webui``: the server's bundled web UI, compiled in when its assets are in the tree.
- ``zip_sources``: the thin binary's own zip store (the files llamafile's C sources open as ``/zip/...``).
"""
