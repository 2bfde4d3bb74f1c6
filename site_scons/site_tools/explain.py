"""SCons tool: ``--debug=explain`` names the inputs that really changed.

SCons' explain asks each input's decider again, out of the context the real decision had; under
``content-timestamp`` (SConstruct) that call reports every input of a target as changed: one ``.c``
edit listed each header of its object and every member of the archive. This tool's explain compares
what the decision compares, each input's content signature against the one the last build recorded,
so an edited source reads "because the source changed" and an archive or link lists only the objects
that changed. Everything else (a new or removed dependency, a changed command) reads as SCons says it.

Construction variables read: none; set: none. Installing the tool replaces SCons's explain (through
opencoti_scons.engine, once per process).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import SCons.Node.FS

from opencoti_scons import engine


def _changed(node: Any, recorded: Any) -> bool:
    old = getattr(recorded, "csig", None)
    if isinstance(node, SCons.Node.FS.File) and old is not None:
        return node.get_csig() != old
    return engine.decider(node)(node, None, recorded)


def _explain(self: Any, _scons_explain: Callable[[Any], str | None]) -> str | None:
    if not self.exists() or self.always_build:
        return _scons_explain(self)
    stored = self.get_stored_info()
    binfo = getattr(stored, "binfo", None)
    if binfo is None:
        return _scons_explain(self)
    binfo.prepare_dependencies()
    try:
        then = list(zip(binfo.bsources + binfo.bdepends + binfo.bimplicit,
                        binfo.bsourcesigs + binfo.bdependsigs + binfo.bimplicitsigs))
    except AttributeError:
        return _scons_explain(self)
    new = self.get_binfo()
    kids = new.bsources + new.bdepends + new.bimplicit
    # position by position, as the decision compares them (an input may be listed twice, as a
    # source and a dependency: a dict of them would not line up)
    if len(kids) != len(then) or any(k != name for k, (name, _) in zip(kids, then)):
        return _scons_explain(self)  # a dependency came or went: SCons says which
    changed = list(dict.fromkeys(k for k, (_, sig) in zip(kids, then) if _changed(k, sig)))
    if not changed:
        return _scons_explain(self)  # the command, or the order of the inputs

    def name(node) -> str:
        return str(self.dir.Entry(node)) if hasattr(node, "dir") else str(node)

    if changed == list(self.sources[:1]) and len(changed) == 1:
        return f"rebuilding `{self}' because the source changed: `{name(changed[0])}'\n"
    if len(changed) == 1:
        return f"rebuilding `{self}' because `{name(changed[0])}' changed\n"
    return f"rebuilding `{self}' because these inputs changed:\n" + "".join(
        f"           `{name(k)}'\n" for k in changed)


def generate(env: Any) -> None:
    engine.install("explain", lambda scons_explain: lambda run, node: _explain(node, scons_explain))


def exists(env: Any) -> bool:
    return engine.supported()
