"""What a run changed in the checkout (tests/leftovers.py, checked at every session's end by tests/conftest.py): new
``git status --porcelain --ignored`` entries and ignored ones that went, work in progress and the caches aside."""
from __future__ import annotations

import leftovers


def test_only_entries_the_run_added_are_leftovers_and_caches_are_none() -> None:
    before = frozenset({" M site_scons/opencoti_build/files.py", "?? host/new-work/", "!! build/"})
    after = before | {
        "!! .sconsign.dblite", "?? --help", "!! key.pem", " M SConstruct",
        "!! .pytest_cache/", "!! .mypy_cache/", "!! site_scons/opencoti_build/__pycache__/", '!! "tests/__pycache__/"',
    }
    assert leftovers.left(before, after) == [" M SConstruct", "!! .sconsign.dblite", "!! key.pem", "?? --help"]


def test_an_ignored_entry_that_went_is_one_and_a_commit_made_meanwhile_is_none() -> None:
    before = frozenset({"!! build/", "!! compile_commands.json", "!! .mypy_cache/", "?? notes.txt", " M README.md"})
    assert leftovers.left(before, frozenset({"!! build/"})) == ["gone: !! compile_commands.json"]
