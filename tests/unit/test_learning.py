"""The daemon's learning (issue 37 item 6, daemon/observe/learning.py): the activity log's
records are learned; after A -> B -> A -> B a request for A reads B's weight files ahead (one
model at a time, only when they fit in half of MemAvailable, not when B is loaded); with
`learn.enabled: false` nothing is learned or read ahead; the `learn` and `weights` keys."""

from __future__ import annotations

from pathlib import Path

from swapd.daemon.config import Config, load_config_text
from swapd.daemon.observe.learning import Learning
from swapd.ipc.activity import ActivityRecord
from swapd.ipc.states import ModelState
from tests.support.models import Clock, model


def _record(model_id: str, at: float) -> ActivityRecord:
    return ActivityRecord(
        timestamp=at,
        model=model_id,
        route="model",
        method="POST",
        req_path="/v1/chat/completions",
        resp_status_code=200,
        duration_ms=10.0,
    )


def _config(tmp_path: Path, learn: bool = True) -> Config:
    weights = tmp_path / "b.gguf"
    weights.write_bytes(b"w" * 8192)
    models = {
        "a": model("a"),
        "b": model("b", cmd=("llama-server", "-m", str(weights))),
    }
    return Config(models=models, learn=learn, learn_prefetch=learn)


def _ping_pong(learning: Learning) -> None:
    for i, name in enumerate("abab"):
        learning.records([_record(name, 1000.0 + i)])


def test_b_follows_a_and_its_files_are_read_ahead(tmp_path: Path) -> None:
    states: dict[str, ModelState] = {"a": ModelState.READY, "b": ModelState.STOPPED}
    learning = Learning(_config(tmp_path), states.get, clock=Clock(1004.0))
    _ping_pong(learning)
    learning.records([_record("a", 1004.0)])
    assert learning._reading is not None
    learning._reading.join(timeout=30)
    when, asked = learning.prefetched["b"]
    assert (when, asked) == (1004.0, 8192)
    shown = learning.learned("a", idle=None, within=0.0)
    assert shown is not None and shown.likely_next == "b"
    assert [f.model for f in shown.followers] == ["b"]
    assert learning.sample() == ["b"]  # a names no file
    assert learning.cached["b"].size == 8192 and "a" not in learning.cached


def test_no_read_ahead_for_a_loaded_model_or_without_room(tmp_path: Path) -> None:
    states = {"a": ModelState.READY, "b": ModelState.ASLEEP}
    learning = Learning(_config(tmp_path), states.get, clock=Clock(1004.0))
    _ping_pong(learning)
    assert learning.prefetch_after("a") is None
    states["b"] = ModelState.STOPPED
    learning.memory = lambda: (1000, 10_000)  # 8 KiB to read, 1000 bytes available
    assert learning.prefetch_after("a") == "b"
    assert learning._reading is not None
    learning._reading.join(timeout=30)
    assert learning.prefetched["b"][1] == 0  # asked, refused: nothing read


def test_learning_off_learns_and_reads_nothing(tmp_path: Path) -> None:
    states = {"a": ModelState.READY, "b": ModelState.STOPPED}
    learning = Learning(_config(tmp_path, learn=False), states.get, clock=Clock(1004.0))
    _ping_pong(learning)
    learning.records([_record("a", 1004.0)])
    assert learning.traffic.models == {}
    assert learning._reading is None and learning.prefetched == {}
    assert learning.learned("a", idle=None, within=0.0) is None
    assert learning.back_chance("a", 10.0, 60.0, 1004.0) is None


def test_the_learn_and_weights_keys() -> None:
    text = """
learn:
  prefetch: false
models:
  m:
    cmd: llama-server --port ${PORT} -m /w/a.gguf
    weights: [/w/b.bin, /w/c.bin]
"""
    config = load_config_text(text)
    assert (config.learn, config.learn_prefetch) == (True, False)
    assert config.models["m"].weights == ("/w/b.bin", "/w/c.bin")
    plain = "models:\n  m:\n    cmd: x --port ${PORT}\n"
    off = load_config_text("learn: {enabled: false}\n" + plain)
    assert (off.learn, off.learn_prefetch) == (False, False)
    assert off.models["m"].weights == ()
    default = load_config_text(plain)
    assert (default.learn, default.learn_prefetch) == (True, True)


def test_history_from_before_a_restart_is_learned_not_read_ahead(tmp_path: Path) -> None:
    states = {"a": ModelState.STOPPED, "b": ModelState.STOPPED}
    learning = Learning(_config(tmp_path), states.get, clock=Clock(1004.0))
    learning.records([_record(n, 1000.0 + i) for i, n in enumerate("ababa")], prefetch=False)
    shown = learning.learned("a", idle=None, within=0.0)
    assert shown is not None and shown.likely_next == "b"
    assert learning._reading is None and learning.prefetched == {}
