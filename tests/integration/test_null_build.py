"""The null build's fast path (opencoti_build/incremental/null_build/) on a private checkout, case by case: what it
prints, a header shadowing another in a search path, a stale DSO under HOME. The seeded differential test
against a full SCons evaluation is tests/soak/test_null_build.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from null_build_checkout import Checkout, append_text
from scons_runs import MINI_VERSION, clone, summary


def test_fast_path_prints_what_a_full_null_build_prints(tmp_path: Path) -> None:
    co = Checkout(clone(tmp_path / "co"))
    co.run(check=True)
    full = co.run("--debug=explain", check=True)  # an option that always takes the full path
    before, why = co.record_stat(), co.why_not_fast()
    assert why is None, f"the run after a null build would take the full path: {why}"
    fast = co.run(check=True)
    assert co.record_stat() == before, "the run after a null build did not take the fast path"
    strip = [line for line in full.stdout.splitlines()
             if not line.startswith("scons: rebuilding") and " up to date in " not in line]
    assert [line for line in fast.stdout.splitlines() if " up to date in " not in line] == strip
    assert fast.stderr == full.stderr
    assert summary.parse(fast.stdout) == summary.parse(full.stdout)


@pytest.mark.skipif(not shutil.which("glslc"), reason="builds the Vulkan DSO (glslc)")
def test_a_header_appearing_earlier_in_a_search_path_is_found_by_an_edit_build(tmp_path: Path) -> None:
    """An edit build reuses the last run's reading and, while no searched directory changed, SCons' scanned
    includes: a llama.h appearing in a directory main.cpp searches first must still reach main.cpp."""
    co = Checkout(clone(tmp_path / "co"))
    co.run(check=True)
    header = co.tree / "llama.cpp" / "ggml" / "src" / "ggml-cpu" / "simd-mappings.h"  # not one main.cpp includes
    append_text(header, "\n#define OPENCOTI_EDIT 1\n")  # an edit build: the reading is the last run's
    edited = co.run(check=True)
    assert summary.parse(edited.stdout)["compiled"] > 0
    shadow = co.tree / "llama.cpp" / "common" / "llama.h"
    shadow.write_text((co.tree / "llama.cpp" / "include" / "llama.h").read_text(encoding="utf-8")
                      + "\n#define OPENCOTI_SHADOW 1\n", encoding="utf-8")
    append_text(header, "\n#define OPENCOTI_EDIT 2\n")
    build = co.run(check=True)
    assert any("llamafile/main.cpp" in line for line in summary.unprefixed(build.stdout)), \
        "main.cpp was not recompiled after a llama.h appeared earlier in its search path"
    assert co.run("-q").returncode == 0, "not current after the build (a full scan finds more)"


@pytest.mark.skipif(not shutil.which("glslc"), reason="builds the Vulkan DSO (glslc)")
def test_a_stale_home_dso_is_reported_when_it_appears_and_a_backend_can_be_current(tmp_path: Path) -> None:
    co = Checkout(clone(tmp_path / "co"))
    co.run(check=True)
    assert co.run("-q").returncode == 0, "scons -q never finds a backend current (a check that always runs)"
    stale = tmp_path / "co" / "home" / "ggml-vulkan.so"
    stale.write_bytes(b"left by an old vulkan.sh")
    assert co.run("-q").returncode == 1, "a stale $HOME/ggml-vulkan.so appearing is not a change"
    warned = co.run(check=True)
    assert warned.stderr.splitlines() == [
        f"WARN: {stale} differs from the ggml-vulkan.so just built and may be loaded instead of it; "
        "delete it or copy the new one over it"]
    assert summary.parse(warned.stdout)["compiled"] == 0  # only the check ran, not the DSO's build
    assert co.run("-q").returncode == 0
    stale.unlink()
    assert co.run(check=True).stderr == ""
    # the first place llamafile loads from: without MIRROR=1 an older copy there is left, and said to be stale
    built = tmp_path / "co" / "out-vendors" / "llamafile" / "vulkan" / MINI_VERSION / "ggml-vulkan.so"
    mirror = tmp_path / "co" / "home" / ".llamafile" / "v" / MINI_VERSION / "ggml-vulkan.so"
    mirror.parent.mkdir(parents=True)
    mirror.write_bytes(b"an older build's copy")
    assert co.run(check=True).stderr.splitlines() == [
        f"WARN: {mirror} differs from the ggml-vulkan.so just built, and llamafile loads that copy first: build with "
        "MIRROR=1 to put this one there, or delete it"]
    assert co.run("MIRROR=1", check=True).stderr == "" and mirror.read_bytes() == built.read_bytes()
