"""SCons tool: the files upstream generates from ``*.in`` templates (CMake's configure_file), for both lanes.

``env.ConfigureTemplate(output, template, TEMPLATE_VALUES=values)`` writes one file
(opencoti_build.config.templates.write_configured); the values are part of its signature (``varlist``), so a
changed value rewrites the file. ``env.ConfigureTemplates(gendir, locate, values)`` configures every
template of ``templates.GENERATED`` the tree has (``locate`` maps a description path to a file) into
``gendir`` and returns package name -> the generated sources it compiles.

Construction variables read: TEMPLATE_VALUES (a dict, template variable -> value, in a fixed order:
templates.template_values). Sets: none.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import SCons.Action
import SCons.Builder

from opencoti_build.config import templates


def _configure(target: list[Any], source: list[Any], env: Any) -> None:
    templates.write_configured(str(source[0]), str(target[0]), env["TEMPLATE_VALUES"])


def configure_templates(env: Any, gendir: str, locate: Callable[[str], str],
                        values: Mapping[str, str]) -> dict[str, list[Any]]:
    generated: dict[str, list[Any]] = {}
    for gen in templates.GENERATED:
        template = locate(gen.template)
        if not os.path.isfile(template):
            continue  # an older tree without it
        node = env.ConfigureTemplate(os.path.join(gendir, gen.output), template, TEMPLATE_VALUES=dict(values))
        if gen.package:
            generated.setdefault(gen.package, []).extend(node)
    return generated


def generate(env: Any) -> None:
    env["BUILDERS"]["ConfigureTemplate"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_configure, "CONFIGURE $TARGET", varlist=["TEMPLATE_VALUES"]), single_source=True)
    env.AddMethod(configure_templates, "ConfigureTemplates")


def exists(env: Any) -> bool:
    return True  # plain Python over opencoti_build.config.templates: no program to find
