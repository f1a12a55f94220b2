"""swapd's model states as llama-swap's clients read them, in the payloads shaped as llama-swap's
(`/api/events` `modelStatus`, `/running`).

llama-swap knows `ready|starting|stopping|stopped|shutdown`, and its web UI acts on them: Load is
sent for `stopped`, Unload for `ready`, `starting` and `stopping` show a spinner. swapd's own
states map onto that set by what they mean to such a client:

* `failed` is `stopped`: llama-swap returns a failed start to `stopped`, and the next request (or
  the UI's Load) tries again, as swapd's does;
* `draining` is `stopping`: the model admits nothing new and stops once its requests are done
  (llama-swap has no drain; its evictee goes straight to `stopping`);
* `sleeping` is `stopping` and `asleep` is `stopped`: the model gives its GPU memory back and a
  request (or the UI's Load) brings it back, as for a stopped one; `waking` is `starting`.
  Beside `state`, `sleepMode` says whether it can sleep, as llmsnap (llama-swap's fork with
  sleep) says it: `enable` or `disable`.

swapd's own state stays beside it, as `swapd_state`, and in swapd's own endpoints
(`/api/status`, `swapd status`)."""

from __future__ import annotations

from typing import Any

from ...ipc.routing_table import RouteModel
from ...ipc.states import ModelState
from . import capabilities

# swapd's state -> llama-swap's word for it.
_LLAMA_STATES: dict[str, str] = {
    ModelState.STOPPED: "stopped",
    ModelState.STARTING: "starting",
    ModelState.READY: "ready",
    ModelState.DRAINING: "stopping",
    ModelState.STOPPING: "stopping",
    ModelState.FAILED: "stopped",
    # A model put to sleep keeps its process but not its GPU memory: a request wakes it.
    ModelState.SLEEPING: "stopping",
    ModelState.ASLEEP: "stopped",
    ModelState.WAKING: "starting",
}


def llama_state(state: str) -> str:
    """The llama-swap state a client of its shapes sees for swapd's `state`."""
    return _LLAMA_STATES.get(state, "stopped")


def model_item(route: RouteModel, state: str) -> dict[str, Any]:
    """One model of llama-swap's `modelStatus` event: its `apiModel`, with the capability flags
    and context length `/v1/models` shows (the UI's tags and its model Details tab)."""
    item: dict[str, Any] = {
        "id": route.id,
        "name": route.name or "",
        "description": route.description or "",
        "state": llama_state(state),
        "swapd_state": state,
        "unlisted": route.unlisted,
        "peerID": "",
        "sleepMode": "enable" if route.sleep is not None else "disable",
    }
    if route.aliases:
        item["aliases"] = list(route.aliases)
    if route.capabilities is not None:
        rendered = capabilities.render(route.capabilities)
        if "capabilities" in rendered:
            item["capabilities"] = rendered["capabilities"]
        if "context_length" in rendered:
            item["context_length"] = rendered["context_length"]
    return item
