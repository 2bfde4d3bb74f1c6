"""Bad inputs refused in one line, in-process: the variables' rules, the fat driver on a full disk, OS errors.

The same refusals through the real scons (exit 2, nothing written): tests/integration/test_bad_inputs.py.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from opencoti_build import errors
from opencoti_build.config import values
from opencoti_build.cosmo import fatcc


def test_the_same_epoch_rule_everywhere() -> None:
    assert values.source_date_epoch("0") == 0 and values.source_date_epoch(" 1700000000 ") == 1700000000
    for bad in ("abc", "-1", "0x10", "", "253402300800"):
        with pytest.raises(errors.UserError, match="is not a whole number of seconds since 1970"):
            values.source_date_epoch(bad)
    assert values.align("0x1000") == 4096 and values.align("65536") == 65536
    assert values.arch("", machine="arm64") == "aarch64"
    with pytest.raises(errors.UserError, match="this machine is ppc64le, which llamafile does not ship for"):
        values.arch("", machine="ppc64le")


def test_a_full_disk_in_the_stand_in_linker_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "out.com.dbg"))

    (tmp_path / "a.o").write_bytes(b"")
    (tmp_path / ".aarch64").mkdir()
    (tmp_path / ".aarch64" / "a.o").write_bytes(b"")
    monkeypatch.setattr(fatcc, "_run_parallel", lambda commands, capture=False: ({arch: 0 for arch in commands}, {}))
    monkeypatch.setattr(fatcc.shutil, "copyfile", full)
    assert fatcc.main("cosmoc++", ["-o", str(tmp_path / "out"), str(tmp_path / "a.o")]) == 1
    assert capsys.readouterr().err == (f"cosmoc++: fatal error: {tmp_path / 'out.com.dbg'}: no space left on the device "
                                       "(disk full); free space and run the build again\n")


def test_permission_denied_and_disk_full_say_so() -> None:
    assert errors.os_error_line(PermissionError(errno.EACCES, "Permission denied"), "BUILD_DIR=/x") == (
        "BUILD_DIR=/x: permission denied; make it writable or point the variable elsewhere")
    assert "disk full" in errors.os_error_line(OSError(errno.ENOSPC, "No space left on device"), "x")
