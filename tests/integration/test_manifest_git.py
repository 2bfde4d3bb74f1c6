"""The manifest's gitCommit: the checkout's HEAD from a real git, or "unknown" (manifest.git_commit)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from opencoti_build.artifacts import manifest

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]


def test_the_commit_is_heads_full_hash_or_unknown(tmp_path: Path, monkeypatch) -> None:
    assert manifest.git_commit(tmp_path) == "unknown"  # no checkout
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert manifest.git_commit(tmp_path) == "unknown"  # a checkout without a commit
    subprocess.run(["git", *IDENTITY, "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert len(head) == 40 and manifest.git_commit(tmp_path) == head
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no git at all
    assert manifest.git_commit(tmp_path) == "unknown"
