"""opencoti_build.cache.launchers without SCons: finding a launcher, its environment, its counters.

In-process checks of the core here; the real builds and tools: tests/integration/test_launcher_table.py.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from opencoti_build.cache import launchers
from opencoti_build.config import buildvars
from opencoti_build.errors import UserError


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_names_the_variable_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^CCWRAPPER=icecc is not a launcher the build knows; use one of "
                                        r"ccache, distcc, sccache, or leave CCWRAPPER empty$"):
        launchers.find("icecc", str(tmp_path))
    with pytest.raises(UserError, match=r"^CCWRAPPER=distcc: no distcc on PATH; install it with `apt-get install "
                                        r"distcc` \(scripts/install-deps\), or leave CCWRAPPER empty$"):
        launchers.find("distcc", str(tmp_path))
    found = executable(tmp_path / "ccache")
    assert launchers.find("ccache", str(tmp_path)) == str(found)


def test_the_launcher_is_outside_the_signature_and_added_once() -> None:
    command = launchers.prefixed("$CC -c $SOURCES")
    assert command == "$( $CCWRAPPER_ARGV $) $CC -c $SOURCES"
    assert launchers.prefixed(command) == command
    assert launchers.prefixed("$NVCC -c", "nvcc") == "$( $CCWRAPPER_NVCC_ARGV $) $NVCC -c"


def test_distcc_takes_only_the_gcc_family_and_only_sccache_wants_the_maps_preprocessed() -> None:
    assert launchers.construction_vars("distcc", ["/usr/bin/distcc"]) == {
        "CCWRAPPER_ARGV": ["/usr/bin/distcc"], "CCWRAPPER_NVCC_ARGV": [], "CCWRAPPER_HIPCC_ARGV": [],
        "CCWRAPPER_MAPS_VIA_PREPROCESSOR": False}
    assert launchers.construction_vars("sccache", ["sccache"]) == {
        "CCWRAPPER_ARGV": ["sccache"], "CCWRAPPER_NVCC_ARGV": ["sccache"], "CCWRAPPER_HIPCC_ARGV": ["sccache"],
        "CCWRAPPER_MAPS_VIA_PREPROCESSOR": True}
    assert launchers.construction_vars("", []) == {
        "CCWRAPPER_ARGV": [], "CCWRAPPER_NVCC_ARGV": [], "CCWRAPPER_HIPCC_ARGV": [],
        "CCWRAPPER_MAPS_VIA_PREPROCESSOR": False}
    assert launchers.construction_vars("ccache", ["ccache"])["CCWRAPPER_MAPS_VIA_PREPROCESSOR"] is False


def test_environment_passes_the_launchers_own_variables_and_sets_base_dirs(tmp_path: Path) -> None:
    project, src = tmp_path / "co", tmp_path / "tree"
    project.mkdir()
    src.mkdir()
    caller = {"SCCACHE_DIR": "/c", "CCACHE_DIR": "/cc", "DISTCC_HOSTS": "h", "HOME": "/root", "SCCACHE_BASEDIRS": "/x"}
    env = launchers.environment("sccache", caller, [str(project), str(src), str(tmp_path / "absent")])
    # the caller's dirs first; one that does not exist left out (sccache's server refuses to start on it)
    assert env == {"SCCACHE_DIR": "/c", "SCCACHE_BASEDIRS": os.pathsep.join(["/x", str(project), str(src)]),
                   "TMPDIR": "/tmp"}  # what a build server has too (sccache-dist sends the environment)
    env = launchers.environment("ccache", caller, [str(project), str(src)])
    # the project root, never a wider common parent: ccache would hand gcc `../tree/…` paths no prefix map covers
    assert env == {"CCACHE_DIR": "/cc", "CCACHE_BASEDIR": str(project), "CCACHE_NOHASHDIR": "1"}
    assert launchers.environment("ccache", {"CCACHE_BASEDIR": "/mine"}, [str(project)])["CCACHE_BASEDIR"] == "/mine"
    assert launchers.environment("distcc", caller, [str(project)]) == {"DISTCC_HOSTS": "h"}


def test_command_environment_hands_the_launcher_to_the_fat_driver(tmp_path: Path, monkeypatch) -> None:
    executable(tmp_path / "ccache")
    env = {"BUILD_DIR": str(tmp_path / "build"), "SRC": str(tmp_path), "SOURCE_DATE_EPOCH": "0", "MODE": "",
           "CCWRAPPER": "ccache"}
    got = buildvars.command_environment({"PATH": str(tmp_path), "CCACHE_DIR": "/cc", "SCCACHE_DIR": "/s"}, env)
    assert got[launchers.FAT_LAUNCHER_ENV] == str(tmp_path / "ccache")
    assert got["CCACHE_DIR"] == "/cc" and "SCCACHE_DIR" not in got and got["CCACHE_NOHASHDIR"] == "1"
    assert launchers.FAT_LAUNCHER_ENV not in buildvars.command_environment({}, {**env, "CCWRAPPER": ""})


SCCACHE_JSON = {"stats": {
    "compile_requests": 12, "cache_hits": {"counts": {"C/C++": 7, "CUDA": 1}, "adv_counts": {"c [gcc]": 8}},
    "cache_misses": {"counts": {"C/C++": 4}, "adv_counts": {}}, "dist_compiles": {"127.0.0.1:1": 3}}}


def test_counters_and_the_one_line() -> None:
    after = launchers.sccache_counters(SCCACHE_JSON)
    assert after == {"compile requests": 12, "hits": 8, "misses": 4, "distributed": 3}
    before = {"compile requests": 2, "hits": 1, "misses": 1, "distributed": 0}
    assert launchers.stats_line("sccache", before, after) == \
        "sccache: 10 compile requests, 7 hits, 3 misses, 3 distributed"
    assert launchers.stats_line("sccache", None, None) is None
    ccache = launchers.ccache_counters("direct_cache_hit\t5\npreprocessed_cache_hit\t2\ncache_miss\t3\nfoo\t9\n")
    assert launchers.stats_line("ccache", None, ccache) == "ccache: 7 hits, 3 misses"


def test_sccache_with_a_dist_scheduler_gets_the_plain_maps(tmp_path: Path) -> None:
    """A build server compiles without the preprocessor's options: distributing, the maps stay plain."""
    conf = tmp_path / "sccache.conf"
    conf.write_text('[dist]\nscheduler_url = "http://127.0.0.1:10600"\ntoolchains = []\n')
    var = launchers.MAPS_VIA_PREPROCESSOR_VAR
    assert launchers.construction_vars("sccache", ["sccache"], {"SCCACHE_CONF": str(conf)})[var] is False
    home = tmp_path / "home"
    (home / ".config" / "sccache").mkdir(parents=True)
    (home / ".config" / "sccache" / "config").write_text(conf.read_text())
    assert launchers.construction_vars("sccache", ["sccache"], {"HOME": str(home)})[var] is False
    for text in ("", "[cache.redis]\nendpoint = 'redis://127.0.0.1:1'\n", "[dist]\ntoolchains = []\n", "not toml ["):
        conf.write_text(text)
        assert launchers.construction_vars("sccache", ["sccache"], {"SCCACHE_CONF": str(conf)})[var] is True, text
    assert launchers.construction_vars("sccache", ["sccache"], {"HOME": str(tmp_path / "nobody")})[var] is True
