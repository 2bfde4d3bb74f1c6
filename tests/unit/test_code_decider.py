"""The decider's table of code signatures (opencoti_scons/code_decider.py): a content is learned only from the bytes
SCons signed, never from a file edited since SCons read it."""
from __future__ import annotations

from pathlib import Path

from opencoti_build.incremental.code_signature import KnownSignatures, signature
from opencoti_scons import engine
from opencoti_scons.code_decider import CodeDecider


class FileNode:
    """What the decider reads of a source node: its bytes now."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get_contents(self) -> bytes:
        return self.data


def test_a_file_edited_after_scons_signed_it_is_not_learned_under_the_old_signature(tmp_path: Path) -> None:
    decider = CodeDecider(KnownSignatures(str(tmp_path / KnownSignatures.FILE_NAME)))
    edited, reverted = b"#define VALUE 1\n", b"#define VALUE 0\n"
    signed = engine.content_signature(edited)  # SCons read the edit; the file was put back before the decider read it
    assert decider._learn(FileNode(reverted), signed) is None
    assert decider.known.known(signed) is None
    assert decider._learn(FileNode(edited), signed) == signature(edited)  # the bytes SCons signed: learned
    assert decider._learn(FileNode(reverted), signed) == signature(edited)  # known now: the file is not read
