"""Writes the traces of `python -m benchmarks trace_replay` (the *.jsonl beside this file), from
fixed seeds: `python benchmarks/traces/make_traces.py` gives the same files byte for byte. The
files are committed; change a trace here and commit what it writes.

Each line is a request (benchmarks/harness/trace_files.py says the format). Times are seconds at
full scale: what the users of llama-swap's issues describe, not measured traffic.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

Line = dict[str, Any]


def line(at: float, client: str, model: str, kind: str, gen: float = 0.0, **more: Any) -> Line:
    out: Line = {"at": round(at, 3), "client": client, "model": model, "kind": kind}
    if gen:
        out["gen"] = round(gen, 3)
    return out | more


def after(prev_at: float, think: float, client: str, model: str, kind: str, gen: float) -> Line:
    """A line sent `think` s after the answer to the client's previous one (at: nominal)."""
    return line(prev_at + think, client, model, kind, gen, after=True, think=round(think, 3))


def agent_pingpong(rng: random.Random) -> list[Line]:
    """(a) Two coding agents, each Aider's architect/editor ping-pong (llama-swap #19): the
    architect plans, the editor applies it in one to three requests, 1-3 s of the agent's own
    work between answers; the second agent starts while the first is mid-turn."""
    lines = []
    for client, start in (("agent1", 0.0), ("agent2", 4.0)):
        at = start
        first = True
        for _turn in range(5):
            gen = rng.uniform(2.0, 4.0)
            if first:
                lines.append(line(at, client, "architect", "stream", gen))
                first = False
            else:
                lines.append(after(at, rng.uniform(1, 3), client, "architect", "stream", gen))
            at = lines[-1]["at"] + gen
            for _edit in range(rng.randint(1, 3)):
                gen = rng.uniform(1.0, 2.0)
                lines.append(after(at, rng.uniform(1, 3), client, "editor", "chat", gen))
                at = lines[-1]["at"] + gen
    return lines


def chat_embeddings(rng: random.Random) -> list[Line]:
    """(b) A person chatting while a background job embeds documents: batches of requests, one
    after another's answer, the batches a few seconds apart."""
    lines = []
    at = 0.0
    lines.append(line(at, "user", "chat", "stream", rng.uniform(2, 4)))
    for _ in range(7):
        gen = rng.uniform(2, 4)
        lines.append(after(lines[-1]["at"] + gen, rng.uniform(3, 8), "user", "chat", "stream", gen))
    for batch in range(4):
        at = 5.0 + batch * 12.0
        lines.append(line(at, "indexer", "embed", "embeddings"))
        for _ in range(rng.randint(6, 12)):
            lines.append(after(lines[-1]["at"], 0.05, "indexer", "embed", "embeddings", 0.0))
    return lines


def openwebui_task(rng: random.Random) -> list[Line]:
    """(c) Open WebUI with a task model: a new chat sends the title request to the task model,
    then, 90 ms later, the streamed chat to the chat model; the follow-ups in that chat are
    streamed chats sent after the answer and the person's reading and typing."""
    lines = []
    for client, start in (("alice", 0.0), ("bob", 7.0)):
        at = start
        for _chat in range(3):
            lines.append(line(at, client, "task", "chat", 0.3))
            gen = rng.uniform(3, 5)
            lines.append(line(at + 0.09, client, "chat", "stream", gen))
            at = at + 0.09 + gen
            for _follow in range(rng.randint(1, 2)):
                think = rng.uniform(4, 8)
                gen = rng.uniform(3, 5)
                lines.append(after(at, think, client, "chat", "stream", gen))
                at = lines[-1]["at"] + gen
            at += rng.uniform(5, 10)
    return sorted(lines, key=lambda x: x["at"])


def comfyui_chat(rng: random.Random) -> list[Line]:
    """(d) ComfyUI jobs queued from an open tab while a person chats with a model on the same
    GPU (llama-swap #588, smaller): a job every 15-25 s, each running 4-8 s. The tab's websocket
    and its GET polls are not replayed: they neither start nor wake a model."""
    lines = []
    at = 2.0
    while at < 60:
        lines.append(line(at, "tab", "comfyui_auto", "comfyui", rng.uniform(4, 8)))
        at += rng.uniform(15, 25)
    lines.append(line(0.0, "user", "chat", "stream", rng.uniform(2, 4)))
    at = 0.0
    for _ in range(9):
        gen = rng.uniform(2, 4)
        lines.append(after(at + gen, rng.uniform(3, 8), "user", "chat", "stream", gen))
        at = lines[-1]["at"]
    return lines


DAY_MODELS = ("chat", "coder", "embed", "task", "reasoner", "vllm-big")


def day(rng: random.Random) -> list[Line]:
    """(e) A day of six users over six models, compressed into two minutes: each user opens a
    session now and then with a model drawn by popularity (Zipf, s = 1.2: `chat` most, `vllm-big`
    least), sends one to four requests with 2-10 s between answer and next question, then is
    idle (exponential, mean 25 s). Now and then someone presses Load in the UI first (the user
    of `vllm-big` always does, the first time)."""
    weights = [1 / (rank**1.2) for rank in range(1, len(DAY_MODELS) + 1)]
    lines = []
    for user in range(6):
        client = f"user{user + 1}"
        at = rng.uniform(0, 20)
        first = True
        while at < 110:
            # Each user's first session is with a model of its own, so the day has all six.
            model = DAY_MODELS[user] if first else rng.choices(DAY_MODELS, weights)[0]
            kind = "embeddings" if model == "embed" else rng.choice(("chat", "stream"))
            gen = 0.0 if kind == "embeddings" else rng.uniform(1, 4)
            if model == "vllm-big":
                gen = 0.0  # the vLLM stand-in answers at once, whatever it is asked
            if rng.random() < 0.05 or (first and model == "vllm-big"):
                lines.append(line(at, client, model, "load"))
                lines.append(after(at, rng.uniform(2, 5), client, model, kind, gen))
            else:
                lines.append(line(at, client, model, kind, gen))
            first = False
            at = lines[-1]["at"] + gen
            for _ in range(rng.randint(0, 3)):
                lines.append(after(at, rng.uniform(2, 10), client, model, kind, gen))
                at = lines[-1]["at"] + gen
            at += rng.expovariate(1 / 25)
    return lines


TRACES = {
    "a_agent_pingpong": agent_pingpong,
    "b_chat_embeddings": chat_embeddings,
    "c_openwebui_task": openwebui_task,
    "d_comfyui_chat": comfyui_chat,
    "e_day": day,
}


def render(name: str) -> str:
    """The trace's file, as written from its seed."""
    seed = 37 + list(TRACES).index(name)
    return "".join(json.dumps(x) + "\n" for x in TRACES[name](random.Random(seed)))


def main() -> None:
    for name in TRACES:
        text = render(name)
        (HERE / f"{name}.jsonl").write_text(text)
        print(f"{name}: {text.count(chr(10))} requests")


if __name__ == "__main__":
    main()
