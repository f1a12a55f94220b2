"""The route decision (proxy/routing/decide.py) on its own: no sockets, no processes. Every rule of
model routes, `/upstream/`, `/comfyui/` and peers, as a table of asks and the decision each gets."""

from __future__ import annotations

import pytest

from swapd.ipc.path_patterns import search_form as searchable
from swapd.ipc.reserved import COMFYUI_MODEL_ID
from swapd.ipc.routing_table import Filters, RouteModel, RoutePeer, RoutingTable
from swapd.proxy.mirror.state import Routes
from swapd.proxy.routing import decide
from swapd.proxy.routing.decide import Ask, Redirect, Refuse, Serve


def _model(model_id: str, **kw: object) -> RouteModel:
    return RouteModel(id=model_id, upstream="http://127.0.0.1:1", concurrency_limit=10, ttl=0, **kw)  # type: ignore[arg-type]


ROUTES = Routes(
    RoutingTable(
        generation=1,
        models=(
            _model("alpha", aliases=("al",), use_model_name="alpha-upstream"),
            _model("org/m:1"),
            _model("ws-ignored", ignore_websockets=True),
            _model(COMFYUI_MODEL_ID, ignore_websockets=True),
            _model("filtered", filters=Filters(strip_params=("t",))),
        ),
        peers=(RoutePeer(id="p", proxy="https://peer.example/api", models=("remote", "alpha")),),
        ignore_paths=(r".*\.js$",),
    )
)
READY = {"alpha", "org/m:1", "ws-ignored", COMFYUI_MODEL_ID, "filtered"}


def ready(model_id: str) -> bool:
    return model_id in READY


def none_ready(model_id: str) -> bool:
    return False


# ------------------------------------------------------------------------------------------------
# model routes


def test_a_model_route_serves_the_named_model_with_its_rename() -> None:
    d = decide.for_model(Ask("POST", "/v1/chat/completions", "?x=1", model="al"), ROUTES, ready)
    assert isinstance(d, Serve) and d.route is not None and d.route.id == "alpha"
    assert (d.path_qs, d.rename, d.admitted, d.peer) == (
        "/v1/chat/completions?x=1",
        "alpha-upstream",
        True,
        None,
    )


def test_a_model_route_to_a_model_not_ready_is_admitted_to_start_it() -> None:
    d = decide.for_model(Ask("POST", "/v1/embeddings", model="filtered"), ROUTES, none_ready)
    assert isinstance(d, Serve) and d.admitted
    assert d.filters is not None and d.filters.strip_params == ("t",)


def test_an_unknown_model_is_404_in_one_wording_everywhere() -> None:
    d = decide.for_model(Ask("POST", "/v1/chat/completions", model="nosuch"), ROUTES, ready)
    assert d == Refuse(404, "model nosuch not found") == decide.model_not_found("nosuch")


def test_a_peer_model_is_served_by_its_peer_with_the_peer_s_name() -> None:
    d = decide.for_model(Ask("POST", "/v1/chat/completions", model="p/alpha"), ROUTES, ready)
    assert isinstance(d, Serve) and d.peer is not None and d.route is None
    assert d.rename == "alpha" and d.rename_query  # the id the peer knows it by
    d = decide.for_model(Ask("POST", "/v1/chat/completions", model="remote"), ROUTES, ready)
    assert isinstance(d, Serve) and d.peer is not None and d.rename is None
    # Local wins over a peer's bare name.
    d = decide.for_model(Ask("POST", "/v1/chat/completions", model="alpha"), ROUTES, ready)
    assert isinstance(d, Serve) and d.route is not None


# ------------------------------------------------------------------------------------------------
# /upstream/


@pytest.mark.parametrize(
    ("path", "model", "rest"),
    [
        ("/upstream/alpha/v1/x", "alpha", "/v1/x"),
        ("/upstream/al/v1/x", "alpha", "/v1/x"),
        ("/upstream/org/m:1/props", "org/m:1", "/props"),
        ("/upstream/org%2Fm:1/props", "org/m:1", "/props"),
        ("/upstream/p/remote/v1/models", None, "/v1/models"),
    ],
)
def test_upstream_resolves_the_longest_leading_name(
    path: str, model: str | None, rest: str
) -> None:
    d = decide.for_upstream(Ask("GET", path, "?q=%20"), ROUTES, ready)
    assert isinstance(d, Serve)
    assert (d.route.id if d.route else None) == model
    assert d.path_qs == rest + "?q=%20"


def test_upstream_without_the_slash_redirects_keeping_the_query() -> None:
    assert decide.for_upstream(Ask("GET", "/upstream/org%2Fm:1", "?a=b"), ROUTES, ready) == (
        Redirect("/upstream/org%2Fm:1/?a=b", 301)
    )
    assert decide.for_upstream(Ask("POST", "/upstream/alpha"), ROUTES, ready) == Redirect(
        "/upstream/alpha/", 308
    )


def test_upstream_naming_no_model_is_404() -> None:
    d = decide.for_upstream(Ask("GET", "/upstream/nosuch/x"), ROUTES, ready)
    assert isinstance(d, Refuse) and d.status == 404


class _Probed(dict[str, object]):
    """A name index that notes every name it is asked about."""

    def __init__(self, names: dict[str, object]) -> None:
        super().__init__(names)
        self.asked: list[str] = []

    def __contains__(self, name: object) -> bool:
        self.asked.append(str(name))
        return super().__contains__(name)


def test_upstream_resolution_is_linear_in_the_path() -> None:
    """However long the path, the names tried are at most as many as a name has `/`-parts, each
    no longer than three times the longest name (its escaped form): bounded work, not a prefix
    per segment."""
    routes = Routes(ROUTES.table)
    probed = routes.by_name = _Probed(routes.by_name)
    long_path = "/upstream/" + "a/" * 30_000
    assert isinstance(decide.for_upstream(Ask("GET", long_path), routes, ready), Refuse)
    assert 0 < len(probed.asked) <= routes.max_name_parts < 30_000
    assert all(len(name) <= 3 * routes.longest_name for name in probed.asked)


def test_ignored_paths_start_nothing_and_skip_admission_when_ready() -> None:
    ask = Ask("GET", "/upstream/alpha/static/app.js")
    d = decide.for_upstream(ask, ROUTES, none_ready)
    assert d == decide.not_loaded("alpha", decide.IGNORED_PATH)
    assert d.status == 409 and d.code == "model_not_loaded"  # type: ignore[union-attr]
    d = decide.for_upstream(ask, ROUTES, ready)
    assert isinstance(d, Serve) and not d.admitted


def test_ignored_websockets() -> None:
    ask = Ask("GET", "/upstream/ws-ignored/ws", websocket=True)
    assert decide.for_upstream(ask, ROUTES, none_ready) == decide.not_loaded(
        "ws-ignored", decide.IGNORED_WEBSOCKET
    )
    d = decide.for_upstream(ask, ROUTES, ready)
    assert isinstance(d, Serve) and d.websocket and not d.admitted
    # A model without the flag: a websocket is an ordinary admitted request.
    d = decide.for_upstream(Ask("GET", "/upstream/alpha/ws", websocket=True), ROUTES, none_ready)
    assert isinstance(d, Serve) and d.websocket and d.admitted


# ------------------------------------------------------------------------------------------------
# /comfyui/


def test_comfyui_rules() -> None:
    assert decide.for_comfyui(Ask("GET", "/comfyui", "?token=x"), ROUTES, ready) == Redirect(
        "/comfyui/?token=x", 301
    )
    d = decide.for_comfyui(Ask("GET", "/comfyui/"), ROUTES, none_ready)
    assert isinstance(d, Serve) and d.admitted and d.path_qs == "/"
    d = decide.for_comfyui(Ask("GET", "/comfyui/api/jobs"), ROUTES, none_ready)
    assert isinstance(d, Refuse) and d.status == 409
    d = decide.for_comfyui(Ask("POST", "/comfyui/api/jobs"), ROUTES, none_ready)
    assert isinstance(d, Serve) and d.admitted  # only a GET is ignored
    d = decide.for_comfyui(Ask("GET", "/comfyui/ws", websocket=True), ROUTES, ready)
    assert isinstance(d, Serve) and d.websocket and not d.admitted
    empty = Routes(RoutingTable(generation=1))
    assert decide.for_comfyui(Ask("GET", "/comfyui/"), empty, ready) == Refuse(
        404, f"local model {COMFYUI_MODEL_ID} not found"
    )


# ------------------------------------------------------------------------------------------------
# linear-time patterns


def test_a_leading_dot_star_is_dropped_without_changing_what_matches() -> None:
    assert searchable(r".*\.js$") == r"\.js$"
    assert searchable(r".*?x") == r".*?x"  # a lazy or possessive quantifier is left alone
    assert searchable(".*") == ""
    routes = Routes(RoutingTable(generation=1, ignore_paths=(r".*\.(js|css)$",)))
    assert routes.path_ignored("/a/b.css") and not routes.path_ignored("/a/b.cssx")
    # What is searched has no leading `.*` (quadratic on a long path): one pass over it.
    assert [p.pattern for p in routes.ignore_paths] == [r"\.(js|css)$"]
    assert not routes.path_ignored("/" + "x" * 60_000)
