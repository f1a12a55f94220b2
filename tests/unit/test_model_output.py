"""The model output stream (circusd's `stdout_stream` for a model): the file always, circusd's
stdout with `[model-id] ` prefixes when asked, and a stdout that does not read never blocks it."""

from __future__ import annotations

import fcntl
import os
import select
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swapd.daemon.machinery import model_start
from swapd.daemon.machinery.model_output import MAX_LINE, ModelOutputStream, StdoutEcho
from tests.support.stack import wait_for


def _read_available(fd: int, timeout: float = 5.0) -> bytes:
    """What the pipe holds once nothing more arrives for 0.3 s (up to `timeout`)."""
    got = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.3)
        if not ready:
            if got:
                return got
            continue
        got += os.read(fd, 65536)
    return got


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe standing for circusd's stdout: (read end, write end)."""
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_lines_get_the_model_prefix_and_still_go_to_the_file(
    tmp_path: Path, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    log = tmp_path / "model-a.log"
    stream = ModelOutputStream(filename=str(log), model="qwen-7b", echo=True, sink=StdoutEcho(w))
    # Chunks split mid-line, as circus reads them from the pipe.
    stream({"data": b"first li", "pid": 1, "name": "stdout"})
    stream({"data": b"ne\nsecond\nthi", "pid": 1, "name": "stdout"})
    stream({"data": b"rd\n", "pid": 1, "name": "stderr"})
    stream({"data": b"no newline at exit", "pid": 1, "name": "stdout"})
    stream.close()
    expected = b"".join(
        b"[qwen-7b] " + line + b"\n"
        for line in (b"first line", b"second", b"third", b"no newline at exit")
    )
    got = b""
    deadline = time.monotonic() + 5
    while len(got) < len(expected) and time.monotonic() < deadline:
        got += _read_available(r, 1.0)
    assert got == expected
    assert log.read_text() == "first line\nsecond\nthird\nno newline at exit"


def test_without_echo_only_the_file_gets_the_output(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    log = tmp_path / "model-a.log"
    stream = ModelOutputStream(filename=str(log), model="a", echo=False, sink=StdoutEcho(w))
    stream({"data": b"hello\n", "pid": 1, "name": "stdout"})
    stream.close()
    assert log.read_text() == "hello\n"
    ready, _, _ = select.select([r], [], [], 0.5)
    assert not ready


def test_a_long_line_is_cut_into_bounded_pieces(tmp_path: Path, pipe: tuple[int, int]) -> None:
    r, w = pipe
    stream = ModelOutputStream(
        filename=str(tmp_path / "m.log"), model="m", echo=True, sink=StdoutEcho(w)
    )
    stream({"data": b"x" * (MAX_LINE * 2 + 10) + b"\n", "pid": 1, "name": "stdout"})
    got = b""
    deadline = time.monotonic() + 5
    while got.count(b"\n") < 3 and time.monotonic() < deadline:
        got += _read_available(r, 1.0)
    lines = got.split(b"\n")[:-1]
    assert [len(line) for line in lines] == [len(b"[m] ") + MAX_LINE] * 2 + [len(b"[m] ") + 10]


def test_a_stdout_that_does_not_read_never_blocks_and_drops_are_counted(
    tmp_path: Path, pipe: tuple[int, int]
) -> None:
    r, w = pipe
    # A small pipe nobody reads: the writer thread blocks on it; the stream must not.
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    sink = StdoutEcho(w, max_lines=16)
    stream = ModelOutputStream(filename=str(tmp_path / "m.log"), model="m", echo=True, sink=sink)
    lines = 2000
    # 220 KB into a 4 KiB pipe nobody reads: a stream that waited on stdout would never get
    # through this loop (the test's timeout would end it, stuck in the write).
    for i in range(lines):
        stream({"data": f"line {i:04d} ".encode() + b"y" * 100 + b"\n", "pid": 1, "name": "x"})
    assert sink.dropped > 0
    # Every line is in the file, dropped for stdout or not.
    assert (tmp_path / "m.log").read_text().count("\n") == lines
    # Once stdout reads again, markers say how many were dropped, where they were.
    got = _read_available(r, 20.0)  # until the queue is empty and the writer idle
    stream({"data": b"end\n", "pid": 1, "name": "x"})  # reports the drops at the tail too
    os.set_blocking(r, False)

    def drained() -> bool:
        nonlocal got
        try:
            got += os.read(r, 1 << 20)
        except BlockingIOError:
            pass
        return got.endswith(b"[m] end\n")

    wait_for(drained, 10, what="every queued line and marker on stdout")
    assert got.startswith(b"[m] line 0000 ")
    out = got.decode().splitlines()
    echoed = [line for line in out if line.startswith("[m] line ")]
    markers = [line for line in out if line.startswith("[swapd] ")]
    assert markers
    told = sum(int(line.split()[1]) for line in markers)
    assert told == sink.dropped
    assert len(echoed) + told == lines


def test_circus_is_told_the_stream_class_by_a_name_it_can_import() -> None:
    from circus.stream import get_stream

    stream = get_stream(
        {"class": model_start.OUTPUT_STREAM, "filename": os.devnull, "model": "a", "echo": False}
    )
    assert isinstance(stream, ModelOutputStream)
    stream.close()


def test_the_daemon_does_not_import_circus() -> None:
    # Importing circus calls logging.basicConfig(): the daemon's own set-up (its format, its
    # level) would then do nothing, and its INFO lines would never reach the journal.
    import subprocess
    import sys

    code = (
        "import sys, swapd.daemon.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'circus'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
