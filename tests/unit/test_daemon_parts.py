"""The daemon's small pure parts: watcher names, the circus INI, circus event parsing, the proxy
registry (heartbeats, activity, drain acks, keep_alive) and TTL."""

from __future__ import annotations

import asyncio
import configparser
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swapd.daemon.cli import circus_config
from swapd.daemon.config import Config, ModelConfig
from swapd.daemon.machinery.circus_events import parse
from swapd.daemon.policy import ttl
from swapd.daemon.policy.collation import IN_USE_FOR
from swapd.daemon.policy.proxies import ProxyRegistry
from swapd.daemon.policy.records import ModelRecord
from swapd.ipc import watcher_names
from swapd.ipc.endpoints import Endpoints
from swapd.ipc.timings import HEARTBEAT_GRACE, REPORT_GRACE
from tests.support.models import Clock
from tests.support.scheduler import until


@given(st.text(min_size=1))
def test_watcher_names_round_trip(model_id: str) -> None:
    name = watcher_names.watcher_name(model_id)
    assert name.startswith("model-")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_")
    assert watcher_names.model_id(name) == model_id
    # circus looks watchers up case-insensitively and splits event topics on dots.
    assert watcher_names.model_id(name.upper()) == model_id


def test_watcher_names_keep_ids_apart_and_readable() -> None:
    assert watcher_names.watcher_name("qwen2.5:7b") == "model-qwen2_2e5_3a7b"
    assert watcher_names.watcher_name("Org/Model") != watcher_names.watcher_name("org/model")
    for bad in ("swapd-daemon", "model-a_zz", "model-a.b", "model-_2f_"):
        with pytest.raises(ValueError):
            watcher_names.model_id(bad)


def test_circus_ini(tmp_path: Path) -> None:
    layout = circus_config.CircusLayout(
        endpoints=Endpoints(tmp_path),
        config_path=tmp_path / "my config.yaml",
        listen_host="127.0.0.1",
        listen_port=8080,
        python="/venv/bin/python",
        proxy_processes=3,
    )
    path = circus_config.write(layout)
    assert path.stat().st_mode & 0o777 == 0o600
    ini = configparser.RawConfigParser()
    ini.read(path)
    assert ini["circus"]["endpoint"] == f"ipc://{tmp_path}/circus-ctl.sock"
    assert ini["circus"]["pubsub_endpoint"].startswith("ipc://")
    assert ini["circus"]["multicast_endpoint"] == ""
    assert ini["circus"]["check_delay"] == "1"
    assert "stats_endpoint" not in ini["circus"]
    assert ini["socket:swapd"]["port"] == "8080"
    proxy = ini["watcher:swapd-proxy"]
    assert proxy["use_sockets"] == "True" and proxy["numprocesses"] == "3"
    assert proxy["cmd"].endswith("--fd $(circus.sockets.swapd)")
    daemon = ini["watcher:swapd-daemon"]
    assert daemon["copy_env"] == "True"
    assert "-m swapd.daemon.main" in daemon["cmd"]
    assert f"'{tmp_path}/my config.yaml'" in daemon["cmd"]
    assert ini["env:swapd-daemon"]["SWAPD_PYTHON"] == "/venv/bin/python"


def test_circus_ini_carries_the_shutdown_grace(tmp_path: Path) -> None:
    layout = circus_config.CircusLayout(
        endpoints=Endpoints(tmp_path),
        config_path=tmp_path / "config.yaml",
        listen_host="127.0.0.1",
        listen_port=8080,
        python="/venv/bin/python",
        daemon_graceful_timeout=52.5,
        shutdown_grace=12.5,
    )
    ini = configparser.RawConfigParser()
    ini.read(circus_config.write(layout))
    assert "--shutdown-grace 12.5" in ini["watcher:swapd-daemon"]["cmd"]
    assert ini["watcher:swapd-daemon"]["graceful_timeout"] == "52.5"
    # circusd SIGKILLs the proxy only after the grace and a margin.
    assert ini["watcher:swapd-proxy"]["graceful_timeout"] == "17.5"


def test_listen_addresses() -> None:
    assert circus_config.parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert circus_config.parse_listen("[::1]:9000") == ("::1", 9000)
    assert circus_config.parse_listen(":80") == ("0.0.0.0", 80)
    for bad in ("localhost", "host:0", "host:http", "h:70000"):
        with pytest.raises(circus_config.ListenAddressError):
            circus_config.parse_listen(bad)


def test_circus_event_parsing() -> None:
    event = parse(b"watcher.model-a_2fb.reap", b'{"process_pid": 12, "exit_code": -9, "time": 1}')
    assert event is not None
    assert (event.model, event.event, event.pid, event.exit_code) == ("a/b", "reap", 12, -9)
    assert parse(b"watcher.swapd-proxy.reap", b"{}") is None
    assert parse(b"watcher.model-a.updated", b"{}") is None
    assert parse(b"garbage", b"not json") is None
    stop = parse(b"watcher.model-a.stop", b"not json")
    assert stop is not None and stop.pid is None


async def test_drain_waits_for_every_live_proxy_and_not_for_silent_ones() -> None:
    clock = Clock(100.0)
    registry = ProxyRegistry(clock=clock)
    clock.now += HEARTBEAT_GRACE  # long enough after start to have heard every proxy
    registry.hello("p1", 1)
    registry.hello("p2", 2)
    published: list[int] = []
    # It looks again at each change only (`tick` is long), and publishes at each look
    # (`republish` 0 on a clock that stands still): every look it took is in `published`.
    drain = asyncio.create_task(registry.drain("m", published.append, tick=60.0, republish=0.0))
    await until(lambda: published == [1], "the first Draining")
    assert not drain.done()
    registry.drained("p1", "m", 1)
    await until(lambda: len(published) == 2, "the drain's look at p1's ack")
    assert not drain.done(), "p2 has not acked"
    registry.drained("p2", "m", 0)  # a stale epoch is no ack
    await until(lambda: len(published) == 3, "the drain's look at p2's stale ack")
    assert not drain.done()
    clock.now += 5  # p2 went silent; p1 keeps its heartbeat
    registry.hello("p1", 1)
    assert await asyncio.wait_for(drain, 1) == 1


async def test_drain_with_no_proxy_is_immediate_and_republishes_while_waiting() -> None:
    clock = Clock(100.0)
    registry = ProxyRegistry(clock=clock)
    clock.now += HEARTBEAT_GRACE
    assert await registry.drain("m", lambda epoch: None) == 1
    registry.hello("p1", 1)
    published: list[int] = []
    drain = asyncio.create_task(registry.drain("m", published.append, tick=0.01, republish=1.0))
    await until(lambda: published == [2], "the first Draining")
    clock.now += 1.5
    registry.hello("p1", 1)
    await until(lambda: len(published) == 2, "the Draining published again")
    assert published == [2, 2]
    registry.drained("p1", "m", 2)
    assert await asyncio.wait_for(drain, 1) == 2


def _model(ttl_s: int) -> ModelConfig:
    return ModelConfig(
        id="m",
        cmd=("x",),
        cmd_stop=None,
        proxy="http://127.0.0.1:1",
        check_endpoint=None,
        ttl=ttl_s,
        unload_timeout=1,
        health_check_timeout=15,
        concurrency_limit=10,
    )


def test_ttl_counts_from_the_last_activity_and_in_flight_holds_it() -> None:
    config = Config(models={"m": _model(10)})
    wall = Clock()
    registry = ProxyRegistry(clock=Clock(), wall=wall)
    rec = ModelRecord("m", state="ready", since=1000.0)
    assert ttl.ttl_left(rec, config, registry, now=1004.0) == 6.0
    assert ttl.due([rec], config, registry, now=1010.0) == ["m"]
    wall.now = 1005.0
    registry.activity("p", "m", in_flight=1, at=1005.0)
    assert ttl.ttl_left(rec, config, registry, now=1100.0) is None  # busy
    wall.now = 1050.0
    registry.activity("p", "m", in_flight=0, at=1050.0)
    assert ttl.ttl_left(rec, config, registry, now=1055.0) == 5.0
    assert ttl.due([rec], Config(models={"m": _model(0)}), registry, now=9999.0) == []
    assert ttl.due([ModelRecord("m", state="starting")], config, registry, now=9999.0) == []


def test_ttl_with_activity_reports_held_back_by_the_proxy() -> None:
    """The proxy casts Activity at most once per second per model, so a report can arrive up to
    1 s after the fact."""
    config = Config(models={"m": _model(2)})
    wall = Clock()
    registry = ProxyRegistry(clock=Clock(), wall=wall)
    rec = ModelRecord("m", state="ready", since=wall.now)
    start = wall.now
    # The busy->idle edge happened at start+0.2 but reached the daemon 1 s later: the TTL counts
    # from when the request ended, not from when the report came in.
    wall.now = start + 1.2
    registry.activity("p", "m", in_flight=0, at=start + 0.2)
    assert registry.last_activity["m"] == start + 0.2
    assert ttl.ttl_left(rec, config, registry, now=start + 1.7) == pytest.approx(1.0)
    # A new request began at start+1.9; the proxy had reported at start+1.2, so it holds the busy
    # report back until start+2.2 (one per second). At start+2.2 the 2 s TTL measured from the
    # last activity has passed, but the last report came in less than REPORT_GRACE ago: the
    # daemon waits for the report held back instead of unloading under the new request.
    assert ttl.ttl_left(rec, config, registry, now=start + 2.2) == pytest.approx(REPORT_GRACE - 1.0)
    assert ttl.due([rec], config, registry, now=start + 2.2) == []
    wall.now = start + 2.25
    registry.activity("p", "m", in_flight=1, at=start + 1.9)
    assert ttl.due([rec], config, registry, now=start + 9.0) == [], "a request in flight"
    wall.now = start + 9.0
    registry.activity("p", "m", in_flight=0, at=start + 9.0)
    assert ttl.due([rec], config, registry, now=start + 10.9) == []
    assert ttl.due([rec], config, registry, now=start + 11.0) == ["m"]
    # A Ready reply counts as a report to come: the request it lets through is not reported yet.
    registry.served("m")
    assert ttl.due([rec], config, registry, now=start + 10.0) == []
    wall.now = start + 20.0
    registry.served("m")
    assert ttl.due([rec], config, registry, now=start + 21.0) == []
    assert ttl.due([rec], config, registry, now=start + 21.5) == ["m"]
    # A report from the future (clock skew) counts as now.
    registry.activity("p", "m", in_flight=0, at=start + 500)
    assert registry.last_activity["m"] == start + 20.0


def test_model_logs_rotate_between_runs(tmp_path: Path) -> None:
    from swapd.daemon.machinery.model_log import LOG_MAX_BYTES, rotate_log

    log = tmp_path / "model-m.log"
    rotate_log(log)  # no file yet: nothing to do
    log.write_text("small\n")
    rotate_log(log)
    assert log.read_text() == "small\n"
    for generation in ("first", "second", "third"):
        log.write_bytes(generation.encode() + b"x" * LOG_MAX_BYTES)
        rotate_log(log)
        assert not log.exists()
    assert (tmp_path / "model-m.log.1").read_bytes().startswith(b"third")
    assert (tmp_path / "model-m.log.2").read_bytes().startswith(b"second")
    assert not (tmp_path / "model-m.log.3").exists()


@dataclass
class _Handle:
    """A running model's handle: which process serves it."""

    pid: int
    upstream: str = "http://127.0.0.1:1"


def test_a_requests_keep_alive_replaces_the_ttl_for_that_run_only() -> None:
    """Ollama's keep_alive (`KeepAlive`): seconds in place of `ttl`, 0 due once no longer in use
    (nothing in flight, nothing begun or ended for IN_USE_FOR), negative never; tied to the process
    it was asked for."""
    config = Config(models={"m": _model(10)})
    wall = Clock()
    registry = ProxyRegistry(clock=Clock(), wall=wall)
    rec: ModelRecord[_Handle] = ModelRecord("m", state="ready", since=1000.0, handle=_Handle(41))
    registry.keep("p", "m", 41, 600.0)
    assert ttl.effective_ttl(rec, config.models["m"], registry) == 600.0
    assert ttl.ttl_left(rec, config, registry, now=1100.0) == 500.0
    registry.keep("p", "m", 41, -1.0)
    assert ttl.ttl_left(rec, config, registry, now=99999.0) is None
    assert ttl.due([rec], config, registry, now=99999.0) == []
    wall.now = 1000.5
    registry.keep("p", "m", 41, 0.0)
    registry.activity("p", "m", in_flight=0, at=1000.5)
    assert ttl.due([rec], config, registry, now=1000.5 + IN_USE_FOR - 0.1) == []
    assert ttl.due([rec], config, registry, now=1000.5 + IN_USE_FOR) == ["m"]
    registry.activity("p", "m", in_flight=1, at=1000.5)  # in flight: held, however long
    assert ttl.due([rec], config, registry, now=1100.0) == []
    registry.activity("p", "m", in_flight=0, at=1000.5)
    # A model with no ttl at all still honours keep_alive 0.
    assert ttl.due([rec], Config(models={"m": _model(0)}), registry, now=1004.0) == ["m"]
    # The next run of the model (another process) starts from its ttl.
    rec.handle = _Handle(42)
    assert registry.kept("m", 42) is None
    assert ttl.effective_ttl(rec, config.models["m"], registry) == 10.0
    registry.keep("p", "m", 42, None)  # back to ttl
    assert "m" not in registry.keep_alive


def test_in_use_is_a_request_in_flight_or_of_this_run_lately_or_a_busy_check() -> None:
    """`ttl.in_use` (Ollama's unload of a model in use waits for it): in flight, busy by its
    busyCheck, or a request of this run begun or ended within IN_USE_FOR; its start, or a
    request of an earlier run, is not use."""
    wall = Clock()
    wall.now = 1000.0
    registry = ProxyRegistry(clock=Clock(), wall=wall)
    rec: ModelRecord[_Handle] = ModelRecord("m", state="ready", since=1000.0, handle=_Handle(41))
    assert not ttl.in_use(rec, registry)  # loaded, never asked
    registry.activity("p", "m", in_flight=0, at=999.0)  # an earlier run's
    assert not ttl.in_use(rec, registry)
    wall.now = 1001.0
    registry.activity("p", "m", in_flight=1, at=1001.0)
    assert ttl.in_use(rec, registry, now=1100.0)
    registry.activity("p", "m", in_flight=0, at=1001.0)
    assert ttl.in_use(rec, registry, now=1001.0 + IN_USE_FOR - 0.1)
    assert not ttl.in_use(rec, registry, now=1001.0 + IN_USE_FOR)
    assert ttl.in_use(rec, registry, held=math.inf, now=1100.0)
    assert ttl.in_use(rec, registry, held=1099.0, now=1100.0)
