"""llama.cpp's router API (`llama-server` started with no model: docs/clients.md), answered
from swapd's own state, in the shapes llama.cpp's server answers them (its `server-models.cpp`):

* `POST /models/load {"model": ...}`: starts the model and answers `{"success": true}` at once,
  as llama.cpp does (the client then watches `status.value` in `/models` go from `loading` to
  `loaded`); 400 when it is already loaded, 404 for a name the config does not know.
* `POST /models/unload {"model": ...}`: stops it and answers `{"success": true}` once it has
  stopped; 400 when it is not loaded.
* `GET /props?model=...`: that model's own `/props`, through the pipeline like any model route
  (starting the model if it must). Without `model`: the one running model's `/props`; with
  several running, a 400 that names them; with none, llama.cpp's own answer for a router
  (`role: router`).

`GET /models` and `/v1/models` are `api/models.py`'s, whose `status.value` speaks llama.cpp's
words (`unloaded`, `loading`, `loaded`). Errors are swapd's one shape, with llama.cpp's
messages.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from ...ipc.states import LOADED_STATES, SERVING_STATES
from .. import pipeline
from ..api import ops
from ..context import CTX
from ..floor.errors import BadRequest
from ..mirror.wait import routes_of
from ..pipeline import Way
from ..routing.body import RequestModel, read_json

PROPS = "/props"
_encode = msgspec.json.Encoder().encode
_SUCCESS = _encode({"success": True})


def _success() -> web.Response:
    return web.Response(body=_SUCCESS, content_type="application/json")


async def _named(request: web.Request) -> str:
    doc, _raw = await read_json(request)
    name = doc.get("model")
    if not isinstance(name, str) or not name:
        raise BadRequest('model name is missing from the request: send {"model": "<id>"}')
    return name


async def handle_load(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    route = ops.local_model(routes, await _named(request), pinned=True)
    rt = ctx.state.runtimes.get(route.id)
    if rt is not None and rt.hot:
        raise BadRequest(f"model {route.id} is already loaded")
    ops.load_soon(ctx, route.id)
    return _success()


async def handle_unload(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    routes = await routes_of(ctx)
    route = ops.local_model(routes, await _named(request))
    rt = ctx.state.runtimes.get(route.id)
    if rt is None or rt.state not in LOADED_STATES:
        raise BadRequest(f"model {route.id} is not loaded")
    await ops.unload(ctx, route.id)
    return _success()


async def _the_running_one(request: web.Request) -> Way:
    """The request's model: the one model running (`handle_props` found it)."""
    model_id = request[_ONE]
    return Way(RequestModel(model_id, "query", None), PROPS, "")


_ONE = "swapd.props_model"
_props_of_one = pipeline.dialect_handler(_the_running_one, "props")


async def handle_props(request: web.Request) -> web.StreamResponse:
    if "model" in request.query:
        return await pipeline.handle_model_route(request)
    ctx = request.app[CTX]
    await routes_of(ctx)
    running = sorted(rt.id for rt in ctx.state.runtimes.values() if rt.state in SERVING_STATES)
    if len(running) == 1:
        request[_ONE] = running[0]
        return await _props_of_one(request)
    if running:
        raise BadRequest(
            f"several models are running ({', '.join(running)}): name one with ?model=",
        )
    # No model runs: what llama.cpp's router answers for itself (its web UI reads `role`).
    return web.Response(
        body=_encode(
            {
                "role": "router",
                "max_instances": len(ctx.state.runtimes),
                "models_autoload": True,
                "model_alias": "swapd",
                "model_path": "none",
                "default_generation_settings": {"params": {}, "n_ctx": 0},
                "webui_settings": {},
            }
        ),
        content_type="application/json",
    )


def register(app: web.Application) -> None:
    router = app.router
    router.add_get(PROPS, handle_props)
    router.add_post("/models/load", handle_load)
    router.add_post("/models/unload", handle_unload)
