"""The embedded default: the demo server (daemon/cli/demo_server.py), spoken to with the real OpenAI
SDK, and default_config.yaml read by the real config loader."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import aiohttp
import openai
import pytest

from swapd.daemon.config.embedded import default_config_path, demo_environ, describe_default
from tests.support.ports import free_port


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"demo server exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"{url}/health did not answer within {timeout}s")


def _start(argv: list[str], url: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(url, proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "swapd.daemon.cli.demo_server", "--port", str(port)]
    proc = _start([*argv, "--model", "demo-small"], url)
    yield url
    _stop(proc)


def test_chat_completion(demo: str) -> None:
    client = openai.OpenAI(base_url=f"{demo}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="small", messages=[{"role": "user", "content": "how are you?"}]
    )
    assert reply.model == "small"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.content == (
        "Hello from demo-small, a swapd demo model. You said: how are you?"
    )
    assert reply.usage is not None and reply.usage.completion_tokens > 0


def test_chat_completion_stream(demo: str) -> None:
    client = openai.OpenAI(base_url=f"{demo}/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model="demo-small",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "ping"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from demo-small, a swapd demo model. You said: ping"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


async def test_stream_ends_with_done_and_bad_bodies_get_json_errors(demo: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{demo}/v1/chat/completions", json=body) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            raw = await resp.text()
        assert raw.endswith("data: [DONE]\n\n")
        assert all(line.startswith("data: ") for line in raw.split("\n\n") if line)
        async with session.post(f"{demo}/v1/chat/completions", data=b"{nope") as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["message"] == "request body is not valid JSON"
        async with session.post(f"{demo}/v1/chat/completions", json={"model": "m"}) as resp:
            assert resp.status == 400
            assert "messages" in (await resp.json())["error"]["message"]


def test_models_and_health(demo: str) -> None:
    client = openai.OpenAI(base_url=f"{demo}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["demo-small"]


def test_describe_default_names_the_models_and_a_curl_line() -> None:
    text = describe_default("0.0.0.0:8123")
    assert "demo-small (alias small)" in text and "demo-large (alias large)" in text
    assert "curl -s http://127.0.0.1:8123/v1/chat/completions" in text
    assert "[::1]:9" in describe_default("[::1]:9")


def test_default_config_loads_and_its_cmd_runs() -> None:
    config_loader = pytest.importorskip(
        "swapd.daemon.config.loader", reason="the config loader (issue 2) is not there yet"
    )
    config = config_loader.load_config(default_config_path(), environ=demo_environ())
    assert sorted(config.models) == ["demo-large", "demo-small"]
    assert config.resolve("large") is config.models["demo-large"]
    small = config.models["demo-small"]
    assert small.ttl == 300
    assert small.cmd[:3] == (sys.executable, "-m", "swapd.daemon.cli.demo_server")
    assert small.port is not None and small.proxy == f"http://127.0.0.1:{small.port}"
    # Run the loaded argv for real, on a free port instead of the allocated one.
    argv = list(small.cmd)
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    proc = _start(argv, f"http://127.0.0.1:{port}")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model="demo-small", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content.startswith("Hello from demo-small")
    finally:
        _stop(proc)
