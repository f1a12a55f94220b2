"""The request traces `trace_replay` replays (benchmarks/traces/*.jsonl) and the stand-in servers
of the models they name (benchmarks/traces/models.json), read into types, and the swapd config a
trace runs under.

A trace line is one request: `{"at": 12.5, "client": "agent1", "model": "architect", "kind":
"stream", "gen": 3.0}` and, where it waits for the answer to its client's previous line,
`"after": true, "think": 1.7`: it is sent `think` seconds after that answer came whole (its `at`
is then only its nominal time). `kind` is a `Kind`; `gen` is how long the stand-in takes over it
(a chat's generation, a ComfyUI job's run), 0 when absent (always for a `vllm` model: its
stand-in answers at once).

models.json gives each model its server (`llama`: tests/support/upstreams/fake_model.py,
listening after `start` seconds as llama-server does once its weights are loaded; `vllm`:
vllm_like.py with the `vllm` sleep preset, `start` its cold start and `wake` its wake; `comfyui`:
comfyui_like.py as `comfyui_auto` with the `comfyui` preset, `start` before it listens, its wake a
few ms as a real ComfyUI's /free). Every duration is multiplied by the run's `scale` (`--quick`).

A `llama` model holds `GB_PER_START_S` GB of the fake GPU per second of its start (a start reads
its weights at about that rate). `warm()` puts the llama models to sleep through the CUDA
checkpoint stand-in (`sleep: cuda`, which a tree before issue 39 does not have), whose copies run
at `COPY_GBPS` (PCIe 4.0 x16 as pinned copies reach it): a checkpoint or a restore then takes a
tenth of the model's start, the ratio of a vLLM's wake to its cold start above. No GPU measured
it here; `python -m benchmarks gpu_check` measures a real one where a GPU is lent.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tests.support.paths import UPSTREAMS

TRACES = Path(__file__).resolve().parent.parent / "traces"
GIB = 1024**3
GB_PER_START_S = 2.0
COPY_GBPS = 20.0


class Kind(StrEnum):
    CHAT = "chat"  # POST /v1/chat/completions, answered whole after `gen`
    STREAM = "stream"  # the same streamed: the first event at once, the rest over `gen`
    EMBEDDINGS = "embeddings"  # POST /v1/embeddings
    COMFYUI = "comfyui"  # a ComfyUI job from the tab: POST /comfyui/api/prompt, runs `gen`
    LOAD = "load"  # POST /api/models/load/<model>, as the UI's Load button


class Server(StrEnum):
    LLAMA = "llama"
    VLLM = "vllm"
    COMFYUI = "comfyui"


@dataclass(frozen=True)
class Request:
    index: int
    at: float
    client: str
    model: str
    kind: Kind
    gen: float = 0.0
    after: bool = False
    think: float = 0.0


@dataclass(frozen=True)
class Model:
    name: str
    server: Server
    start: float  # seconds from spawn to listening (a cold start)
    wake: float = 0.0  # seconds of a wake (a model with a sleep preset)

    def swap_in(self) -> float:
        """The most a swap back to it costs: its cold start (a wake is cheaper)."""
        return self.start


def trace_path(name: str) -> Path:
    """A trace by its name in benchmarks/traces/, or a file of one anywhere (`x.jsonl`)."""
    return Path(name) if name.endswith(".jsonl") else TRACES / f"{name}.jsonl"


def read_trace(name: str) -> list[Request]:
    path = trace_path(name)
    requests = []
    for index, line in enumerate(path.read_text().splitlines()):
        if line.strip():
            raw = json.loads(line)
            raw["kind"] = Kind(raw["kind"])
            requests.append(Request(index=index, **raw))
    return requests


def read_models() -> dict[str, Model]:
    raw = json.loads((TRACES / "models.json").read_text())
    return {
        name: Model(name, Server(m["server"]), float(m["start"]), float(m.get("wake", 0.0)))
        for name, m in raw.items()
        if not name.startswith("_")
    }


def trace_names() -> list[str]:
    return sorted(p.stem for p in TRACES.glob("*.jsonl"))


def _model_config(model: Model, scale: float) -> dict[str, Any]:
    start = f"{model.start * scale:.3f}"
    argv: list[str]
    config: dict[str, Any] = {"proxy": "http://127.0.0.1:${PORT}", "gpus": [0]}
    if model.server is Server.LLAMA:
        argv = [str(UPSTREAMS / "fake_model.py"), "--name", "${MODEL_ID}", "--listen-delay", start]
        argv += ["--gpu-mem", str(int(model.start * GB_PER_START_S * 1e9))]
    elif model.server is Server.VLLM:
        argv = [str(UPSTREAMS / "vllm_like.py"), "--name", "${MODEL_ID}", "--load-delay", start]
        argv += ["--wake-delay", f"{model.wake * scale:.3f}", "--gpu-mem", str(8 * GIB)]
        argv += ["--enable-sleep-mode"]
        config |= {"sleep": "vllm", "env": ["VLLM_SERVER_DEV_MODE=1"]}
    else:
        argv = [str(UPSTREAMS / "comfyui_like.py"), "--name", "${MODEL_ID}", "--listen-delay"]
        argv += [start, "--status-interval", "1", "--gpu-mem", str(6 * GIB)]
        config |= {"sleep": "comfyui", "checkEndpoint": "/"}
    config["cmd"] = shlex.join([sys.executable, *argv, "--port", "${PORT}"])
    return config


def swapd_config(
    trace: list[Request], models: dict[str, Model], scale: float, start_port: int
) -> dict[str, Any]:
    """The config both trees run a trace under: the trace's models, one at a time on one (fake)
    GPU, in keys the older tree knows too (`--new-config` adds to the current tree's alone)."""
    names = sorted({r.model for r in trace})
    longest = max(models[n].start for n in names) * scale
    return {
        "healthCheckTimeout": int(longest + 60),
        "startPort": start_port,
        "models": {name: _model_config(models[name], scale) for name in names},
    }


def warm(config: dict[str, Any], models: dict[str, Model]) -> dict[str, Any]:
    """`config` with its llama models asleep through the CUDA checkpoint (`sleep: cuda`)."""
    sleep = {
        name: {"sleep": "cuda"} for name in config["models"] if models[name].server is Server.LLAMA
    }
    return merged(config, {"models": sleep})


def warm_env(folder: str, scale: float) -> dict[str, str]:
    """The checkpoint stand-in's folder and copy rate (faster as the run is scaled down), on a
    host with 64 GiB of memory available (the daemon reads `SWAPD_MEMINFO` for it)."""
    meminfo = Path(folder, "meminfo")
    meminfo.write_text(f"MemTotal: {128 * 1024**2} kB\nMemAvailable: {64 * 1024**2} kB\n")
    return {
        "SWAPD_FAKE_CUDA_DIR": str(Path(folder, "cuda")),
        "SWAPD_FAKE_CUDA_GBPS": f"{COPY_GBPS / scale:g}",
        "SWAPD_MEMINFO": str(meminfo),
    }


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, mappings merged key by key (a model's keys under `models`)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
