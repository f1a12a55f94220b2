"""The body and the query a route decision asks for (`decide.Serve`: a rename, filters, a
model chosen by id), made from what the client sent (`body.RequestModel`): pure functions."""

from __future__ import annotations

import urllib.parse

from .body import RequestModel, filter_json, replace_span
from .decide import Serve


def outgoing_body(found: RequestModel | None, decision: Serve) -> tuple[bytes | None, bool, str]:
    """(body to send or None to stream it, whether it is a rewrite, path and query to send).

    JSON bodies get the rename and the filters; multipart bodies the rename, in place; a peer's
    `?model=` the rename. Anything not rewritten goes as the client sent it."""
    path_qs = decision.path_qs
    if found is None:
        return None, False, path_qs
    rename = decision.rename
    if found.kind == "query" and rename and decision.rename_query:
        return None, False, with_query_model(path_qs, rename)
    if found.body is None:
        return None, False, path_qs
    filters = decision.filters
    if found.kind == "json" and (
        rename
        or decision.by_id
        or (filters is not None and (filters.strip_params or filters.set_params))
    ):
        strip = filters.strip_params if filters is not None else ()
        params = filters.set_params if filters is not None else None
        body = filter_json(
            found.body, model=rename, strip=strip, set_params=params, then=decision.by_id
        )
        return body, True, path_qs
    if found.kind == "multipart" and rename and found.model_span is not None:
        return replace_span(found.body, found.model_span, rename), True, path_qs
    if found.rewritten:
        return found.body, True, path_qs
    return found.raw, False, path_qs


def with_query_model(path_qs: str, model: str) -> str:
    """`path_qs` with its query's `model` renamed `model` (a peer's `?model=`)."""
    path, sep, query = path_qs.partition("?")
    pairs = [
        (k, model if k == "model" else v)
        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True)
    ]
    return path + "?" + urllib.parse.urlencode(pairs) if sep else path
