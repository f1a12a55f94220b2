"""A test upstream standing in for vLLM's OpenAI server started with `--enable-sleep-mode` and
`VLLM_SERVER_DEV_MODE=1` (vLLM needs a GPU, which the machines these tests run on lack).

It does what swapd's sleep preset relies on, as vLLM's docs ("Sleep Mode") describe it:

* it listens only once its model has loaded (`--load-delay` seconds: the cold start, which for a
  real vLLM is weights, CUDA graphs and compilation); `GET /health` then answers 200;
* `POST /sleep?level=1` (the default) offloads the weights and drops the KV cache, `level=2`
  drops both; `POST /wake_up` brings everything back, `POST /wake_up?tags=weights` and
  `?tags=kv_cache` one part each; `POST /collective_rpc {"method": "reload_weights"}` reloads the
  weights after a level-2 sleep, `POST /reset_prefix_cache` empties the prefix cache;
  `GET /is_sleeping` answers `{"is_sleeping": bool}`: true until every part is awake again. A
  sleep takes `--sleep-delay` seconds, a wake `--wake-delay`, a weight reload `--reload-delay`;
* `POST /v1/chat/completions` (streaming or not) answers as an OpenAI server does, with
  `served_by` (its `--name`, pid and port); while asleep it answers 503, so a request that
  reached an asleep server shows;
* its GPU memory, for the fake NVML backend (`SWAPD_FAKE_GPU_MEM_DIR/<pid>`): `--gpu-mem` bytes
  awake, `--residual` bytes asleep (the CUDA context), as NVML
  reads a real vLLM's (of the rest, half is weights and half KV cache).

Faults on cue: `--sleep-fault 500` answers the sleep with a 500, `hang` never answers it;
`--wake-fault` the same for the wake; `--wrong-after-wake` answers every chat completion after
its first wake with garbage (200, and `/health` still 200), as a vLLM woken with corrupted weights
did (torch_memory_saver#71). Every sleep-mode call is printed as one
`vllm-like <event> {json}` line and appended to `--request-log` (JSON lines), so tests see which
calls were made, in which order, by which process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

ARGS: argparse.Namespace
# The parts of its memory that are awake ("weights", "kv_cache"), and how it slept.
AWAKE: set[str] = {"weights", "kv_cache"}
STATE: dict[str, Any] = {"level": 0, "weights_lost": False, "woken": False}


def record(event: str, **fields: Any) -> None:
    line = json.dumps(
        {"event": event, "pid": os.getpid(), "name": ARGS.name, "at": time.time(), **fields}
    )
    print(f"vllm-like {event} {line}", flush=True)
    if ARGS.request_log:
        with open(ARGS.request_log, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def declare_memory() -> None:
    """What the fake NVML backend reports for this process."""
    folder = os.environ.get("SWAPD_FAKE_GPU_MEM_DIR")
    if not folder:
        return
    part = max(ARGS.gpu_mem - ARGS.residual, 0) // 2  # the weights, and the KV cache
    used = ARGS.residual + part * len(AWAKE)
    path = Path(folder, str(os.getpid()))
    path.with_suffix(".tmp").write_text(str(used))
    path.with_suffix(".tmp").replace(path)


def served_by() -> dict[str, Any]:
    return {"name": ARGS.name, "pid": os.getpid(), "port": ARGS.port}


async def fault(what: str) -> web.Response | None:
    kind = ARGS.sleep_fault if what == "sleep" else ARGS.wake_fault
    if kind == "500":
        record(f"{what}_failed")
        return web.json_response({"error": f"{what} failed (injected)"}, status=500)
    if kind == "hang":
        record(f"{what}_hangs")
        await asyncio.sleep(3600)
    return None


async def health(request: web.Request) -> web.Response:
    return web.Response()


async def models(request: web.Request) -> web.Response:
    return web.json_response(
        {"object": "list", "data": [{"id": ARGS.name, "object": "model", "owned_by": "vllm"}]}
    )


async def sleep(request: web.Request) -> web.Response:
    level = int(request.query.get("level", "1"))
    record("sleep", level=level)
    failed = await fault("sleep")
    if failed is not None:
        return failed
    await asyncio.sleep(ARGS.sleep_delay)
    AWAKE.clear()
    STATE["level"] = level
    STATE["weights_lost"] = level >= 2
    declare_memory()
    record("asleep", level=level)
    return web.Response()


async def wake_up(request: web.Request) -> web.Response:
    tags = request.query.getall("tags", []) or ["weights", "kv_cache"]
    record("wake_up", tags=tags)
    failed = await fault("wake")
    if failed is not None:
        return failed
    await asyncio.sleep(ARGS.wake_delay)
    AWAKE.update(tags)
    STATE["woken"] = True
    declare_memory()
    record("awake", tags=sorted(AWAKE))
    return web.Response()


async def is_sleeping(request: web.Request) -> web.Response:
    return web.json_response({"is_sleeping": len(AWAKE) < 2 or STATE["weights_lost"]})


async def collective_rpc(request: web.Request) -> web.Response:
    body = await request.json()
    method = body.get("method") if isinstance(body, dict) else None
    record("collective_rpc", method=method)
    if method == "reload_weights":
        if "weights" not in AWAKE:
            return web.json_response({"error": "weights are asleep: wake them first"}, status=400)
        await asyncio.sleep(ARGS.reload_delay)
        STATE["weights_lost"] = False
    return web.json_response({"results": [None]})


async def reset_prefix_cache(request: web.Request) -> web.Response:
    record("reset_prefix_cache")
    return web.Response()


def _asleep() -> bool:
    return len(AWAKE) < 2 or STATE["weights_lost"]


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if _asleep():
        record("request_while_asleep")
        return web.json_response({"error": "the model is sleeping"}, status=503)
    created = int(time.time())
    content = "awake and serving"
    if ARGS.wrong_after_wake and STATE["woken"]:
        record("wrong_answer")
        content = "\u00bf\u00bf corrupted weights \u00bf\u00bf"
    if body.get("stream"):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for word in ("awake", " and", " serving"):
            chunk = {
                "id": "chatcmpl-vllm-like",
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", ARGS.name),
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                "served_by": served_by(),
            }
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
    return web.json_response(
        {
            "id": "chatcmpl-vllm-like",
            "object": "chat.completion",
            "created": created,
            "model": body.get("model", ARGS.name),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
            "served_by": served_by(),
        }
    )


def make_app() -> web.Application:
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/sleep", sleep)
    app.router.add_post("/wake_up", wake_up)
    app.router.add_get("/is_sleeping", is_sleeping)
    app.router.add_post("/collective_rpc", collective_rpc)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    return app


def main(argv: list[str] | None = None) -> int:
    global ARGS
    parser = argparse.ArgumentParser(prog="vllm_like.py", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--name", default="vllm")
    parser.add_argument("--load-delay", type=float, default=0.0, help="cold start, seconds")
    parser.add_argument("--sleep-delay", type=float, default=0.0)
    parser.add_argument("--wake-delay", type=float, default=0.0)
    parser.add_argument("--reload-delay", type=float, default=0.0)
    parser.add_argument("--gpu-mem", type=int, default=8 * 1024**3, help="bytes held awake")
    parser.add_argument("--residual", type=int, default=512 * 1024**2, help="bytes held asleep")
    parser.add_argument("--sleep-fault", choices=("500", "hang"), default=None)
    parser.add_argument("--wake-fault", choices=("500", "hang"), default=None)
    parser.add_argument(
        "--wrong-after-wake", action="store_true", help="answer garbage once it has woken"
    )
    parser.add_argument("--request-log", default=None, help="also append events here")
    parser.add_argument(
        "--enable-sleep-mode", action="store_true", help="vLLM's flag; its endpoints are always on"
    )
    ARGS = parser.parse_args(argv)
    record("start", port=ARGS.port)
    # vLLM binds its port once the model is loaded (weights, CUDA graphs, compilation).
    time.sleep(ARGS.load_delay)
    declare_memory()
    record("loaded")
    web.run_app(
        make_app(), host=ARGS.host, port=ARGS.port, print=None, access_log=None,
        shutdown_timeout=1.0,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
