"""What a model and a peer share: a name a request can use, a URL, `filters`."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from ....ipc.routing_table import Filters
from .. import shape
from ..floor.issues import Report, describe
from ..floor.yaml_nodes import Path

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def name_problem(name: str, what: str) -> str | None:
    """Why a model id or alias can never be named by a request, if it cannot."""
    if not name.strip():
        return f"{what} cannot be empty"
    control = _CONTROL.search(name)
    if control is not None:
        return (
            f"{what} {name!r} holds the control character U+{ord(control.group()):04X}; "
            "no request can name it"
        )
    return None


def check_url(url: str, where: Path, report: Report) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as error:
        report.error(where, f"invalid URL {url!r}: {error}")
        return
    if parts.scheme not in ("http", "https") or not parts.hostname:
        report.error(where, f"expected an http:// or https:// URL with a host, got {url!r}")


def filters_of(spec: shape.PeerFilters | None, where: Path, report: Report) -> Filters:
    if spec is None:
        return Filters()
    strip = spec.strip_params if spec.strip_params is not None else spec.strip_params_legacy
    params = sorted({p.strip() for p in (strip or "").split(",")} - {"", "model"})
    set_params = dict(spec.set_params or {})
    if "model" in set_params:
        report.warn((*where, "setParams", "model"), "'model' cannot be set; ignored")
        del set_params["model"]
    by_id: dict[str, dict[str, Any]] = {}
    for name, values in (getattr(spec, "set_params_by_id", None) or {}).items():
        if values is not None and not isinstance(values, dict):
            report.error(
                (*where, "setParamsByID", name),
                f"expected a mapping of parameters to set, got {describe(values)}",
            )
            continue
        values = dict(values or {})
        if "model" in values:
            report.warn((*where, "setParamsByID", name, "model"), "'model' cannot be set; ignored")
            del values["model"]
        by_id[name] = values
    return Filters(strip_params=tuple(params), set_params=set_params, set_params_by_id=by_id)
