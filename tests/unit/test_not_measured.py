"""Honest figures, formatting only: where nothing was measured (no GPU inventory) the sleep's log
line, `swapd status` and the UI's words say "not measured", and where NVML read a figure they
show it (the stack test, tests/stack/test_not_measured.py, holds the surfaces end to end)."""

from __future__ import annotations

from swapd.daemon.cli.operator import render_table
from swapd.daemon.machinery.sleep_proof import memory_words
from swapd.ipc.messages import StatusReply
from swapd.ipc.model_status import GpuInfo, ModelStatus, SleepStatus
from swapd.ipc.states import ModelState
from tests.support.ui_modules import evaluate, module_url, needs_node

GIB = 1024**3


def test_the_sleeps_log_line_says_what_was_not_measured() -> None:
    assert memory_words(None, None) == "not measured (no GPU inventory)"
    assert memory_words({"g": 8 * GIB}, None) == "8.00 GiB before, not measured now"
    assert memory_words({"g": 8 * GIB}, {"g": GIB // 2}) == "8.00 GiB before, 0.50 GiB now"
    # Measured and nothing held is a figure of its own: 0.00 GiB, because NVML said so.
    assert memory_words({}, {}) == "0.00 GiB before, 0.00 GiB now"


def reply(residual: dict[str, int] | None, gpus: tuple[GpuInfo, ...], backend: str) -> str:
    sleep = SleepStatus(preset="vllm", residual=residual, held_before=residual, sleeps=1)
    model = ModelStatus(model="a", state=ModelState.ASLEEP, sleep=sleep)
    status = StatusReply(
        id=1, instance="i", pid=1, uptime=1.0, models=(model,), gpus=gpus, gpu_backend=backend
    )
    return render_table(status, now=0.0)


def test_swapd_status_says_not_measured_without_an_inventory() -> None:
    text = reply(None, (), "none")
    assert "GPUs: not measured (no GPU inventory)" in text
    assert "a: sleep vllm; asleep, its GPU memory not measured (no GPU inventory)" in text
    assert "holding nothing" not in text


def test_swapd_status_shows_what_nvml_read() -> None:
    gpu = GpuInfo(index=0, uuid="gpu-0", name="H100", total_bytes=80 * GIB, used_bytes=0,
                  free_bytes=80 * GIB)  # fmt: skip
    assert "a: sleep vllm; asleep, holding 512 MiB on GPU 0" in reply(
        {"gpu-0": GIB // 2}, (gpu,), "nvml"
    )
    verified = SleepStatus(preset="vllm", sleeps=2, wakes=2, verified=2)
    model = ModelStatus(model="a", state=ModelState.READY, sleep=verified)
    status = StatusReply(id=1, instance="i", pid=1, uptime=1.0, models=(model,))
    assert "(2 sleeps, 2 wakes, 2 verified)" in render_table(status, now=0.0)
    # Measured, and it holds nothing: said as such.
    assert "asleep, holding nothing on the GPUs" in reply({}, (gpu,), "nvml")
    assert "GPUs: none (fake)" in reply({}, (), "fake")


@needs_node
def test_the_uis_words_for_a_figure_not_measured() -> None:
    script = (
        f"import * as m from {module_url('measured.js')};"
        "const show = (held) => 'shown';"
        "console.log(JSON.stringify([m.heldWords(null, show), m.heldWords({}, show),"
        " m.heldWords({g: 5}, show), m.noGpuWords('none'), m.noGpuWords(''),"
        " m.noGpuWords('fake')]));"
    )
    assert evaluate(script) == [
        "not measured (no GPU inventory)",
        "nothing on the GPUs",
        "shown",
        "no GPU inventory (no NVML): GPU memory not measured",
        "no GPU inventory (no NVML): GPU memory not measured",
        "no GPU reported by the fake backend",
    ]
