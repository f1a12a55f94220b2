"""`StatusReply` as a JSON document: what `swapd status --json` prints and `GET /api/status`
answers (one shape for both)."""

from __future__ import annotations

from typing import Any

import msgspec

from .messages import StatusReply


def status_json(reply: StatusReply) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(reply)
    data.pop("id", None)
    data.pop("type", None)
    for model in data["models"]:
        model.pop("type", None)
        # The loading streams' step, for the proxies only: the document keeps its shape.
        model.pop("starting", None)
    return data
