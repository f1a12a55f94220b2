"""The `/comfyui/` ignored-path rule on its own (no processes): every path the seed page names;
and, with the ComfyUI sleep preset's `servesAsleep` and `wakeOn`, what an asleep server answers
without waking (everything but a job).

The same rows run end to end through swapd in `test_comfyui_endpoint.py`; this table pins the
matching itself (GET only, fixed patterns, query and escaping) cheaply and exhaustively."""

from __future__ import annotations

import pytest

from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.ipc.routing_table import HttpCall, RouteModel, RoutingTable, SleepSetting, WakeRule
from swapd.proxy.mirror.state import Routes
from swapd.proxy.routing.comfyui import IGNORED_PATH, is_ignored
from swapd.proxy.routing.decide import Ask, Refuse, Serve, for_comfyui, for_model, for_upstream
from swapd.proxy.routing.wake_rules import wakes

IGNORED = [
    "/scripts/app.js",
    "/style.css",
    "/templates/default.json",
    "/api/userdata/workflows%2Fmine.json",  # a saved workflow, as the frontend fetches it
    "/favicon.ico",
    "/logo.png",
    "/a.gif",
    "/a.jpg",
    "/a.jpeg",
    "/robots.txt",
    "/ws",
    "/ws/",
    "/ws/anything/below",
    "/api/jobs",
]
STARTS = [
    "/",  # the page itself
    "/api/prompt",
    "/wsapi",  # not /ws
    "/api/jobs/12",  # not /api/jobs
    "/api/jobs/",
    "/api/queue",
    "/api/object_info",
    "/scripts/app.js.map",
    "/prefix/ws",  # ^/ws is anchored
    "/api/jobsx",
]


@pytest.mark.parametrize("path", IGNORED)
def test_get_to_an_ignored_path_is_ignored(path: str) -> None:
    assert is_ignored("GET", path)


@pytest.mark.parametrize("path", STARTS)
def test_other_paths_are_not_ignored(path: str) -> None:
    assert not is_ignored("GET", path)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("path", ["/api/jobs", "/ws", "/scripts/app.js", "/templates/x.json"])
def test_only_get_is_ignored(method: str, path: str) -> None:
    assert not is_ignored(method, path)


def test_the_rule_is_on_the_decoded_path() -> None:
    # An escaped letter still names the same file; an escaped slash still ends in .json.
    assert is_ignored("GET", "/scripts/app%2Ejs")
    assert is_ignored("GET", "/%77s")  # /ws


def test_the_reason_is_the_seed_fragment() -> None:
    assert IGNORED_PATH == "ignored ComfyUI paths cannot start it"


# --------------------------------------------------------------- with sleep's `servesAsleep`


def _routes(serves_asleep: bool | None, setting: SleepSetting | None = None) -> Routes:
    sleep = setting
    if serves_asleep is not None:
        sleep = SleepSetting(sleep=(HttpCall("/free"),), serves_asleep=serves_asleep)
    route = RouteModel(
        id="comfyui_auto",
        concurrency_limit=999,
        ttl=0,
        ignore_websockets=True,
        upstream="http://127.0.0.1:1",
        sleep=sleep,
    )
    return Routes(RoutingTable(generation=1, models=(route,)))


def _never(_: str) -> bool:
    return False


def _always(_: str) -> bool:
    return True


@pytest.mark.parametrize(
    ("method", "path", "websocket"),
    [
        ("GET", "/comfyui/", False),  # the page itself
        ("GET", "/comfyui/scripts/app.js", False),
        ("GET", "/comfyui/api/jobs", False),
        ("GET", "/comfyui/api/queue", False),  # a poll not in the ignored list
        ("HEAD", "/comfyui/", False),
        ("GET", "/comfyui/ws", True),
    ],
)
def test_an_asleep_server_that_keeps_serving_answers_reads_without_waking(
    method: str, path: str, websocket: bool
) -> None:
    ask = Ask(method, path, "?clientId=x", websocket)
    decision = for_comfyui(ask, _routes(serves_asleep=True), _never, _always)
    assert isinstance(decision, Serve) and not decision.admitted


@pytest.mark.parametrize("path", ["/comfyui/api/prompt", "/comfyui/api/interrupt"])
def test_a_job_is_admitted_which_wakes_it(path: str) -> None:
    decision = for_comfyui(Ask("POST", path), _routes(serves_asleep=True), _never, _always)
    assert isinstance(decision, Serve) and decision.admitted


@pytest.mark.parametrize("serves_asleep", [None, False])
def test_without_it_the_seed_rules_stay_exactly_as_they_are(serves_asleep: bool | None) -> None:
    routes = _routes(serves_asleep)
    ws = for_comfyui(Ask("GET", "/comfyui/ws", "", True), routes, _never, _always)
    asset = for_comfyui(Ask("GET", "/comfyui/scripts/app.js"), routes, _never, _always)
    page = for_comfyui(Ask("GET", "/comfyui/"), routes, _never, _always)
    assert ws == Refuse(
        409,
        "model comfyui_auto is not loaded; ignored websocket requests cannot start it",
        "model_not_loaded",
    )
    assert asset == Refuse(
        409, f"model comfyui_auto is not loaded; {IGNORED_PATH}", "model_not_loaded"
    )
    assert isinstance(page, Serve) and page.admitted  # the page starts it, as before


def test_while_it_is_not_dozing_the_seed_rules_apply_even_with_it() -> None:
    # Stopped (not asleep), a model whose sleep keeps serving follows the seed's rules.
    routes = _routes(serves_asleep=True)
    asset = for_comfyui(Ask("GET", "/comfyui/scripts/app.js"), routes, _never, _never)
    assert isinstance(asset, Refuse) and asset.status == 409


# ------------------------------------------------ with the `comfyui` preset's `wakeOn`: a job only

PRESET = PRESETS["comfyui"]


@pytest.mark.parametrize(
    ("method", "path", "websocket"),
    [
        ("POST", "/comfyui/api/settings/Comfy.ColorPalette", False),  # a settings change
        ("POST", "/comfyui/api/settings", False),
        ("POST", "/comfyui/api/userdata/workflows%2Fmine.json", False),  # a workflow save
        ("POST", "/comfyui/api/userdata/workflows%2Fmine.json?overwrite=true", False),
        ("DELETE", "/comfyui/api/userdata/workflows%2Fold.json", False),
        ("POST", "/comfyui/api/interrupt", False),  # nothing runs while it is asleep
        ("POST", "/comfyui/api/queue", False),  # clearing an empty queue
        ("POST", "/comfyui/api/prompt/x", False),  # not the job path itself
        ("GET", "/comfyui/api/prompt", False),  # the queue's size, a read
        ("GET", "/comfyui/", False),
        ("GET", "/comfyui/api/queue", False),
        ("GET", "/comfyui/ws", True),
    ],
)
def test_with_the_preset_everything_but_a_job_is_served_asleep(
    method: str, path: str, websocket: bool
) -> None:
    query = ""
    if "?" in path:
        path, _, rest = path.partition("?")
        query = "?" + rest
    ask = Ask(method, path, query, websocket)
    decision = for_comfyui(ask, _routes(None, PRESET), _never, _always)
    assert isinstance(decision, Serve) and not decision.admitted


@pytest.mark.parametrize(
    "path", ["/comfyui/api/prompt", "/comfyui/prompt", "/comfyui/api%2Fprompt"]
)
def test_with_the_preset_a_job_wakes_it(path: str) -> None:
    ask = Ask("POST", path, "?client_id=tab")
    decision = for_comfyui(ask, _routes(None, PRESET), _never, _always)
    assert isinstance(decision, Serve) and decision.admitted


def test_the_preset_wakes_on_a_job_only() -> None:
    assert PRESET.serves_asleep
    assert PRESET.wake_on == (WakeRule("POST", "/prompt"), WakeRule("POST", "/api/prompt"))


def test_with_the_preset_the_seed_rules_hold_while_it_is_stopped() -> None:
    routes = _routes(None, PRESET)
    for method in ("POST", "GET"):
        settings = for_comfyui(Ask(method, "/comfyui/api/settings/x"), routes, _never, _never)
        assert isinstance(settings, Serve) and settings.admitted  # starts it, as before
    asset = for_comfyui(Ask("GET", "/comfyui/scripts/app.js"), routes, _never, _never)
    assert isinstance(asset, Refuse) and asset.status == 409
    ws = for_comfyui(Ask("GET", "/comfyui/ws", "", True), routes, _never, _never)
    assert isinstance(ws, Refuse) and ws.message.endswith(
        "ignored websocket requests cannot start it"
    )


def test_wake_rules_match_the_method_and_the_whole_decoded_path() -> None:
    setting = SleepSetting(
        sleep=(HttpCall("/free"),),
        serves_asleep=True,
        wake_on=(WakeRule("*", "/v1/.*"), WakeRule("PUT", "/jobs/[0-9]+")),
    )
    assert wakes(setting, "GET", False, "/v1/models")
    assert wakes(setting, "POST", False, "/v1/chat/completions?x=1")
    assert wakes(setting, "PUT", False, "/jobs/12")
    assert wakes(setting, "PUT", False, "/jobs%2F12")
    assert not wakes(setting, "POST", False, "/jobs/12")
    assert not wakes(setting, "PUT", False, "/jobs/12/log")  # the whole path, not a prefix
    assert not wakes(setting, "PUT", False, "/x/jobs/12")
    assert not wakes(setting, "GET", True, "/v1/ws")  # a websocket never wakes it
    empty = SleepSetting(sleep=(HttpCall("/free"),), serves_asleep=True, wake_on=())
    assert not wakes(empty, "POST", False, "/anything")
    # Without wakeOn: every request but a read.
    default = SleepSetting(sleep=(HttpCall("/free"),), serves_asleep=True)
    assert wakes(default, "POST", False, "/api/settings/x")
    assert not wakes(default, "HEAD", False, "/")


def test_wake_rules_apply_to_upstream_and_model_routes_on_the_servers_path() -> None:
    setting = SleepSetting(
        sleep=(HttpCall("/free"),), serves_asleep=True, wake_on=(WakeRule("POST", "/api/prompt"),)
    )
    route = RouteModel(
        id="other-comfy", concurrency_limit=999, ttl=0, upstream="http://127.0.0.1:1", sleep=setting
    )
    routes = Routes(RoutingTable(generation=1, models=(route,)))
    job = for_upstream(Ask("POST", "/upstream/other-comfy/api/prompt"), routes, _never, _always)
    save = for_upstream(
        Ask("POST", "/upstream/other-comfy/api/settings/a"), routes, _never, _always
    )
    assert isinstance(job, Serve) and job.admitted
    assert isinstance(save, Serve) and not save.admitted
    chat = for_model(
        Ask("POST", "/v1/chat/completions", model="other-comfy"), routes, _never, _always
    )
    assert isinstance(chat, Serve) and not chat.admitted  # its wakeOn names no such path
