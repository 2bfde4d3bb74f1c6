"""The decider of the build: SCons's content-timestamp one, except that a compile whose objects follow its sources'
code alone stays current when a C or C++ source or header it reads changed only in comments or trailing blanks
(opencoti_build.incremental.code_signature).

A compile is marked so by its emitter (``env.DecidedByCode(targets)``, site_tools/code_decider.py) only where the compiler writes the same object for
the same code: gcc does (its debug info names files and lines, never their bytes); clang's DWARF 5 line tables carry
each source's MD5, so its compiles keep deciding by bytes. A file that changed is compared with the code signature of
the bytes the step's record names (what SCons keeps for each input of a step: its content signature), so each content
is scanned once, when first seen: the sources of every step this run compiled, at its end, and each changed file when
the decider meets it; and only when the file still holds the bytes SCons signed (a file edited since SCons read it,
within one timestamp tick say, is learned by a later run, never under the old signature). A step that is up to date records its inputs as they are now (SCons stores a visited target's
build info), so the next comparison starts from the edited bytes.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import SCons.Node

from opencoti_build.incremental.code_signature import SUFFIXES, KnownSignatures
from opencoti_scons import engine


def _code_source(node: Any) -> bool:
    """A C or C++ file no step writes (a generated one decides by its bytes)."""
    return not node.has_builder() and os.path.splitext(node.name)[1] in SUFFIXES


def _recorded_signature(target: Any, dependency: Any) -> str | None:
    """The content signature ``target``'s record holds for ``dependency`` (by its path, as SCons maps them)."""
    binfo = target.get_stored_info().binfo
    names = getattr(binfo, "bsources", []) + getattr(binfo, "bdepends", []) + getattr(binfo, "bimplicit", [])
    signatures = (getattr(binfo, "bsourcesigs", []) + getattr(binfo, "bdependsigs", [])
                  + getattr(binfo, "bimplicitsigs", []))
    for name, ninfo in zip(names, signatures):
        if str(name) == str(dependency):
            return getattr(ninfo, "csig", None)
    return None


class CodeDecider:
    """This run's decider (:meth:`decide`, for ``env.Decider``) and the known code signatures it reads and adds to."""

    def __init__(self, known: KnownSignatures) -> None:
        self.known = known
        self._marked: list[Any] = []  # the targets of compiles decided by code

    def mark(self, targets: Iterable[Any]) -> None:
        """The steps writing ``targets`` (compiles whose objects follow their sources' code alone) stay current when
        their C and C++ inputs changed only in comments or trailing blanks."""
        for target in targets:
            target.attributes.decided_by_code = True
            self._marked.append(target)

    def decide(self, dependency: Any, target: Any, prev_ni: Any, repo_node: Any = None) -> bool:
        """Whether ``dependency`` changed for ``target``: its stamp, then its content, then (for a marked compile and
        a C or C++ source) its code."""
        if not dependency.changed_timestamp_then_content(target, prev_ni, repo_node):
            return False
        if not getattr(target.attributes, "decided_by_code", False) or not _code_source(dependency):
            return True
        recorded = _recorded_signature(repo_node or target, dependency)
        before = self.known.known(recorded) if recorded else None
        now = self._learn(dependency, dependency.get_csig())
        return not before or not now or before != now

    def _learn(self, node: Any, csig: str) -> str | None:
        """The code signature of the content SCons signed ``csig`` for ``node``, learned from the file when unknown;
        None when the file no longer holds that content (edited since SCons read it: never learned under the old
        signature, so the next run compares what it finds then)."""
        known = self.known.known(csig)
        if known is not None:
            return known
        data = node.get_contents()
        if engine.content_signature(data) != csig:
            return None
        return self.known.learn(csig, data)

    def learn_compiled(self) -> None:
        """Learn the code signature of each C or C++ source of the marked compiles this run ran: the bytes their
        records now name, which the next change of them is compared with."""
        for target in self._marked:
            if target.get_state() != SCons.Node.executed:
                continue
            for child in target.children():
                csig = getattr(child.get_ninfo(), "csig", None) if _code_source(child) else None
                if csig:
                    self._learn(child, csig)

    def finish(self) -> None:
        """At the end of the run: learn what it compiled and save the table."""
        try:
            self.learn_compiled()
            self.known.save()
        except OSError:
            pass  # an unwritable table costs a compile of the next comment edit, never a wrong answer
