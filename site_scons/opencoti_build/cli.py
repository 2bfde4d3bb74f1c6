"""`opencoti-build` (or `python -m opencoti_build`): inspect, verify and pin built artifacts; run the build server."""
from __future__ import annotations

import importlib
import sys

# subcommand -> (module, function, one-line help); each function takes the parsed argv tail.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "inspect": ("opencoti_build.artifacts.binary_report", "main", "print architectures, symbols and entries of a DSO or host binary"),
    "verify": ("opencoti_build.artifacts.verify", "main", "check a .llamafile artifact against its MANIFEST.json"),
    "pin": ("opencoti_build.artifacts.verify", "pin_main", "print the vendors/pin/embedder.txt line for an artifact"),
    "serve": ("opencoti_scons.server_hooks", "main", "start the resident build server for this checkout and KEY=VALUE variables"),
    "build": ("opencoti_build.server.client", "build_main", "build through the server (a plain scons run when none serves)"),
    "stop": ("opencoti_build.server.client", "stop_main", "stop the build server for this checkout and KEY=VALUE "
             "variables; with none, every server of this checkout, each named"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:  # no argparse on this path: `build` is what a null request's time is made of
        module_name, function, _ = COMMANDS[argv[0]]
        return int(getattr(importlib.import_module(module_name), function)(argv[1:]) or 0)
    import argparse

    parser = argparse.ArgumentParser(prog="opencoti-build", description=__doc__.replace("`", ""))  # plain in --help
    parser.add_argument("command", choices=sorted(COMMANDS), help="; ".join(f"{k}: {v[2]}" for k, v in sorted(COMMANDS.items())))
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    module_name, function, _ = COMMANDS[ns.command]
    return int(getattr(importlib.import_module(module_name), function)(ns.args) or 0)
