"""`logToStdout`, with the real circusd, daemon, proxy and a model: a model's own output reaches
`swapd run`'s stdout (the journal under systemd) as `[model-id] line` only with `upstream` or
`both`; its log file has it either way. A reload's value applies from the model's next start."""

from __future__ import annotations

import re

import pytest

from tests.support.daemon import chat, config
from tests.support.stack import FAKE_MODEL, PYTHON, wait_for

pytestmark = pytest.mark.processes

# A model that says something on stdout and on stderr (with its pid, so each run's lines are its
# own), then becomes the fake llama-server.
SAYS = (
    'sh -c \'echo "talker out pid $$"; echo "talker err pid $$" >&2; '
    f"exec {PYTHON} {FAKE_MODEL} --port ${{PORT}} --name talker'"
)


def _lines(pid: int) -> tuple[str, str]:
    return f"talker out pid {pid}", f"talker err pid {pid}"


def test_model_output_reaches_stdout_only_when_asked(stack_factory) -> None:
    stack = stack_factory(config({"talker": {"cmd": SAYS}}))
    chat(stack.url, "talker")
    quiet_pid = stack.model("talker")["pid"]
    for line in _lines(quiet_pid):
        wait_for(lambda line=line: line in stack.model_log("talker"), 10, what=line)

    stack.write_config(config({"talker": {"cmd": SAYS}}, logToStdout="both"))
    stack.swapd("reload")
    stack.swapd("unload", "talker")
    stack.wait_state("talker", "stopped")
    chat(stack.url, "talker")
    loud_pid = stack.model("talker")["pid"]
    assert loud_pid != quiet_pid
    for line in _lines(loud_pid):
        wait_for(
            lambda line=line: re.search(rf"^\[talker\] {line}$", stack.output(), re.M),
            10,
            what=f"[talker] {line} in swapd run's output",
        )
        assert line in stack.model_log("talker")
    # The first run (the default, `proxy`) said its lines before these: none reached stdout.
    output = stack.output()
    for line in _lines(quiet_pid):
        assert line not in output
