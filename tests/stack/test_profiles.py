"""`profiles` (the config's checks: tests/unit/test_profiles.py) through the real stack
(fake_model.py stands for llama-server) a profile switch changing where a name goes, a pin that
disables a name, `/upstream/<pin>/`, the API's errors, no profile after a reload, and a switch
during a reload kept."""

from __future__ import annotations

import concurrent.futures
import json
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import chat
from tests.support.stack import fake_model_cmd, free_port_range, http_get


def _put(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url + "/api/profiles/active", data=body, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.processes
def test_a_profile_switch_changes_where_a_name_goes(stack_factory) -> None:
    config = textwrap.dedent(
        f"""
        startPort: {free_port_range(3)}
        groups: {{all: {{swap: false, members: [a, b]}}}}
        models:
          a: {{cmd: "{fake_model_cmd("a")}", proxy: "http://127.0.0.1:${{PORT}}"}}
          b: {{cmd: "{fake_model_cmd("b")}", proxy: "http://127.0.0.1:${{PORT}}"}}
        profiles:
          fast:
            description: chat goes to b; a is off
            pins: {{chat: b, a: ""}}
        """
    )
    stack = stack_factory(config)
    assert chat(stack.url, "a")["served_by"]["name"] == "a"
    with pytest.raises(urllib.error.HTTPError) as caught:
        chat(stack.url, "chat")
    assert caught.value.code == 404

    assert _put(stack.url, b'{"name": "fast"}') == (200, {"active": "fast"})
    served = chat(stack.url, "chat")
    assert served["served_by"]["name"] == "b"
    assert served["model"] == "b"  # the pin rewrote the body's model (no useModelName)
    with pytest.raises(urllib.error.HTTPError) as caught:
        chat(stack.url, "a")
    assert caught.value.code == 404
    assert http_get(stack.url + "/upstream/chat/health")[0] == 200
    listed = json.loads(http_get(stack.url + "/v1/models")[1])["data"]
    assert {"chat"} <= {m["id"] for m in listed}
    profiles = json.loads(http_get(stack.url + "/api/profiles")[1])
    assert profiles == {
        "active": "fast",
        "profiles": [
            {
                "id": "fast",
                "description": "chat goes to b; a is off",
                "pins": {"chat": "b", "a": ""},
            }
        ],
    }

    assert _put(stack.url, b"{nope")[0] == 400
    assert _put(stack.url, b"{}")[1]["error"]["message"] == "profile name is required"
    assert _put(stack.url, b'{"name": 5}')[1]["error"]["message"] == (
        "profile name must be a string or null"
    )
    assert _put(stack.url, b'{"name": "zz"}')[0] == 404
    assert _put(stack.url, b'{"name": "zz"}')[1]["error"]["message"] == 'profile "zz" not found'

    # A reload leaves no profile active, as llama-swap's.
    stack.swapd("reload")
    assert json.loads(http_get(stack.url + "/api/profiles")[1])["active"] is None
    assert chat(stack.url, "a")["served_by"]["name"] == "a"


@pytest.mark.processes
def test_a_profile_switched_during_a_reload_is_kept(stack_factory, tmp_path: Path) -> None:
    """A switch that arrives while a reload runs (here: held open by the stop of a model whose
    definition changed, its `cmdStop` waiting for a file) applies to the table that reload makes:
    answered once the reload is done, and still active after it. (It was once answered at once,
    applied to the old table, and dropped when the reload replaced the table.)"""
    gate = tmp_path / "let-the-stop-finish"
    stop = f"sh -c 'while [ ! -e {gate} ]; do sleep 0.05; done; kill ${{PID}}'"

    def config(env: str) -> str:
        return textwrap.dedent(
            f"""
            startPort: {free_port_range(2)}
            models:
              a:
                cmd: "{fake_model_cmd("a")}"
                cmdStop: "{stop}"
                proxy: "http://127.0.0.1:${{PORT}}"
                env: ["{env}"]
            profiles:
              fast: {{pins: {{chat: a}}}}
            """
        )

    stack = stack_factory(config("GEN=1"))
    assert chat(stack.url, "a")["served_by"]["name"] == "a"
    stack.write_config(config("GEN=2"))
    reloading = concurrent.futures.ThreadPoolExecutor(2)
    reload = reloading.submit(stack.swapd, "reload")
    stack.wait_state("a", "stopping")  # the reload is under way, held by a's stop
    switch = reloading.submit(_put, stack.url, b'{"name": "fast"}')
    gate.touch()
    assert reload.result(timeout=60).returncode == 0
    assert switch.result(timeout=60) == (200, {"active": "fast"})
    reloading.shutdown()
    assert json.loads(http_get(stack.url + "/api/profiles")[1])["active"] == "fast"
    assert chat(stack.url, "chat")["served_by"]["name"] == "a"
