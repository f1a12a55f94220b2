"""What a loading stream says a starting model waits for (proxy/loading.py `Progress.phase`): the
spawn or the health check, told by the daemon as a typed step (`ModelStatus.starting`), never
read from the words of its reason."""

from __future__ import annotations

from types import SimpleNamespace

from swapd.ipc.model_status import ModelStatus
from swapd.ipc.routing_table import RouteModel
from swapd.ipc.states import HEALTH_CHECK_REASON, KV_RESTORE_REASON, ModelState, StartStep
from swapd.proxy.loading import Progress
from swapd.proxy.mirror.state import ModelRuntime


def phase(status: ModelStatus) -> str:
    route = RouteModel(id="m", upstream="http://127.0.0.1:1", concurrency_limit=10, ttl=60)
    rt = ModelRuntime(id="m", route=route, limit=10, status=status, state=status.state)
    ctx = SimpleNamespace(state=SimpleNamespace(runtimes={"m": rt}))
    return Progress({}, ctx, rt, "m").phase() or ""  # type: ignore[arg-type]


def test_the_health_check_is_told_by_its_step_not_by_the_words() -> None:
    starting = ModelState.STARTING
    health = ModelStatus(model="m", state=starting, starting=StartStep.HEALTH_CHECK)
    assert phase(health) == "m is running; waiting for its health check"
    # The words alone (a reworded reason, or a spawn that says them) do not make it one.
    worded = ModelStatus(
        model="m", state=starting, reason=HEALTH_CHECK_REASON, starting=StartStep.SPAWNING
    )
    assert phase(worded) == "starting m"
    assert phase(ModelStatus(model="m", state=starting)) == "starting m"


def test_a_restore_of_the_conversations_cache_is_told() -> None:
    restoring = ModelStatus(
        model="m",
        state=ModelState.STARTING,
        reason=KV_RESTORE_REASON,
        starting=StartStep.KV_RESTORE,
    )
    assert phase(restoring) == "m is up; restoring the conversation's cache"
    woken = ModelStatus(model="m", state=ModelState.WAKING, reason=KV_RESTORE_REASON)
    assert phase(woken) == "m is awake; restoring the conversation's cache"
    waking = ModelStatus(model="m", state=ModelState.WAKING)
    assert phase(waking).startswith("waking m")


def test_the_status_document_keeps_its_shape() -> None:
    """`starting` is the daemon's word to its proxies: `/api/status` and `swapd status --json`
    show the models as they did."""
    from swapd.ipc.messages import StatusReply
    from swapd.ipc.status_doc import status_json

    status = ModelStatus(model="m", state=ModelState.STARTING, starting=StartStep.SPAWNING)
    reply = StatusReply(id=1, instance="i", pid=2, uptime=3.0, models=(status,))
    (model,) = status_json(reply)["models"]
    assert "starting" not in model and model["state"] == "starting"
