"""Verified wakes without processes: `wakeProbe` read from the config (the default chat probe,
`off`, written out, its errors), the probe's answer held to what it must be, the sleep machinery
recording the answer before a first sleep and failing a wake that answers otherwise (against a
loopback server), and the scheduler's cause for it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from swapd.daemon.config import ConfigError, WakeProbe, load_config_text
from swapd.daemon.config.sections.sleep_fields import PRESETS
from swapd.daemon.errors import WakeFailed, WakeUnverified
from swapd.daemon.machinery import wake_probe
from swapd.daemon.machinery.sleeping import Sleeper
from swapd.daemon.policy.story import Began, Ended
from swapd.ipc.causes import StopCause
from swapd.ipc.routing_table import SleepSetting
from swapd.ipc.swap_record import SwapKind, SwapOutcome, SwapPhase
from tests.support.loopback_app import serving
from tests.support.scheduler import setup

VLLM = "cmd: vllm serve m --port ${PORT} --enable-sleep-mode\n    env: [VLLM_SERVER_DEV_MODE=1]"


def probe_of(body: str, sleep: str = "sleep: vllm") -> WakeProbe | None:
    text = f"models:\n  m:\n    {VLLM}\n    {sleep}\n" + "".join(
        f"    {line}\n" for line in body.splitlines()
    )
    return load_config_text(text).models["m"].wake_probe


# ------------------------------------------------------------------------------ the config


def test_unset_is_the_default_chat_probe_asking_for_the_models_name() -> None:
    probe = probe_of("useModelName: served-name")
    assert probe is not None and probe.default and probe.path == "/v1/chat/completions"
    body = json.loads(probe.body)
    assert body["model"] == "served-name"
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0, 8, 1234)
    assert probe.json_path == ("choices", "0", "message", "content")
    assert wake_probe.needs_record(probe)


@pytest.mark.parametrize("off", ["wakeProbe: off", "wakeProbe: false", 'wakeProbe: "off"'])
def test_off_asks_nothing(off: str) -> None:
    assert probe_of(off) is None


def test_comfyuis_preset_has_no_probe_and_no_sleep_no_probe() -> None:
    assert probe_of("", sleep="sleep: comfyui") is None
    text = "models:\n  m:\n    cmd: x --port ${PORT}\n    wakeProbe: {expect: ok}\n"
    config = load_config_text(text)
    assert config.models["m"].wake_probe is None


def test_written_out() -> None:
    probe = probe_of(
        "wakeProbe:\n  method: post\n  path: /v1/completions\n  body: {prompt: hi}\n"
        "  jsonPath: $.choices.0.text\n  match: Par+is\n  timeout: 5"
    )
    assert probe == WakeProbe(
        method="POST",
        path="/v1/completions",
        body='{"prompt": "hi"}',
        json_path=("choices", "0", "text"),
        match="Par+is",
        timeout=5.0,
    )
    # A mapping without path or body changes the default request.
    tuned = probe_of("wakeProbe: {timeout: 120}")
    assert tuned is not None and not tuned.default and tuned.timeout == 120
    assert json.loads(tuned.body)["model"] == "m"


@pytest.mark.parametrize(
    ("written", "words"),
    [
        ("wakeProbe: {bogus: 1}", "unknown key 'bogus'"),
        ("wakeProbe: {method: DELETE}", "expected one of GET, POST, PUT, PATCH"),
        ("wakeProbe: {path: 'http://x/y'}", "expected a path on the model's server"),
        ("wakeProbe: {match: '(('}", "not a regular expression"),
        ("wakeProbe: {timeout: 0}", "expected seconds above 0"),
        ("wakeProbe: [1]", "expected off, or a mapping"),
        ("wakeProbe: sometimes", "expected off, or a mapping"),
    ],
)
def test_a_wrong_probe_is_an_error_naming_its_key(written: str, words: str) -> None:
    with pytest.raises(ConfigError, match=r"models\.m\.wakeProbe") as caught:
        probe_of(written)
    assert words in str(caught.value)


# ------------------------------------------------------------------------------ the answer


def test_the_answer_is_the_body_or_the_value_at_its_json_path() -> None:
    whole = WakeProbe(path="/x")
    assert wake_probe.value_at("plain text", whole) == "plain text"
    at = WakeProbe(json_path=("choices", "0", "text"))
    assert wake_probe.value_at('{"choices": [{"text": "Paris"}]}', at) == "Paris"
    assert wake_probe.value_at('{"choices": [{"text": 7}]}', at) == "7"
    for wrong in ('{"choices": []}', "not json"):
        with pytest.raises(wake_probe.ProbeFailed) as caught:
            wake_probe.value_at(wrong, at)
        assert caught.value.fault is wake_probe.ProbeFault.ERROR


def test_the_verdict_holds_it_to_expect_match_or_the_recorded_answer() -> None:
    wake_probe.verdict(WakeProbe(expect="Paris"), "Paris", None)
    wake_probe.verdict(WakeProbe(match="Par+is"), "in Parris", None)
    wake_probe.verdict(WakeProbe(), "one two", "one two")
    for probe, answer, recorded in (
        (WakeProbe(expect="Paris"), "paris", None),
        (WakeProbe(match="^Paris"), "Lyon", None),
        (WakeProbe(), "garbage", "one two"),
    ):
        with pytest.raises(wake_probe.ProbeFailed) as caught:
            wake_probe.verdict(probe, answer, recorded)
        assert caught.value.fault is wake_probe.ProbeFault.MISMATCH


# --------------------------------------------------------------------- the sleep machinery


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A server whose chat answer is `state["answer"]` (its status `state["status"]`)."""
    state: dict[str, Any] = {"answer": "one two", "status": 200, "asked": 0}

    async def chat(request: web.Request) -> web.Response:
        state["asked"] += 1
        body = {"choices": [{"message": {"content": state["answer"]}}]}
        return web.json_response(body, status=state["status"])

    async def ok(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_route("*", "/{tail:.*}", ok)
    async with serving(app) as url:
        yield url, state


PROBE = WakeProbe(body="{}", json_path=("choices", "0", "message", "content"), timeout=5)
SETTING = SleepSetting(sleep=PRESETS["vllm"].sleep, wake=PRESETS["vllm"].wake)


async def cycle(sleeper: Sleeper, session: aiohttp.ClientSession, url: str) -> float:
    await sleeper.sleep(session, "m", 1, url, SETTING, (None, None, set()), PROBE)
    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    return await sleeper.wake(session, "m", url, SETTING, None, 5, never, PROBE)


async def test_the_answer_is_recorded_before_the_first_sleep_and_held_after_each_wake(
    server: tuple[str, dict[str, Any]],
) -> None:
    url, state = server
    phases: list[SwapPhase] = []
    sleeper = Sleeper(None, 1.0, on_phase=lambda _, phase, __: phases.append(phase))
    async with aiohttp.ClientSession() as session:
        await cycle(sleeper, session, url)
        assert sleeper.of("m").probe_answer == "one two" and sleeper.of("m").verified == 1
        assert (state["asked"], phases) == (2, [SwapPhase.VERIFY, SwapPhase.VERIFY])
        state["answer"] = "garbage"
        with pytest.raises(WakeUnverified, match="mismatch: answered 'garbage', not 'one two'"):
            await cycle(sleeper, session, url)
        assert state["asked"] == 3  # recorded once per process
        # A probe with no answer fails the wake too, with the same cause.
        state["status"] = 500
        with pytest.raises(WakeUnverified, match="its wakeProbe error: POST /v1/chat/completions"):
            await cycle(sleeper, session, url)
        assert issubclass(WakeUnverified, WakeFailed)


async def test_a_server_that_gives_no_answer_before_its_sleep_is_not_verified(
    server: tuple[str, dict[str, Any]],
) -> None:
    url, state = server
    sleeper = Sleeper(None, 1.0)
    state["status"] = 404
    async with aiohttp.ClientSession() as session:
        await cycle(sleeper, session, url)  # sleeps and wakes as without a probe
        assert sleeper.of("m").probe_answer is None and sleeper.of("m").verified == 0
        await cycle(sleeper, session, url)  # the same process: not asked again
        assert state["asked"] == 1
        # Its process stopped: the next one records its own answer.
        state["status"] = 200
        sleeper.forget("m")
        await cycle(sleeper, session, url)
        assert sleeper.of("m").verified == 1


# ----------------------------------------------------------------------------- the scheduler


async def test_an_unverified_wake_stops_the_model_with_its_cause_and_starts_it_cold() -> None:
    sched, fx, _ = setup("a", "b", a={"sleep": PRESETS["vllm"]})
    first = await sched.ensure("a")
    await sched.ensure("b")
    fx.wake_unverified.add("a")
    again = await sched.ensure("a")
    assert fx.log[-3:] == [("wake", "a"), ("stop", "a"), ("start", "a")]
    assert again.pid != first.pid
    stopped = [s for s in fx.states if s[0] == "a"]
    assert stopped[-5:] == [
        ("a", "waking"), ("a", "stopping"), ("a", "stopped"), ("a", "starting"), ("a", "ready"),
    ]  # fmt: skip
    began = [e for e in fx.happenings if isinstance(e, Began) and e.model == "a"]
    assert (began[-2].kind, began[-2].cause) == (SwapKind.STOP, StopCause.WAKE_UNVERIFIED)
    ended = [e for e in fx.happenings if isinstance(e, Ended) and e.model == "a"]
    wake = next(e for e in ended if e.outcome is SwapOutcome.FAILED)
    assert wake.reason.startswith("its wake was not verified, so it was stopped to start again")
