"""`logTimeFormat`: llama-swap's names for Go's time layouts stamp swapd's own log lines, in the
daemon and in the proxy (its stderr and the `/logs` ring), and follow a reload. The layouts are
checked at a fixed instant; the stack test reads the log lines themselves (the feature under test
is their format), through `/logs` and `swapd run`'s output."""

from __future__ import annotations

import json
import re
import textwrap
import time
import urllib.request

import pytest

from swapd.daemon.config import load_config_text
from swapd.ipc import log_time
from tests.stack import fake_model_cmd, free_port_range, wait_for

# 2026-01-02 15:04:05.123456789 UTC, Go's reference instant a few years on.
NS = 1_767_366_245_123_456_789


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ansic", "Fri Jan  2 15:04:05 2026"),
        ("unixdate", "Fri Jan  2 15:04:05 UTC 2026"),
        ("rubydate", "Fri Jan 02 15:04:05 +0000 2026"),
        ("rfc822", "02 Jan 26 15:04 UTC"),
        ("rfc822z", "02 Jan 26 15:04 +0000"),
        ("rfc850", "Friday, 02-Jan-26 15:04:05 UTC"),
        ("rfc1123", "Fri, 02 Jan 2026 15:04:05 UTC"),
        ("rfc1123z", "Fri, 02 Jan 2026 15:04:05 +0000"),
        ("rfc3339", "2026-01-02T15:04:05Z"),
        ("rfc3339nano", "2026-01-02T15:04:05.123456789Z"),
        ("kitchen", "3:04PM"),
        ("stamp", "Jan  2 15:04:05"),
        ("stampmilli", "Jan  2 15:04:05.123"),
        ("stampmicro", "Jan  2 15:04:05.123456"),
        ("stampnano", "Jan  2 15:04:05.123456789"),
        ("", ""),
        ("nonsense", ""),
    ],
)
def test_go_layouts_at_a_fixed_instant(utc: None, name: str, expected: str) -> None:
    stamp = log_time.stamper(name)
    assert stamp is not None and stamp(NS) == expected
    assert log_time.stamper(None) is None  # unset: swapd's own stamp


def test_rfc3339_offsets_and_nano_trailing_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        stamp = log_time.stamper("rfc3339nano")
        assert stamp is not None
        assert stamp(1_767_366_245_120_000_000) == "2026-01-02T20:34:05.12+05:30"
        assert stamp(1_767_366_245_000_000_000) == "2026-01-02T20:34:05+05:30"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_config_reads_names_as_llama_swap_and_warns_on_unknown(tmp_path) -> None:
    header = "models:\n  m:\n    cmd: x\n    proxy: http://127.0.0.1:9\n"
    assert load_config_text(header).log_time_format is None
    assert load_config_text("logTimeFormat: ' RFC3339 '\n" + header).log_time_format == "rfc3339"
    from swapd.daemon.config import load

    path = tmp_path / "config.yaml"
    path.write_text("logTimeFormat: iso\n" + header)
    loaded = load(path, environ={})
    assert loaded.config.log_time_format == "iso"
    (warning,) = loaded.warnings
    assert (warning.path, warning.line) == ("logTimeFormat", 1)
    assert warning.message.startswith("unknown time format 'iso': swapd's log lines get no")


RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)"


def _config(start: int, time_format: str) -> str:
    return textwrap.dedent(
        f"""
        logTimeFormat: {json.dumps(time_format)}
        startPort: {start}
        models:
          m:
            cmd: {fake_model_cmd("m")}
            proxy: http://127.0.0.1:${{PORT}}
        """
    )


def _chat(url: str, tag: str) -> None:
    body = json.dumps({"model": "m", "messages": [], "x_tag": tag}).encode()
    request = urllib.request.Request(
        f"{url}/v1/chat/completions?tag={tag}",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def _ring_line(url: str, needle: str) -> str:
    found: list[str] = []

    def seen() -> bool:
        with urllib.request.urlopen(url + "/logs", timeout=10) as response:
            text = response.read().decode()
        found[:] = [line for line in text.splitlines() if needle in line]
        return bool(found)

    wait_for(seen, 10, what=f"{needle!r} in /logs")
    return found[-1]


@pytest.mark.processes
def test_the_proxy_and_daemon_lines_follow_the_config_and_a_reload(stack_factory) -> None:
    start = free_port_range(2)
    stack = stack_factory(_config(start, "rfc3339"))
    _chat(stack.url, "first")
    line = _ring_line(stack.url, '"POST /v1/chat/completions" 200')
    assert re.match(rf"\[{RFC3339}\] \[INFO\] 127\.0\.0\.1 ", line), line
    daemon = [ln for ln in stack.output().splitlines() if " swapd-daemon[" in ln]
    assert daemon and all(re.match(rf"{RFC3339} swapd-daemon\[", ln) for ln in daemon[-3:]), daemon

    mark = len(stack.output().splitlines())
    stack.write_config(_config(start, ""))
    stack.swapd("reload")

    def plain_access_line() -> bool:
        _chat(stack.url, "second")
        with urllib.request.urlopen(stack.url + "/logs", timeout=10) as response:
            lines = response.read().decode().splitlines()
        return any(ln.startswith("[INFO] 127.0.0.1 ") for ln in lines)

    wait_for(plain_access_line, 10, what="an unstamped access line after the reload")

    def plain_daemon_line() -> bool:
        later = stack.output().splitlines()[mark:]
        return any(ln.startswith("swapd-daemon[") and "config reloaded" in ln for ln in later)

    wait_for(plain_daemon_line, 10, what="the daemon's unstamped 'config reloaded' line")
