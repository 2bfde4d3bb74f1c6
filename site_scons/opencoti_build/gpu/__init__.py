"""The GPU backends: their registry, architecture tables, sources, toolchains and the DSOs' verification.

- ``backends``: the GPU backends, one spec each in build order (variables, probe, device-code reader, entry points).
- ``cublas``: where cuBLAS is: in the CUDA toolkit or in NVIDIA's ``nvidia-cublas`` wheel.
- ``cuda_archs``: CUDA architecture tables keyed by toolkit version and target arch.
- ``cuda_sources``: the ggml-cuda translation units of ggml-cuda.so (and of ggml-rocm.so).
- ``dso_verification``: whether a linked backend DSO may be published, and its publication.
- ``rocm_archs``: the gfx targets of ggml-rocm.so: upstream's list, cut to what this ROCm builds.
- ``toolchains``: finding and interrogating nvcc, hipcc and glslc (``cuda``, ``rocm``, ``vulkan``).
- ``vulkan_shaders``: ggml-vulkan.so's C++ source and one SPIR-V module per shader variant.
"""
