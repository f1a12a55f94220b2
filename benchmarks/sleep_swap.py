"""Swaps with sleep against swaps with stop and start, and against a wake done by hand.

Two models take turns on the GPU. A request for the one that is not on it is timed from the
request sent to the first byte of its (streamed) answer, in three ways side by side in one run,
in rotating order each round:

* **sleep**: swapd, both models with the `vllm` sleep preset: the swap puts the other model to
  sleep (its sleep call, the check that its memory came back) and wakes this one (its wake call,
  its health check);
* **cold**: swapd, the same models without a sleep setting: the swap stops the other model and
  starts this one from cold;
* **floor**: no swapd: the same two servers run directly, and the client itself sends the other's
  sleep call, this one's wake call, then its request: what a person who knows the servers would do
  by hand, the least a swap by sleep can cost.

The servers are the vLLM stand-in (tests/support/upstreams/vllm_like.py, vLLM's sleep endpoints
as vLLM documents them) with a cold start of `--load` seconds and a wake of `--wake` seconds
(default 10x apart, as a real vLLM's tens of seconds to load against its second or two to wake),
and their memory on a fake GPU (SWAPD_GPU_BACKEND=fake), as NVML would report it.

Targets (benchmarks/targets.py): the sleep swap over the floor (median), and how many times
faster than cold it is (median ratio per round).

`--gpu` (on a machine with a GPU and NVML): for each preset given a command (`--vllm-cmd`,
`--vllm2-cmd` for level 2, `--sglang-cmd`, `--comfyui-cmd`; `{port}` is the port to listen on),
swapd starts it, reads what NVML says its processes hold awake, puts it to sleep, and prints what
they still hold asleep (its residual), the sleep's and the wake's seconds; `--fake` does the same
with the stand-ins on the fake GPU, to check the script without one. docs/guides/sleep-and-wake.md
says how to run it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.paths import UPSTREAMS
from tests.support.ports import free_port, free_port_range

from .harness.report import Report
from .harness.swapd_run import RunningSwapd

VLLM_LIKE = UPSTREAMS / "vllm_like.py"
COMFYUI_LIKE = UPSTREAMS / "comfyui_like.py"
GIB = 1024**3
MODELS = ("bench-a", "bench-b")


# ------------------------------------------------------------------------------ the servers


def stand_in(args: argparse.Namespace, port: str, name: str) -> list[str]:
    return [
        sys.executable, str(VLLM_LIKE), "--port", port, "--name", name,
        "--load-delay", f"{args.load:g}", "--wake-delay", f"{args.wake:g}",
        "--sleep-delay", f"{args.sleep:g}", "--gpu-mem", str(8 * GIB),
        "--residual", str(GIB // 2), "--enable-sleep-mode",
    ]  # fmt: skip


def swapd_config(args: argparse.Namespace, sleep: bool) -> str:
    models = {}
    for name in MODELS:
        model: dict[str, Any] = {
            "cmd": shlex.join(stand_in(args, "${PORT}", name)),
            "env": ["VLLM_SERVER_DEV_MODE=1"],
            "proxy": "http://127.0.0.1:${PORT}",
            "gpus": [0],
            "unloadTimeout": 5,
        }
        if sleep:
            model["sleep"] = "vllm"
            if args.no_wake_probe:
                model["wakeProbe"] = "off"
        models[name] = model
    start = free_port_range(2)
    return json.dumps({"healthCheckTimeout": 60, "startPort": start, "models": models})


def gpu_env(total_gib: int = 80) -> dict[str, str]:
    mem_dir = tempfile.mkdtemp(prefix="swapd-bench-gpumem-")
    return {
        **os.environ,
        "SWAPD_GPU_BACKEND": "fake",
        "SWAPD_FAKE_GPUS": json.dumps([{"name": "Fake 0", "total_bytes": total_gib * GIB}]),
        "SWAPD_FAKE_GPU_MEM_DIR": mem_dir,
        "SWAPD_FAKE_GPU_SCOPE": mem_dir,
    }


# ----------------------------------------------------------------------------- the requests


def body(model: str) -> dict[str, Any]:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": "ping"}]}


async def first_byte(session: aiohttp.ClientSession, base: str, model: str) -> float:
    """Seconds from the request sent to the first byte of the answer (the rest is read too)."""
    began = time.perf_counter()
    async with session.post(f"{base}/v1/chat/completions", json=body(model)) as resp:
        first = await resp.content.readany()
        took = time.perf_counter() - began
        rest = await resp.read()
        if resp.status != 200 or b"serving" not in first + rest:
            raise RuntimeError(f"{model}: HTTP {resp.status}: {(first + rest)[:300]!r}")
    return took


async def post(session: aiohttp.ClientSession, url: str) -> None:
    async with session.post(url) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {(await resp.text())[:300]}")


class Direct:
    """The two servers run by hand, for the floor."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str]) -> None:
        self.args = args
        # On GPU 0 of the fake, as swapd's `gpus: [0]` puts its own.
        self.env = {**env, "CUDA_VISIBLE_DEVICES": "0"}
        self.ports = {name: free_port() for name in MODELS}
        self.procs: list[asyncio.subprocess.Process] = []

    async def __aenter__(self) -> Direct:
        for name, port in self.ports.items():
            argv = stand_in(self.args, str(port), name)
            proc = await asyncio.create_subprocess_exec(
                *argv, env=self.env, stdout=asyncio.subprocess.DEVNULL, start_new_session=True
            )
            self.procs.append(proc)
        async with aiohttp.ClientSession() as session:
            for port in self.ports.values():
                await healthy(session, f"http://127.0.0.1:{port}", 60)
            # Both start awake; the one not on the GPU is put to sleep, as swapd would have it.
            await post(session, self.url(MODELS[1]) + "/sleep?level=1")
        return self

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    async def swap_to(self, session: aiohttp.ClientSession, name: str, other: str) -> float:
        """The other's sleep, this one's wake, then the request: timed from the first call."""
        began = time.perf_counter()
        await post(session, self.url(other) + "/sleep?level=1")
        await post(session, self.url(name) + "/wake_up")
        asked = time.perf_counter()
        return asked - began + await first_byte(session, self.url(name), name)

    async def __aexit__(self, *exc: object) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            await proc.wait()


async def healthy(session: aiohttp.ClientSession, base: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(base + "/health") as resp:
                if resp.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{base} never became healthy")
        await asyncio.sleep(0.01)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.1f} ms"


async def compare(args: argparse.Namespace, report: Report) -> int:
    env = gpu_env()
    times: dict[str, list[float]] = {"sleep": [], "cold": [], "floor": []}
    with (
        RunningSwapd(swapd_config(args, sleep=True), env=env, start_timeout=60) as asleep,
        RunningSwapd(swapd_config(args, sleep=False), env=env, start_timeout=60) as cold,
    ):
        async with Direct(args, env) as direct, aiohttp.ClientSession() as session:
            stacks = {"sleep": asleep, "cold": cold}
            # Warm-up: each model once through each swapd (the first starts are cold for both).
            for name in (*MODELS, MODELS[0]):
                for swapd in stacks.values():
                    await first_byte(session, swapd.url, name)
            await direct.swap_to(session, MODELS[0], MODELS[1])
            for i in range(args.rounds):
                target, other = (MODELS[1], MODELS[0]) if i % 2 == 0 else MODELS
                order = ["sleep", "cold", "floor"]
                order = order[i % 3 :] + order[: i % 3]
                for way in order:
                    if way == "floor":
                        times[way].append(await direct.swap_to(session, target, other))
                    else:
                        times[way].append(await first_byte(session, stacks[way].url, target))
            phases = await sleep_phases(session, asleep.url)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"stand-ins: cold start {args.load:g} s, wake {args.wake:g} s, sleep {args.sleep:g} s; "
        f"{args.rounds} swaps each; load average {load} on {os.cpu_count()} CPUs"
    )
    med = {way: statistics.median(values) for way, values in times.items()}
    for way, label in (
        ("sleep", "swapd, sleep and wake"),
        ("cold", "swapd, stop and cold start"),
        ("floor", "by hand: sleep, wake, request"),
    ):
        print(f"{label:32s} median {ms(med[way])}  (min {ms(min(times[way]))})")
    ratios = [c / s for c, s in zip(times["cold"], times["sleep"], strict=True)]
    over = [s - f for s, f in zip(times["sleep"], times["floor"], strict=True)]
    ratio = statistics.median(ratios)
    overhead = statistics.median(over)
    print(f"sleep swaps faster than cold ones: median {ratio:.1f}x (per round)")
    print(f"sleep swap over the floor:         median {overhead * 1e3:+.1f} ms (per round)")
    print(f"where a sleep swap's time goes (swapd's swap log, medians): {phases}")
    print("per round (ms): sleep / cold / floor")
    for row in zip(times["sleep"], times["cold"], times["floor"], strict=True):
        print("  " + " ".join(f"{x * 1e3:8.1f}" for x in row))
    report.figure("first_byte_ms", {way: [t * 1e3 for t in ts] for way, ts in times.items()})
    report.check("over_floor", overhead * 1e3)
    report.check("vs_cold", ratio)
    return 0


async def sleep_phases(session: aiohttp.ClientSession, base: str) -> str:
    async with session.get(base + "/api/swaps") as resp:
        records = (await resp.json())["swaps"]
    wakes = [r for r in records if r["kind"] == "wake"]
    sleeps = [r for r in records if r["kind"] == "sleep"]
    if not wakes:
        return "(no wake recorded)"

    def median(rs: list[dict[str, Any]], name: str) -> str:
        values = [r["phases"].get(name, 0.0) for r in rs]
        return f"{statistics.median(values) * 1e3:.1f}" if values else "-"

    return (
        f"the other's drain {median(sleeps, 'drain')} ms and sleep {median(sleeps, 'sleep')} ms "
        f"(its calls and the release check); this one's wake {median(wakes, 'wake')} ms (its "
        f"calls and health check) and its wakeProbe {median(wakes, 'verify')} ms (0: off)"
    )


# --------------------------------------------------------------------------------- --gpu mode


def preset_commands(args: argparse.Namespace) -> dict[str, str]:
    """Preset -> the command that starts its server (`{port}` filled by swapd's `${PORT}`)."""
    if args.fake:
        py = shlex.quote(sys.executable)
        vllm = (
            f"{py} {VLLM_LIKE} --port {{port}} --gpu-mem {8 * GIB} --residual {GIB // 2}"
            " --enable-sleep-mode"
        )
        comfy = f"{py} {COMFYUI_LIKE} --port {{port}} --gpu-mem {6 * GIB} --job-steps 1"
        return {"vllm": vllm, "vllm-level2": vllm, "comfyui": comfy}
    given = {
        "vllm": args.vllm_cmd,
        "vllm-level2": args.vllm2_cmd,
        "sglang": args.sglang_cmd,
        "comfyui": args.comfyui_cmd,
    }
    return {preset: cmd for preset, cmd in given.items() if cmd}


def gpu_config(commands: dict[str, str], fake: bool) -> str:
    models = {}
    for preset, cmd in commands.items():
        models[f"gpu-{preset}"] = {
            "cmd": cmd.replace("{port}", "${PORT}"),
            "proxy": "http://127.0.0.1:${PORT}",
            "checkEndpoint": "/" if preset == "comfyui" else "/health",
            "env": ["VLLM_SERVER_DEV_MODE=1"],
            "sleep": preset,
            "unloadTimeout": 30,
            **({"gpus": [0]} if fake else {}),
        }
    start = free_port_range(len(models))
    return json.dumps({"healthCheckTimeout": 900, "startPort": start, "models": models})


def status(swapd: RunningSwapd) -> dict[str, dict[str, Any]]:
    argv = [sys.executable, "-m", "swapd.daemon.cli", "status", "--json"]
    out = subprocess.run(
        [*argv, "--run-dir", str(swapd.run_dir)], capture_output=True, text=True, check=True
    ).stdout
    return {m["model"]: m for m in json.loads(out)["models"]}


def call(url: str, data: dict[str, Any] | None = None, timeout: float = 900) -> int:
    payload = json.dumps(data).encode() if data is not None else b""
    request = urllib.request.Request(
        url, data=payload, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def residuals(args: argparse.Namespace, report: Report) -> int:
    commands = preset_commands(args)
    if not commands:
        print("--gpu needs at least one of --vllm-cmd, --vllm2-cmd, --sglang-cmd, --comfyui-cmd")
        return 2
    env = gpu_env() if args.fake else None
    rows = []
    with RunningSwapd(gpu_config(commands, args.fake), env=env, start_timeout=60) as swapd:
        for preset in commands:
            model = f"gpu-{preset}"
            if call(f"{swapd.url}/api/models/load/{model}") != 200:
                rows.append((preset, "did not start: see the swapd log", swapd.log))
                continue
            if preset == "comfyui":  # a job, so its models are on the GPU before the sleep
                base = status(swapd)[model]["upstream"]
                workflow = (
                    json.loads(args.comfyui_workflow.read_text()) if args.comfyui_workflow else {}
                )
                call(f"{base}/api/prompt", {"prompt": workflow, "client_id": "bench"})
                time.sleep(args.comfyui_job_seconds)
            code = call(f"{swapd.url}/api/models/sleep/{model}")
            st = status(swapd)[model]
            sleep = st.get("sleep") or {}
            before = sum((sleep.get("held_before") or {}).values())
            left = sum((sleep.get("residual") or {}).values())
            if code != 200:
                rows.append((preset, f"sleep failed: {sleep.get('last_failure')}", ""))
                continue
            t = time.perf_counter()
            call(f"{swapd.url}/api/models/load/{model}")
            woke = time.perf_counter() - t
            rows.append(
                (
                    preset,
                    f"awake {before / GIB:6.2f} GiB, asleep {left / GIB:6.2f} GiB "
                    f"(kept {100 * left / before if before else 0:4.1f} %)",
                    f"sleep {sleep.get('last_sleep_s') or 0:.2f} s, wake {woke:.2f} s",
                )
            )
            call(f"{swapd.url}/api/models/unload/{model}")
    kind = "fake GPU, stand-ins" if args.fake else "NVML"
    print(f"residual GPU memory after each preset's sleep ({kind}):")
    for row in rows:
        print("  " + "  ".join(str(x) for x in row))
    report.figure("residuals", [[str(x) for x in row] for row in rows])
    return 0


def main(argv: list[str], report: Report) -> int:
    parser = argparse.ArgumentParser("python -m benchmarks sleep_swap", description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--load", type=float, default=2.5, help="the stand-ins' cold start (s)")
    parser.add_argument("--wake", type=float, default=0.25, help="the stand-ins' wake (s)")
    parser.add_argument("--sleep", type=float, default=0.02, help="the stand-ins' sleep (s)")
    parser.add_argument(
        "--no-wake-probe", action="store_true", help="wakeProbe: off (what the probe costs)"
    )
    parser.add_argument("--gpu", action="store_true", help="the residual after each preset's sleep")
    parser.add_argument("--fake", action="store_true", help="--gpu with stand-ins on a fake GPU")
    for preset in ("vllm", "vllm2", "sglang", "comfyui"):
        parser.add_argument(f"--{preset}-cmd", default=None, help=f"--gpu: the {preset} server")
    parser.add_argument(
        "--comfyui-workflow",
        type=Path,
        help="--gpu: an API-format workflow to run before its sleep",
    )
    parser.add_argument("--comfyui-job-seconds", type=float, default=2.0, help="how long it runs")
    args = parser.parse_args(argv)
    if args.gpu or args.fake:
        return residuals(args, report)
    return asyncio.run(compare(args, report))
