"""A test upstream standing in for llama-server / vLLM: an OpenAI-compatible aiohttp server.

llama.cpp's real server runs in tests/real/test_llamacpp.py (tier `llamacpp`). This stand-in is
for what a real server cannot be made to do on cue and cheaply in every test: a chosen health
delay or health failure, an exit at start with a given code, slow or endless streams, websockets,
identifying which instance served a request (`served_by`), start-up in a few milliseconds for the
hundreds of stacks the suite starts, and a GPU footprint for the fake NVML backend. What a real
small model cannot be made to do on cue it does as llama-server's API does it: a tool call when
the request carries `tools`, an answer naming the images of a vision request, text completions
(`/v1/completions`), embeddings.

Two of llama-server's habits on cue: `--close-after-stream` closes the connection after every
streamed chat answer without saying `Connection: close` first; `--no-jinja` answers a chat with
`tools` 500 `tools param requires --jinja flag`, as llama-server started without `--jinja` does.

Run as `python fake_model.py --port N [--name ID] [options]`. Every response says which instance
served it (`served_by`, the `--name` and pid), so tests can tell models apart.

`--request-log FILE` appends one JSON line per request that reaches it (method, raw path, headers
in order, the body's bytes as they came in base64), with request bodies left compressed, as a
server that does not decompress them receives them: a test proves from it what the proxy sent,
byte for byte, including any request nobody asked the proxy for.
What the servers report about their own work, for swapd's `busyCheck` presets: `--slots N` serves
llama-server's `GET /slots` (N slots; a chat completion or `/slow` request in progress occupies one
and shows `is_processing: true`); without it `/slots` answers 501 as llama-server started with
`--no-slots` does. `--metrics` serves vLLM's `GET /metrics` (Prometheus text) with
`vllm:num_requests_running` and `vllm:num_requests_waiting`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import sys
import time
from typing import Any

from aiohttp import WSMsgType, web

ARGS: argparse.Namespace
STARTED = time.monotonic()
# The slots occupied by a generation in progress (slot id -> its task id), as llama-server keeps.
BUSY_SLOTS: dict[int, int] = {}
TASKS = iter(range(1, 2**31))


class _Slot:
    """A generation in progress holds a slot (the lowest free one) while it runs."""

    def __enter__(self) -> None:
        self.slot = next(i for i in range(len(BUSY_SLOTS) + 1) if i not in BUSY_SLOTS)
        BUSY_SLOTS[self.slot] = next(TASKS)

    def __exit__(self, *exc: object) -> None:
        BUSY_SLOTS.pop(self.slot, None)


def _served_by() -> dict[str, object]:
    return {"name": ARGS.name, "pid": os.getpid(), "port": ARGS.port}


def _timings(prompt: int, predicted: int) -> dict[str, float]:
    """llama.cpp's `timings` block, with fixed speeds (tests compare them): 100 tokens/s of
    prompt, 50 of generation."""
    return {
        "cache_n": 0,
        "prompt_n": prompt,
        "prompt_ms": prompt * 10.0,
        "prompt_per_second": 100.0,
        "predicted_n": predicted,
        "predicted_ms": predicted * 20.0,
        "predicted_per_second": 50.0,
    }


async def health(request: web.Request) -> web.Response:
    if time.monotonic() - STARTED < ARGS.health_delay:
        return web.json_response({"status": "loading"}, status=503)
    return web.json_response({"status": "ok"})


async def _json_body(request: web.Request) -> dict[str, object]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return body if isinstance(body, dict) else {}


async def chat(request: web.Request) -> web.StreamResponse:
    with _Slot():
        return await _chat(request)


def _images(body: dict[str, object]) -> list[str]:
    """The media types of the images in an OpenAI chat body's messages (`image_url` parts with
    data URLs), in order."""
    found = []
    for message in body.get("messages") or []:  # type: ignore[attr-defined]
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            image = part.get("image_url") if isinstance(part, dict) else None
            url = image.get("url") if isinstance(image, dict) else None
            if isinstance(url, str) and url.startswith("data:"):
                found.append(url[5:].split(";", 1)[0])
    return found


def _tool_call(body: dict[str, object]) -> dict[str, object] | None:
    """With `tools` in the request, llama-server answers with a call of the first one (its
    arguments: each required parameter set to "x"), as a model that chose to call it would."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    # Whatever a client sent as its tools (a fuzz sends anything): what is not a function's
    # shape reads as absent, as a server that answers rather than fails would read it.
    tool = tools[0] if isinstance(tools[0], dict) else {}
    function = tool.get("function") if isinstance(tool.get("function"), dict) else {}
    parameters = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
    required = parameters.get("required") if isinstance(parameters.get("required"), list) else []
    arguments = json.dumps({str(name): "x" for name in required if isinstance(name, str)})
    return {
        "id": "call_fake0",
        "type": "function",
        "function": {"name": function.get("name"), "arguments": arguments},
    }


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    if ARGS.no_jinja and body.get("tools"):
        # llama-server's answer to `tools` when it was started without `--jinja`.
        error = {
            "code": 500,
            "message": "tools param requires --jinja flag",
            "type": "server_error",
        }
        return web.json_response({"error": error}, status=500)
    call = _tool_call(body)
    images = _images(body)
    if call is not None or images:
        return await _chat_special(request, body, call, images)
    chunks = int(body.get("x_chunks", request.query.get("chunks", 5)))  # type: ignore[arg-type]
    delay = float(body.get("x_delay", request.query.get("delay", 0)))  # type: ignore[arg-type]
    if "x_blob" in body:
        # A large body of known length: `x_blob` bytes of a repeating 0..255 pattern.
        n = int(body["x_blob"])  # type: ignore[call-overload]
        return web.Response(body=(bytes(range(256)) * (n // 256 + 1))[:n])
    if body.get("stream"):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        tag = body.get("x_tag", "")
        try:
            for i in range(chunks):
                event = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [
                        {"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}
                    ],
                }
                await resp.write(f"data: {json.dumps(event)}\n\n".encode())
                if delay:
                    await asyncio.sleep(delay)
        except (asyncio.CancelledError, ConnectionError):
            # What tests look for in the model's log to prove a client disconnect reached here.
            print(f"chat {tag}: client gone after {i + 1} chunks", flush=True)
            raise
        done = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            # What llama-server's last chunk carries: its timings, always.
            "timings": _timings(7, chunks),
        }
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            # OpenAI's usage chunk, only when asked for.
            done["usage"] = {
                "prompt_tokens": 7,
                "completion_tokens": chunks,
                "total_tokens": 7 + chunks,
                "prompt_tokens_details": {"cached_tokens": 2},
            }
        await resp.write(f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        if ARGS.close_after_stream and request.transport is not None:
            # As llama-server does: the connection closed after a streamed answer, though its
            # head did not say `Connection: close`.
            request.transport.close()
        return resp
    if delay:
        await asyncio.sleep(delay)
    # `x_tokens`: the generated tokens it reports (a tag a test finds in the activity record).
    generated = int(body.get("x_tokens", 3))  # type: ignore[call-overload]
    return web.json_response(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"hello from {ARGS.name}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 1,
                "completion_tokens": generated,
                "total_tokens": 1 + generated,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
            "timings": _timings(1, generated),
            "request_body": body,
            "request_headers": dict(request.headers),
            "served_by": _served_by(),
        }
    )


async def _chat_special(
    request: web.Request,
    body: dict[str, object],
    call: dict[str, object] | None,
    images: list[str],
) -> web.StreamResponse:
    """A tool call, or an answer that names the images it was sent ("2 images: image/png,
    image/jpeg"), non-streamed or streamed as llama-server streams them (a tool call's arguments
    in two fragments, then `finish_reason: tool_calls`)."""
    text = f"{len(images)} images: {', '.join(images)}" if images and call is None else ""
    finish = "tool_calls" if call is not None else "stop"
    created = int(time.time())
    if not body.get("stream"):
        message: dict[str, object] = {"role": "assistant", "content": text or None}
        if call is not None:
            message["tool_calls"] = [call]
        return web.json_response(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": created,
                "model": body.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
                "timings": _timings(5, 2),
            }
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    def event(delta: dict[str, object], finish_reason: str | None = None) -> bytes:
        chunk = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": created,
            "model": body.get("model"),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    if call is not None:
        function = call["function"]
        arguments = function["arguments"]  # type: ignore[index]
        half = len(arguments) // 2
        first = {
            "index": 0,
            "id": call["id"],
            "type": "function",
            "function": {"name": function["name"], "arguments": arguments[:half]},
        }  # type: ignore[index]
        await resp.write(event({"role": "assistant", "tool_calls": [first]}))
        rest = {"index": 0, "function": {"arguments": arguments[half:]}}
        await resp.write(event({"tool_calls": [rest]}))
    else:
        await resp.write(event({"role": "assistant", "content": text}))
    done = json.loads(event({}, finish)[6:])
    done["timings"] = _timings(5, 2)
    await resp.write(f"data: {json.dumps(done)}\n\n".encode())
    usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    tail = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": created,
        "model": body.get("model"),
        "choices": [],
        "usage": usage,
    }
    await resp.write(f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode())
    await resp.write_eof()
    return resp


async def completions(request: web.Request) -> web.StreamResponse:
    """`/v1/completions`: the prompt said back ("completion of <prompt>"), whole or streamed in
    two pieces, with llama-server's timings and OpenAI's usage (a body without a prompt is
    echoed, as any other route)."""
    body = await _json_body(request)
    if "prompt" not in body:
        return await echo(request)  # what the route tests read: the request as it arrived
    text = f"completion of {body.get('prompt', '')}"
    if body.get("suffix"):
        text += f" before {body['suffix']}"
    created = int(time.time())
    base = {
        "id": "cmpl-fake",
        "object": "text_completion",
        "created": created,
        "model": body.get("model"),
    }
    usage = {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    if not body.get("stream"):
        choice = {"index": 0, "text": text, "finish_reason": "stop"}
        return web.json_response(
            {
                **base,
                "choices": [choice],
                "usage": usage,
                "timings": _timings(4, 2),
                "request_body": body,
            }
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for piece, finish in ((text[:5], None), (text[5:], "stop")):
        chunk = {**base, "choices": [{"index": 0, "text": piece, "finish_reason": finish}]}
        if finish:
            chunk["timings"] = _timings(4, 2)
        await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
    tail = {**base, "choices": [], "usage": usage}
    await resp.write(f"data: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode())
    await resp.write_eof()
    return resp


async def embeddings(request: web.Request) -> web.Response:
    body = await _json_body(request)
    inputs = body.get("input", "")
    items = inputs if isinstance(inputs, list) else [inputs]
    return web.json_response(
        {
            "object": "list",
            "model": body.get("model"),
            "data": [
                {"object": "embedding", "index": i, "embedding": [0.1, 0.2, float(len(str(x)))]}
                for i, x in enumerate(items)
            ],
            "usage": {"prompt_tokens": len(items), "total_tokens": len(items)},
        }
    )


async def transcription(request: web.Request) -> web.Response:
    form = await request.post()
    upload = form.get("file")
    size = len(upload.file.read()) if hasattr(upload, "file") else 0
    return web.json_response(
        {"text": f"{size} bytes", "model": form.get("model"), "served_by": _served_by()}
    )


async def env(request: web.Request) -> web.Response:
    return web.json_response(dict(os.environ))


async def websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(protocols=("chat", "superchat"))
    await ws.prepare(request)
    await ws.send_str(json.dumps({"hello": ARGS.name, "query": request.query_string}))
    async for msg in ws:
        if msg.type == WSMsgType.TEXT:
            if msg.data == "close":
                await ws.close(code=4001, message=b"asked to close")
                break
            await ws.send_str("echo:" + msg.data)
        elif msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data[::-1])
    return ws


async def slow(request: web.Request) -> web.StreamResponse:
    """Streams `n` chunks `delay` seconds apart (a long generation)."""
    with _Slot():
        return await _slow(request)


async def _slow(request: web.Request) -> web.StreamResponse:
    n = int(request.query.get("n", 10))
    delay = float(request.query.get("delay", 0.1))
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    tag = request.query.get("tag", "")
    sent = 0
    try:
        for i in range(n):
            await resp.write(f"{i}\n".encode())
            sent += 1
            await asyncio.sleep(delay)
        await resp.write_eof()
    except (asyncio.CancelledError, ConnectionError):
        # What tests look for in the model's log to prove a client disconnect reached here.
        print(f"slow {tag}: client gone after {sent} chunks", flush=True)
        raise
    print(f"slow {tag}: finished {sent} chunks", flush=True)
    return resp


def _slot(slot: int) -> dict[str, object]:
    # The fields of llama-server's /slots entry that matter here, with some of the rest.
    task = BUSY_SLOTS.get(slot)
    return {
        "id": slot,
        "id_task": task if task is not None else -1,
        "n_ctx": 4096,
        "speculative": False,
        "is_processing": task is not None,
        "params": {"n_predict": -1, "temperature": 0.8},
        "next_token": {"has_next_token": task is not None, "n_remain": -1, "n_decoded": 0},
    }


async def slots(request: web.Request) -> web.Response:
    if not ARGS.slots:
        error = {
            "code": 501,
            "message": "This server does not support slots endpoint. Start it with `--slots`",
            "type": "not_supported_error",
        }
        return web.json_response({"error": error}, status=501)
    return web.json_response([_slot(i) for i in range(ARGS.slots)])


async def metrics(request: web.Request) -> web.Response:
    labels = f'engine="0",model_name="{ARGS.name}"'
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} {float(len(BUSY_SLOTS))}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} 0.0\n"
    )
    return web.Response(text=text, content_type="text/plain")


async def output(request: web.Request) -> web.Response:
    """Writes `bytes` bytes of output to its log, in lines of `line` bytes (0: one line), then
    `end` on a line of its own: a verbose model (or one that prints a huge line)."""
    size = int(request.query.get("bytes", 1024))
    line = int(request.query.get("line", 0)) or size
    end = request.query.get("end", "output done")
    out = sys.stdout.buffer
    piece = b"o" * (line - 1) + b"\n" if line < size else b""
    written = 0
    while size - written >= line and piece:
        out.write(piece)
        written += line
    while written < size:  # the rest, or the one long line, a MiB a write
        step = min(1 << 20, size - written)
        out.write(b"o" * step)
        written += step
    out.write(f"\n{end}\n".encode())
    out.flush()
    return web.json_response({"written": size})


async def blob(request: web.Request) -> web.Response:
    """`n` bytes (a repeating 0..255 pattern) with a Content-Length: a large download."""
    n = int(request.query.get("n", 1024))
    return web.Response(body=(bytes(range(256)) * (n // 256 + 1))[:n])


async def sse(request: web.Request) -> web.StreamResponse:
    """`n` SSE events of `size` bytes as fast as possible (the relay benchmark)."""
    n = int(request.query.get("n", 1000))
    size = int(request.query.get("size", 64))
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    event = b"data: " + b"x" * size + b"\n\n"
    for _ in range(n):
        await resp.write(event)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def echo(request: web.Request) -> web.Response:
    """Anything else: say what arrived."""
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.path,
            "raw_path": request.raw_path,
            "query": request.query_string,
            "headers": dict(request.headers),
            "body_bytes": len(body),
            "body": body.decode("utf-8", "replace") if len(body) < 65536 else "",
            "served_by": _served_by(),
        }
    )


async def no_page(request: web.Request) -> web.Response:
    return web.json_response({"detail": "Not Found"}, status=404)  # FastAPI's (vLLM's) 404


@web.middleware
async def log_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    body = await request.read()
    entry = {
        "method": request.method,
        "raw_path": request.raw_path,
        "version": f"{request.version.major}.{request.version.minor}",
        "headers": [[k, v] for k, v in request.headers.items()],
        "body_b64": base64.b64encode(body).decode(),
    }
    _append(ARGS.request_log, json.dumps(entry))
    return await handler(request)


async def llama_cors(request: web.Request, response: web.StreamResponse) -> None:
    """As llama-server: the request's Origin echoed in `Access-Control-Allow-Origin`."""
    origin = request.headers.get("Origin")
    if origin:
        response.headers["Access-Control-Allow-Origin"] = origin


def _append(path: str, line: str) -> None:
    # Written before the request is handled, so the line is there once the answer is.
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


def _declare_gpu_mem(used: int) -> None:
    # What the fake NVML backend reports for this process (SWAPD_FAKE_GPU_MEM_DIR/<pid>).
    folder = os.environ.get("SWAPD_FAKE_GPU_MEM_DIR")
    if folder:
        path = os.path.join(folder, str(os.getpid()))
        with open(path + ".tmp", "w") as out:
            out.write(str(used))
        os.replace(path + ".tmp", path)


async def gpu_mem(request: web.Request) -> web.Response:
    """`POST /gpu-mem?bytes=N`: the process now holds N bytes of (fake) GPU memory."""
    used = int(request.query["bytes"])
    _declare_gpu_mem(used)
    return web.json_response({"gpu_mem": used, **_served_by()})


def main() -> None:
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--name", default="fake")
    parser.add_argument("--health-delay", type=float, default=0.0, help="503 on /health this long")
    parser.add_argument("--listen-delay", type=float, default=0.0, help="sleep before listening")
    parser.add_argument("--exit-after", type=float, default=None, help="exit this long after start")
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--fail", action="store_true", help="print an error and exit at once")
    parser.add_argument(
        "--no-root", action="store_true", help="404 at / (as vLLM and many servers have no page)"
    )
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--request-log", default=None, help="append each request here (JSON)")
    parser.add_argument("--slots", type=int, default=0, help="serve llama-server's /slots")
    parser.add_argument("--metrics", action="store_true", help="serve vLLM's /metrics")
    parser.add_argument(
        "--sigterm-exits",
        action="store_true",
        help="exit at once on SIGTERM, cutting requests under way (aiohttp would finish them)",
    )
    parser.add_argument(
        "--close-after-stream",
        action="store_true",
        help="close the connection after a streamed chat answer, unannounced (llama-server)",
    )
    parser.add_argument(
        "--no-jinja", action="store_true", help="500 for a chat with `tools` (llama-server)"
    )
    parser.add_argument("--gpu-mem", type=int, default=None, help="GPU bytes it says it holds")
    ARGS = parser.parse_args()
    if ARGS.gpu_mem is not None:
        _declare_gpu_mem(ARGS.gpu_mem)

    print(f"fake model {ARGS.name} starting on port {ARGS.port} pid {os.getpid()}", flush=True)
    if ARGS.fail:
        print(f"error: {ARGS.name} cannot load its weights", flush=True)
        # As llama-server does, a line after the error: the cause is not always the last line.
        print(f"fake model {ARGS.name}: exiting", flush=True)
        sys.exit(ARGS.exit_code)
    if ARGS.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if ARGS.listen_delay:
        time.sleep(ARGS.listen_delay)

    middlewares = [log_requests] if ARGS.request_log else []
    app = web.Application(client_max_size=1024**3, middlewares=middlewares)
    app.on_response_prepare.append(llama_cors)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/audio/transcriptions", transcription)
    app.router.add_get("/env", env)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/slow", slow)
    app.router.add_get("/sse", sse)
    app.router.add_get("/blob", blob)
    app.router.add_get("/output", output)
    app.router.add_post("/gpu-mem", gpu_mem)
    app.router.add_get("/slots", slots)
    if ARGS.metrics:
        app.router.add_get("/metrics", metrics)
    if ARGS.no_root:
        app.router.add_route("*", "/", no_page)
    app.router.add_route("*", "/{tail:.*}", echo)

    async def exit_later(app: web.Application) -> None:
        async def _exit() -> None:
            await asyncio.sleep(ARGS.exit_after)
            print(f"{ARGS.name} exiting with {ARGS.exit_code}", flush=True)
            os._exit(ARGS.exit_code)

        if ARGS.exit_after is not None:
            app["exit_task"] = asyncio.get_running_loop().create_task(_exit())

    app.on_startup.append(exit_later)

    async def sigterm_exits(app: web.Application) -> None:
        if ARGS.sigterm_exits:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, os._exit, 0)

    app.on_startup.append(sigterm_exits)
    # handler_cancellation: a proxy that drops the connection cancels the handler (tests watch it).
    web.run_app(
        app,
        host=ARGS.host,
        port=ARGS.port,
        print=None,
        access_log=None,
        handler_cancellation=True,
        # What reaches it is what the proxy sent: a compressed body stays compressed in the log.
        auto_decompress=not ARGS.request_log,
    )


if __name__ == "__main__":
    main()
