"""`sleep: cuda` through the real stack: circusd, the daemon, the proxy, and the llama-server
stand-in (`fake_model.py`, which has no sleep API) on a fake GPU, with the stand-in for the CUDA
driver's checkpoint calls (`daemon/machinery/cuda_fake.py`: it moves the fake GPU's accounting,
blocks the stand-in's work while locked, and logs each call to a file here).

A swap back and forth keeps the sleeping model's process and calls lock, checkpoint, restore,
unlock in that order; a lock that times out, a checkpoint that fails, too little host memory for
the checkpoint, a host without the driver's checkpoint API, and a restore that fails each fall back
to a stop (and a cold start), with their own cause in the swap record and the metrics; a daemon
restart adopts it asleep and its wake asks the driver what to restore."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swapd.daemon.machinery.gpu_fake import fake_uuid
from tests.support.daemon import chat
from tests.support.sleeping import GIB, config, gpu_env, plain_model
from tests.support.stack import Stack, fake_model_cmd, http_get

pytestmark = pytest.mark.processes

GPU = fake_uuid(0).casefold()


def cuda_env(tmp_path: Path, available_gib: int = 64) -> dict[str, str]:
    """A fake GPU, the checkpoint stand-in's folder, and a host with `available_gib` of memory
    available (the daemon reads `SWAPD_MEMINFO` instead of /proc/meminfo)."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        f"MemTotal: {128 * 1024**2} kB\nMemAvailable: {available_gib * 1024**2} kB\n"
    )
    return {
        **gpu_env(),
        "SWAPD_FAKE_CUDA_DIR": str(tmp_path / "cuda"),
        "SWAPD_MEMINFO": str(meminfo),
    }


def llama_model(name: str, sleep: Any = "cuda") -> dict[str, Any]:
    """The llama-server stand-in holding 6 GiB of the fake GPU, asleep through the driver."""
    return {
        **plain_model(name, sleep=sleep),
        "cmd": fake_model_cmd(name, "--gpu-mem", str(6 * GIB)),
    }


def served_pid(reply: dict[str, Any]) -> int:
    return int(reply["served_by"]["pid"])  # type: ignore[index]


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "cuda" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_swap_back_and_forth_keeps_the_process_and_checkpoints_it(
    stack_factory, tmp_path: Path
) -> None:
    stack: Stack = stack_factory(
        config({"a": llama_model("a"), "b": plain_model("b")}), env=cuda_env(tmp_path)
    )
    first = served_pid(chat(stack.url, "a"))
    assert served_pid(chat(stack.url, "b")) != first
    a = stack.wait_state("a", "asleep")
    assert a["pid"] == first and a["reason"] == "swapped out for b (asleep)"
    assert a["sleep"]["preset"] == "cuda"
    # NVML (the fake) lists a checkpointed process nowhere: its 6 GiB are back, nothing residual.
    assert a["sleep"]["held_before"] == {GPU: 6 * GIB} and a["sleep"]["residual"] == {}
    assert calls(tmp_path) == [f"lock {first}", f"checkpoint {first}"]
    # Its work blocks while it is checkpointed (the stand-in honours the lock).
    assert (tmp_path / "cuda" / f"{first}.state").read_text() == "checkpointed"
    assert served_pid(chat(stack.url, "a")) == first
    assert calls(tmp_path) == [
        f"lock {first}", f"checkpoint {first}", f"restore {first}", f"unlock {first}",
    ]  # fmt: skip
    a = stack.model("a")
    assert a["state"] == "ready" and a["sleep"]["wakes"] == 1
    assert stack.model("b")["state"] == "stopped"
    _, swaps = stack.get_json("/api/swaps")
    kinds = [s["kind"] for s in swaps["swaps"] if s["model"] == "a"]
    assert kinds == ["start", "sleep", "wake"]


def _stops(stack: Stack, model: str) -> list[tuple[str, str]]:
    """Its stop records' causes, and why a sleep that was to be failed (`fell_back`)."""
    _, swaps = stack.get_json("/api/swaps")
    return [
        (s["cause"], s.get("fell_back", ""))
        for s in swaps["swaps"]
        if s["model"] == model and s["kind"] == "stop"
    ]


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("lock", "cuda_lock_timeout"),
        ("checkpoint", "cuda_checkpoint_failed"),
        ("memory", "host_memory_short"),
        ("unavailable", "cuda_unavailable"),
    ],
)
def test_a_sleep_that_cannot_checkpoint_stops_the_model_instead(
    stack_factory, tmp_path: Path, fault: str, cause: str
) -> None:
    env = cuda_env(tmp_path, available_gib=4 if fault == "memory" else 64)
    if fault == "unavailable":  # as on a host without the driver's checkpoint API
        env["SWAPD_CUDA_CHECKPOINT"] = "none"
    sleep = {"preset": "cuda", "lockTimeout": 0.2}
    stack: Stack = stack_factory(
        config({"a": llama_model("a", sleep), "b": plain_model("b")}), env=env
    )
    first = served_pid(chat(stack.url, "a"))
    if fault in ("lock", "checkpoint"):
        (tmp_path / "cuda").mkdir(exist_ok=True)
        (tmp_path / "cuda" / f"fail-{fault}").touch()
    chat(stack.url, "b")
    a = stack.model("a")
    assert a["state"] == "stopped" and a["pid"] is None
    assert a["reason"].startswith("its sleep failed, so it was stopped: ")
    expected = {
        "lock": [f"lock {first}"],
        # What the failed sleep took is given back before the stop.
        "checkpoint": [f"lock {first}", f"checkpoint {first}", f"unlock {first}"],
        "memory": [],
        "unavailable": [],
    }[fault]
    assert calls(tmp_path) == expected
    if fault == "memory":
        assert "too little for the checkpoint of its 6.00 GiB" in a["sleep"]["last_failure"]
    # The take-down was the swap's; it came to a stop for its own cause.
    assert _stops(stack, "a") == [("swap", cause)]
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert f'swapd_model_stops_total{{cause="{cause}",model="a"}} 1.0' in metrics
    assert 'swapd_model_sleeps_total{model="a",result="failed"} 1.0' in metrics
    # The next request starts it cold.
    assert served_pid(chat(stack.url, "a")) != first


def test_a_restore_that_fails_stops_the_model_and_starts_it_cold(
    stack_factory, tmp_path: Path
) -> None:
    stack: Stack = stack_factory(
        config({"a": llama_model("a"), "b": plain_model("b")}), env=cuda_env(tmp_path)
    )
    first = served_pid(chat(stack.url, "a"))
    chat(stack.url, "b")
    stack.wait_state("a", "asleep")
    (tmp_path / "cuda" / "fail-restore").touch()
    again = served_pid(chat(stack.url, "a"))
    assert again != first
    assert calls(tmp_path) == [f"lock {first}", f"checkpoint {first}", f"restore {first}"]
    a = stack.model("a")
    assert a["state"] == "ready" and "cuda restore of pid" in a["sleep"]["last_failure"]
    assert _stops(stack, "a") == [("cuda_restore_failed", "")]
    metrics = http_get(stack.url + "/metrics")[1].decode()
    assert 'swapd_model_stops_total{cause="cuda_restore_failed",model="a"} 1.0' in metrics
    assert 'swapd_model_wakes_total{model="a",result="failed"} 1.0' in metrics


def test_a_daemon_restart_adopts_it_asleep_and_its_wake_asks_the_driver_what_to_restore(
    stack_factory, tmp_path: Path
) -> None:
    """The new daemon has no record of what the old one checkpointed: its wake asks the driver
    (the stand-in's `state`) about the model's process tree, and restores and unlocks what is
    checkpointed."""
    stack: Stack = stack_factory(
        config({"a": llama_model("a"), "b": plain_model("b")}), env=cuda_env(tmp_path)
    )
    pid = served_pid(chat(stack.url, "a"))
    assert stack.swapd("sleep", "a").returncode == 0
    stack.kill_watcher("swapd-daemon")
    adopted = stack.wait_state("a", "asleep", timeout=30)
    assert adopted["pid"] == pid and adopted["reason"] == "adopted asleep"
    assert served_pid(chat(stack.url, "a")) == pid
    assert calls(tmp_path) == [
        f"lock {pid}",
        f"checkpoint {pid}",
        f"restore {pid}",
        f"unlock {pid}",
    ]
    assert stack.model("a")["state"] == "ready"
