"""The text stages before typing (llama-swap's order, reference §1.1 and §1.5): comment lines out
of `cmd`/`cmdStop`, per model the macro scope, then `${GPUS}`, then `${PORT}` (allocated from
`startPort` in sorted id order, only for models whose cmd uses it), and the leftover-macro check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .floor import macros
from .floor.cmdline import strip_comment_lines
from .floor.issues import Report, describe
from .floor.keys import MAX_PORT
from .floor.schema import suggest
from .floor.yaml_nodes import Document, Path
from .sections.gpu_fields import auto_wanted, gpus_of

_ENV_REF_NAME = re.compile(r"^env\.[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class Staged:
    """A model between macro expansion and its typed form."""

    id: str
    path: Path
    body: dict[str, Any]
    cmd_text: str | None = None
    gpus: tuple[str, ...] | None = None
    gpus_auto: bool = False
    port: int | None = None
    scope: list[macros.Macro] = field(default_factory=list)


def strip_cmd_comments(
    models: dict[str, Any], document: Document, report: Report
) -> dict[str, Any]:
    """Each model's body with comment lines out of its commands; a body that is no mapping is
    reported and left out."""
    result: dict[str, Any] = {}
    for model_id, body in models.items():
        path = ("models", model_id)
        if not isinstance(body, dict):
            report.error(path, f"expected a mapping with at least cmd, got {describe(body)}")
            continue
        body = dict(body)
        for key in ("cmd", "cmdStop"):
            value = body.get(key)
            if not isinstance(value, str):
                continue
            unfolded = document.unfolded.get((*path, key))
            if unfolded is None:
                body[key] = strip_comment_lines(value)
                continue
            # A folded scalar's lines were joined by YAML, so a `#` line there is an
            # argument; its unfolded text only serves to keep `\` continuations working.
            body[key] = unfolded
            hashed = next((ln for ln in unfolded.split("\n") if ln.lstrip()[:1] == "#"), None)
            if hashed is not None:
                report.warn(
                    (*path, key),
                    "a '#' line in a folded (>) block is passed as arguments, not dropped "
                    "as a comment; write the block with | for comment lines",
                    line=document.find_line((*path, key), hashed.strip()),
                )
        result[model_id] = body
    return result


def expand_model(
    model_id: str,
    body: dict[str, Any],
    global_macros: list[macros.Macro],
    report: Report,
    *,
    auto_default: bool = False,
    kv_dir: str = "",
) -> Staged:
    path = ("models", model_id)
    own = macros.declare(body.get("macros"), (*path, "macros"), report)
    scope = macros.scope(model_id, global_macros, own)
    if kv_dir and body.get("kvCache") is not None:
        # `${KV_DIR}`: the model's folder of saved conversation caches (kv_cache_fields.py).
        scope.insert(1, ("KV_DIR", kv_dir))
    try:
        expanded = _expand_fields(body, scope, path)
    except KeysCollide as error:
        report.error(error.path, str(error), key=True)
        body = {k: v for k, v in body.items() if k != "filters"}
        expanded = _expand_fields(body, scope, path)
    model = Staged(model_id, path, expanded, scope=scope)
    # `gpus: auto`: ${GPUS} stays in place until a start knows its GPUs (model_process.fill_gpus).
    model.gpus_auto = auto_wanted(model.body.get("gpus"), auto_default)
    if model.gpus_auto:
        return _with_cmd_text(model)
    model.gpus = gpus_of(model.body.get("gpus"), (*path, "gpus"), report)
    if model.gpus is not None:
        model.body = _expand_fields(model.body, [("GPUS", ",".join(model.gpus))], path)
    return _with_cmd_text(model)


def _with_cmd_text(model: Staged) -> Staged:
    cmd = model.body.get("cmd")
    if isinstance(cmd, str):
        model.cmd_text = cmd
    return model


def _expand_fields(body: dict[str, Any], scope: list[macros.Macro], path: Path) -> dict[str, Any]:
    expanded = {
        key: value if key == "macros" else macros.expand(value, scope, (*path, key))
        for key, value in body.items()
    }
    filters = expanded.get("filters")
    if isinstance(filters, dict) and isinstance(filters.get(BY_ID), dict):
        # setParamsByID's keys are names a client asks for: llama-swap expands macros in them.
        by_id: dict[str, Any] = {}
        first: dict[str, str] = {}  # expanded name -> the key written
        for key, value in filters[BY_ID].items():
            name = macros.expand(key, scope, (*path, "filters", BY_ID))
            name = name if isinstance(name, str) else key
            if name in first:
                raise KeysCollide(first[name], key, (*path, "filters", BY_ID, key))
            first[name] = key
            by_id[name] = value
        expanded["filters"] = {**filters, BY_ID: by_id}
    return expanded


BY_ID = "setParamsByID"


class KeysCollide(Exception):
    """Two setParamsByID keys that name the same model once their macros are expanded."""

    def __init__(self, first: str, second: str, path: Path) -> None:
        super().__init__(f'keys "{first}" and "{second}" resolve to the same value')
        self.path = path


def allocate_ports(
    staged: list[Staged], start_port: int, ports: Mapping[str, int], report: Report
) -> None:
    """`${PORT}` for every model whose cmd uses it, from `startPort` up in sorted id order.

    A model in `ports` (a reload: the ports of the config it replaces and of the running
    processes) keeps its port, and no other model gets one of those, so adding or removing a
    model never renumbers another (whose definition would then change)."""
    taken = set(ports.values())
    port = start_port
    for model in sorted(staged, key=lambda m: m.id):
        if model.cmd_text is None or "${PORT}" not in model.cmd_text:
            continue
        assigned = ports.get(model.id)
        if assigned is None:
            while port in taken:
                port += 1
            if port > MAX_PORT:
                report.error(
                    (*model.path, "cmd"),
                    f"no ${{PORT}} left: allocation from startPort {start_port} passed {MAX_PORT}",
                )
                continue
            assigned = port
            port += 1
        model.port = assigned
        model.body = _expand_fields(model.body, [("PORT", assigned)], model.path)
        cmd = model.body.get("cmd")
        model.cmd_text = cmd if isinstance(cmd, str) else None


def check_leftovers(
    value: Any,
    path: Path,
    known: list[macros.Macro],
    document: Document,
    report: Report,
    *,
    model: bool,
    gpus_auto: bool = False,
) -> None:
    """Report every `${...}` that no macro filled; `known` gives the "did you mean"."""
    known_names = [name for name, _ in known]
    for where, name in macros.references(value, path):
        top_key = where[len(path)] if len(where) > len(path) else ""
        if _ENV_REF_NAME.match(name):
            continue  # already reported as an unset environment variable
        if name == "PID" and model and top_key == "cmdStop":
            continue
        if name == "GPUS" and gpus_auto:
            continue  # filled at each start
        if name == "PID":
            message = "${PID} is only available in cmdStop"
        elif name == "PORT" and model and top_key == "proxy":
            message = (
                "proxy uses ${PORT} but cmd does not - ${PORT} is only available when used in cmd"
            )
        elif name == "PORT" and model:
            message = "${PORT} is only available when the model's cmd uses it"
        elif name == "GPUS" and model:
            message = "${GPUS} is only available when the model sets gpus"
        elif name == "KV_DIR" and model:
            message = "${KV_DIR} is only available when the model sets kvCache"
        elif name in ("PORT", "GPUS", "MODEL_ID", "KV_DIR"):
            message = f"${{{name}}} is only available inside a model's settings"
        elif name in known_names:
            message = (
                f"${{{name}}} is left over: macro {name!r} is defined after the macro that uses it"
            )
        else:
            guess = suggest(name, known_names)
            hint = f"; did you mean '${{{guess}}}'?" if guess else ""
            message = f"unknown macro '${{{name}}}'{hint}"
        line = document.find_line(where, f"${{{name}}}")
        report.error(where, message, line=line)
    for where, text in macros.unterminated(value, path):
        # llama-swap keeps the text as it is (no macro matches it): it loads, and is rarely meant.
        report.warn(
            where,
            f"{text!r} is not a macro (no closing '}}'): kept as text, as llama-swap keeps it",
            line=document.find_line(where, text),
        )
