"""Learning footprints (daemon/machinery/footprints.py): attribution of NVML's process list to
models, peaks and persistence. The process lists here are written by hand in NVML's shape
(`GpuProcess`): no GPU on this machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from swapd.daemon.machinery import footprints
from swapd.daemon.machinery.footprints import Footprints, attribute, default_state_dir
from swapd.daemon.machinery.gpu_backend import GpuProcess

GIB = 1024**3


def proc(pid: int, gpu: int, gib: float) -> GpuProcess:
    return GpuProcess(gpu, f"GPU-{gpu}", pid, int(gib * GIB))


def test_attribution_sums_a_model_tree_and_names_the_rest() -> None:
    usage = attribute(
        [proc(10, 0, 2), proc(11, 0, 1), proc(10, 1, 4), proc(99, 0, 3)],
        {"a": {10, 11}},
        {},
    )
    assert usage.by_model == {"a": {"gpu-0": 3 * GIB, "gpu-1": 4 * GIB}}
    assert usage.foreign == {"gpu-0": 3 * GIB}
    assert usage.foreign_holders["gpu-0"][0].startswith("pid 99 (")


def test_a_container_process_goes_to_the_only_container_model_on_its_gpu(monkeypatch) -> None:
    monkeypatch.setattr(footprints, "container_id", lambda pid: "ab" * 32 if pid == 50 else None)
    usage = attribute([proc(50, 0, 5), proc(51, 0, 1)], {}, {"vllm": {"gpu-0"}})
    assert usage.by_model == {"vllm": {"gpu-0": 5 * GIB}}
    assert usage.foreign == {"gpu-0": 1 * GIB}  # not in a container: not the model's
    # Two container models on one GPU: which one holds it cannot be told, so neither does.
    both = attribute([proc(50, 0, 5)], {}, {"x": {"gpu-0"}, "y": {"gpu-0"}})
    assert both.by_model == {} and both.foreign == {"gpu-0": 5 * GIB}


def test_container_ids_are_read_from_the_cgroup(tmp_path: Path, monkeypatch) -> None:
    scope = "0::/system.slice/docker-" + "0123456789ab" * 5 + "0123.scope\n"
    assert footprints._CONTAINER.search(scope) is not None
    assert footprints._CONTAINER.search("0::/user.slice/user-1000.slice/session-2.scope") is None
    assert footprints.container_id(os.getpid()) is None  # this test runs in no container


def test_peaks_persist_and_a_changed_definition_starts_afresh(tmp_path: Path) -> None:
    path = tmp_path / "state" / "footprints.json"
    book = Footprints(path)
    assert [g.now for g in book.observe("a", "h1", {"gpu-0": 2 * GIB})] == [2 * GIB]
    assert book.observe("a", "h1", {"gpu-0": GIB}) == []  # below the peak: nothing new
    book.save()
    assert json.loads(path.read_text())["models"]["a"]["peak"] == {"gpu-0": 2 * GIB}
    again = Footprints(path)
    learned = again.learned("a", "h1")
    assert learned is not None and learned.need() == (2 * GIB,)
    assert again.learned("a", "h2") is None  # its cmd changed: not this definition's footprint
    again.observe("a", "h2", {"gpu-1": GIB})
    assert again.learned("a", "h2").peak == {"gpu-1": GIB}  # type: ignore[union-attr]


def test_a_malformed_state_file_is_reported_and_learning_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "footprints.json"
    path.write_text("{not json")
    assert Footprints(path).models == {}
    assert "learning afresh" in caplog.text


def test_the_state_directory_follows_systemd_then_xdg_then_home() -> None:
    assert default_state_dir({"STATE_DIRECTORY": "/var/lib/swapd"}) == Path("/var/lib/swapd")
    assert default_state_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/swapd")
    assert default_state_dir({}) == Path.home() / ".local" / "state" / "swapd"
