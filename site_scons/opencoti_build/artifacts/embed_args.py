"""The embedder's `.args`: the default defined once, a parser, and the check against the host binary.

llamafile reads `/zip/.args` with cosmo_args: shell-like words (spaces or newlines), `#`
comments, quotes; a lone `...` marks where the user's own arguments go.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from opencoti_build.errors import UserError
from opencoti_build.formats.host_strings import missing_strings

# The embedder's buildEmbedderArgs() (packages/opencoti-embedder/src/manager.ts), after `-m /zip/<model>`.
# --slot-initial-ctx and --slot-shrink-idle-ms exist only with the opencoti patch series compiled in.
EMBEDDER_OPTIONS: tuple[tuple[str, ...], ...] = (
    ("--server",),
    ("--embedding",),
    ("--pooling", "last"),
    ("--ctx-size", "16384"),
    ("--parallel", "2"),
    ("--slot-initial-ctx", "4096"),
    ("--slot-shrink-idle-ms", "30000"),
)

# The same embedder on llama.cpp's own server (a host built from LLAMACPP=, which reads .args through the project's
# main, host/zip_args.c): it is always a server, and has no slot options. It maps its model MAP_SHARED, which
# cosmopolitan's /zip/ file system refuses (EINVAL: it copies entries into private memory), so it reads it instead
# (`--load-mode none`, the ggml 0.25 series' spelling of --no-mmap).
LLAMA_SERVER_OPTIONS: tuple[tuple[str, ...], ...] = (
    ("--load-mode", "none"),
    ("--embedding",),
    ("--pooling", "last"),
    ("--ctx-size", "16384"),
    ("--parallel", "2"),
)
# Which options a generated .args gives, by the server the host runs.
SERVER_OPTIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    "llamafile": EMBEDDER_OPTIONS,
    "llama-server": LLAMA_SERVER_OPTIONS,
}

# The options only the opencoti patch series adds: a host lacking one of them lacks the series.
SERIES_OPTIONS: tuple[str, ...] = ("--slot-initial-ctx", "--slot-shrink-idle-ms")
MODEL_OPTIONS: tuple[str, ...] = ("-m", "--model")

ARGS_ENTRY = ".args"
_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9_-]*")


class ArgsError(UserError):
    """An .args file is unusable or asks for options the host lacks. One line naming the problem."""


def default_args(model_name: str, server: str = "llamafile") -> str:
    """The generated .args for a model embedded as ``model_name`` into a host running ``server`` (SERVER_OPTIONS):
    one option (and value) per line."""
    lines = [f"-m {shlex.quote('/zip/' + model_name)}"]
    lines += [" ".join(option) for option in SERVER_OPTIONS[server]]
    return "\n".join(lines) + "\n"


def parse_words(text: str, origin: str = ".args") -> list[str]:
    """The words of .args text, quotes removed and comments dropped."""
    try:
        return shlex.split(text, comments=True, posix=True)
    except ValueError as exc:  # unbalanced quotes or a trailing backslash
        raise ArgsError(f"{origin}: cannot parse: {exc}; balance its quotes") from exc


def options_used(words: list[str]) -> list[str]:
    """The option names the words use, in order, without repeats (``--opt=value`` counts as ``--opt``).

    A word that is a value ("-1", "/zip/x", "last") or the ``...`` marker is not an option.
    """
    found = (m.group(0) for m in map(_OPTION.fullmatch, (w.split("=", 1)[0] for w in words)) if m)
    return list(dict.fromkeys(found))


def zip_paths(words: list[str]) -> list[str]:
    """Entry names the words point at inside the artifact (``/zip/<name>``)."""
    return [w.split("=", 1)[-1][len("/zip/"):] for w in words if w.split("=", 1)[-1].startswith("/zip/")]


def model_paths(words: list[str]) -> list[str]:
    """The values the words give ``-m`` / ``--model`` (``--model=X`` too)."""
    found = []
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in MODEL_OPTIONS:
            if eq:
                found.append(value)
            elif i + 1 < len(words):
                found.append(words[i + 1])
    return found


def check_loads_model(words: list[str], model_name: str, origin: str = ".args") -> None:
    """ArgsError unless the words are not empty and load ``/zip/<model_name>`` with ``-m``."""
    wanted = shlex.quote("/zip/" + model_name)
    if not words:
        raise ArgsError(f"{origin} holds no arguments; the embedder needs at least `-m {wanted}` "
                        "(or leave ARGS out for the generated .args)")
    if "/zip/" + model_name not in model_paths(words):
        raise ArgsError(f"{origin} does not load the embedded model; add `-m {wanted}` to it")


def check_against_host(text: str, host: Path | str, origin: str = ".args") -> list[str]:
    """The options of ``text``; ArgsError naming the first ones ``host`` was not built with.

    An option the opencoti series adds (SERIES_OPTIONS) means the series is not compiled in; any
    other means the host has no such option at all (a typo, or HOST is no llamafile server).
    """
    options = options_used(parse_words(text, origin))
    missing = missing_strings(host, options)
    unknown = [o for o in missing if o not in SERIES_OPTIONS]
    if unknown:
        fix = ("fix or remove it in that file" if origin.startswith("ARGS=")
               else "point HOST= at a llamafile server binary")
        raise ArgsError(f"{origin} uses unknown option(s) {', '.join(unknown)}: host binary {host} has no such option; {fix}")
    if missing:
        raise ArgsError(
            f"{origin} uses {', '.join(missing)}, which host binary {host} does not know: the opencoti patch series "
            "is not compiled into it (run `scons apply` and rebuild, or package with ARGS= naming only its options)"
        )
    return options
