"""Which requests wake an asleep server that keeps serving (`sleep.servesAsleep`, ComfyUI's), and
which it is sent asleep (docs/guides/sleep-and-wake.md, "Only real work wakes it").

A websocket upgrade never wakes it. Otherwise the sleep setting's `wakeOn` decides: a request
wakes it when its method and its path on the model's own server (decoded, without the query)
match one of the rules, the path as a whole; the `comfyui` preset's rules are a job,
`POST /prompt` and `POST /api/prompt`, so a settings change or a saved workflow is served asleep.
Without `wakeOn`, every request but a GET or HEAD wakes it."""

from __future__ import annotations

import functools
import logging
import re
import urllib.parse

from ...ipc.routing_table import SleepSetting

log = logging.getLogger(__name__)

# Without `wakeOn`: what an asleep server that keeps serving answers without waking, reads.
_NO_GPU = frozenset({"GET", "HEAD"})
_NEVER = re.compile(r"(?!)")


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error:
        # The config loader refuses such a pattern; one that reaches the proxy anyway matches
        # nothing rather than failing every request to the model.
        log.error("wakeOn pattern %r does not compile; ignoring it", pattern)
        return _NEVER


def wakes(setting: SleepSetting, method: str, websocket: bool, path_qs: str) -> bool:
    """Whether a request (`path_qs`: raw path and query on the model's server) wakes it."""
    if websocket:
        return False
    if setting.wake_on is None:
        return method not in _NO_GPU
    path = urllib.parse.unquote(path_qs.partition("?")[0])
    return any(
        rule.method in ("*", method) and _compiled(rule.path).fullmatch(path) is not None
        for rule in setting.wake_on
    )
