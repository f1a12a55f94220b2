"""Which way a request comes in (proxy/dispatch.py): the table of model routes served straight
from aiohttp's low-level server is read from the Application's own router, so it holds every
model route and only those, including one a later line of the route table adds (contract K1).
What the requests then get (keys, preflight, errors) is tested on the real stack
(test_proxy_keys.py, test_proxy_pipeline.py), through both ways in."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from swapd.proxy import pipeline
from swapd.proxy.app import make_app
from swapd.proxy.dispatch import model_routes
from swapd.proxy.routing.model_routes import MODEL_ROUTES


def test_every_model_route_and_only_those(tmp_path: Path) -> None:
    app = make_app(run_dir=tmp_path)
    table = model_routes(app)
    assert set(table) == set(MODEL_ROUTES)
    for (method, path), route in table.items():
        assert route.handler is pipeline.handle_model_route
        # The router's own route for that method and path (dispatch.py hands the pipeline the
        # proxy's context instead of giving the request a match info: no app, by design,
        # test_proxy_connection.py).
        assert route.method == method and route.resource is not None
        assert route.resource.canonical == path
    # Routes with path variables (/upstream/{tail}) and other handlers stay the Application's.
    assert ("GET", "/running") not in table
    assert not any(path.startswith(("/upstream", "/comfyui")) for _, path in table)


def test_a_model_route_added_to_the_route_table_is_found(tmp_path: Path) -> None:
    app = make_app(run_dir=tmp_path)
    app.router.add_route("POST", "/v9/made/up", pipeline.handle_model_route)
    app.router.add_get("/v9/other", _other)
    table = model_routes(app)
    assert ("POST", "/v9/made/up") in table
    assert ("GET", "/v9/other") not in table


async def test_the_first_route_registered_wins_as_in_the_router() -> None:
    app = web.Application()
    # A second resource for a path (aiohttp refuses a second route on the same resource): the
    # router tries the first one registered first, so these two are never reached.
    app.router.add_post("/a", _other)
    app.router.add_route("*", "/b", _other)
    app.router.add_get("/x", _other)
    app.router.add_post("/a", pipeline.handle_model_route)
    app.router.add_post("/b", pipeline.handle_model_route)
    app.router.add_post("/c", pipeline.handle_model_route)
    assert set(model_routes(app)) == {("POST", "/c")}
    for path in ("/a", "/b"):  # what the router itself makes of them
        info = await app.router.resolve(make_mocked_request("POST", path))
        assert info.handler is _other


async def _other(request: web.Request) -> web.Response:
    return web.Response(text="other")


def test_no_model_route_is_open() -> None:
    """`front.guard(..., model_route=True)` skips the open-path lookup: that is right only while no
    model route is an open path."""
    from swapd.proxy.auth import OPEN_PATHS

    for _method, path in MODEL_ROUTES:
        assert path not in OPEN_PATHS
