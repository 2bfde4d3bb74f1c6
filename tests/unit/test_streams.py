"""opencoti_build.streams: the one place the process's standard streams are redirected (the build server's runs
and readers use it on descriptors 0-2, which a unit test leaves alone; these tests move Python's streams only)."""
from __future__ import annotations

import os
import sys

import pytest

from opencoti_build import streams


def test_a_null_answer_writes_to_the_clients_descriptors_and_puts_the_streams_back() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    before = sys.stdout, sys.stderr
    try:
        with streams.written_to([out_w, err_w]):
            print("to the client")
            print("its stderr", file=sys.stderr)
        assert (sys.stdout, sys.stderr) == before
        assert os.read(out_r, 100) == b"to the client\n" and os.read(err_r, 100) == b"its stderr\n"
    finally:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)


class _Kept:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str, /) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_a_replaced_stream_is_recorded_as_the_original_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("stdout", "stderr", "__stdout__", "__stderr__"):
        monkeypatch.setattr(sys, name, getattr(sys, name))  # put back after the test
    kept, other = _Kept(), _Kept()
    streams.replace(stdout=kept, originals=True)
    streams.replace(stderr=other)
    print("kept")
    streams.flush()
    assert kept.text == "kept\n" and sys.__stdout__ is kept and sys.stderr is other and sys.__stderr__ is not other
