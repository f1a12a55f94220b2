"""`wakeProbe`: the request that proves a woken model answers as it did before its sleep
(docs/configuration.md, "wakeProbe"; docs/guides/sleep-and-wake.md, "Verified wakes").

Unset (or `true`): the default probe for an OpenAI-compatible chat model, a short greedy
completion whose answer is recorded before the process's first sleep; `off` (or `false`): no
probe; a mapping: written out (`method`, `path`, `body`, and the answer it must give: `expect`,
`match`, `jsonPath`; `timeout`), a mapping without `path` and `body` being the default request
with those changes. A health check does not prove a wake: a server can answer `/health` and then
serve corrupted weights (torch_memory_saver#71, vllm#25800).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .. import shape
from ..floor.issues import Report, describe
from ..floor.yaml_nodes import Path
from ..model import WakeProbe

KEY = "wakeProbe"
METHODS = ("GET", "POST", "PUT", "PATCH")
DEFAULT_PATH = "/v1/chat/completions"
# Where the default probe's answer is: the completion's text.
DEFAULT_JSON_PATH = ("choices", "0", "message", "content")
# Short and greedy, so that the same weights give the same words: a fixed seed for servers that
# sample anyway, eight tokens so that it costs a fraction of a second.
DEFAULT_PROMPT = "Count from one to ten in words, separated by spaces."
DEFAULT_MAX_TOKENS = 8
DEFAULT_SEED = 1234
# The resolved default before the model's name is known (`for_model` fills its body in).
DEFAULT = WakeProbe(default=True)


def default_body(model_name: str) -> str:
    return json.dumps(
        {
            "model": model_name,
            "messages": [{"role": "user", "content": DEFAULT_PROMPT}],
            "temperature": 0,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "seed": DEFAULT_SEED,
            "stream": False,
        }
    )


def for_model(probe: WakeProbe | None, model_name: str) -> WakeProbe | None:
    """The probe with the default request's body for `model_name` where it has no request of its
    own (the default, or a mapping that wrote neither `path` nor `body`)."""
    if probe is None or probe.body or probe.path != DEFAULT_PATH:
        return probe
    return WakeProbe(
        method=probe.method,
        path=probe.path,
        body=default_body(model_name),
        json_path=probe.json_path or DEFAULT_JSON_PATH,
        expect=probe.expect,
        match=probe.match,
        timeout=probe.timeout,
        default=probe.default,
    )


def read_wake_probe(
    value: bool | str | shape.WakeProbeMapping | None, where: Path, report: Report
) -> WakeProbe | None:
    """The key's quirk (registered in model_fields.py): its written value to the probe (None:
    off, or after an error; `DEFAULT` until `for_model` names the model). The mapping's keys are
    typed (`typed.py` reported each wrong one); read in this order, the reading stops at the
    first such key, as at its own first problem."""
    if value is None or value is True:
        return DEFAULT
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return None
    if isinstance(value, str):
        report.error(where, f"expected off, or a mapping (path, body, expect, ...), got {value!r}")
        return None

    def wrong(key: str) -> bool:
        return report.typed_wrong((*where, key))

    if wrong("method"):
        return None
    method = value.method if value.method is not None else "POST"
    if method.upper() not in METHODS:
        report.error((*where, "method"), f"expected one of {', '.join(METHODS)}, got {method!r}")
        return None
    if wrong("path"):
        return None
    path = value.path if value.path is not None else DEFAULT_PATH
    if not path.startswith("/") or "://" in path:
        report.error((*where, "path"), f"expected a path on the model's server, got {path!r}")
        return None
    if wrong("body") or wrong("expect"):
        return None
    body = value.body if isinstance(value.body, str | None) else json.dumps(value.body)
    match = value.match
    if wrong("match"):
        return None
    if match is not None:
        try:
            re.compile(str(match))
        except re.error as exc:
            report.error((*where, "match"), f"not a regular expression: {exc}")
            return None
    if wrong("jsonPath") or wrong("timeout"):
        return None
    timeout = value.timeout if value.timeout is not None else DEFAULT.timeout
    if not 0 < timeout < 1e6:
        report.error((*where, "timeout"), f"expected seconds above 0, got {describe(timeout)}")
        return None
    return WakeProbe(
        method=method.upper(),
        path=path,
        body=body or "",
        json_path=_json_path(value.json_path),
        expect=None if value.expect is None else _text(value.expect),
        match=None if match is None else str(match),
        timeout=float(timeout),
    )


def _json_path(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    text = text.removeprefix("$").removeprefix(".")
    return tuple(part for part in text.split(".") if part)


def _text(value: Any) -> str:
    """A YAML scalar as the text an answer is compared with (`true`, not Python's `True`)."""
    return json.dumps(value) if isinstance(value, bool | int | float) else str(value)
