"""The server's bundled web UI, compiled in as upstream does when its assets are in the tree.

llama.cpp/BUILD.mk turns each asset of ``llama.cpp/tools/server/public/`` (what llama.cpp's
``fetch-ui-assets.sh`` downloads) into ``<asset>.hpp``, an ``unsigned char <name>[]`` array and
its ``<name>_len`` (od + awk there; a Python builder here, byte for byte the same array), and
compiles the server objects and server.cpp with ``-DLLAMA_BUILD_WEBUI`` so they include them.
Without the assets the server is built without its UI, as before, and the build says so once.
"""
from __future__ import annotations

import re
from pathlib import Path

from opencoti_build.errors import UserError
from opencoti_build.tree.sources import tree_file

PUBLIC = "llama.cpp/tools/server/public"
ASSETS: tuple[str, ...] = ("index.html", "bundle.js", "bundle.css", "loading.html")  # BUILD.mk's SERVER_ASSETS
DEFINE = "LLAMA_BUILD_WEBUI"
SERVER_MAIN = "llama.cpp/tools/server/server.cpp"
SERVER_PACKAGE = "server"


class WebUiError(UserError):
    """Part of the UI's assets is there. One line."""


def enabled(root: Path | str, llama: Path | str | None = None) -> bool:
    """True when the tree holds every asset; False (UI off) when it holds none of them.

    ``llama``: where ``llama.cpp/`` lies when it is not ``root/llama.cpp`` (sources.tree_file)."""
    public = tree_file(root, PUBLIC, llama)
    present = [a for a in ASSETS if (public / a).is_file()]
    if present and len(present) < len(ASSETS):
        missing = ", ".join(a for a in ASSETS if a not in present)
        raise WebUiError(f"{public} holds {', '.join(present)} but not {missing}; fetch the web UI "
                         "again (llama.cpp's fetch-ui-assets.sh) or remove its assets to build without it")
    return bool(present)


def off_note(public: Path | str) -> str:
    """The NOTE a build without the UI prints, naming the ``public`` dir (said once a run: BuildRun.note)."""
    return (f"NOTE: web UI off: {public} has none of {', '.join(ASSETS)} (llama.cpp's "
            "fetch-ui-assets.sh fetches them); the server is built without its bundled UI")


def applies(package: str, rel: str) -> bool:
    """Does this compile get -DLLAMA_BUILD_WEBUI (upstream: the server objects and server.cpp)?"""
    return package == SERVER_PACKAGE or rel == SERVER_MAIN


def variable(asset: str) -> str:
    """The array's name, as BUILD.mk's ``sed 's/[.-]/_/g'`` of the file name."""
    return re.sub(r"[.-]", "_", Path(asset).name)


def header_text(asset: str, data: bytes) -> str:
    """``<asset>.hpp``: the asset's bytes as a C array and its length (upstream's layout, 16 bytes a line)."""
    name = variable(asset)
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    return f"unsigned char {name}[] = {{\n" + ",\n".join(rows) + f"\n}};\nunsigned int {name}_len = sizeof({name});\n"


def write_header(asset: Path | str, output: Path | str) -> None:
    """Write ``output`` (``<asset>.hpp``) beside itself and rename it into place."""
    import os

    asset, output = Path(asset), Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(header_text(asset.name, asset.read_bytes()))
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
