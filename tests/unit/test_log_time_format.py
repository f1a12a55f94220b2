"""`logTimeFormat` without a stack: llama-swap's names, Go's layouts at a fixed instant, RFC 3339
offsets and trailing zeros."""

from __future__ import annotations

import time

import pytest

from swapd.daemon.config import load_config_text
from swapd.ipc import log_time

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
