"""opencoti_build.tree.package_flags: one assembly of a package's flags, as both lanes compile them."""
from __future__ import annotations

from opencoti_build.native import native_lane
from opencoti_build.tree import sources, webui
from opencoti_build.tree.package_flags import FileCompile, LaneDefaults, file_compile, package_flags

FAT = LaneDefaults(ccflags=("-O2", "-mclang"), cppflags=("-mcosmo",), iquote=(".",), target_arch=("-Xx86_64-mtune=x",))
STAMPS = {"GGML_VERSION": "0.9.4", "GGML_COMMIT": "abc1234", "LLAMA_VERSION": "abc1234", "LLAMA_COMMIT": "abc1234"}


def test_a_package_inheriting_every_default_gets_them_before_its_own() -> None:
    flags = package_flags(sources.GGML, FAT)
    assert flags.ccflags == ("-O2", "-mclang", "-fopenmp")
    assert flags.cppflags == ("-mcosmo",)
    assert flags.iquote == (".",) + sources.LLAMA_IQUOTE
    assert flags.isystem == ("llama.cpp/vendor",)
    assert flags.defines == sources.CPU_DEFINES
    assert flags.target_arch == ("-Xx86_64-mtune=x",)


def test_llamafiles_recipe_keeps_only_target_arch() -> None:
    flags = package_flags(sources.LLAMAFILE, FAT)
    assert flags.ccflags == () and flags.cppflags == ()
    assert flags.iquote == sources.LLAMAFILE_IQUOTE  # no `-iquote.` without CPPFLAGS
    assert flags.target_arch == ("-Xx86_64-mtune=x",)


def test_tinyblas_recipe_keeps_ccflags_and_target_arch_but_not_cppflags() -> None:
    flags = package_flags(sources.TINYBLAS, FAT)
    assert flags.ccflags == ("-O2", "-mclang", "-O3", "-fopenmp", "-mgcc")
    assert flags.cppflags == () and flags.iquote == sources.LLAMAFILE_IQUOTE


def test_a_file_adds_its_flags_target_arch_and_stamps() -> None:
    assert file_compile(sources.GGML, "llama.cpp/ggml/src/ggml.c", STAMPS, webui_on=False) == FileCompile(
        ("-O3", "-mgcc"), None, ('GGML_VERSION="0.9.4"', 'GGML_COMMIT="abc1234"'))
    zen4 = file_compile(sources.TINYBLAS, "llamafile/tinyblas_cpu_sgemm_amd_zen4.cpp", STAMPS, webui_on=False)
    assert zen4.flags == () and zen4.defines == ()
    assert zen4.target_arch is not None and "-Xx86_64-mavx512bf16" in zen4.target_arch
    metal = file_compile(sources.LLAMAFILE, "llamafile/metal.c", STAMPS, webui_on=False)  # a per-file stamp
    assert metal.defines == ('GGML_VERSION="0.9.4"', 'GGML_COMMIT="abc1234"')
    assert file_compile(sources.LLAMAFILE, "llamafile/zip.c", STAMPS, webui_on=False).defines == ()


def test_the_web_ui_define_goes_to_the_server_objects_and_server_cpp_only_when_on() -> None:
    server = "llama.cpp/tools/server/server-http.cpp"
    assert file_compile(sources.SERVER, server, STAMPS, webui_on=True).defines == (webui.DEFINE,)
    assert file_compile(sources.SERVER, server, STAMPS, webui_on=False).defines == ()
    assert file_compile(sources.LLAMAFILE, webui.SERVER_MAIN, STAMPS, webui_on=True).defines == (webui.DEFINE,)
    assert file_compile(sources.LLAMAFILE, "llamafile/main.cpp", STAMPS, webui_on=True).defines == ()


def test_the_native_lane_compiles_every_package_with_its_one_profile() -> None:
    defaults = native_lane.lane_defaults("x86_64", ("-ffile-prefix-map=/x=y",))
    assert "-mclang" not in defaults.ccflags and "-mavx2" in defaults.ccflags
    assert defaults.ccflags[-1] == "-ffile-prefix-map=/x=y" and defaults.iquote == ()
    server_main = native_lane.native_packages("x86_64")[0]  # llamafile's recipe skips CCFLAGS in the fat lane
    flags = package_flags(server_main, defaults)
    assert flags.ccflags == defaults.ccflags and flags.cppflags == defaults.cppflags
    assert flags.defines == ()  # LLAMAFILE_TUI and COSMOCC=1 are fat-only
