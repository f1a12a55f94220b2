"""A tiny OpenAI-compatible server: the models of swapd's embedded demo config.

It loads nothing and thinks about nothing: it answers chat completions (plain JSON, or SSE chunks
when `stream` is true) with a short text that names the model and echoes the last user message, so
swapping between the two demo models is visible in every reply. Also `GET /health` and
`GET /v1/models`. Run it as `python -m swapd.daemon.cli.demo_server --port N --model NAME`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiohttp import web

MODEL_KEY = web.AppKey("model", str)


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return web.json_response(body, status=status)


def _last_user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # content parts: keep the text ones
            parts = [p.get("text", "") for p in content if isinstance(p, dict)]
            return " ".join(p for p in parts if isinstance(p, str) and p)
    return ""


def reply_text(model: str, messages: Any) -> str:
    said = _last_user_text(messages).strip()
    if not said:
        return f"Hello from {model}, a swapd demo model."
    if len(said) > 200:
        said = said[:200] + "..."
    return f"Hello from {model}, a swapd demo model. You said: {said}"


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [w + " " for w in words[:-1]] + words[-1:]


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def models(request: web.Request) -> web.Response:
    model = request.app[MODEL_KEY]
    entry = {"id": model, "object": "model", "created": 0, "owned_by": "swapd-demo"}
    return web.json_response({"object": "list", "data": [entry]})


async def chat_completions(request: web.Request) -> web.StreamResponse:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(400, "request body is not valid JSON")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return _error(400, "'messages' must be a non-empty list")
    # Answer as the name the client asked for (an alias, say), as llama-server does.
    model = body.get("model") if isinstance(body.get("model"), str) else request.app[MODEL_KEY]
    text = reply_text(request.app[MODEL_KEY], messages)
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    prompt_tokens = sum(
        len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict)
    )
    completion_tokens = len(text.split())
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if not body.get("stream"):
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)

    async def send(choices: list[dict[str, Any]], **extra: Any) -> None:
        chunk = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
            **extra,
        }
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    for word in _words(text):
        await send([{"index": 0, "delta": {"content": word}, "finish_reason": None}])
    await send([{"index": 0, "delta": {}, "finish_reason": "stop"}])
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        await send([], usage=usage)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def make_app(model: str) -> web.Application:
    app = web.Application()
    app[MODEL_KEY] = model
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m swapd.daemon.cli.demo_server",
        description="A tiny OpenAI-compatible demo model for swapd's embedded config.",
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", default="demo")
    args = parser.parse_args(argv)
    url = f"http://{args.host}:{args.port}"

    def started(_message: str) -> None:  # run_app calls it once the socket listens
        print(f"demo model {args.model} listening on {url}", flush=True)

    web.run_app(make_app(args.model), host=args.host, port=args.port, print=started)
    # run_app returned: sockets and connections are closed. Skip the interpreter's teardown of
    # aiohttp and friends (~25 ms on a small VM), since a swap waits for this exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
