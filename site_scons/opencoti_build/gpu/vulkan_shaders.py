"""What ggml-vulkan.so is made of: its C++ source and one SPIR-V module per variant of each compute shader."""
from __future__ import annotations

VULKAN_DIR = "llama.cpp/ggml/src/ggml-vulkan"
SOURCE = f"{VULKAN_DIR}/ggml-vulkan.cpp"
SHADER_DIR = f"{VULKAN_DIR}/vulkan-shaders"
SHADER_SUFFIX = ".comp"

# .comp stem -> {variant name: defines}. vulkan-shaders-gen derives llama.cpp's ~1,400 variants in C++;
# this table is the build's equivalent for the shaders it knows (the miniature tree's).
VARIANTS: dict[str, dict[str, list[str]]] = {
    "add": {"add_f32": ["A_TYPE=float"], "add_u32": ["A_TYPE=uint"]},
    "scale": {"scale_f32": ["A_TYPE=float"]},
}


def variants(stem: str) -> dict[str, list[str]]:
    """The variants of shader ``<stem>.comp``; a stem not in VARIANTS builds once, with no defines, as itself."""
    return VARIANTS.get(stem, {stem: []})
