"""The one plan of what a run builds, from the command line's targets and the build's outputs (in-process)."""
from __future__ import annotations

import pytest

from opencoti_build.config import targets
from opencoti_build.errors import UserError
from opencoti_build.gpu import backends

PROJECT = "/co"
OUTPUTS = targets.Outputs("/co/build", "/co/dist", "/co/vendors/dist", "/co/compile_commands.json")


def plan(*given: str, host_prebuilt: bool = False, cpu_only: bool = False, checkout: bool = False) -> targets.Plan:
    return targets.plan(given, OUTPUTS, PROJECT, host_prebuilt=host_prebuilt, cpu_only=cpu_only, checkout=checkout)


def test_the_default_build_is_the_host_and_the_compile_database() -> None:
    default = plan()
    assert (default.default, default.host, default.compiles, default.backends) == (True, True, True, ())
    assert not (default.package or default.native or default.native_only or default.series)


def test_a_backend_alone_reads_no_host_and_only_that_backend() -> None:
    cuda = plan("cuda")
    assert (cuda.host, cuda.backends, cuda.package, cuda.default) == (False, ("cuda",), False, False)


@pytest.mark.parametrize("given", [("backends",), ("compiledb",), ("compile",), ("package",), ("install",),
                                   ("vendors/dist",), ("build/backends/cuda.shadow-check",)])
def test_what_embeds_indexes_or_lies_around_the_dsos_reads_every_backend(given: tuple[str, ...]) -> None:
    assert plan(*given).backends == backends.NAMES


def test_cpu_only_packages_embed_no_backend_but_the_database_still_indexes_them() -> None:
    assert plan("package", cpu_only=True).backends == ()
    assert plan("compiledb", cpu_only=True).backends == backends.NAMES


@pytest.mark.parametrize("given", [("package",), ("compiledb",), ("vendors/dist",), ()])
def test_a_checkouts_server_wants_no_backend(given: tuple[str, ...]) -> None:
    checkout = plan(*given, checkout=True)
    assert checkout.backends == () and checkout.checkout and checkout.host
    assert not plan(*given).checkout


def test_without_the_host_lane_llamacpp_is_the_native_lanes_alone() -> None:
    native = plan("native", "native-cuda", checkout=True)
    assert native.native_only and not native.checkout
    # the backends come from SRC's llamafile tree as always; the native lane reads the checkout itself
    both = plan("native", "cuda", "rocm", checkout=True)
    assert both.backends == ("cuda", "rocm") and not both.checkout and not both.host
    assert not plan("package", checkout=True, host_prebuilt=True).checkout  # HOST= is packaged, not a checkout


@pytest.mark.parametrize("asked", ["cuda", "backends"])
def test_a_backend_asked_for_beside_a_checkouts_server_is_refused(asked: str) -> None:
    with pytest.raises(UserError) as raised:
        plan("host", asked, checkout=True)
    assert str(raised.value) == (
        "LLAMACPP= makes the host lane build llama.cpp's own llama-server, which loads no llamafile GPU DSO; "
        f"build {asked} in a run of its own (from SRC's llamafile tree)")


def test_package_is_asked_by_name_or_by_a_path_around_the_artifacts() -> None:
    assert plan("package").package and plan("install").package and plan("dist/llamafile/x.llamafile").package
    assert not plan("host").package


def test_verify_alone_checks_the_dist_dir_as_it_lies_with_no_tree_host_or_backend() -> None:
    alone = plan("verify")
    assert alone.verify and alone.verify_alone and not alone.verify_builds_first
    assert (alone.package, alone.host, alone.backends, alone.compiles) == (False, False, (), False)
    for packaging in (("package", "verify"), ("install", "verify")):  # package, then check what it made
        assert plan(*packaging).verify_builds_first and not plan(*packaging).verify_alone
    beside = plan("verify", "host")  # the host is built; verify checks the dist dir as it lies
    assert beside.verify and beside.host and not beside.verify_builds_first and not beside.verify_alone


def test_the_native_lane_alone_needs_no_llamafile_tree() -> None:
    assert plan("native").native_only and plan("native", "native-cuda").native_only
    assert plan("native", "host").native and not plan("native", "host").native_only
    assert plan("build/native/bin/llama-server").native and not plan("host").native


def test_a_prebuilt_host_is_never_read_and_targets_that_need_none_read_none() -> None:
    assert not plan(host_prebuilt=True).host
    assert not plan("apply").host and not plan("vulkan", "native").host
    assert plan("package").host and plan("vulkan", "host").host


@pytest.mark.parametrize(("given", "compiles"), [((), True), (("host",), True), (("apply",), False),
                                                 (("verify",), False), (("compile",), False),
                                                 (("verify", "host"), True)])
def test_targets_that_compile_nothing_leave_the_compile_database_alone(given: tuple[str, ...], compiles: bool) -> None:
    assert plan(*given).compiles is compiles


def test_the_series_is_applied_or_reset_never_both() -> None:
    assert plan("apply").series == "apply" and plan("reset").series == "reset" and plan().series is None
    with pytest.raises(UserError, match=r"^`apply` and `reset` undo each other; give one of them$"):
        plan("apply", "reset")


def test_a_misspelled_target_is_refused_before_any_plan() -> None:
    with pytest.raises(UserError, match=r"^unknown target 'hots': no such target or file; the targets are host, "):
        plan("hots")
    assert plan("build/o/llamafile/main.o").names == {"build/o/llamafile/main.o"}  # a path the build writes
