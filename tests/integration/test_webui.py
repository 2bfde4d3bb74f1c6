"""The server's web UI (opencoti_build.tree.webui): compiled in when tools/server/public/ has the assets."""
from __future__ import annotations

import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from opencoti_build.report import summary
from opencoti_build.tree import webui

from native_support import free_port
from samples import WEBUI_ASSETS, give_webui_assets
from scons_runs import MINI_TREE, scons


def get(program: Path, *args: str, paths: tuple[str, ...] = ("/",)) -> dict[str, tuple[int, bytes]]:
    """Start ``program … --port P`` (it answers one request per start), GET each path, stop it by PID."""
    answers = {}
    for path in paths:
        port = free_port()
        proc = subprocess.Popen([str(program), *args, "--port", str(port)], stdout=subprocess.PIPE, text=True)
        try:
            assert "listening" in proc.stdout.readline() + proc.stdout.readline()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                    answers[path] = (response.status, response.read())
            except urllib.error.HTTPError as exc:
                answers[path] = (exc.code, b"")
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
    return answers


def test_a_header_holds_the_assets_bytes_as_gcc_reads_them(tmp_path: Path) -> None:
    for name, data in WEBUI_ASSETS.items():
        (tmp_path / f"{name}.hpp").write_text(webui.header_text(name, data))
        var = webui.variable(name)
        (tmp_path / "dump.c").write_text(f'#include <stdio.h>\n#include "{name}.hpp"\n'
                                         f"int main(void) {{ fwrite({var}, 1, {var}_len, stdout); return 0; }}\n")
        subprocess.run(["gcc", "-o", tmp_path / "dump", tmp_path / "dump.c"], check=True)
        assert subprocess.run([tmp_path / "dump"], capture_output=True).stdout == data, name
    assert webui.variable("bundle.js") == "bundle_js" and webui.variable("loading-x.html") == "loading_x_html"


def test_a_tree_with_the_assets_compiles_the_server_with_the_ui(tree: Path, tmp_path: Path, built_mini: Path) -> None:
    give_webui_assets(tree)
    proc = scons(f"SRC={tree}", "VERBOSE=1", f"CACHE_DIR={built_mini / 'cache'}", build=tmp_path / "b")
    compiles = [line for line in summary.unprefixed(proc.stdout) if " -c -o " in line]
    with_ui = sorted({line.rsplit("/", 1)[-1] for line in compiles if "-DLLAMA_BUILD_WEBUI" in line})
    assert with_ui == ["server-common.cpp", "server.cpp"], with_ui
    gen = tmp_path / "b/out/o/gen"
    for name, data in WEBUI_ASSETS.items():
        assert (gen / f"{name}.hpp").read_text() == webui.header_text(name, data)
    assert "NOTE: web UI off" not in proc.stdout
    # the thin binary (an x86-64 ELF with the stand-in) serves them
    answers = get(tmp_path / "b/out/o/llamafile/llamafile", "--server", paths=("/", "/bundle.js"))
    assert answers == {"/": (200, WEBUI_ASSETS["index.html"]), "/bundle.js": (200, WEBUI_ASSETS["bundle.js"])}


def test_the_native_lanes_server_returns_the_ui_for_get_slash(tree: Path, tmp_path: Path) -> None:
    give_webui_assets(tree)
    scons("native", f"SRC={tree}", "CPU_ONLY=1", build=tmp_path / "b")
    server = tmp_path / "b/out/native/bin/llama-server"
    assert get(server, paths=("/", "/loading.html")) == {
        "/": (200, WEBUI_ASSETS["index.html"]), "/loading.html": (200, WEBUI_ASSETS["loading.html"])}


def test_a_tree_without_them_builds_without_the_ui_and_says_so_once(tmp_path: Path) -> None:
    proc = scons("-n", "VERBOSE=1", f"SRC={MINI_TREE}", "CACHE_DIR=", build=tmp_path / "b")
    notes = [line for line in proc.stdout.splitlines() if line.startswith("NOTE: web UI off")]
    assert notes == [f"NOTE: web UI off: {MINI_TREE / webui.PUBLIC} has none of index.html, bundle.js, bundle.css, "
                     "loading.html (llama.cpp's fetch-ui-assets.sh fetches them); the server is built without its bundled UI"]
    assert "-DLLAMA_BUILD_WEBUI" not in proc.stdout
