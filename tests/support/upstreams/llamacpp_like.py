"""A test upstream standing in for llama.cpp's `llama-server` started with `--slot-save-path DIR`:
its slots and its prompt cache, and its `/slots` API (list, save, restore), in a few milliseconds.

The real server runs in tests/real/test_kv_cache.py (tier `llamacpp`); this stand-in is for what
it cannot be made to do on cue: a save that never answers (`--hang-save`), a save or restore that
answers 500 (`--save-status 500`, `--restore-status 500`), a restore that brings back only part of
a slot (`--restore-keep N` tokens: a sliding-window model without `--swa-full`).

What it keeps as llama-server does: `--slots N` slots (`-np`), each holding the tokens of its last
conversation; a chat completion takes the idle slot whose tokens share the longest prefix with its
prompt, reuses that prefix (`timings.cache_n`) and evaluates the rest (`prompt_n`). A token here
is a word of the messages' text. `GET /slots` lists the slots (`id`, `n_ctx`, `is_processing`, and
on a slot that served a request `id_task` and `n_prompt_tokens`); `POST /slots/<id>?action=save
{"filename": F}` writes the slot to `DIR/F` (`n_saved` tokens, `n_written` bytes); `?action=restore`
reads it back (`n_restored`, `n_read`), and answers 400 as llama-server does for a file that is
missing, corrupt, or from a server with a larger `--ctx`. A filename with a `/` is refused (400).

Run as `python llamacpp_like.py --port N --slot-save-path DIR [--name ID] [--slots N] [--ctx C]
[--request-log FILE] [--pad BYTES]`; `--pad` makes each saved file that much larger (a real
slot's file is tens of MB); `--request-log` appends one JSON line per `/slots` call (method, path,
body) and per chat (`cache_n`, `prompt_n`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

ARGS: argparse.Namespace
SLOTS: dict[int, list[str]] = {}
TASKS: dict[int, int] = {}
NEXT_TASK = [0]
RESTORE_ERROR = "Unable to restore slot, no available space in KV cache or invalid slot save file"


def _log(entry: dict[str, Any]) -> None:
    if ARGS.request_log:
        with open(ARGS.request_log, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _error(status: int, message: str) -> web.Response:
    kind = "invalid_request_error" if status == 400 else "server_error"
    return web.json_response(
        {"error": {"code": status, "message": message, "type": kind}}, status=status
    )


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def slots(request: web.Request) -> web.Response:
    _log({"method": "GET", "path": "/slots"})
    listed = []
    for slot in range(ARGS.slots):
        item: dict[str, Any] = {"id": slot, "n_ctx": ARGS.ctx, "is_processing": False}
        if slot in TASKS:
            item |= {"id_task": TASKS[slot], "n_prompt_tokens": len(SLOTS.get(slot, []))}
        listed.append(item)
    return web.json_response(listed)


async def slot_action(request: web.Request) -> web.Response:
    slot = int(request.match_info["slot"])
    action = request.query.get("action", "")
    body = await request.json()
    name = body.get("filename", "") if isinstance(body, dict) else ""
    _log({"method": "POST", "path": f"/slots/{slot}", "action": action, "filename": name})
    if slot not in range(ARGS.slots):
        return _error(400, "Invalid slot ID")
    if not name or "/" in name or name in (".", ".."):
        return _error(400, "Invalid filename")
    path = Path(ARGS.slot_save_path) / name
    if action == "save":
        if ARGS.hang_save:
            await asyncio.sleep(3600)
        if ARGS.save_status:
            return _error(ARGS.save_status, "Unable to save slot")
        tokens = SLOTS.get(slot, [])
        data = json.dumps({"ctx": ARGS.ctx, "tokens": tokens, "pad": "x" * ARGS.pad}).encode()
        path.write_bytes(data)
        return web.json_response(
            {"id_slot": slot, "filename": name, "n_saved": len(tokens), "n_written": len(data)}
        )
    if action == "restore":
        if ARGS.restore_status:
            return _error(ARGS.restore_status, RESTORE_ERROR)
        try:
            data = path.read_bytes()
            saved = json.loads(data)
            tokens = [str(t) for t in saved["tokens"]]
            if int(saved["ctx"]) > ARGS.ctx:
                raise ValueError("saved by a server with a larger context")
        except (OSError, ValueError, KeyError, TypeError):
            return _error(400, RESTORE_ERROR)
        if ARGS.restore_keep is not None:
            tokens = tokens[: ARGS.restore_keep]
        SLOTS[slot] = tokens
        NEXT_TASK[0] += 1
        TASKS[slot] = NEXT_TASK[0]
        return web.json_response(
            {"id_slot": slot, "filename": name, "n_restored": len(tokens), "n_read": len(data)}
        )
    return _error(400, "Invalid action")


def _prompt(body: dict[str, Any]) -> list[str]:
    words: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            words += [f"<{message.get('role', '')}>", *content.split()]
    return words


def _shared(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _choose(prompt: list[str]) -> int:
    """llama-server's choice: the slot whose tokens the prompt continues for at least half of
    them (`--slot-prompt-similarity 0.5`), else an empty slot, else the lowest."""
    best = max(range(ARGS.slots), key=lambda s: (_shared(SLOTS.get(s, []), prompt), -s))
    held = SLOTS.get(best, [])
    if held and _shared(held, prompt) * 2 >= len(held):
        return best
    return next((s for s in range(ARGS.slots) if not SLOTS.get(s)), 0)


async def chat(request: web.Request) -> web.Response:
    body = await request.json()
    prompt = _prompt(body)
    slot = _choose(prompt)
    cached = _shared(SLOTS.get(slot, []), prompt)
    answer = ["fine", "thanks"]
    # What the next turn's prompt repeats: the answer, after its role's marker.
    SLOTS[slot] = [*prompt, "<assistant>", *answer]
    NEXT_TASK[0] += 1
    TASKS[slot] = NEXT_TASK[0]
    timings = {"cache_n": cached, "prompt_n": len(prompt) - cached, "predicted_n": len(answer)}
    _log({"chat": True, "slot": slot, **timings})
    return web.json_response(
        {
            "object": "chat.completion",
            "model": ARGS.name,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": " ".join(answer)},
                }
            ],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(answer)},
            "timings": timings,
            "served_by": {"name": ARGS.name, "pid": os.getpid(), "slot": slot},
        }
    )


def main(argv: list[str] | None = None) -> int:
    global ARGS
    parser = argparse.ArgumentParser(prog="llamacpp_like.py", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="llamacpp-like")
    parser.add_argument("--slot-save-path", required=True)
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--hang-save", action="store_true")
    parser.add_argument("--save-status", type=int, default=0)
    parser.add_argument("--restore-status", type=int, default=0)
    parser.add_argument("--restore-keep", type=int, default=None)
    parser.add_argument("--request-log", default="")
    parser.add_argument("--pad", type=int, default=0, help="bytes added to each saved file")
    ARGS = parser.parse_args(argv)
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/slots", slots)
    app.router.add_post("/slots/{slot}", slot_action)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=ARGS.port, print=None, handle_signals=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
