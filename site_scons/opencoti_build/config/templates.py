"""The files upstream generates from ``*.in`` templates (CMake's configure_file, BUILD.mk's sed), for both lanes.

Written reproducibly: the description's version stamps (sources.tree_stamps), build number 0, no
clock, and no web UI assets (they are a separate npm build that is not vendored).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from opencoti_build.errors import UserError
from opencoti_build.tree.sources import LLAMA


class TemplateError(UserError):
    """A template uses a variable no lane defines."""


@dataclass(frozen=True)
class Generated:
    """A file configured from ``template``; ``package`` compiles it (None: a header)."""

    template: str  # description-relative (llama.cpp/...)
    output: str  # file name in the lane's generated directory
    package: str | None = None


GENERATED: tuple[Generated, ...] = (
    Generated(f"{LLAMA}/ggml/src/ggml-version.h.in", "ggml-version.h"),
    Generated(f"{LLAMA}/src/llama-version.h.in", "llama-version.h"),
    Generated(f"{LLAMA}/common/build-info.cpp.in", "build-info.cpp", "common"),
    Generated(f"{LLAMA}/tools/ui/ui.h.in", "ui.h"),
    Generated(f"{LLAMA}/tools/ui/ui.cpp.in", "ui.cpp", "server"),
)


def template_values(stamps: Mapping[str, str], compiler: str, target: str) -> dict[str, str]:
    """The values the templates use; ``compiler``/``target`` are what the build-info reports."""
    return {
        "GGML_VERSION": stamps["GGML_VERSION"], "GGML_BUILD_COMMIT": stamps["GGML_COMMIT"],
        "LLAMA_VERSION": stamps["LLAMA_VERSION"],
        "LLAMA_BUILD_NUMBER": "0", "LLAMA_BUILD_COMMIT": stamps["LLAMA_COMMIT"],
        "BUILD_COMPILER": compiler, "BUILD_TARGET": target,
        "N_ASSETS": "0", "ASSET_ARRAYS": "", "ASSET_TABLE": "", "USE_GZIP": "false",
        "LLAMA_UI_HAS_ASSETS": "",
    }


def configure_template(text: str, values: Mapping[str, str]) -> str:
    """CMake ``configure_file(@ONLY)``: ``@VAR@`` replaced, ``#cmakedefine VAR …`` defined when VAR is non-empty."""
    def value(name: str) -> str:
        if name not in values:
            raise TemplateError(f"template variable {name} has no value; add it to "
                                f"template_values in site_scons/opencoti_build/config/templates.py")
        return values[name]

    def cmakedefine(match: re.Match[str]) -> str:
        name, rest = match.group(1), match.group(2)
        return f"#define {name}{rest}" if value(name) else f"/* #undef {name} */"

    text = re.sub(r"^#cmakedefine\s+(\w+)(.*)$", cmakedefine, text, flags=re.MULTILINE)
    return re.sub(r"@(\w+)@", lambda m: value(m.group(1)), text)


def write_configured(template: str, output: str, values: Mapping[str, str]) -> None:
    """Configure ``template`` into ``output`` (both lanes' generate action)."""
    with open(template, encoding="utf-8") as fh:
        text = configure_template(fh.read(), values)
    with open(output, "w", encoding="utf-8") as fh:
        fh.write(text)
