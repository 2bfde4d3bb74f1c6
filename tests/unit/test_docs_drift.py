"""The README, docs/ and `scons -h` say what the code does: every version, tag, path default, variable and environment
variable they name comes from (or is checked against) the one place that defines it, so an edit of that place
that leaves a document behind fails here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from opencoti_build.config import buildvars, targets, upstream_pin, versioning
from opencoti_build.gpu.toolchains import cuda

PROJECT = Path(__file__).resolve().parents[2]
DOCS = [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]
HELP = buildvars.HELP_TARGETS + "\n".join(f"{v.name}: {v.help} ({v.default})" for v in buildvars.VARIABLES)
TAG = versioning.opencoti_tag(PROJECT / "vendors" / "llamafile" / "OPENCOTI_TAG")
# the versions a build here can carry: the pinned upstream (the default SRC) and the miniature tree's
VERSIONS = {upstream_pin.LLAMAFILE_VERSION, versioning.llamafile_version(PROJECT / buildvars.MINI_TREE)}


def texts() -> list[tuple[str, str]]:
    return [(str(p.relative_to(PROJECT)), p.read_text()) for p in DOCS] + [("scons -h", HELP)]


def found(pattern: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(where, m.groups()) for where, text in texts() for m in re.finditer(pattern, text)]


def test_artifact_names_carry_a_version_a_build_makes_and_the_current_tag() -> None:
    names = found(r"opencoti-llamafile-(\d+\.\d+\.\d+)-(c\d+)-")
    assert names, "no artifact name in the docs: the pattern is stale"
    assert [(w, g) for w, g in names if g[0] not in VERSIONS or g[1] != TAG] == []
    versions = found(r"opencoti-embedder-(\d+\.\d+\.\d+)-") + found(r"llamafile/(?:cuda|rocm|vulkan)/(\d+\.\d+\.\d+)/")
    assert versions and [(w, g) for w, g in versions if g[0] not in VERSIONS] == []


def test_llamafile_and_cosmocc_versions_are_the_pinned_ones() -> None:
    llamafile = found(r"\b(0\.10\.\d+)\b")  # llamafile 0.10's releases
    assert llamafile and [(w, g) for w, g in llamafile if g[0] not in VERSIONS] == []
    cosmocc = found(r"cosmocc[ -/](\d+\.\d+\.\d+)") + found(r"\.cosmocc/\.?(\d+\.\d+\.\d+)")
    assert cosmocc and [(w, g) for w, g in cosmocc if g[0] != upstream_pin.COSMOCC_VERSION] == []


def test_the_default_cuda_toolkit_is_the_one_searched_first() -> None:
    named = found(r"(?<!CUDA_PATH=)(/usr/local/cuda-\d+\.\d+)\b")  # not a CUDA_PATH= given as an example
    assert named and [(w, g) for w, g in named if g[0] != cuda.DEFAULT_CUDA_PATH] == []


def test_every_environment_variable_named_is_one_the_code_reads() -> None:
    sources = [PROJECT / "SConstruct", *PROJECT.glob("*/SConscript"), *PROJECT.glob("*.SConscript"),
               *(PROJECT / "site_scons").rglob("*.py"), *(PROJECT / "scripts").iterdir(), *(PROJECT / ".ci").iterdir(),
               *(PROJECT / "tests").rglob("*.py"), *(PROJECT / "bench").rglob("*.py")]
    code = "\n".join(p.read_text(errors="replace") for p in sources if p.is_file() and p != Path(__file__))
    code += "\n".join(str(p) for p in (PROJECT / "vendors").rglob("*"))  # files named after one (OPENCOTI_TAG)
    named = {g[0] for _, g in found(r"\b(OPENCOTI_[A-Z0-9_]+)")}
    assert named and sorted(name for name in named if name not in code) == []


SCONS_LINE = re.compile(r"^\s*(?:\$ )?scons\b(.*)$", re.M)


def test_every_variable_on_a_documented_scons_line_exists_and_every_variable_is_documented() -> None:
    known = {v.name for v in buildvars.VARIABLES}
    given: set[tuple[str, str]] = set()
    for where, text in texts():
        for line in SCONS_LINE.findall(text):
            command = line.split("#", 1)[0]
            given |= {(where, name) for name in re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]*)=", command)}
    assert given and sorted((w, n) for w, n in given if n not in known) == []
    docs = "\n".join(text for _, text in texts()[:-1])
    assert sorted(name for name in known if not re.search(rf"\b{name}\b", docs)) == []


@pytest.mark.parametrize("name", targets.NAMES)
def test_every_target_is_in_the_help(name: str) -> None:
    assert re.search(rf"^  {re.escape(name)}\b", buildvars.HELP_TARGETS, re.M), name
