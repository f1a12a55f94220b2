"""An aiohttp application served on a free loopback port for the length of a block: the small
stand-in servers unit tests talk to (a ComfyUI queue, a vLLM sleep endpoint)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serves `app` on 127.0.0.1 at a port the kernel picks; yields its base URL (no slash)."""
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
