"""Lines for the combined log's tests: what a model served, and when the proxy started."""

from __future__ import annotations


def started(model: str) -> str:
    return f"[{model}] fake model {model} starting on port"


def served(model: str) -> str:
    return f"model={model} "
