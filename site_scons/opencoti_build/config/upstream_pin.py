"""What this build describes, pinned in one place: the upstream llamafile release and its cosmocc.

The submodule gitlink (vendors/sources/llamafile in .gitmodules and the index) must name
LLAMAFILE_COMMIT; tests/integration/test_provision.py checks that the two agree. docs/source-description.md
says what was read at which commit.
"""
from __future__ import annotations

# mozilla-ai/llamafile's release commit "New release version: update version.h and docs (#952)",
# 2026-04-30, whose llamafile/version.h says 0.10.1 (the version docs/source-description.md maps).
LLAMAFILE_VERSION = "0.10.1"
LLAMAFILE_COMMIT = "6490e16f7a8fb7d8a0a0734b41490c3f8db78763"
LLAMAFILE_URL = "https://github.com/mozilla-ai/llamafile.git"
LLAMAFILE_PATH = "vendors/sources/llamafile"

# upstream's Makefile: `.cosmocc/4.0.2: build/download-cosmocc.sh $@ 4.0.2 85b8c37a…`
COSMOCC_VERSION = "4.0.2"
COSMOCC_SHA256 = "85b8c37a406d862e656ad4ec14be9f6ce474c1b436b9615e91a55208aced3f44"
# build/download-cosmocc.sh's two URLs, tried in this order.
COSMOCC_URLS: tuple[str, ...] = (
    "https://github.com/jart/cosmopolitan/releases/download/{version}/cosmocc-{version}.zip",
    "https://cosmo.zip/pub/cosmocc/cosmocc-{version}.zip",
)


def cosmocc_urls(version: str = COSMOCC_VERSION) -> list[str]:
    return [url.format(version=version) for url in COSMOCC_URLS]
