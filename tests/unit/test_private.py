"""BUILD_DIR's bookkeeping is the user's alone and holds no secret (opencoti_build/incremental/private.py), and the
null build's record keeps keyed digests of the settings, never their values."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import SCons

from opencoti_build.incremental import null_build, private
from opencoti_build.incremental.null_build import record as record_mod

RUNNING = null_build.interpreter(SCons.__version__)
SECRET = "tok-7f3a9c"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    """The loosest umask: the modes must not depend on it."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_bookkeeping_is_written_whole_and_for_the_user_alone(tmp_path: Path, open_umask) -> None:
    path = tmp_path / "record"
    path.write_bytes(b"old")
    path.chmod(0o666)
    private.write(path, b"new bytes")
    assert path.read_bytes() == b"new bytes" and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["record"]  # no temporary left beside it
    private.make_dir(tmp_path / "build" / "tmp")
    assert mode(tmp_path / "build" / "tmp") == 0o700 and mode(tmp_path / "build") == 0o777  # only the directory asked
    (tmp_path / "build" / "tmp").chmod(0o755)
    private.make_dir(tmp_path / "build" / "tmp")
    assert mode(tmp_path / "build" / "tmp") == 0o700


def test_the_key_is_made_once_kept_private_and_replaced_when_damaged(tmp_path: Path, open_umask) -> None:
    where = tmp_path / ".null-build.key"
    assert private.read_key(where) is None
    first = private.key(where)
    assert len(first) == private.KEY_BYTES and mode(where) == 0o600
    assert private.key(where) == first == private.read_key(where)  # the same key every run after
    assert private.key(tmp_path / "other.key") != first  # each build directory its own
    where.write_bytes(b"short")
    assert private.read_key(where) is None
    second = private.key(where)
    assert second != first and private.read_key(where) == second and mode(where) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [".null-build.key", "other.key"]


def test_a_digest_is_keyed_and_says_nothing_of_the_value() -> None:
    one, two = bytes(32), bytes(range(32))
    assert private.digest(one, SECRET) == private.digest(one, SECRET) != private.digest(two, SECRET)
    assert private.digest(one, SECRET) != private.digest(one, SECRET + "x")
    assert SECRET not in private.digest(one, SECRET) and private.digest(one, "\udcff").startswith("hmac-sha256:")
    args = private.digested_arguments(one, ["-j", "4", "--directory=/co", "host", f"CACHE_URL=redis://:{SECRET}@h:1"])
    assert args[:4] == ["-j", "4", "--directory=/co", "host"]
    assert args[4] == "CACHE_URL=" + private.digest(one, f"redis://:{SECRET}@h:1")
    assert private.digested_environment(one, {"CI_TOKEN": SECRET}) == {"CI_TOKEN": private.digest(one, SECRET)}


@pytest.mark.parametrize(("arg", "shown"), [
    (f"CACHE_URL=redis://:{SECRET}@127.0.0.1:6379/2", "CACHE_URL=redis://:***@127.0.0.1:6379/2"),
    (f"CACHE_URL=rediss://user:{SECRET}@cache.example:6380", "CACHE_URL=rediss://user:***@cache.example:6380"),
    ("CACHE_URL=redis://127.0.0.1:6379", "CACHE_URL=redis://127.0.0.1:6379"),
    ("SRC=/co/tree", "SRC=/co/tree"), ("host", "host"), ("CACHE_URL=redis://[::1", "CACHE_URL=redis://[::1"),
])
def test_a_command_line_for_a_log_shows_no_password(arg: str, shown: str) -> None:
    assert private.shown(["-Q", arg]) == ["-Q", shown]


def test_the_record_keeps_digests_of_the_settings_and_is_the_users_alone(tmp_path: Path, monkeypatch,
                                                                          open_umask) -> None:
    monkeypatch.setattr(record_mod, "now_ns", lambda: time.time_ns() + 10 * 10**9)
    out = tmp_path / "out"
    out.mkdir()
    args = ["-Q", f"CACHE_URL=redis://:{SECRET}-pw@127.0.0.1:1"]
    environ = {"PATH": "/bin", "CI_TOKEN": SECRET, "OPENCOTI_CACHE_URL": f"redis://:{SECRET}-env@127.0.0.1:1"}
    rec = null_build.Recorder(null_build.record_file(str(out)), args, str(tmp_path), environ, RUNNING,
                              (null_build.record_file(str(out)),), ())
    rec.locate([], [str(out)], [])
    null_build.reading_done(rec)
    rec.build_ended = True
    rec.finish(False, steps=1)
    record_path, key_path = Path(rec.record_path), Path(null_build.key_file(rec.record_path))
    assert SECRET.encode() not in record_path.read_bytes() and SECRET.encode() not in key_path.read_bytes()
    assert mode(record_path) == mode(key_path) == 0o600
    record = null_build.Record.load(str(record_path))
    assert record is not None and set(record.environ) == {"PATH", "CI_TOKEN", "OPENCOTI_CACHE_URL"}  # names kept
    assert null_build.difference(record, args, str(tmp_path), environ, RUNNING) is None
    assert null_build.difference(record, args, str(tmp_path), {**environ, "CI_TOKEN": "another"}, RUNNING) == \
        "the environment (CI_TOKEN)"
    assert null_build.difference(record, ["-Q", "CACHE_URL=redis://:other@127.0.0.1:1"], str(tmp_path), environ,
                                 RUNNING) == "the command line"
    assert null_build.carry_over(record, args, str(tmp_path), environ, RUNNING) is not None
    key_path.unlink()  # digests nobody can check: no record
    assert null_build.Record.load(str(record_path)) is None
