"""opencoti_build.formats.spirv: header parsing and finding modules embedded in arbitrary bytes."""
from __future__ import annotations

import subprocess
from pathlib import Path

from opencoti_build.formats import spirv

from samples import spirv_module


def test_real_glslc_output(tmp_path: Path) -> None:
    comp = tmp_path / "k.comp"
    comp.write_text("#version 450\nlayout(local_size_x = 8) in;\n"
                    "layout(binding = 0) buffer B { float b[]; };\n"
                    "void main() { b[gl_GlobalInvocationID.x] *= 2.0; }\n")
    spv = tmp_path / "k.spv"
    subprocess.run(["glslc", "-fshader-stage=compute", "--target-env=vulkan1.2", "-O", str(comp), "-o", str(spv)],
                   check=True)
    data = spv.read_bytes()
    found = spirv.find_modules(b"\0\0\0" + data + b"\0" * 16)
    assert len(found) == 1
    assert (found[0].offset, found[0].length) == (3, len(data))
    assert found[0].header.version == "1.5"  # vulkan1.2 -> SPIR-V 1.5
    assert found[0].header.generator >> 16 == 13  # shaderc


def test_c_arrays_written_are_read_back_from_the_linked_dso(tmp_path: Path) -> None:
    modules = {"b_shader": spirv_module(extra_words=5), "a_shader": spirv_module(bound=3), "skipped": b"\x01\x02\x03\x04"}
    (tmp_path / "shaders.hpp").write_text(spirv.c_array_header(list(modules)))
    (tmp_path / "shaders.cpp").write_text(spirv.c_array_source(modules, "shaders.hpp"))
    dso = tmp_path / "ggml-shaders.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(dso), str(tmp_path / "shaders.cpp")], check=True)
    # the reader takes exactly the arrays the writer defined that hold one well-formed module each
    assert spirv.embedded_shaders(str(dso)) == ["a_shader", "b_shader"]
    source = (tmp_path / "shaders.cpp").read_text()
    assert source.index("a_shader_data") < source.index("b_shader_data")  # sorted: bytes depend on names only
    assert f"unsigned int b_shader_len = {len(modules['b_shader'])};" in source
