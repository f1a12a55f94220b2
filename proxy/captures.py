"""Captures (`captureBuffer`): a model request's headers and bodies and its response's, kept for
`GET /api/captures/{id}` as llama-swap keeps them (its `ReqRespCapture`, `captureFieldsByPath`,
`redactHeaders`).

What is captured: the request body as the client sent it when the pipeline read it to find the
model (model routes; `/upstream/` and `/comfyui/` bodies stream through unread, so their
`req_body` is null), and the response body as relayed, teed chunk by chunk (`account.Tail`),
never held back from the client; the tees of all the responses streaming at once in a process
hold at most `captureBuffer` between them (`account.TEE`). A failed response (status other than
200) keeps the request only, as llama-swap's does. A capture larger than `captureBuffer` is not
kept at all. The capture travels to the daemon with its record's batch; the daemon keeps them
all within `captureBuffer` in total, oldest evicted first (docs/endpoints.md, "Captures")."""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from ..ipc.activity import Capture
from .account import Account

REDACTED = "[REDACTED]"
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)

# (request body, response body) kept for routes whose bodies are large binary payloads;
# everything else keeps both (llama-swap's `captureFieldsByPath`; headers are always kept).
_BODIES_BY_PATH = {
    "/v1/audio/speech": (True, False),
    "/v1/audio/voices": (False, True),
    "/v1/audio/transcriptions": (False, True),
    "/v1/images/generations": (True, False),
    "/v1/images/edits": (False, False),
    "/sdapi/v1/txt2img": (True, False),
    "/sdapi/v1/img2img": (False, False),
}
_BOTH = (True, True)


def headers_of(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """One value per name (the first, as llama-swap's `headerMap`), secrets redacted."""
    out: dict[str, str] = {}
    for key, value in headers:
        if key not in out:
            out[key] = REDACTED if key.lower() in SECRET_HEADERS else value
    return out


def _bodies_for(path: str) -> tuple[bool, bool]:
    if path.startswith("/upstream/"):
        # `/upstream/<model>/v1/audio/speech`: the model's path after its id.
        for known, kept in _BODIES_BY_PATH.items():
            if path.endswith(known):
                return kept
        return _BOTH
    return _BODIES_BY_PATH.get(path, _BOTH)


def capture_of(
    request: web.BaseRequest, response: web.StreamResponse, acc: Account, path: str
) -> Capture | None:
    """The capture of a finished request, or None when it is larger than `acc.keep`."""
    want_req, want_resp = _bodies_for(path)
    req_body = acc.req_body if want_req else None
    resp_body: bytes | None = None
    if want_resp and response.status == 200:
        if acc.body is not None:
            resp_body = acc.body
        elif acc.tail is not None:
            resp_body = acc.tail.whole()
            acc.tail.release()
            if resp_body is None:
                return None  # the stream outgrew a bound: the tee let go of it
        elif isinstance(response, web.Response) and isinstance(response.body, bytes):
            resp_body = response.body
        else:
            resp_body = b""
    capture = Capture(
        req_path=path,
        req_headers=headers_of(request.headers.items()),
        req_body=req_body,
        resp_headers=headers_of(response.headers.items()),
        resp_body=resp_body,
    )
    return capture if capture.size <= acc.keep else None
