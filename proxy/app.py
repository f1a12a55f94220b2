"""The proxy's aiohttp application: app factory and route table."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web


async def _health(_request: web.Request) -> web.Response:
    return web.Response(text="OK")


def make_app(*, run_dir: Path, processes: int = 1) -> web.Application:
    app = web.Application()
    app.router.add_get("/health", _health)
    return app
