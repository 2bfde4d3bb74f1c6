"""The null build's record and its checks, in-process: which command lines may take the fast path, what a
difference is named, when a reading is carried over, a damaged record. Through real scons runs:
tests/integration/test_null_build.py and the differential test in tests/soak/test_null_build.py."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
import SCons

from opencoti_build.incremental import null_build, private
from opencoti_build.incremental.null_build import record as record_mod

RUNNING = null_build.interpreter(SCons.__version__)
KEY = bytes(range(32))


@pytest.fixture(autouse=True)
def settled_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path these tests sign is looked at long after its last change (git's racily-clean rule is tested on
    its own below)."""
    monkeypatch.setattr(record_mod, "now_ns", lambda: time.time_ns() + 10 * 10**9)


def made(args: list[str], cwd: str, environ: dict[str, str], *rest, **more) -> null_build.Record:
    """A record of a run with this command line and environment (kept as digests under KEY)."""
    sealed_args, sealed_environ = null_build.sealed(KEY, args, environ)
    return null_build.Record(sealed_args, cwd, sealed_environ, *rest, **more, key=KEY)


def kept(record: null_build.Record, path: Path) -> null_build.Record | None:
    """``record`` written at ``path`` with its key beside it, and read back."""
    private.write(null_build.key_file(str(path)), record.key)
    record.dump(str(path))
    return null_build.Record.load(str(path))


@pytest.mark.parametrize(("args", "fast"), [
    ([], True), (["-Q", "-j4", "host"], True), (["-j", "2", "-k", "-s"], True), (["-C", "/x", "VERBOSE=1"], True),
    (["--jobs=3", "cuda"], True), (["MODEL=package"], True),
    (["-n"], False), (["-q"], False), (["-c"], False), (["--debug=explain"], False), (["-j"], False),
    (["-jx"], False), (["package"], True), (["verify", "-Q"], False), (["--cache-disable"], False),
])
def test_which_command_lines_may_take_the_fast_path(args: list[str], fast: bool) -> None:
    assert null_build.eligible(args) is fast


@pytest.mark.parametrize(("args", "why"), [
    (["package", "verify"], "verify reads every artifact whole, each time"),
    (["install", "PREFIX=/p"], "install writes outside the build's directories"),
    (["TRACE=t.json"], "TRACE= is written by the build phase, which the fast path skips"),
    (["-j", "x"], "the option value 'x'"), (["-j"], "an option without its value"),
    (["--debug=explain"], "the option --debug=explain (only -Q, -s, -k, -j N and -C DIR leave a run recordable)"),
    (["package", "TRACE="], None), (["MODEL=verify", "package"], None),
])
def test_why_a_command_line_is_never_recorded_is_said_in_words(args: list[str], why: str | None) -> None:
    assert null_build.why_never_recorded(args) == why


def test_difference_names_what_changed(tmp_path: Path) -> None:
    source, listed = tmp_path / "a.c", tmp_path / "dir"
    source.write_text("int a;\n")
    listed.mkdir()
    (listed / "x.h").write_text("")
    paths = {str(source): null_build.signature(str(source), False), str(listed): null_build.signature(str(listed), True),
             str(tmp_path / "absent.h"): None}
    record = made(["-Q"], "/co", {"PATH": "/bin"}, RUNNING, paths, {str(listed)}, [], (), [(1, "NOTE\n")], 3)
    loaded = kept(record, tmp_path / "record")
    assert loaded == record and loaded.key == KEY
    same = ("-Q",), "/co", {"PATH": "/bin", "_": "/usr/bin/scons"}, RUNNING
    assert null_build.difference(loaded, *same) is None
    assert null_build.difference(loaded, ["-Q", "VERBOSE=1"], "/co", {"PATH": "/bin"}, RUNNING) == "the command line"
    assert null_build.difference(loaded, ["-Q"], "/co", {"PATH": "/sbin"}, RUNNING) == "the environment (PATH)"
    assert null_build.difference(loaded, *same[:3], "another SCons") == "the Python or SCons running the build"
    (tmp_path / "absent.h").write_text("")  # a header appearing where the build looked for one
    assert null_build.difference(loaded, *same) == f"{tmp_path / 'absent.h'} changed"
    (tmp_path / "absent.h").unlink()
    (listed / "y.h").write_text("")  # a directory the build listed gains a file
    assert null_build.difference(loaded, *same) == f"{listed} changed"
    (listed / "y.h").unlink()
    os.utime(source)  # a touch: same bytes, but the full path must decide
    assert null_build.difference(loaded, *same) == f"{source} changed"


def test_carry_over_only_when_the_reading_is_the_same(tmp_path: Path) -> None:
    read, looked_for, header, searched, listed = (tmp_path / n for n in ("version.h", "a.c", "x.h", "inc", "pkg"))
    for path in (read, looked_for, header):
        path.write_text("1\n")
    searched.mkdir()
    listed.mkdir()
    sign = lambda p: null_build.signature(str(p), p.is_dir())  # noqa: E731
    paths = {str(p): sign(p) for p in (read, looked_for, header, searched, listed)}
    paths[str(searched / "x.h")] = None  # a header search looked here first
    record = kept(made(["-Q"], "/co", {"PATH": "/bin"}, RUNNING, paths, {str(searched), str(listed)}, [], (),
                       [], 3, reading={str(read), str(listed)}, reading_found={str(looked_for)},
                       memo={"key": "value"}), tmp_path / "record")
    same = ("-Q",), "/co", {"PATH": "/bin"}, RUNNING
    carry = null_build.carry_over(record, *same)
    assert carry and carry.memo == {"key": "value"} and carry.implicit_cache
    assert null_build.carry_over(record, ["-Q", "VERBOSE=1"], "/co", {"PATH": "/bin"}, RUNNING) is None
    assert null_build.carry_over(record, ["-Q"], "/co", {"PATH": "/sbin"}, RUNNING) is None

    header.write_text("2\n")  # an edited header, an edited source the SConscripts only looked for
    looked_for.write_text("int a;\n")
    carry = null_build.carry_over(record, *same)
    assert carry and carry.implicit_cache and carry.now[str(header)] == sign(header)
    (searched / "x.h").write_text("")  # a header appears earlier in a search path: scan again
    carry = null_build.carry_over(record, *same)
    assert carry and not carry.implicit_cache
    (searched / "x.h").unlink()
    (searched / "y.h").write_text("")  # a searched directory gains a file
    assert not null_build.carry_over(record, *same).implicit_cache
    (searched / "y.h").unlink()

    for change, undo in (
        (lambda: (listed / "new.c").write_text(""), lambda: (listed / "new.c").unlink()),  # a globbed directory
        (lambda: looked_for.unlink(), lambda: looked_for.write_text("")),  # a listed source gone
        (lambda: read.write_text("2\n"), lambda: None),  # a file the SConscripts read (last: not undone)
    ):
        change()
        assert null_build.carry_over(record, *same) is None
        undo()
        assert read.read_text() != "1\n" or null_build.carry_over(record, *same) is not None


def test_a_damaged_record_takes_the_full_path(tmp_path: Path) -> None:
    record = tmp_path / "record"
    for data in (b"", b"\x00garbage", b"\xe3" * 3):
        record.write_bytes(data)
        assert null_build.Record.load(str(record)) is None


@pytest.mark.parametrize(("args", "fast"), [
    (["-j", "x", "host"], False), (["-j", "2", "-Q", "-C", "/co", "host"], True), (["--jobs=4", "-k", "--quiet"], True),
    (["--directory=/co", "-s"], True), (["-C/co", "-j2", "-Q"], True), (["--jobs=a=b"], False),
    (["--cache-debug=x=y"], False), (["MODEL=verify", "package"], True), (["-Q", "verify"], False),
])
def test_every_argument_is_checked_not_only_the_first(args: list[str], fast: bool) -> None:
    assert null_build.eligible(args) is fast


def test_under_is_the_place_itself_inside_it_or_a_sibling_temporary() -> None:
    places = ("/co/build", "/co/.lock")
    assert null_build.record.under("/co/build", places) and null_build.record.under("/co/build/o/x.o", places)
    assert null_build.record.under("/co/build.1234.tmp", places) and null_build.record.under("/co/.lock", places)
    assert not null_build.record.under("/co/build2", places) and not null_build.record.under("/co/buil", places)
    assert not null_build.record.under("/co", places) and not null_build.record.under("/elsewhere", places)


def test_a_listing_leaves_out_hidden_entries_and_tells_names_apart(tmp_path: Path) -> None:
    (tmp_path / "a.h").write_text("")
    (tmp_path / "b.h").write_text("")
    listed = null_build.signature(str(tmp_path), True)
    (tmp_path / "out").mkdir()
    assert null_build.signature(str(tmp_path), True, (str(tmp_path / "out"),)) == listed  # the build's own: hidden
    assert null_build.signature(str(tmp_path), True) != listed
    assert null_build.signature(str(tmp_path), False)[2] is None  # not listed: only the directory's identity
    assert listed[2] == hashlib.sha256(b"a.h\0b.h").hexdigest()  # the sorted names, NUL-separated


def test_a_file_signature_holds_its_permission_bits(tmp_path: Path) -> None:
    script = tmp_path / "probe"
    script.write_text("")
    script.chmod(0o644)
    sig = null_build.signature(str(script), False)
    assert sig[5] == 0o644 and sig[1] == 0
    script.chmod(0o755)
    assert null_build.signature(str(script), False)[5] == 0o755


def test_difference_names_the_working_directory_every_changed_variable_and_a_missing_file(tmp_path: Path) -> None:
    present = tmp_path / ".sconsign.dblite"
    present.write_text("")
    record = made(["-Q"], "/co", {"A": "1", "B": "2"}, RUNNING, {}, set(), [str(present)], (), [], 0)
    assert null_build.difference(record, ["-Q"], "/elsewhere", {"A": "1", "B": "2"}, RUNNING) == "the working directory"
    assert null_build.difference(record, ["-Q"], "/co", {"B": "3", "C": "4"}, RUNNING) == "the environment (A, B, C)"
    assert null_build.difference(record, ["-Q"], "/co", {"A": "1", "B": "2"}, RUNNING) is None
    present.unlink()
    assert null_build.difference(record, ["-Q"], "/co", {"A": "1", "B": "2"}, RUNNING) == f"{present} is missing"


def test_a_record_of_another_format_or_shape_is_no_record(tmp_path: Path) -> None:
    import marshal

    path = tmp_path / "record"
    good = made(["-Q"], "/co", {}, RUNNING, {}, {"/co/src"}, [], (), [], 1)
    assert kept(good, path) == good  # sets come back as sets
    fields = marshal.loads(path.read_bytes())
    others = [(2,) + (None,) * 14,  # format 2's tuple
              {**fields, "format": 4}, {k: v for k, v in fields.items() if k != "unsettled"}, {**fields, "extra": 1},
              [null_build.FORMAT] + [None] * 14, "text"]
    for other in others:
        path.write_bytes(marshal.dumps(other))
        assert null_build.Record.load(str(path)) is None, other


def test_a_listing_leaves_out_the_bytecode_cache_a_first_import_creates(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("")
    before = null_build.signature(str(package), True)
    (package / "__pycache__").mkdir()  # what importing pkg.mod mid-run does
    assert null_build.signature(str(package), True) == before
    (package / "other.py").write_text("")
    assert null_build.signature(str(package), True) != before
