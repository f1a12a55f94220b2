"""What reaches the model, against the real stack: the client's Host unchanged (or the upstream's
own with `hostHeader: upstream`), the X-Forwarded-* headers, and the config key's validation."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import aiohttp
import pytest

from swapd.daemon.config.loader import ConfigError, load_config_text
from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Stack, int]]:
    own, rewritten = model_ports(2)
    config = {
        "models": {
            "own": local_model("own", own),
            "rewritten": local_model("rewritten", rewritten, hostHeader="upstream"),
        },
        "groups": {"both": {"swap": False, "members": ["own", "rewritten"]}},
    }
    with Stack(config) as running:
        yield running, rewritten


async def _headers(stack: Stack, model: str, **headers: str) -> dict[str, str]:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            stack.url + "/v1/chat/completions",
            json={"model": model},
            headers={"Host": "swapd.example:8443", **headers},
        ) as resp:
            assert resp.status == 200
            return dict((await resp.json())["request_headers"])


async def test_the_client_s_host_reaches_the_model_with_x_forwarded(
    stack: tuple[Stack, int],
) -> None:
    running, _ = stack
    seen = await _headers(running, "own", **{"X-Forwarded-For": "10.0.0.7"})
    assert seen["Host"] == "swapd.example:8443"
    assert seen["X-Forwarded-Host"] == "swapd.example:8443"
    assert seen["X-Forwarded-Proto"] == "http"
    assert seen["X-Forwarded-For"] == "10.0.0.7, 127.0.0.1"


async def test_host_header_upstream_sends_the_upstream_s_own_address(
    stack: tuple[Stack, int],
) -> None:
    running, port = stack
    seen = await _headers(running, "rewritten")
    assert seen["Host"] == f"127.0.0.1:{port}"
    assert seen["X-Forwarded-Host"] == "swapd.example:8443"


def test_host_header_takes_client_or_upstream_only() -> None:
    text = textwrap.dedent(
        """\
        models:
          m:
            cmd: server --port ${PORT}
            hostHeader: upstreams
        """
    )
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, "config.yaml", environ={})
    [issue] = caught.value.issues
    assert issue.path == "models.m.hostHeader" and issue.line == 4
    assert "client" in issue.message and "upstream" in issue.message
    ok = load_config_text(text.replace("upstreams", "upstream"), "config.yaml", environ={})
    assert ok.models["m"].host_header == "upstream"
