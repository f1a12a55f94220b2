"""The route decision: a pure function of what a request asks (`Ask`), the routing table
(`state.Routes`) and which local models are ready, to `Serve`, `Refuse` or `Redirect`.

Model routes (`for_model`), `/upstream/<model>/...` (`for_upstream`), `/comfyui/...`
(`for_comfyui`) and peers all decide here; `pipeline.py` carries the decision out. Nothing here
does I/O, so `tests/unit/test_proxy_decide.py` runs it without sockets.

The passthrough rules (`/upstream/` and `/comfyui/`), for a local model:
* a websocket upgrade (GET only) to a model with `compat.ignoreWebsockets` answers 409 while the
  model is not ready, and is relayed outside admission while it is ready;
* a request on an ignored path (`upstream.ignorePaths` on the decoded path; ComfyUI's fixed
  patterns on a GET) answers 409 while the model is not ready, and is forwarded outside admission
  (no slot, not in flight, not TTL activity) while it is ready;
* anything else is admitted like a model request, starting the model if it must.

A model whose sleep setting keeps its server serving while asleep (ComfyUI's: `servesAsleep`)
has one more rule: while it sleeps (`sleeping`, `asleep`, `waking`), a request that does not wake
it (`wake_rules.wakes`: a websocket upgrade never does; a request matching the setting's `wakeOn`
does, ComfyUI's job `POST /api/prompt`; without `wakeOn` any request but a GET or HEAD does) is
forwarded to its asleep server outside admission, so it neither wakes it nor counts as its use;
one that wakes it is admitted, which wakes it. Without that setting, or while the model is
stopped, the rules above are exactly as they were.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ...ipc.reserved import COMFYUI_MODEL_ID
from ...ipc.routing_table import Filters, RouteModel
from ..floor.errors import ProxyError
from ..mirror.state import ModelRuntime, PeerTarget, Routes
from . import comfyui, selectors, wake_rules
from .model_routes import upstream_path

UPSTREAM_PREFIX = "/upstream/"
IGNORED_PATH = "path matches upstream.ignorePaths"
IGNORED_WEBSOCKET = "ignored websocket requests cannot start it"

Ready = Callable[[str], bool]


def _never(_model_id: str) -> bool:
    return False


@dataclass(slots=True)
class Ask:
    """What a request asks for. `path` is the raw path as sent (no query); `query` is `?...` as
    sent, or ""; `model` is the model a model route's body or `?model=` named."""

    method: str
    path: str
    query: str = ""
    websocket: bool = False
    model: str | None = None
    # This process's models, for selectors (which target is ready, how busy each is).
    runtimes: Mapping[str, ModelRuntime] | None = None


class Serve(msgspec.Struct):
    """Forward to a local model (`route`) or a peer (`peer`) at `path_qs` (below the upstream's
    base). `rename`: the model value to write into the body; `filters`: the JSON filters;
    `rename_query`: also rewrite `?model=` (peers). `admitted`: False for what is served outside
    admission (ignored paths and websockets of a ready model). Built once, by keywords, and never
    changed after. A msgspec `Struct`, not a dataclass: one is built per request, and a
    dataclass built by keywords costs a dict of them (about a microsecond); this costs a tenth.
    Never encoded: its fields' types are read by nothing."""

    path_qs: str
    route: RouteModel | None = None
    peer: PeerTarget | None = None
    rename: str | None = None
    filters: Filters | None = None
    rename_query: bool = False
    admitted: bool = True
    websocket: bool = False
    # setParamsByID's params for the name the client asked for, set after the filters' own.
    by_id: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Refuse:
    status: int
    message: str
    code: str | None = None

    def error(self) -> ProxyError:
        return ProxyError(self.message, status=self.status, code=self.code)


@dataclass(frozen=True, slots=True)
class Redirect:
    """301 for GET and HEAD, 308 (which keeps the method and body) for the rest."""

    location: str
    status: int


Decision = Serve | Refuse | Redirect


def model_not_found(name: str) -> Refuse:
    return Refuse(404, f"model {name} not found")


def not_loaded(model_id: str, reason: str) -> Refuse:
    return Refuse(409, f"model {model_id} is not loaded; {reason}", "model_not_loaded")


def redirect_with_slash(ask: Ask, location: str) -> Redirect:
    return Redirect(location + ask.query, 301 if ask.method in ("GET", "HEAD") else 308)


# --------------------------------------------------------------------------------------------------


def for_model(ask: Ask, routes: Routes, ready: Ready, dozing: Ready = _never) -> Decision:
    """A model route: the model named in the body or query, local first, then peers."""
    name = ask.model or ""
    # The active profile's pin comes first (before aliases and filters), and does not chain.
    pinned = routes.pins.get(name) if routes.pins else None
    if pinned is not None:
        if not pinned:
            return model_not_found(name)
        name = pinned
    selector = routes.selectors.get(name) if routes.selectors else None
    if selector is not None:
        chosen = selectors.choose(selector, ask.runtimes or {})
        if chosen is None:
            return Refuse(503, f'selector "{name}" has no available spillover targets')
        name = pinned = chosen
    route = routes.model(name)
    path_qs = upstream_path(ask.path) + ask.query
    if route is not None:
        by_id = route.filters.set_params_by_id
        return _local(
            ask,
            route,
            path_qs,
            None,
            ready,
            dozing,
            rename=route.use_model_name or pinned,
            filters=route.filters,
            rename_query=pinned is not None and route.use_model_name is None,
            by_id=by_id.get(name) if by_id else None,
        )
    peer = routes.peer(name)
    if peer is not None:
        return _peer(ask, peer, path_qs, name)
    return model_not_found(name)


def for_upstream(ask: Ask, routes: Routes, ready: Ready, dozing: Ready = _never) -> Decision:
    """`/upstream/<model>/<path>`: the model (or peer model) the path names."""
    if routes.pins:
        pinned = _upstream_pin(routes.pins, ask.path)
        if pinned is not None:
            pin, target_name = pinned
            if not target_name:
                return model_not_found(pin)
            tail = ask.path[len(UPSTREAM_PREFIX) + len(pin) :]
            ask = Ask(ask.method, UPSTREAM_PREFIX + target_name + tail, ask.query, ask.websocket)
    target = upstream_target(routes, ask.path)
    if target is None:
        return Refuse(404, f"model not found in {ask.path!r}")
    name, typed, rest = target
    if rest is None:
        return redirect_with_slash(ask, f"{UPSTREAM_PREFIX}{typed}/")
    route = routes.model(name)
    if route is None:
        peer = routes.peer(name)
        assert peer is not None  # upstream_target only returns known names
        return _peer(ask, peer, rest + ask.query, None)
    reason = IGNORED_PATH if routes.path_ignored(urllib.parse.unquote(rest)) else None
    return _local(ask, route, rest + ask.query, reason, ready, dozing)


def for_comfyui(ask: Ask, routes: Routes, ready: Ready, dozing: Ready = _never) -> Decision:
    """`/comfyui` and `/comfyui/<path>`: the local model `comfyui_auto`, by exact id only."""
    if ask.path == comfyui.PREFIX:
        return redirect_with_slash(ask, comfyui.PREFIX + "/")
    route = routes.by_id.get(COMFYUI_MODEL_ID)
    if route is None:
        return Refuse(404, f"local model {COMFYUI_MODEL_ID} not found")
    rest = ask.path[len(comfyui.PREFIX) :]
    reason = comfyui.IGNORED_PATH if comfyui.is_ignored(ask.method, rest) else None
    return _local(ask, route, rest + ask.query, reason, ready, dozing)


def _upstream_pin(pins: dict[str, str], path: str) -> tuple[str, str] | None:
    """The longest pin that `/upstream/<pin>` or `/upstream/<pin>/...` names (llama-swap's)."""
    tail = path[len(UPSTREAM_PREFIX) :]
    found = [p for p in pins if tail == p or tail.startswith(p + "/")]
    if not found:
        return None
    pin = max(found, key=len)
    return pin, pins[pin]


def upstream_target(routes: Routes, path: str) -> tuple[str, str, str | None] | None:
    """Split `/upstream/<model>/<rest>` (raw, without the query): (model name as given, its
    escaped form, "/<rest>" or None when the slash after the model is missing), or None when no
    model or peer is named. The longest leading run of segments naming one wins, so ids with `/`
    work, escaped (`a%2Fb`) or not.

    Linear in the path's length: a name of k `/`-parts is typed as at most k segments, and
    percent-escaping at most triples its length, so only the first `routes.max_name_parts`
    segments, and only prefixes no longer than three times the longest name, are tried."""
    tail = path[len(UPSTREAM_PREFIX) :]
    bound = 3 * routes.longest_name
    segments = tail[: bound + 1].split("/", routes.max_name_parts)[: routes.max_name_parts]
    ends = []
    end = -1
    for segment in segments:
        end += len(segment) + 1
        ends.append(end)
    for end in reversed(ends):
        if end > bound:
            continue
        typed = tail[:end]
        name = urllib.parse.unquote(typed)
        if name and (name in routes.by_name or name in routes.peers):
            return name, typed, tail[end:] if end < len(tail) else None
    return None


# --------------------------------------------------------------------------------------------------


def _local(
    ask: Ask,
    route: RouteModel,
    path_qs: str,
    reason: str | None,
    ready: Ready,
    dozing: Ready,
    *,
    rename: str | None = None,
    filters: Filters | None = None,
    rename_query: bool = False,
    by_id: Mapping[str, Any] | None = None,
) -> Decision:
    """A local model: `reason`, why the path is ignored (None: it is not); `dozing`, whether a
    model is asleep (or falling asleep, or waking). The rest is the `Serve`'s."""
    admitted = _admitted(ask, route, path_qs, reason, ready, dozing)
    if isinstance(admitted, Refuse):
        return admitted
    return Serve(
        path_qs=path_qs,
        route=route,
        rename=rename,
        filters=filters,
        rename_query=rename_query,
        admitted=admitted,
        websocket=ask.websocket,
        by_id=by_id,
    )


def _admitted(
    ask: Ask, route: RouteModel, path_qs: str, reason: str | None, ready: Ready, dozing: Ready
) -> bool | Refuse:
    """Whether a local model's request is admitted (False: served outside admission), or why
    it is refused (the passthrough rules of the module's docstring)."""
    sleep = route.sleep
    if (
        sleep is not None
        and sleep.serves_asleep
        and dozing(route.id)
        and not wake_rules.wakes(sleep, ask.method, ask.websocket, path_qs)
    ):
        return False
    if ask.websocket and route.ignore_websockets:
        # The websocket rule answers first: an upgrade on any path, /ws included, is the
        # websocket case; the path rule is what also covers a plain GET to /ws.
        if not ready(route.id):
            return not_loaded(route.id, IGNORED_WEBSOCKET)
        return False
    if reason is not None:
        if not ready(route.id):
            return not_loaded(route.id, reason)
        return ask.websocket
    return True


def _peer(ask: Ask, peer: PeerTarget, path_qs: str, named: str | None) -> Serve:
    """`named`: the model the body or query named (model routes), None for `/upstream/`."""
    rename = peer.model if named is not None and named != peer.model else None
    return Serve(
        path_qs=path_qs,
        peer=peer,
        rename=rename,
        filters=peer.peer.filters if named is not None else None,
        rename_query=rename is not None,
        websocket=ask.websocket,
    )
