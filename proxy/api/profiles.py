"""`GET /api/profiles` and `PUT /api/profiles/active`, llama-swap's shapes and messages.

The active profile is the daemon's (one for every proxy process): a `PUT` asks it with
`SetProfile`, and the answer comes once this process's routing table shows the change (the table
arrives on the event stream, the reply on the request socket: either may come first).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from ...ipc.messages import Ok, SetProfile
from ..context import CTX
from ..floor.errors import BadRequest
from ..mirror.wait import routes_of
from ..routing.body import read_json

# How long a PUT waits for the event stream to bring the table the daemon just published.
_TABLE_WAIT_S = 2.0

_encode = msgspec.json.Encoder().encode


def _json(body: object) -> web.Response:
    return web.Response(body=_encode(body), content_type="application/json")


async def handle_profiles(request: web.Request) -> web.Response:
    routes = await routes_of(request.app[CTX])
    table = routes.table
    profiles = [
        {"id": p.id, "description": p.description, "pins": dict(p.pins)}
        for p in sorted(table.profiles, key=lambda p: p.id)
    ]
    return _json({"active": table.active_profile, "profiles": profiles})


async def handle_set_active(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    try:
        body, _raw = await read_json(request)
    except BadRequest as exc:
        # llama-swap's words first, then what was wrong.
        raise BadRequest(f"invalid profile request: {exc.message}") from None
    if "name" not in body:
        raise BadRequest("profile name is required")
    name = body["name"]
    if name is not None and not isinstance(name, str):
        raise BadRequest("profile name must be a string or null")
    name = name or None
    await ctx.link.ask(lambda i: SetProfile(id=i, name=name), Ok)
    # Woken by the table's arrival (the mirror's changes), not a poll.
    await ctx.state.changes.until(
        lambda: ctx.state.routes.table.active_profile == name, _TABLE_WAIT_S
    )
    return _json({"active": name})
