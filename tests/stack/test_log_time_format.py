"""`logTimeFormat`: llama-swap's names for Go's time layouts stamp swapd's own log lines, in the
daemon and in the proxy (its stderr and the `/logs` ring), and follow a reload. The layouts at a
fixed instant: tests/unit/test_log_time_format.py; here the stack test reads the log lines
themselves (the feature under test is their format), through `/logs` and `swapd run`'s output."""

from __future__ import annotations

import json
import re
import textwrap
import urllib.request

import pytest

from tests.support.stack import fake_model_cmd, free_port_range, wait_for

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
