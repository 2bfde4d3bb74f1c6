"""What a run left in the checkout (tests/leftovers.py, checked at every session's end by tests/conftest.py): new
``git status --porcelain --ignored`` entries, work in progress and the caches aside."""
from __future__ import annotations

import leftovers


def test_only_entries_the_run_added_are_leftovers_and_caches_are_none() -> None:
    before = frozenset({" M site_scons/opencoti_build/files.py", "?? host/new-work/", "!! build/"})
    after = before | {
        "!! .sconsign.dblite", "?? --help", "!! key.pem", " M SConstruct",
        "!! .pytest_cache/", "!! .mypy_cache/", "!! site_scons/opencoti_build/__pycache__/", '!! "tests/__pycache__/"',
    }
    assert leftovers.left(before, after) == [" M SConstruct", "!! .sconsign.dblite", "!! key.pem", "?? --help"]


def test_what_was_there_and_went_is_no_leftover() -> None:
    assert leftovers.left(frozenset({"!! build/", "?? notes.txt"}), frozenset()) == []
