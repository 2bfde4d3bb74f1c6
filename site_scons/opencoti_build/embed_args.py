"""The embedder's `.args`: the default defined once, a parser, and the check against the host binary.

llamafile reads `/zip/.args` with cosmo_args: shell-like words (spaces or newlines), `#`
comments, quotes; a lone `...` marks where the user's own arguments go.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from opencoti_build.host_strings import missing_strings

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

ARGS_ENTRY = ".args"
_OPTION = re.compile(r"--?[A-Za-z][A-Za-z0-9_-]*")


class ArgsError(ValueError):
    """An .args file is unusable or asks for options the host lacks. One line naming the problem."""


def default_args(model_name: str) -> str:
    """The generated .args for a model embedded as ``model_name``: one option (and value) per line."""
    lines = [f"-m {shlex.quote('/zip/' + model_name)}"]
    lines += [" ".join(option) for option in EMBEDDER_OPTIONS]
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


def check_against_host(text: str, host: Path | str, origin: str = ".args") -> list[str]:
    """The options of ``text``; ArgsError naming the first one ``host`` was not built with."""
    options = options_used(parse_words(text, origin))
    missing = missing_strings(host, options)
    if missing:
        raise ArgsError(
            f"{origin} uses {', '.join(missing)}, which host binary {host} does not know: the opencoti patch series "
            "is not compiled into it (run `scons apply` and rebuild, or package with ARGS= naming only its options)"
        )
    return options
