"""The code that writes artifacts and manifests is their input: an edit to any module of it redoes them.

In-process checks of the core here; the real builds and tools: tests/integration/test_package_code.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.incremental import import_closure

PACKAGE_DIR = import_closure.PACKAGE_DIR


def relative(paths: list[Path]) -> set[str]:
    return {p.relative_to(PACKAGE_DIR).as_posix() for p in paths}


def test_closure_follows_imports_lazy_ones_and_packages_included() -> None:
    files = relative(import_closure.source_files("opencoti_build.artifacts.manifest"))
    # manifest -> backends (the registry) -> the readers it imports inside its functions
    assert {"artifacts/manifest.py", "gpu/backends.py", "config/versioning.py", "formats/nvfatbin.py",
            "formats/hipbundle.py", "formats/spirv.py", "formats/__init__.py", "artifacts/__init__.py",
            "__init__.py"} <= files
    assert "artifacts/packaging.py" not in files and "config/provision.py" not in files


def test_modules_outside_the_package_are_not_followed(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import os\nfrom SCons.Script import Action\nfrom opencoti_build import errors as e\n"
                      "def f():\n    from opencoti_build.formats import spirv\n")
    assert import_closure.imported_names(source) == {
        "opencoti_build", "opencoti_build.errors", "opencoti_build.formats", "opencoti_build.formats.spirv"}


def test_an_import_in_any_nested_block_is_found(tmp_path: Path) -> None:
    source = tmp_path / "nested.py"
    source.write_text(
        "try:\n    import opencoti_build.a\nexcept ImportError:\n    import opencoti_build.b\nelse:\n"
        "    import opencoti_build.c\nfinally:\n    import opencoti_build.d\n"
        "class K:\n    import opencoti_build.e\n    def m(self):\n        if x:\n            pass\n"
        "        elif y:\n            import opencoti_build.f\n        else:\n            import opencoti_build.g\n"
        "async def h():\n    async with z:\n        import opencoti_build.i\n    async for q in r:\n        pass\n"
        "    else:\n        import opencoti_build.j\n"
        "while w:\n    with v:\n        import opencoti_build.k\n"
        "match m:\n    case 1:\n        import opencoti_build.l\n"
        "f = lambda: __import__('opencoti_build.not_a_statement')\n")
    assert import_closure.imported_names(source) == {f"opencoti_build.{m}" for m in "abcdefgijkl"}


class Memo(dict):
    """An ImportMemo over a dict (the build's is opencoti_build.cache.file_digests.Digests)."""

    def imported_names(self, source_sha256: str) -> list[str] | None:
        return self.get(source_sha256)

    def remember_imports(self, source_sha256: str, names: list[str]) -> None:
        self[source_sha256] = names


def test_a_memo_answers_for_the_same_bytes_and_is_not_asked_for_others(tmp_path: Path, monkeypatch) -> None:
    source = tmp_path / "m.py"
    source.write_text("from opencoti_build import errors\n")
    memo = Memo()
    assert import_closure.imported_names(source, memo) == {"opencoti_build", "opencoti_build.errors"}
    assert list(memo.values()) == [["opencoti_build", "opencoti_build.errors"]]
    monkeypatch.setattr(import_closure.ast, "parse", lambda *a: pytest.fail("parsed bytes the memo knows"))
    memo[next(iter(memo))] = ["opencoti_build.remembered"]  # what the memo says is what counts
    assert import_closure.imported_names(source, memo) == {"opencoti_build.remembered"}
    monkeypatch.undo()
    source.write_text("from opencoti_build import tempfiles\n")  # other bytes: parsed, not the memo's answer
    assert import_closure.imported_names(source, memo) == {"opencoti_build", "opencoti_build.tempfiles"}
    assert len(memo) == 2
