"""The proxy's routes against the real stack: circusd, daemon, proxy and fake_model upstreams
(which stand for llama-server). One stack for the module; every model sits in one `swap: false`
group so the tests do not swap each other's models out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import aiohttp
import openai
import pytest
from yarl import URL

from swapd.proxy.routing.model_routes import MODEL_ROUTES, upstream_path
from tests.support.proxy import (
    in_flight,
    local_model,
    model_log_has,
    model_ports,
    received,
)
from tests.support.stack import Stack, free_port, wait_for

pytestmark = pytest.mark.processes

MODELS = [
    "alpha",
    "renamed",
    "org/model",
    "wsignored",
    "hidden",
    "limited",
    "broken",
    "slowstart",
]


@pytest.fixture(scope="module")
def stack(peer_url: str) -> Iterator[Stack]:
    ports = dict(zip(MODELS, model_ports(len(MODELS)), strict=True))
    config = {
        "healthCheckTimeout": 15,
        "includeAliasesInList": True,
        "models": {
            "alpha": local_model("alpha", ports["alpha"], aliases=["alpha-alias"]),
            "renamed": local_model(
                "renamed",
                ports["renamed"],
                useModelName="upstream-name",
                filters={"stripParams": "temperature, top_p", "setParams": {"top_k": 7}},
            ),
            "org/model": local_model("org/model", ports["org/model"]),
            "wsignored": local_model(
                "wsignored", ports["wsignored"], compat={"ignoreWebsockets": True}
            ),
            "hidden": local_model("hidden", ports["hidden"], unlisted=True),
            "limited": local_model("limited", ports["limited"], concurrencyLimit=2),
            "broken": local_model("broken", ports["broken"], "--fail", "--exit-code", "7"),
            "slowstart": local_model(
                "slowstart", ports["slowstart"], "--health-delay", "1.5", concurrencyLimit=1
            ),
        },
        "groups": {"all": {"swap": False, "members": MODELS}},
        "peers": {
            "peer1": {"proxy": peer_url, "apiKey": "peer-secret", "models": ["remote-model"]}
        },
    }
    with Stack(config, env={"SWAPD_PROXY_MAX_BODY_MB": "1"}) as running:
        yield running


async def _post(session: aiohttp.ClientSession, url: str, body: object) -> tuple[int, dict]:
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.json(content_type=None)


# ------------------------------------------------------------------------------------------------
# OpenAI SDK as a real client


def test_openai_sdk_chat_embeddings_transcription(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.url + "/v1", api_key="unused", timeout=30, max_retries=0)
    chat = client.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "hi"}]
    )
    assert chat.choices[0].message.content == "hello from alpha"

    chunks = client.chat.completions.create(
        model="alpha", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4 "

    emb = client.embeddings.create(model="alpha", input=["a", "bcd"])
    assert [d.embedding[2] for d in emb.data] == [1.0, 3.0]

    audio = b"RIFF" + bytes(range(256)) * 40
    result = client.audio.transcriptions.create(model="alpha-alias", file=("a.wav", audio))
    assert result.text == f"{len(audio)} bytes"


async def test_sse_headers_and_streaming(stack: Stack) -> None:
    body = {"model": "alpha", "stream": True, "x_chunks": 3, "x_delay": 0.2}
    async with aiohttp.ClientSession() as session:
        async with session.post(stack.url + "/v1/chat/completions", json=body) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert resp.headers["X-Accel-Buffering"] == "no"
            loop = asyncio.get_running_loop()
            first = await resp.content.readuntil(b"\n\n")
            t_first = loop.time()
            rest = await resp.read()
            # Events arrive as the upstream writes them (0.2 s apart), not all at the end.
            assert loop.time() - t_first > 0.3
    assert b"tok0" in first and b"[DONE]" in rest


# ------------------------------------------------------------------------------------------------
# model lookup, aliases, filters, errors


async def test_alias_name_is_forwarded_and_use_model_name_and_filters(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        status, data = await _post(
            session, stack.url + "/v1/chat/completions", {"model": "alpha-alias", "x": 1}
        )
        assert status == 200
        assert data["request_body"] == {"model": "alpha-alias", "x": 1}
        assert data["served_by"]["name"] == "alpha"

        body = {"model": "renamed", "temperature": 0.1, "top_p": 1, "keep": True}
        status, data = await _post(session, stack.url + "/v1/chat/completions", body)
        assert status == 200
        assert data["request_body"] == {"model": "upstream-name", "keep": True, "top_k": 7}

        form = aiohttp.FormData()
        form.add_field("model", "renamed")
        form.add_field("file", b"12345", filename="a.wav")
        async with session.post(stack.url + "/v1/audio/transcriptions", data=form) as resp:
            assert (await resp.json())["model"] == "upstream-name"


@pytest.mark.parametrize(("method", "path"), MODEL_ROUTES)
async def test_every_model_route_reaches_the_model_unchanged(
    stack: Stack, method: str, path: str
) -> None:
    async with aiohttp.ClientSession() as session:
        if method == "GET":
            resp = await session.get(stack.url + path + "?model=alpha-alias&x=1")
        elif path in ("/v1/audio/transcriptions", "/v1/images/edits"):
            form = aiohttp.FormData()
            form.add_field("model", "alpha-alias")
            form.add_field("image", b"\x89PNG...", filename="x.png")
            resp = await session.post(stack.url + path + "?x=1", data=form)
        else:
            resp = await session.post(stack.url + path + "?x=1", json={"model": "alpha-alias"})
        async with resp:
            assert resp.status == 200
            data = await resp.json()
    if "served_by" in data:
        assert data["served_by"]["name"] == "alpha"
    if "path" in data:  # fake_model's echo (routes it has no handler of its own for)
        assert data["method"] == method
        # The one rewrite: /v/... and /audioapi/... lose their prefix (llama-swap's).
        sent = upstream_path(path)
        assert data["raw_path"] == sent + ("?model=alpha-alias&x=1" if method == "GET" else "?x=1")
        if method == "POST" and "json" in data["headers"].get("Content-Type", ""):
            assert json.loads(data["body"]) == {"model": "alpha-alias"}


async def test_model_from_query_and_multipart_without_model(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/v1/audio/voices?model=alpha") as resp:
            data = await resp.json()
            assert resp.status == 200 and data["path"] == "/v1/audio/voices"
            assert data["query"] == "model=alpha"
        form = aiohttp.FormData()
        form.add_field("file", b"abc", filename="a.wav")
        async with session.post(
            stack.url + "/v1/audio/transcriptions?model=alpha", data=form
        ) as resp:
            assert resp.status == 200 and (await resp.json())["text"] == "3 bytes"


@pytest.mark.parametrize(
    ("kwargs", "status", "fragment"),
    [
        ({"json": {"messages": []}}, 400, "no model id"),
        (
            {"data": b'{"model": ', "headers": {"Content-Type": "application/json"}},
            400,
            "malformed",
        ),
        ({"data": b"[1, 2]", "headers": {"Content-Type": "application/json"}}, 400, "object"),
        ({"json": {"model": 5}}, 400, "string"),
        ({"json": {"model": "no-such-model"}}, 404, "no-such-model"),
        (
            {
                "data": b'--xx\r\nContent-Disposition: form-data; name="model"\r\n\r\nalpha',
                "headers": {"Content-Type": "multipart/form-data; boundary=xx"},
            },
            400,
            "multipart",
        ),
        ({"json": {"model": "alpha", "pad": "x" * (1024 * 1024 + 10)}}, 413, "larger than 1 MiB"),
    ],
)
async def test_bad_requests_get_openai_errors(
    stack: Stack, kwargs: dict, status: int, fragment: str
) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(stack.url + "/v1/chat/completions", **kwargs) as resp:
            assert resp.status == status
            body = await resp.json()
    assert set(body) == {"src", "error"} and body["src"] == "swapd"
    assert {"message", "type", "param", "code"} <= set(body["error"])
    assert body["error"]["param"] is None
    assert fragment in body["error"]["message"]


async def test_start_failure_is_502_with_log_tail(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        status, body = await _post(session, stack.url + "/v1/chat/completions", {"model": "broken"})
    assert status == 502
    text = body["error"]["message"] + "\n".join(body["error"].get("log_tail", []))
    assert "7" in body["error"]["message"]
    assert "cannot load its weights" in text


async def test_models_list(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        await _post(session, stack.url + "/v1/chat/completions", {"model": "alpha"})
        async with session.get(stack.url + "/v1/models") as resp:
            listing = await resp.json()
        async with session.get(stack.url + "/models") as resp:
            assert (await resp.json())["data"] == listing["data"]
    ids = [m["id"] for m in listing["data"]]
    assert listing["object"] == "list"
    assert ids == sorted(ids)
    assert "hidden" not in ids
    assert {"alpha", "alpha-alias", "org/model", "peer1/remote-model"} <= set(ids)
    by_id = {m["id"]: m for m in listing["data"]}
    assert by_id["alpha"]["status"]["value"] == "loaded"
    assert by_id["alpha-alias"]["meta"]["llamaswap"]["modelID"] == "alpha"
    assert by_id["peer1/remote-model"]["status"]["value"] == "unloaded"


# ------------------------------------------------------------------------------------------------
# /upstream/ passthrough


async def test_upstream_redirects_keep_the_query(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        for method, code in (("GET", 301), ("HEAD", 301), ("POST", 308), ("DELETE", 308)):
            async with session.request(
                method,
                URL(stack.url + "/upstream/alpha?a=1&b=%2F", encoded=True),
                allow_redirects=False,
            ) as resp:
                assert resp.status == code
                assert resp.headers["Location"] == "/upstream/alpha/?a=1&b=%2F"


async def test_upstream_strips_prefix_keeps_escaping_and_matches_longest_id(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.put(
            URL(stack.url + "/upstream/alpha/a%2Fb/c%252F?q=%20x", encoded=True), data=b"payload"
        ) as resp:
            data = await resp.json()
        assert data["method"] == "PUT"
        assert data["raw_path"] == "/a%2Fb/c%252F?q=%20x"
        assert data["body"] == "payload"
        assert data["served_by"]["name"] == "alpha"
        for prefix in ("/upstream/org/model", "/upstream/org%2Fmodel"):
            async with session.get(stack.url + prefix + "/v1/thing") as resp:
                data = await resp.json()
            assert data["path"] == "/v1/thing"
            assert data["served_by"]["name"] == "org/model"
        async with session.get(stack.url + "/upstream/nothing-here/x") as resp:
            assert resp.status == 404
        async with session.head(stack.url + "/upstream/alpha/thing") as resp:
            assert resp.status == 200
            assert int(resp.headers["Content-Length"]) > 0
            assert await resp.read() == b""


async def test_upstream_streams_a_large_upload(stack: Stack) -> None:
    payload = bytes(range(256)) * 40_000  # 10 MB: past the model-route limit, streamed here

    async def chunks():  # type: ignore[no-untyped-def]
        for i in range(0, len(payload), 1 << 20):
            yield payload[i : i + (1 << 20)]

    async with aiohttp.ClientSession() as session:
        async with session.post(stack.url + "/upstream/alpha/upload", data=chunks()) as resp:
            data = await resp.json()
    assert data["body_bytes"] == len(payload)


async def test_large_downloads_arrive_intact(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        for size in (10, 300_000, 5_000_000):
            async with session.get(stack.url + f"/upstream/alpha/blob?n={size}") as resp:
                assert resp.headers["Content-Length"] == str(size)
                data = await resp.read()
            assert data == (bytes(range(256)) * (size // 256 + 1))[:size]


async def test_ignore_paths_answer_409_and_start_nothing(stack: Stack) -> None:
    assert stack.model("org/model")["state"] in ("stopped", "ready")
    async with aiohttp.ClientSession() as session:
        await session.post(stack.url + "/api/models/unload/org/model")
        for method in ("GET", "POST"):
            async with session.request(method, stack.url + "/upstream/org/model/app.js") as resp:
                assert resp.status == 409
                body = await resp.json()
                assert body["error"]["message"] == (
                    "model org/model is not loaded; path matches upstream.ignorePaths"
                )
        assert stack.model("org/model")["state"] == "stopped"
        async with session.get(stack.url + "/upstream/org/model/index.html") as resp:
            assert resp.status == 200
        async with session.get(stack.url + "/upstream/org/model/app.js") as resp:
            assert resp.status == 200  # ready now: served


# ------------------------------------------------------------------------------------------------
# websockets


async def test_websocket_relay_both_ways(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(
            stack.url + "/upstream/alpha/ws?room=a%20b&x=1",
            protocols=("nope", "superchat"),
            autoping=False,
        ) as ws:
            assert ws.protocol == "superchat"
            hello = json.loads((await ws.receive(timeout=10)).data)
            assert hello == {"hello": "alpha", "query": "room=a b&x=1"}
            await ws.send_str("hi")
            assert (await ws.receive(timeout=5)).data == "echo:hi"
            await ws.send_bytes(b"\x01\x02\x03")
            assert (await ws.receive(timeout=5)).data == b"\x03\x02\x01"
            await ws.ping(b"are you there")
            pong = await ws.receive(timeout=5)
            assert pong.type == aiohttp.WSMsgType.PONG and pong.data == b"are you there"
            await ws.send_str("close")
            closing = await ws.receive(timeout=5)
            assert closing.type == aiohttp.WSMsgType.CLOSE
            assert closing.data == 4001 and closing.extra == "asked to close"


async def test_ignored_websockets(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        await session.post(stack.url + "/api/models/unload/wsignored")
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(stack.url + "/upstream/wsignored/ws")
        assert refused.value.status == 409
        async with session.get(
            stack.url + "/upstream/wsignored/ws",
            headers={"Connection": "Upgrade", "Upgrade": "websocket"},
        ) as resp:
            assert (await resp.json())["error"]["message"] == (
                "model wsignored is not loaded; ignored websocket requests cannot start it"
            )
        assert stack.model("wsignored")["state"] == "stopped"

        async with session.get(stack.url + "/upstream/wsignored/") as resp:
            assert resp.status == 200  # a plain request starts it
        async with session.ws_connect(stack.url + "/upstream/wsignored/ws") as ws:
            await ws.receive(timeout=10)
            await ws.send_str("ping")
            assert (await ws.receive(timeout=5)).data == "echo:ping"
            async with session.get(stack.url + "/running") as resp:
                running = {m["model"]: m for m in (await resp.json())["running"]}
            assert running["wsignored"]["in_flight"] == 0  # not counted
            # Not holding a drain: the unload completes while the websocket is open, and closes it.
            async with session.post(stack.url + "/api/models/unload/wsignored") as resp:
                assert resp.status == 200
            closing = await ws.receive(timeout=10)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


# ------------------------------------------------------------------------------------------------
# admission, disconnects, IPC


async def test_concurrency_limit_answers_429(stack: Stack) -> None:
    url = stack.url + "/upstream/limited/slow?n=20&delay=0.1"
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/upstream/limited/") as resp:
            assert resp.status == 200
        first = await session.get(url)
        second = await session.get(url)
        try:
            assert first.status == second.status == 200
            async with session.get(url) as third:
                assert third.status == 429
                assert third.headers["Retry-After"] == "1"
                body = await third.json()
                assert body["error"]["code"] == "concurrency_limit"
                assert body["error"]["type"] == "rate_limit_error"
        finally:
            first.close()
            second.close()
        # The slots come back once those requests are gone.
        wait_for(lambda: in_flight(stack, "limited") == 0, 10, what="slots released")
        async with session.get(stack.url + "/upstream/limited/slow?n=1&delay=0") as resp:
            assert resp.status == 200


async def test_a_client_that_leaves_while_waiting_frees_its_slot(stack: Stack) -> None:
    body = {"model": "slowstart"}
    async with aiohttp.ClientSession() as session:
        with pytest.raises(asyncio.TimeoutError):
            # Leaves while the model is still starting (its health check fails for 1.5 s).
            await session.post(
                stack.url + "/v1/chat/completions",
                json=body,
                timeout=aiohttp.ClientTimeout(total=0.3),
            )
        # concurrencyLimit is 1: had the first request kept its slot, this would stay 429. (The
        # proxy notices the disconnect asynchronously, hence a short deadline, not one try.)
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            status, data = await _post(session, stack.url + "/v1/chat/completions", body)
            if status != 429 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
    assert status == 200 and data["served_by"]["name"] == "slowstart"


async def test_client_disconnect_cancels_the_upstream_request(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        resp = await session.get(stack.url + "/upstream/alpha/slow?n=100&delay=0.05&tag=gone")
        assert resp.status == 200
        assert await resp.content.readline() == b"0\n"
        resp.close()  # the client goes away mid-stream
    log = model_log_has(stack, "alpha", "slow gone: client gone after")
    assert "slow gone: finished" not in log
    wait_for(lambda: in_flight(stack, "alpha") == 0, 10, what="alpha idle")


async def test_requests_to_a_ready_model_make_no_ipc(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        status, _ = await _post(session, stack.url + "/v1/chat/completions", {"model": "alpha"})
        assert status == 200
        before = received(stack)
        for _ in range(100):
            status, _ = await _post(session, stack.url + "/v1/chat/completions", {"model": "alpha"})
            assert status == 200
        after = received(stack)
    assert after.get("Ensure", 0) == before.get("Ensure", 0)
    # Activity is rate-limited per model (about two casts a second at most), never one per request.
    assert after.get("Activity", 0) - before.get("Activity", 0) <= 10


# ------------------------------------------------------------------------------------------------
# peers


async def test_peer_models_are_forwarded_with_key_and_rewritten_model(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            stack.url + "/v1/chat/completions",
            json={"model": "peer1/remote-model"},
            headers={"Authorization": "Bearer client-key"},
        ) as resp:
            data = await resp.json()
        assert data["served_by"]["name"] == "peer-upstream"
        assert data["request_body"]["model"] == "remote-model"
        assert data["request_headers"]["Authorization"] == "Bearer peer-secret"
        assert data["request_headers"]["x-api-key"] == "peer-secret"
        status, data = await _post(
            session, stack.url + "/v1/chat/completions", {"model": "remote-model"}
        )
        assert status == 200 and data["request_body"]["model"] == "remote-model"
        async with session.get(stack.url + "/upstream/peer1/remote-model/v1/x?y=1") as resp:
            data = await resp.json()
        assert data["raw_path"] == "/v1/x?y=1" and data["headers"]["x-api-key"] == "peer-secret"
        async with session.ws_connect(stack.url + "/upstream/peer1/remote-model/ws") as ws:
            assert json.loads((await ws.receive(timeout=10)).data)["hello"] == "peer-upstream"
            await ws.send_str("x")
            assert (await ws.receive(timeout=5)).data == "echo:x"


async def test_a_failing_peer_is_502(peer_url: str) -> None:
    dead = free_port()
    config = {
        "models": {},
        "peers": {"gone": {"proxy": f"http://127.0.0.1:{dead}", "models": ["m"]}},
    }
    with Stack(config) as other:
        async with aiohttp.ClientSession() as session:
            status, body = await _post(session, other.url + "/v1/chat/completions", {"model": "m"})
    assert status == 502
    assert body["error"]["message"].startswith("peer proxy error:")


# ------------------------------------------------------------------------------------------------
# operations


async def test_running_unload_and_logs(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        await _post(session, stack.url + "/v1/chat/completions", {"model": "alpha"})
        async with session.get(stack.url + "/running") as resp:
            running = {m["model"]: m for m in (await resp.json())["running"]}
        assert running["alpha"]["state"] == "ready"
        assert running["alpha"]["pid"] == stack.model("alpha")["pid"]

        async with session.get(stack.url + "/logs/stream/alpha") as resp:
            assert resp.headers["X-Accel-Buffering"] == "no"
            history = await resp.content.readuntil(b"starting on port")
        assert b"fake model alpha" in history
        async with session.get(stack.url + "/logs/stream/alpha-alias?no-history") as resp:
            # No history: the next thing to arrive is new output (a request's log line).
            async with session.get(stack.url + "/upstream/alpha/slow?n=1&tag=live") as slow:
                await slow.read()
            line = await asyncio.wait_for(resp.content.readline(), 10)
        assert b"slow live" in line
        async with session.get(stack.url + "/logs/stream/nope") as resp:
            assert resp.status == 400
        async with session.get(stack.url + "/logs/stream/proxy") as resp:
            assert b"routing table generation" in await resp.content.readuntil(b"generation")
        async with session.get(stack.url + "/logs") as resp:
            assert b"[alpha] fake model alpha" in await resp.read()

        async with session.post(stack.url + "/api/models/unload/alpha-alias") as resp:
            assert resp.status == 200
        # Answered when done: the daemon already reports it stopped.
        assert stack.model("alpha")["state"] == "stopped"
        async with session.post(stack.url + "/api/models/unload/not-a-model") as resp:
            assert resp.status == 404
        await _post(session, stack.url + "/v1/chat/completions", {"model": "alpha"})
        async with session.post(stack.url + "/api/models/unload") as resp:
            assert (await resp.json()) == {"msg": "ok"}
        assert all(m["state"] != "ready" for m in stack.status()["models"])


async def test_health_cors_and_unknown_paths(stack: Stack) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/health") as resp:
            assert await resp.text() == "OK"
        async with session.get(stack.url + "/no/such/route") as resp:
            assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
        async with session.put(stack.url + "/v1/chat/completions") as resp:
            assert resp.status == 405 and resp.headers["Allow"] == "POST"
            assert (await resp.json())["error"]["type"] == "invalid_request_error"
        async with session.options(
            stack.url + "/v1/chat/completions",
            headers={"Access-Control-Request-Headers": "content-type, x-bad header"},
        ) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == "*"
            assert resp.headers["Access-Control-Allow-Headers"] == "content-type"
