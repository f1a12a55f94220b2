"""`busyCheck` without processes: each preset's rule on recorded answers of the real servers
(`tests/data/busy_answers/`: ComfyUI's `/api/queue`, llama-server's `/slots`, vLLM's `/metrics`),
the config key, the board (TTL hold, failures logged once) and a swap held by a busy model."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any, get_args

import msgspec
import pytest
from aiohttp import web

from swapd.daemon.busy_checks import BusyChecks
from swapd.daemon.config import (
    BusyCheck,
    BusyCount,
    Config,
    ConfigError,
    ModelConfig,
    load_config_text,
)
from swapd.daemon.config.sections.busy_check_fields import PRESETS
from swapd.daemon.config.shape import BusyPreset
from swapd.daemon.observe.swap_log import SwapLog
from swapd.daemon.policy import ttl
from swapd.daemon.policy.busy_answer import Reading, evaluate, failed
from swapd.daemon.policy.busy_board import BusyBoard
from swapd.daemon.policy.eviction.contract import BusyReading, Decision, Wait
from swapd.daemon.policy.proxies import ProxyRegistry
from swapd.daemon.policy.records import ModelRecord, Parked
from swapd.daemon.policy.scheduler import Scheduler
from swapd.daemon.policy.story import Happening
from swapd.daemon.status import waiting_of
from swapd.ipc.model_status import Busy
from tests.support.loopback_app import serving
from tests.support.models import model as scheduler_model
from tests.support.paths import BUSY_ANSWERS
from tests.support.scheduler import FakeEffects, Handle, make_config, parked, until

ANSWERS = BUSY_ANSWERS


def answer(name: str) -> bytes:
    return (ANSWERS / name).read_bytes()


# ------------------------------------------------------------------------------ the rules


@pytest.mark.parametrize(
    ("preset", "recorded", "jobs", "words"),
    [
        ("comfyui", "comfyui_queue_busy.json", 3, "upstream reports 1 running job, 2 pending jobs"),
        ("comfyui", "comfyui_queue_idle.json", 0, "upstream reports nothing running"),
        ("llamacpp", "llamacpp_slots_busy.json", 2, "upstream reports 2 processing slots"),
        ("llamacpp", "llamacpp_slots_idle.json", 0, "upstream reports nothing running"),
        ("vllm", "vllm_metrics_busy.txt", 3, "upstream reports 3 running requests"),
        ("vllm", "vllm_metrics_idle.txt", 0, "upstream reports nothing running"),
    ],
)
def test_each_preset_reads_its_servers_recorded_answer(
    preset: str, recorded: str, jobs: int, words: str
) -> None:
    reading = evaluate(PRESETS[preset], answer(recorded))
    assert (reading.jobs, reading.busy, reading.error) == (jobs, jobs > 0, "")
    assert reading.words() == words


def test_one_of_a_kind_is_said_in_the_singular() -> None:
    one = b'{"queue_running": [[1, "p", {}, {}, []]], "queue_pending": []}'
    reading = evaluate(PRESETS["comfyui"], one)
    assert f"busy ({reading.words()})" == "busy (upstream reports 1 running job)"


@pytest.mark.parametrize(
    ("preset", "body", "error"),
    [
        # llama-server started with --no-slots: its 501 body (the status alone already fails).
        ("llamacpp", answer("llamacpp_no_slots.json"), "the answer is not a list or a number"),
        ("comfyui", b"<html>ComfyUI</html>", "the answer is not JSON"),
        ("comfyui", b'{"queue_running": []}', "no 'queue_pending' in the answer"),
        ("comfyui", b'{"queue_running": {}, "queue_pending": []}', "queue_running is not a list"),
        ("llamacpp", b"[1, 2]", "an item of the answer is not a mapping"),
        ("vllm", b"# HELP python_info\npython_info 1.0\n", "no vllm:num_requests_running"),
        ("vllm", b"\xff\xfe not text", "the answer is not Prometheus text"),
    ],
)
def test_an_answer_the_rule_cannot_read_is_a_failed_reading(
    preset: str, body: bytes, error: str
) -> None:
    reading = evaluate(PRESETS[preset], body)
    assert error in reading.error
    assert not reading.busy


def test_a_json_number_counts_as_itself() -> None:
    check = BusyCheck(path="/status", counts=(BusyCount(label="job", json="stats.active"),))
    assert evaluate(check, b'{"stats": {"active": 4}}').jobs == 4
    assert evaluate(check, b'{"stats": {"active": 0}}').busy is False


# ------------------------------------------------------------------------------ the config

BASE = "models:\n  m:\n    cmd: server --port ${PORT}\n"


def test_without_busy_check_a_model_has_none_comfyui_auto_included() -> None:
    text = BASE + "  comfyui_auto:\n    checkEndpoint: /\n    cmd: comfy --port ${PORT}\n"
    config = load_config_text(text, environ={})
    assert all(m.busy_check is None for m in config.models.values())


def test_a_preset_by_name_and_a_preset_with_settings_changed() -> None:
    config = load_config_text(
        BASE
        + "    busyCheck: comfyui\n  n:\n    cmd: server --port ${PORT}\n"
        + "    busyCheck: {preset: vllm, interval: 0.5, swapWait: 30}\n",
        environ={},
    )
    assert config.models["m"].busy_check == PRESETS["comfyui"]
    vllm = config.models["n"].busy_check
    assert vllm is not None
    assert (vllm.path, vllm.counts, vllm.interval, vllm.swap_wait, vllm.timeout) == (
        "/metrics",
        PRESETS["vllm"].counts,
        0.5,
        30.0,
        2.0,
    )


def test_a_check_written_in_full() -> None:
    config = load_config_text(
        BASE
        + "    busyCheck:\n      path: /api/state\n      count:\n"
        + "        - {json: workers, where: active, label: active worker}\n",
        environ={},
    )
    check = config.models["m"].busy_check
    assert check is not None and check.preset is None
    assert check.counts == (BusyCount(label="active worker", json="workers", where="active"),)
    assert evaluate(check, b'{"workers": [{"active": true}, {"active": false}]}').jobs == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("comfy", "busyCheck: unknown preset 'comfy': expected comfyui, llamacpp, vllm"),
        ("{preset: llamacpp, swapwait: 3}", "busyCheck.swapwait: unknown key 'swapwait'"),
        ("{path: /x}", "busyCheck: needs count (what makes the model busy) or a preset"),
        ("{path: x, count: [{json: a, label: b}]}", "busyCheck.path: expected a path"),
        ("{preset: vllm, interval: 0}", "busyCheck.interval: must be at least 0.1 seconds"),
        ("{path: /x, count: [{json: a}]}", "busyCheck.count[0]: needs a label"),
        ("{path: /x, count: [{json: a, metric: b, label: c}]}", "needs exactly one of json"),
        ("{path: /x, count: [{json: a, label: a}, {metric: b, label: b}]}", "mixes json and"),
        ("3", "busyCheck: expected a preset name (comfyui, llamacpp, vllm) or a mapping"),
    ],
)
def test_a_bad_busy_check_names_line_key_path_and_what_was_expected(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(BASE + f"    busyCheck: {value}\n", "c.yaml", environ={})
    text = str(caught.value)
    assert text.startswith("c.yaml:4 models.m.busyCheck") and message in text, text


# ------------------------------------------------------------------------------- the board


class Wall:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


BUSY = Reading(jobs=1, parts=(("running job", 1),))
IDLE = Reading()


def test_busy_holds_the_ttl_and_the_clock_restarts_when_it_turns_idle() -> None:
    wall = Wall()
    board = BusyBoard(wall=wall)
    registry = ProxyRegistry(wall=wall)
    config = load_config_text(BASE + "    ttl: 10\n    busyCheck: comfyui\n", environ={})
    rec: ModelRecord[Handle] = ModelRecord("m", state="ready", since=wall.now)
    wall.now += 8
    board.observe("m", BUSY)
    assert board.held("m") == math.inf
    wall.now += 100
    assert ttl.ttl_left(rec, config, registry, held=board.held("m")) is None
    assert ttl.due([rec], config, registry, held=board.held) == []
    report = board.report("m")
    assert report is not None and report.message == "busy (upstream reports 1 running job)"
    board.observe("m", IDLE)
    assert board.held("m") == wall.now
    assert ttl.ttl_left(rec, config, registry, held=board.held("m")) == 10.0
    wall.now += 10
    assert ttl.due([rec], config, registry, held=board.held) == ["m"]


def test_a_failing_check_counts_as_idle_and_is_logged_once_until_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    board = BusyBoard(wall=Wall())
    caplog.set_level(logging.INFO, logger="swapd.busy")
    board.observe("m", BUSY)
    for _ in range(5):
        board.observe("m", failed("GET http://127.0.0.1:1/slots answered HTTP 501"))
    assert not board.busy("m") and board.held("m") > 0
    report = board.report("m")
    assert report is not None and report.error.endswith("HTTP 501") and not report.busy
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "counted as idle" in warnings[0].getMessage()
    board.observe("m", IDLE)
    board.observe("m", failed("GET http://127.0.0.1:1/slots: no answer within 2s"))
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_only_a_visible_change_is_published() -> None:
    changed: list[str] = []
    board = BusyBoard(changed.append, wall=Wall())
    board.observe("m", IDLE)
    board.observe("m", IDLE)
    board.observe("m", BUSY)
    board.observe("m", BUSY)
    board.observe("m", Reading(jobs=2, parts=(("running job", 2),)))
    board.forget("m")
    assert changed == ["m", "m", "m", "m"]


# -------------------------------------------------------------------- a swap held by busy


class HeldEffects(FakeEffects):
    """The fake effects and readings, with the daemon's busy board: the readings are its, and
    what the eviction policy decides shows the swaps it holds on it, as the daemon's effects do."""

    def __init__(self, config: Config, board: BusyBoard) -> None:
        super().__init__(config)
        self.board = board
        self.asked: list[str] = []

    def busy(self, model_id: str) -> BusyReading | None:
        report = self.board.report(model_id)
        return BusyReading(report.busy, self.board.words(model_id)) if report else None

    async def check_busy(self, models: frozenset[str]) -> None:
        self.asked.extend(sorted(models))

    def decided(self, target: ModelConfig, decision: Decision) -> None:
        super().decided(target, decision)
        self.board.waits(target.id, decision.holding if isinstance(decision, Wait) else {})

    def ended(self, target: str) -> None:
        self.board.waits_over(target)


def _held_scheduler(
    swap_wait: float,
) -> tuple[Scheduler[Handle], HeldEffects, BusyBoard, list[str]]:
    check = msgspec.structs.replace(PRESETS["comfyui"], swap_wait=swap_wait)
    config = make_config("a", "b", a={"busy_check": check})
    effects = HeldEffects(config, BusyBoard())
    # The swapWait is a time the swap waits: measured on the loop's own clock here.
    sched: Scheduler[Handle] = Scheduler(config, effects, effects, clock=time.monotonic)
    effects.board.on_change = lambda _model: sched.readings_changed()
    return sched, effects, effects.board, effects.asked


async def _swap_held_by_a(
    swap_wait: float,
) -> tuple[Scheduler[Handle], HeldEffects, BusyBoard, list[str], asyncio.Task[Handle]]:
    """`a` ready and busy, and a swap to `b` waiting for it (seen holding, with a deadline)."""
    sched, effects, board, asked = _held_scheduler(swap_wait)
    await sched.ensure("a")
    board.observe("a", BUSY)
    swap = asyncio.ensure_future(sched.ensure("b"))

    def holding() -> bool:
        report = board.report("a")
        return report is not None and report.holding == ("b",)

    await until(holding, "the swap to b held by a")
    return sched, effects, board, asked, swap


async def test_a_swap_waits_for_a_busy_model_and_goes_ahead_when_it_is_idle() -> None:
    sched, effects, board, asked, swap = await _swap_held_by_a(60)
    assert not swap.done() and ("drain", "a") not in effects.log
    assert sched.record("a").state == "ready"  # it serves on meanwhile
    assert asked == ["a"]  # checked once more before waiting
    assert await parked(sched, "b") == "busy: a"
    board.observe("a", IDLE)
    await asyncio.wait_for(swap, 5)
    assert effects.log[-3:] == [("drain", "a"), ("stop", "a"), ("start", "b")]
    after = board.report("a")
    assert after is not None and after.holding == ()


async def test_a_swap_goes_ahead_after_swap_wait(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    _, effects, _, _, swap = await _swap_held_by_a(0.3)
    await asyncio.wait_for(swap, 5)
    assert loop.time() - started >= 0.3
    assert ("stop", "a") in effects.log
    assert any("goes ahead (swapWait)" in r.getMessage() for r in caplog.records)


async def test_an_unload_is_not_held_and_an_unloaded_target_ends_the_wait() -> None:
    sched, effects, _, _, swap = await _swap_held_by_a(60)
    # The target is unloaded while its swap waits: its waiters are answered at once.
    await asyncio.wait_for(sched.unload("b"), 5)
    with pytest.raises(Exception, match="unloaded"):
        await asyncio.wait_for(swap, 5)
    # The busy model itself: an unload stops it at once.
    await asyncio.wait_for(sched.unload("a"), 5)
    assert ("stop", "a") in effects.log


class LoggedEffects(HeldEffects):
    """HeldEffects that also tell the daemon's swap log what the daemon's effects tell it (the
    swap story as it happens, what a queued swap waits for, its end), so the target's `waiting`
    and its swap record can be read as `/api/status` and `/api/swaps` give them
    (daemon/status.py's `waiting_of`)."""

    def __init__(self, config: Config, board: BusyBoard, swaps: SwapLog) -> None:
        super().__init__(config, board)
        self.swaps = swaps
        self.republished: list[str] = []

    def happened(self, event: Happening) -> None:
        super().happened(event)
        self.swaps.told(event)

    def waiting(self, target: str, on: str, queued_at: float, parked: Parked | None = None) -> None:
        super().waiting(target, on, queued_at, parked)
        if self.swaps.waiting(target, on, time.time() - (time.monotonic() - queued_at)):
            self.republished.append(target)

    def ended(self, target: str) -> None:
        super().ended(target)
        if self.swaps.swap_ended(target):
            self.republished.append(target)


class _Published:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def publish_nowait(self, make: Callable[[int], Any]) -> None:
        self.events.append(make(len(self.events) + 1))

    def reply(self, identity: bytes, reply: Any) -> None:
        return None


async def test_a_waiting_swap_is_shown_on_its_target_and_its_record_says_what_it_waited_for() -> (
    None
):
    check = msgspec.structs.replace(PRESETS["comfyui"], swap_wait=60)
    config = make_config("a", "b", a={"busy_check": check})
    swaps = SwapLog("inst", _Published())
    effects = LoggedEffects(config, BusyBoard(), swaps)
    board = effects.board
    sched: Scheduler[Handle] = Scheduler(config, effects, effects, clock=time.monotonic)
    board.on_change = lambda _model: sched.readings_changed()
    await sched.ensure("a")
    board.observe("a", BUSY)
    asked = time.time()
    swap = asyncio.ensure_future(sched.ensure("b"))
    assert await parked(sched, "b") == "busy: a"
    # The target's status: what its swap waits for, since when, which busy model holds it and
    # until when at the latest (the busy model's swapWait from the reading before the wait).
    waiting = waiting_of("b", swaps, board)
    assert waiting is not None
    assert (waiting.reason, waiting.holding) == ("busy: a", ("a",))
    held = board.report("a")
    assert held is not None and waiting.until == held.hold_until > asked + 59
    assert asked - 1 < waiting.since <= time.time()
    assert effects.republished == ["b"]  # published again as it began to wait
    board.observe("a", IDLE)
    await asyncio.wait_for(swap, 5)
    assert waiting_of("b", swaps, board) is None  # it went ahead: nothing waits
    assert effects.waits[-1] == ("b", "")
    assert effects.republished == ["b", "b"]
    # One swap record for it, folding a's stop, with its request's whole wait.
    stop, record = list(swaps.records)[-2:]
    assert (stop.kind, stop.model, record.kind, record.model) == ("stop", "a", "swap", "b")
    assert record.folded == (stop.id,)
    assert record.waited_for == ("busy: a",)
    assert record.queued == waiting.since
    assert record.waited == round(record.ended - record.queued, 4)
    assert record.waited >= record.ended - record.began


# ------------------------------------------------------------------ the probe, on loopback


@pytest.fixture
async def queue_server() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A loopback HTTP server answering `/api/queue` as `behaviour` says (stands for ComfyUI)."""
    behaviour: dict[str, Any] = {"mode": "busy"}

    async def handler(request: web.Request) -> web.StreamResponse:
        mode = behaviour["mode"]
        if mode == "hang":
            await asyncio.sleep(30)
        if mode == "error":
            return web.Response(status=500, text="Internal Server Error")
        name = "comfyui_queue_busy.json" if mode == "busy" else "comfyui_queue_idle.json"
        return web.Response(body=answer(name), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/queue", handler)
    async with serving(app) as url:
        yield url, behaviour


async def test_the_probe_polls_a_ready_model_and_a_timeout_counts_as_idle(
    queue_server: tuple[str, dict[str, Any]],
) -> None:
    url, behaviour = queue_server
    check = BusyCheck(
        path="/api/queue", counts=PRESETS["comfyui"].counts, interval=0.1, timeout=0.3
    )
    config = Config(models={"c": msgspec.structs.replace(scheduler_model("c"), busy_check=check)})
    watch = BusyChecks()
    rec: ModelRecord[Any] = ModelRecord("c", state="ready")
    rec.handle = SimpleNamespace(upstream=url, pid=1)
    registry = ProxyRegistry()
    try:
        watch.tick([rec], config, registry)

        async def until(pred: Callable[[Busy], bool]) -> Busy:
            async with asyncio.timeout(10):
                while True:
                    got = watch.report("c")
                    if got is not None and pred(got):
                        return got
                    await asyncio.sleep(0.02)

        busy = await until(lambda b: b.busy)
        assert busy.message == "busy (upstream reports 1 running job, 2 pending jobs)"
        assert watch.held("c") == math.inf
        behaviour["mode"] = "hang"
        failing = await until(lambda b: bool(b.error))
        assert "no answer within 0.3s" in failing.error and not failing.busy
        behaviour["mode"] = "error"
        assert "HTTP 500" in (await until(lambda b: "500" in b.error)).error
        behaviour["mode"] = "idle"
        assert (await until(lambda b: not b.error)).message == "idle"
        # No longer ready: no longer polled, no reading.
        rec.state = "draining"
        watch.tick([rec], config, registry)
        assert watch.report("c") is None
    finally:
        await watch.close()


def test_the_presets_are_the_declared_names() -> None:
    # `busyCheck`'s type in config/shape.py names them (its error lists them).
    assert tuple(PRESETS) == get_args(BusyPreset)
