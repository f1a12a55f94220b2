"""A test upstream standing in for ComfyUI (the `yanwk/comfyui-boot` container of the seed page).

It behaves as the real server does for what swapd cares about:

* `/` answers 200 with the HTML page; there is no `/health` (so a model needs `checkEndpoint: /`);
* static assets: `/scripts/app.js`, `/style.css`, `/favicon.ico`, `/templates/default.json`, and
  saved workflows under `/api/userdata/<name>.json` (the frontend fetches them as
  `/api/userdata/workflows%2F<name>.json`);
* `/ws` is the frontend websocket: it sends a JSON `status` message on connect and every
  `--status-interval` seconds, relays job progress, and stays open until the client or the server
  closes it;
* `GET /api/jobs` (the list the open page polls), `GET /api/jobs/<id>`, `GET /api/queue`,
  `GET /api/system_stats`, `POST /api/prompt` (queues a fake job of `--job-steps` steps,
  `--step-delay` seconds each, that reports `execution_start`, `progress` and `executing` messages
  over the websocket). A prompt's `extra_data` may choose its own length: `x_steps` (-1: a job
  that never ends) and `x_step_delay`. `GET /api/queue` answers as ComfyUI does:
  `{"queue_running": [[number, prompt_id, prompt, extra_data, outputs]], "queue_pending": [...]}`;
  `POST /interrupt` (and `/api/interrupt`) stops the running job at its next step, as ComfyUI's
  does (logged as `job_interrupted`); `POST /prompt` is the same job queue at ComfyUI's path
  from before its `/api/` prefix;
* what a page saves, which needs no GPU: `POST /api/settings/<id>` (one setting, its JSON value),
  `POST /api/settings` (several) and `GET /api/settings`; `POST /api/userdata/<name>` (a workflow
  saved, its body the file), read back by `GET /api/userdata/<name>` (logged as `saved`).

Like ComfyUI (its `origin_only_middleware`, on unless `--enable-cors-header`), it answers 403 to a
request whose `Origin` names another host:port than its `Host`, when that Host is a loopback
name or address (a port missing on either side compares host names only), and 403 to
`Sec-Fetch-Site: cross-site`; an OPTIONS request gets an empty 200. That is the check a browser's
module scripts, CSS, fetch POSTs and websocket trip over when a proxy rewrites Host.

Every request that reaches it is printed to stdout as one `comfyui-like request {json}` line (and
appended to `--request-log` as a JSON line, when given), so tests can prove what reached it and
what did not. `--hold-file` keeps it "loading" (not yet listening) while that file exists, so a
test can hold swapd's model in `starting` for as long as it needs.

`POST /free` is ComfyUI's (`{"unload_models": true, "free_memory": true}`): it answers 200 at once
and, as ComfyUI's prompt worker does between jobs, unloads the models a little later
(`--free-delay`). Its GPU memory is reported through the fake NVML backend as NVML would report a
real ComfyUI's (`SWAPD_FAKE_GPU_MEM_DIR/<pid>`): `--idle-mem` bytes once up (a CUDA context),
`--gpu-mem` bytes once a job has loaded its models, `--idle-mem` again after a `/free`.

`--pidfile` and `--stop-pidfile` give the docker-like pair: the seed's `cmd` runs a container by
name and its `cmdStop` is `docker stop <name>`; here `cmd` writes its pid to a file and `cmdStop` is
this script with `--stop-pidfile`, which stops it through that file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import itertools
import json
import os
import signal
import socket
import sys
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

PAGE = """<!DOCTYPE html>
<html>
<head><title>ComfyUI</title><link rel="stylesheet" href="style.css"></head>
<body><div id="app"></div><script type="module" src="scripts/app.js"></script></body>
</html>
"""

ASSETS: dict[str, tuple[str, str]] = {
    "/scripts/app.js": ("application/javascript", "console.log('comfyui-like app');\n"),
    "/style.css": ("text/css", "body { background: #202020; }\n"),
    "/favicon.ico": ("image/x-icon", "\x00\x00\x01\x00"),
    "/templates/default.json": ("application/json", '{"nodes": [], "links": []}\n'),
}

ARGS: argparse.Namespace
SOCKETS: web.AppKey[dict[web.WebSocketResponse, str]] = web.AppKey("sockets", dict)
JOBS: web.AppKey[dict[str, dict[str, Any]]] = web.AppKey("jobs", dict)
QUEUE: web.AppKey[asyncio.Queue[str]] = web.AppKey("queue", asyncio.Queue)
WORKER: web.AppKey[asyncio.Task[None]] = web.AppKey("worker", asyncio.Task)
COUNTER = itertools.count()
# Whether a job loaded its models (and so holds `--gpu-mem`).
MODELS: dict[str, bool] = {"loaded": False}
# What the page saved: settings by id, workflow files by name.
SETTINGS: dict[str, Any] = {}
SAVED: dict[str, str] = {}
# Set while no job runs: ComfyUI unloads between jobs.
IDLE: web.AppKey[asyncio.Event] = web.AppKey("idle", asyncio.Event)


def declare_memory() -> None:
    """What the fake NVML backend reports for this process."""
    folder = os.environ.get("SWAPD_FAKE_GPU_MEM_DIR")
    if not folder:
        return
    used = ARGS.gpu_mem if MODELS["loaded"] else ARGS.idle_mem
    path = Path(folder, str(os.getpid()))
    path.with_suffix(".tmp").write_text(str(used))
    path.with_suffix(".tmp").replace(path)


def record(event: str, **fields: Any) -> None:
    line = json.dumps(
        {"event": event, "pid": os.getpid(), "name": ARGS.name, "at": time.time(), **fields}
    )
    print(f"comfyui-like {event} {line}", flush=True)
    if ARGS.request_log:
        with open(ARGS.request_log, "a", encoding="utf-8") as log:
            log.write(line + "\n")


@web.middleware
async def log_requests(request: web.Request, handler: Any) -> web.StreamResponse:
    record(
        "request",
        method=request.method,
        path=request.path,
        raw_path=request.raw_path,
        query=request.query_string,
        upgrade=request.headers.get("Upgrade", ""),
        headers={k: v for k, v in request.headers.items() if k.lower() != "authorization"},
    )
    return await handler(request)


def _is_loopback(host: str | None) -> bool:
    """An address on loopback, or a name that resolves to loopback addresses only."""
    if not host:
        return False
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(host).is_loopback
    found = False
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            infos = socket.getaddrinfo(host, None, family, socket.SOCK_STREAM)
        except socket.gaierror:
            continue
        for *_, sockaddr in infos:
            if not ipaddress.ip_address(sockaddr[0]).is_loopback:
                return False
            found = True
    return found


def origin_refused(headers: Any) -> str | None:
    """Why ComfyUI would refuse a request with these headers (None: it would not)."""
    if headers.get("Sec-Fetch-Site") == "cross-site":
        return "cross-site"
    host, origin = headers.get("Host"), headers.get("Origin")
    if host is None or origin is None:
        return None
    host_seen = host.lower()
    parsed_origin = urllib.parse.urlparse(origin)
    origin_seen = parsed_origin.netloc.lower()
    parsed_host = urllib.parse.urlsplit("//" + host_seen)
    if parsed_origin.port is None:
        host_seen = parsed_host.hostname or ""
    if parsed_host.port is None:
        origin_seen = parsed_origin.hostname or ""
    if not _is_loopback(parsed_host.hostname) or not host_seen or not origin_seen:
        return None
    return None if host_seen == origin_seen else f"{host_seen} != {origin_seen}"


@web.middleware
async def origin_only(request: web.Request, handler: Any) -> web.StreamResponse:
    reason = origin_refused(request.headers)
    if reason is not None:
        record("origin_refused", path=request.path, reason=reason)
        return web.Response(status=403)
    if request.method == "OPTIONS":
        return web.Response()
    return await handler(request)


async def page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")


async def asset(request: web.Request) -> web.Response:
    content_type, body = ASSETS[request.path]
    return web.Response(text=body, content_type=content_type)


async def userdata(request: web.Request) -> web.Response:
    """Saved workflows; the name arrives with its `%2F` still escaped, as ComfyUI expects."""
    name = request.match_info["file"]
    if name in SAVED:
        return web.Response(text=SAVED[name], content_type="application/json")
    return web.json_response({"workflow": name, "raw_path": request.raw_path, "nodes": []})


async def save_userdata(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    SAVED[name] = await request.text()
    record("saved", what="userdata", key=name)
    return web.json_response({"path": name})


async def settings(request: web.Request) -> web.Response:
    return web.json_response(SETTINGS)


async def save_settings(request: web.Request) -> web.Response:
    try:
        value = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": "invalid setting"}, status=400)
    key = request.match_info.get("id")
    if key is None:
        if not isinstance(value, dict):
            return web.json_response({"error": "expected a mapping"}, status=400)
        SETTINGS.update(value)
    else:
        SETTINGS[key] = value
    record("saved", what="settings", key=key or ",".join(sorted(value)))
    return web.json_response({})


def _queue_status() -> dict[str, Any]:
    jobs = APP[JOBS].values()
    remaining = sum(1 for job in jobs if job["status"] in ("pending", "running"))
    return {"status": {"exec_info": {"queue_remaining": remaining}}}


async def _send(ws: web.WebSocketResponse, message: dict[str, Any]) -> None:
    # A tab that went away while a message was on its way is not an error for the server.
    with contextlib.suppress(ConnectionError, RuntimeError):
        await ws.send_str(json.dumps(message))


async def _broadcast(message: dict[str, Any], client_id: str | None = None) -> None:
    for ws, sid in list(APP[SOCKETS].items()):
        if client_id is None or sid == client_id:
            await _send(ws, message)


async def websocket(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        # ComfyUI's /ws without upgrade headers is an aiohttp handshake error.
        return web.json_response({"error": "websocket upgrade expected"}, status=400)
    ws = web.WebSocketResponse(heartbeat=None)
    await ws.prepare(request)
    sid = request.query.get("clientId") or uuid.uuid4().hex
    APP[SOCKETS][ws] = sid
    record("ws_open", sid=sid)

    async def status_loop() -> None:
        while True:
            await _send(ws, {"type": "status", "data": {**_queue_status(), "sid": sid}})
            await asyncio.sleep(ARGS.status_interval)

    ticker = asyncio.get_running_loop().create_task(status_loop())
    try:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                record("ws_message", sid=sid, data=msg.data)
                await _send(ws, {"type": "echo", "data": msg.data})
    finally:
        ticker.cancel()
        APP[SOCKETS].pop(ws, None)
        record("ws_close", sid=sid)
    return ws


async def jobs(request: web.Request) -> web.Response:
    return web.json_response({"jobs": list(APP[JOBS].values())})


async def job(request: web.Request) -> web.Response:
    found = APP[JOBS].get(request.match_info["job_id"])
    if found is None:
        return web.json_response({"error": "job not found"}, status=404)
    return web.json_response(found)


def _queue_item(job: dict[str, Any]) -> list[Any]:
    # ComfyUI's queue entry: (number, prompt_id, prompt, extra_data, outputs_to_execute).
    return [job["number"], job["id"], job["prompt"], {"client_id": job["client_id"]}, ["9"]]


async def queue(request: web.Request) -> web.Response:
    running = [_queue_item(j) for j in APP[JOBS].values() if j["status"] == "running"]
    pending = [_queue_item(j) for j in APP[JOBS].values() if j["status"] == "pending"]
    return web.json_response({"queue_running": running, "queue_pending": pending})


async def system_stats(request: web.Request) -> web.Response:
    return web.json_response({"system": {"comfyui_version": "fake", "pid": os.getpid()}})


async def prompt(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return web.json_response({"error": "invalid prompt"}, status=400)
    prompt_id = str(uuid.uuid4())
    body = body if isinstance(body, dict) else {}
    extra = body.get("extra_data") if isinstance(body.get("extra_data"), dict) else {}
    APP[JOBS][prompt_id] = {
        "id": prompt_id,
        "number": next(COUNTER),
        "status": "pending",
        "client_id": body.get("client_id"),
        "prompt": body.get("prompt", {}),
        "steps": int(extra.get("x_steps", ARGS.job_steps)),
        "step_delay": float(extra.get("x_step_delay", ARGS.step_delay)),
        "step": 0,
    }
    await APP[QUEUE].put(prompt_id)
    await _broadcast({"type": "status", "data": _queue_status()})
    return web.json_response({"prompt_id": prompt_id, "number": APP[JOBS][prompt_id]["number"]})


async def worker(app: web.Application) -> None:
    """Runs queued jobs one at a time, as ComfyUI's single executor does."""
    while True:
        prompt_id = await app[QUEUE].get()
        current = app[JOBS][prompt_id]
        current["status"] = "running"
        app[IDLE].clear()
        if not MODELS["loaded"]:
            MODELS["loaded"] = True  # the job's checkpoint goes onto the GPU
            declare_memory()
            record("models_loaded")
        client = current["client_id"]
        await _broadcast({"type": "execution_start", "data": {"prompt_id": prompt_id}}, client)
        steps = current["steps"]  # -1: a job that never ends
        for step in itertools.count(1) if steps < 0 else range(1, steps + 1):
            await asyncio.sleep(current["step_delay"])
            if current.get("interrupted"):
                break
            current["step"] = step
            progress = {"value": step, "max": steps, "prompt_id": prompt_id}
            await _broadcast({"type": "progress", "data": progress}, client)
        if current.get("interrupted"):
            current["status"] = "interrupted"
            record("job_interrupted", prompt_id=prompt_id)
        else:
            current["status"] = "done"
            record("job_done", prompt_id=prompt_id)
        app[IDLE].set()
        await _broadcast(
            {"type": "executing", "data": {"node": None, "prompt_id": prompt_id}}, client
        )
        await _broadcast({"type": "status", "data": _queue_status()})


async def interrupt(request: web.Request) -> web.Response:
    """ComfyUI's `POST /interrupt`: the running job stops at its next step."""
    for current in APP[JOBS].values():
        if current["status"] == "running":
            current["interrupted"] = True
    return web.Response()


async def free(request: web.Request) -> web.Response:
    """ComfyUI's `/free`: flags for its prompt worker, which unloads between jobs."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = {}
    body = body if isinstance(body, dict) else {}
    record("free", body=body)
    if body.get("unload_models") or body.get("free_memory"):
        asyncio.get_running_loop().create_task(_free_later())
    return web.Response()


async def _free_later() -> None:
    await asyncio.sleep(ARGS.free_delay)
    await APP[IDLE].wait()
    MODELS["loaded"] = False
    declare_memory()
    record("freed")


async def not_found(request: web.Request) -> web.Response:
    """ComfyUI answers unknown paths with 404; this one says what arrived, for prefix tests."""
    return web.json_response(
        {"error": "not found", "method": request.method, "raw_path": request.raw_path}, status=404
    )


async def _start_worker(app: web.Application) -> None:
    app[WORKER] = asyncio.get_running_loop().create_task(worker(app))


async def _close_sockets(app: web.Application) -> None:
    # Without this aiohttp waits its whole shutdown timeout for every open tab.
    app[WORKER].cancel()
    for ws in list(app[SOCKETS]):
        await ws.close(code=1001, message=b"server shutting down")


def _make_app() -> web.Application:
    app = web.Application(middlewares=[log_requests, origin_only])
    app[SOCKETS] = {}
    app[JOBS] = {}
    app[QUEUE] = asyncio.Queue()
    app[IDLE] = asyncio.Event()
    app[IDLE].set()
    app.router.add_get("/", page)
    for path in ASSETS:
        app.router.add_get(path, asset)
    app.router.add_get("/api/userdata/{file:.+}", userdata)
    app.router.add_post("/api/userdata/{file:.+}", save_userdata)
    app.router.add_get("/api/settings", settings)
    app.router.add_post("/api/settings", save_settings)
    app.router.add_post("/api/settings/{id}", save_settings)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/api/jobs", jobs)
    app.router.add_get("/api/jobs/{job_id}", job)
    app.router.add_get("/api/queue", queue)
    app.router.add_get("/api/system_stats", system_stats)
    app.router.add_post("/api/prompt", prompt)
    app.router.add_post("/prompt", prompt)
    app.router.add_post("/api/interrupt", interrupt)
    app.router.add_post("/interrupt", interrupt)
    app.router.add_post("/free", free)
    app.router.add_route("*", "/{tail:.*}", not_found)
    app.on_startup.append(_start_worker)
    app.on_shutdown.append(_close_sockets)
    return app


def _alive(pid: int) -> bool:
    """True while `pid` runs; an exited process its parent has not reaped yet counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def stop_by_pidfile(path: Path, timeout: float) -> int:
    """The `docker stop NAME` stand-in: SIGTERM the server named by the pidfile and wait for it."""
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        print(f"comfyui-like stop: no server recorded in {path}", flush=True)
        return 0
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"comfyui-like stop: {pid} stopped", flush=True)
            return 0
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    print(f"comfyui-like stop: {pid} killed after {timeout}s", flush=True)
    return 0


APP: web.Application


def main() -> None:
    global ARGS, APP
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--name", default="comfyui")
    parser.add_argument("--status-interval", type=float, default=1.0)
    parser.add_argument("--job-steps", type=int, default=5)
    parser.add_argument("--step-delay", type=float, default=0.2)
    parser.add_argument(
        "--listen-delay", type=float, default=0.0, help="load time before listening"
    )
    parser.add_argument(
        "--hold-file", type=Path, default=None, help="keep loading while this file exists"
    )
    parser.add_argument("--request-log", default=None, help="also append events here (JSON lines)")
    parser.add_argument("--pidfile", type=Path, default=None)
    parser.add_argument("--stop-pidfile", type=Path, default=None, help="stop that server, exit")
    parser.add_argument("--stop-timeout", type=float, default=10.0)
    parser.add_argument("--gpu-mem", type=int, default=6 * 1024**3, help="bytes, models loaded")
    parser.add_argument("--idle-mem", type=int, default=256 * 1024**2, help="bytes, none loaded")
    parser.add_argument("--free-delay", type=float, default=0.3, help="/free to memory freed")
    ARGS = parser.parse_args()

    if ARGS.stop_pidfile is not None:
        sys.exit(stop_by_pidfile(ARGS.stop_pidfile, ARGS.stop_timeout))
    if ARGS.port is None:
        parser.error("--port is required")
    if ARGS.pidfile is not None:
        ARGS.pidfile.write_text(f"{os.getpid()}\n")
    record("start", port=ARGS.port)
    if ARGS.listen_delay:
        time.sleep(ARGS.listen_delay)
    # ComfyUI binds its port only after loading custom nodes; a test holds it in that phase.
    while ARGS.hold_file is not None and ARGS.hold_file.exists():
        time.sleep(0.02)
    APP = _make_app()
    declare_memory()
    try:
        web.run_app(
            APP, host=ARGS.host, port=ARGS.port, print=None, access_log=None, shutdown_timeout=1.0
        )
    finally:
        record("exit")
        if ARGS.pidfile is not None:
            with contextlib.suppress(FileNotFoundError):
                ARGS.pidfile.unlink()


if __name__ == "__main__":
    main()
