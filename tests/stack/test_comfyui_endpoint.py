"""`/comfyui/` end to end: the real swapd (circusd, daemon, proxy) with the ComfyUI-like upstream
standing in for the seed page's ComfyUI container (see `comfyui_support.py`), and a fake
llama-server (`other`) to swap to.

Every row of the seed page's tables is a request here, and each check reads what the upstream
itself logged (so "did not start it" means the server process was never started, not just that
the answer was a 409). The config gives `comfyui_auto` `concurrencyLimit: 5` and
`compat.ignoreWebsockets: false`: the loader must raise and force them, and the tests show it did.
That the seed page's two YAML blocks load verbatim is tested by the config loader's own suite
(`test_config_compat.py`, with `configs/seed_*.yaml`).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator

import aiohttp
import pytest
from yarl import URL

from tests.support.comfyui import (
    IGNORED_PATH,
    IGNORED_WS,
    MODEL,
    ComfyUpstream,
    Running,
    attempt,
    closed,
    comfyui_model_yaml,
    free_port_run,
    until,
)
from tests.support.stack import PYTHON, Stack, fake_model_cmd

pytestmark = [pytest.mark.processes, pytest.mark.timeout(180)]


def _config(up: ComfyUpstream) -> str:
    comfy = comfyui_model_yaml(
        up,
        extra="""    concurrencyLimit: 5         # below 999: the loader raises it
    compat:
      ignoreWebsockets: false   # has no effect on comfyui_auto
""",
    )
    # upstream.ignorePaths is /upstream/'s list; /comfyui/ must not use it (/api/queue starts it).
    return f"""
healthCheckTimeout: 15
startPort: {free_port_run(2)}
upstream:
  ignorePaths:
    - ^/api/queue$
models:
{comfy}
  other:
    cmd: {fake_model_cmd("other")}
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    stack = Stack("")
    stack.up = ComfyUpstream(stack.base, MODEL)  # type: ignore[attr-defined]
    stack.write_config(_config(stack.up))  # type: ignore[attr-defined]
    with stack:
        yield stack


async def _stopped(swapd: Running) -> None:
    if await swapd.state(MODEL) != "stopped":
        await swapd.unload(MODEL)


async def _in_flight(swapd: Running, model: str, count: int) -> bool:
    return bool((await swapd.status(model))["in_flight"] == count)


async def _ready(swapd: Running, session: aiohttp.ClientSession) -> None:
    async with session.get(swapd.url + "/comfyui/") as resp:
        assert resp.status == 200
        assert "ComfyUI" in await resp.text()
    await swapd.wait_state(MODEL, "ready")


# --------------------------------------------------------------------------------------------------
# Setup: the redirect and the prefix


@pytest.mark.parametrize(
    ("method", "query", "status"),
    [
        ("GET", "", 301),
        ("GET", "?token=abc%20d&x=1", 301),
        ("HEAD", "?token=abc", 301),
        ("POST", "?token=abc", 308),
        ("PUT", "", 308),
    ],
)
async def test_no_slash_redirects_keeping_the_query(
    swapd: Running, session: aiohttp.ClientSession, method: str, query: str, status: int
) -> None:
    url = swapd.url + "/comfyui" + query
    async with session.request(method, url, allow_redirects=False) as resp:
        assert resp.status == status
        assert resp.headers["Location"] == "/comfyui/" + query


async def test_prefix_is_stripped_keeping_raw_escapes_and_query(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _ready(swapd, session)
    mark = up.mark()
    # Saved workflows are fetched with an escaped slash in the name; it must arrive escaped.
    async with session.get(swapd.url + "/comfyui/api/userdata/workflows%2Fmine.json?v=1") as resp:
        assert resp.status == 200
        assert (await resp.json())["raw_path"] == "/api/userdata/workflows%2Fmine.json?v=1"
    async with session.get(swapd.url + "/comfyui/api/userdata/a%252Fb.json") as resp:
        assert (await resp.json())["raw_path"] == "/api/userdata/a%252Fb.json"
    # encoded=True: the client itself must not normalise %41 to A.
    async with session.get(URL(swapd.url + "/comfyui/nowhere%2Fhere?q=%41", encoded=True)) as resp:
        assert resp.status == 404  # ComfyUI's own 404, passed through untouched
        assert (await resp.json())["raw_path"] == "/nowhere%2Fhere?q=%41"
    got = [(e["method"], e["raw_path"]) for e in up.requests_since(mark)]
    assert got == [
        ("GET", "/api/userdata/workflows%2Fmine.json?v=1"),
        ("GET", "/api/userdata/a%252Fb.json"),
        ("GET", "/nowhere%2Fhere?q=%41"),
    ]


async def test_ready_comfyui_serves_assets_websocket_and_jobs(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _ready(swapd, session)
    for path in ("/comfyui/scripts/app.js", "/comfyui/style.css", "/comfyui/api/jobs"):
        async with session.get(swapd.url + path) as resp:
            assert resp.status == 200, path
    ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=tab1")
    try:
        status = await ws.receive_json(timeout=10)
        assert status["type"] == "status"
        assert status["data"]["sid"] == "tab1"  # the query reached ComfyUI
        body = {"prompt": {"3": {"class_type": "KSampler"}}, "client_id": "tab1"}
        async with session.post(swapd.url + "/comfyui/api/prompt", json=body) as resp:
            assert resp.status == 200
            prompt_id = (await resp.json())["prompt_id"]
        progress = []
        async with asyncio.timeout(20):
            while True:
                msg = await ws.receive_json()
                if msg["type"] == "progress":
                    progress.append(msg["data"]["value"])
                if msg["type"] == "executing" and msg["data"]["node"] is None:
                    assert msg["data"]["prompt_id"] == prompt_id
                    break
        assert progress == [1, 2, 3]
    finally:
        await ws.close()


# --------------------------------------------------------------------------------------------------
# What cannot start the model


IGNORED_GETS = [
    "/comfyui/scripts/app.js",
    "/comfyui/style.css",
    "/comfyui/templates/default.json",
    "/comfyui/favicon.ico",
    "/comfyui/assets/logo.png",
    "/comfyui/a.gif",
    "/comfyui/a.jpg",
    "/comfyui/a.jpeg",
    "/comfyui/robots.txt",
    "/comfyui/scripts/app.js?v=123",  # the query is not part of the match
    "/comfyui/ws",  # a plain GET without upgrade headers
    "/comfyui/ws?clientId=abc",
    "/comfyui/ws/",
    "/comfyui/ws/anything",
    "/comfyui/api/jobs",
    "/comfyui/api/jobs?limit=5",
]


async def test_get_to_an_ignored_path_answers_409_and_starts_nothing(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _stopped(swapd)
    mark = up.mark()
    for path in IGNORED_GETS:
        status, error = await attempt(session, swapd.url + path)
        assert status == 409, path
        assert error is not None
        assert error["message"] == IGNORED_PATH, path
        assert error["type"] == "invalid_request_error"
    assert await swapd.state(MODEL) == "stopped"
    assert up.since(mark) == []  # the server was never started, nothing reached it


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/comfyui/", IGNORED_WS),
        ("/comfyui/wsapi", IGNORED_WS),
        ("/comfyui/api/prompt", IGNORED_WS),
        ("/comfyui/socket?clientId=1", IGNORED_WS),
        # /ws is an ignored path as well, but an upgrade is the websocket rule's case, on any path.
        ("/comfyui/ws?clientId=abc", IGNORED_WS),
    ],
)
async def test_websocket_upgrade_answers_409_and_starts_nothing(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream, path: str, message: str
) -> None:
    await _stopped(swapd)
    mark = up.mark()
    status, error = await attempt(session, swapd.url + path, websocket=True)
    assert status == 409
    assert error is not None and error["message"] == message
    # What a browser's websocket sees: a failed handshake.
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await session.ws_connect(swapd.url + path)
    assert refused.value.status == 409
    assert await swapd.state(MODEL) == "stopped"
    assert up.since(mark) == []


@pytest.mark.parametrize(
    ("method", "path", "upstream_path", "status"),
    [
        ("GET", "/comfyui/", "/", 200),  # the page itself
        ("POST", "/comfyui/api/prompt", "/api/prompt", 200),  # queueing a job
        ("POST", "/comfyui/api/jobs", "/api/jobs", 404),  # a write on an ignored path
        ("POST", "/comfyui/scripts/app.js", "/scripts/app.js", 404),
        ("PUT", "/comfyui/ws", "/ws", 404),
        ("HEAD", "/comfyui/scripts/app.js", "/scripts/app.js", 200),  # only GET is ignored
        ("GET", "/comfyui/wsapi", "/wsapi", 404),  # not /ws
        ("GET", "/comfyui/api/jobs/12", "/api/jobs/12", 404),  # not /api/jobs
        # any path not in the list, even one in upstream.ignorePaths
        ("GET", "/comfyui/api/queue", "/api/queue", 200),
    ],
)
async def test_everything_else_starts_the_model(
    swapd: Running,
    session: aiohttp.ClientSession,
    up: ComfyUpstream,
    method: str,
    path: str,
    upstream_path: str,
    status: int,
) -> None:
    await _stopped(swapd)
    mark = up.mark()
    kwargs = {"json": {"prompt": {}, "client_id": "x"}} if method == "POST" else {}
    async with session.request(method, swapd.url + path, **kwargs) as resp:
        assert resp.status == status  # ComfyUI's own answer: the request reached it
    assert up.starts_since(mark) == 1
    assert [(e["method"], e["path"]) for e in up.requests_since(mark)][-1] == (
        method,
        upstream_path,
    )
    assert await swapd.state(MODEL) == "ready"


async def test_while_starting_ignored_requests_get_409_and_waiters_join_one_start(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    """Not ready includes starting. The forced concurrencyLimit (999, not the configured 5) lets
    a whole page's worth of requests wait for the one start."""
    await _stopped(swapd)
    mark = up.mark()
    with up.held():

        async def page() -> int:
            async with session.get(swapd.url + "/comfyui/") as resp:
                await resp.read()
                return resp.status

        waiting = [asyncio.ensure_future(page()) for _ in range(12)]
        try:
            await swapd.wait_state(MODEL, "starting")
            status, error = await attempt(session, swapd.url + "/comfyui/api/jobs")
            assert (status, error and error["message"]) == (409, IGNORED_PATH)
            status, error = await attempt(session, swapd.url + "/comfyui/wsapi", websocket=True)
            assert (status, error and error["message"]) == (409, IGNORED_WS)
            assert not any(t.done() for t in waiting)
        except BaseException:
            for task in waiting:
                task.cancel()
            raise
    assert await asyncio.wait_for(asyncio.gather(*waiting), 20) == [200] * 12
    assert up.starts_since(mark) == 1
    paths = [e["path"] for e in up.requests_since(mark)]
    assert "/api/jobs" not in paths and "/wsapi" not in paths


# --------------------------------------------------------------------------------------------------
# What goes wrong (the seed's troubleshooting section)


async def test_stale_tab_is_closed_and_its_reconnects_never_start_the_model(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _ready(swapd, session)
    ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=stale")
    assert (await ws.receive_json(timeout=10))["type"] == "status"
    # An open ignored websocket is not in flight (the page load's count reaches the daemon within
    # a second), so the unload below does not wait for it.
    await until(
        lambda: _in_flight(swapd, MODEL, 0), timeout=10, what="in_flight 0 with the tab open"
    )
    unload = asyncio.ensure_future(swapd.unload(MODEL))
    await closed(ws)
    await asyncio.wait_for(unload, 30)
    mark = up.mark()
    # The frontend retries its websocket for as long as the tab is open.
    for _ in range(5):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(swapd.url + "/comfyui/ws?clientId=stale")
        assert refused.value.status == 409
        status, error = await attempt(session, swapd.url + "/comfyui/ws?clientId=stale")
        assert (status, error and error["message"]) == (409, IGNORED_PATH)
        await asyncio.sleep(0.1)
    assert await swapd.state(MODEL) == "stopped"
    assert up.since(mark) == []
    # Interacting with the page starts it again; the websocket then reconnects.
    await _ready(swapd, session)
    ws = await session.ws_connect(swapd.url + "/comfyui/ws?clientId=stale")
    assert (await ws.receive_json(timeout=10))["type"] == "status"
    await ws.close()
    assert up.starts_since(mark) == 1


async def test_opening_a_saved_workflow_before_the_page_answers_409(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _stopped(swapd)
    mark = up.mark()
    workflow = swapd.url + "/comfyui/api/userdata/workflows%2Fportrait.json"
    status, error = await attempt(session, workflow)
    assert (status, error and error["message"]) == (409, IGNORED_PATH)
    assert up.since(mark) == []
    await _ready(swapd, session)  # "Load /comfyui/ first"
    async with session.get(workflow) as resp:
        assert resp.status == 200
        assert (await resp.json())["workflow"] == "workflows/portrait.json"


async def test_an_open_tab_does_not_hold_back_a_swap(
    swapd: Running, session: aiohttp.ClientSession, up: ComfyUpstream
) -> None:
    await _ready(swapd, session)
    tabs = [await session.ws_connect(swapd.url + f"/comfyui/ws?clientId=t{i}") for i in range(3)]
    for ws in tabs:
        await ws.receive_json(timeout=10)
    body = {"model": "other", "messages": [{"role": "user", "content": "hi"}]}
    # If the websockets counted as in flight the drain would wait for them forever.
    async with asyncio.timeout(40):
        async with session.post(swapd.url + "/v1/chat/completions", json=body) as resp:
            assert resp.status == 200
            assert (await resp.json())["served_by"]["name"] == "other"
        for ws in tabs:
            await closed(ws)
    assert await swapd.state(MODEL) == "stopped"
    assert await swapd.state("other") == "ready"
    mark = up.mark()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await session.ws_connect(swapd.url + "/comfyui/ws?clientId=t0")
    assert refused.value.status == 409
    assert await swapd.state("other") == "ready"
    assert up.since(mark) == []


async def test_forced_settings_are_in_effect_and_printed(stack: Stack) -> None:
    """Item 3 of the issue is the loader's; here: `check-config --print` on this module's config."""
    argv = [
        PYTHON,
        "-m",
        "swapd.daemon.cli",
        "check-config",
        "-c",
        str(stack.config_path),
        "--print",
    ]
    result = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    section = text[text.index(MODEL + ":") :]
    limit_line = next(line for line in section.splitlines() if "concurrencyLimit" in line)
    ws_line = next(line for line in section.splitlines() if "ignoreWebsockets" in line)
    assert "999" in limit_line and "forced" in limit_line
    assert "true" in ws_line and "forced" in ws_line


async def test_the_model_log_holds_what_comfyui_printed(
    stack: Stack, swapd: Running, session: aiohttp.ClientSession
) -> None:
    """docs/guides/troubleshooting-model-wont-load.md: the per-model log file and its stream."""
    await _ready(swapd, session)
    path = stack.log_dir / "model-comfyui_5fauto.log"
    text = path.read_text()
    assert "--- swapd " in text and f"starting {MODEL}: " in text
    assert "comfyui-like request" in text
    seen = b""
    async with session.get(swapd.url + f"/logs/stream/{MODEL}") as resp:
        assert resp.status == 200
        async with asyncio.timeout(10):
            while b"comfyui-like start" not in seen:
                seen += await resp.content.readany()
