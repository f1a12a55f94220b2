"""`timeouts` (llama-swap's keys and defaults) on models and peers, through the real circusd,
daemon and proxy with fake_model.py upstreams (standing for llama-server and for a peer
llama-swap): `responseHeader` cuts a slow head and spares a model without one. The config and the
lean pool on their own: tests/unit/test_timeouts.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

# ------------------------------------------------------------------------------------ the stack


@pytest.fixture(scope="module")
def stack(peer_url: str) -> Iterator[Stack]:
    limited, free = model_ports(2)
    config = {
        "healthCheckTimeout": 15,
        "models": {
            "limited": local_model("limited", limited, timeouts={"responseHeader": 1}),
            "free": local_model("free", free),
        },
        "groups": {"all": {"swap": False, "members": ["limited", "free"]}},
        "peers": {
            "p": {"proxy": peer_url, "models": ["remote"], "timeouts": {"responseHeader": 1}}
        },
    }
    with Stack(config) as running:
        yield running


def _chat(url: str, model: str, delay: float) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"model": model, "messages": [], "x_delay": delay}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.processes
def test_response_header_timeout_cuts_a_slow_head_and_spares_the_rest(stack: Stack) -> None:
    assert _chat(stack.url, "limited", 0)[0] == 200  # started, and a prompt head is fine
    status, body = _chat(stack.url, "limited", 4)
    assert status == 502, body
    message = body["error"]["message"]
    assert "upstream limited is not reachable: timeout awaiting response headers (1s" in message
    # No limit on a model that sets none (llama-swap's default responseHeader is 0): its head,
    # two seconds late, is waited for.
    status, body = _chat(stack.url, "free", 2)
    assert status == 200, body
    # The model is still served after a timed-out request.
    assert _chat(stack.url, "limited", 0)[0] == 200


@pytest.mark.processes
def test_a_peers_response_header_timeout(stack: Stack) -> None:
    assert _chat(stack.url, "p/remote", 0)[0] == 200
    status, body = _chat(stack.url, "p/remote", 4)
    assert status == 502, body
    assert body["error"]["message"].startswith("peer proxy error: upstream peer p is not reachable")
    assert "timeout awaiting response headers (1s" in body["error"]["message"]


# --------------------------------------------------------------------------------- the lean pool
