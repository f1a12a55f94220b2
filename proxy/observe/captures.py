"""Captures (`captureBuffer`): a model request's headers and bodies and its response's, kept for
`GET /api/captures/{id}` as llama-swap keeps them (its `ReqRespCapture`, `captureFieldsByPath`,
`redactHeaders`).

What is captured: the request body as the client sent it when the pipeline read it to find the
model (model routes; `/upstream/` and `/comfyui/` bodies stream through unread, so their
`req_body` is null), and the response body as relayed, teed chunk by chunk (`account.Tail`),
never held back from the client; the tees of all the responses streaming at once in a process
hold at most `captureBuffer` between them (`TeeBudget`). A failed response (status other than
200) keeps the request only, as llama-swap's does. A capture larger than `captureBuffer` is not
kept at all. The capture travels to the daemon with its record's batch; the daemon keeps them
all within `captureBuffer` in total, oldest evicted first (docs/endpoints.md, "Captures").

The proxy sends the header pairs as they are (the request's `raw_headers`, the response's as
sent): the daemon redacts the secret ones, keeps one value per name and counts the size when it
stores the capture (daemon/observe/captures.py), so a capture costs a request a few references
here."""

from __future__ import annotations

from aiohttp import web

from ...ipc.activity import RawCapture
from ..floor.account import Account

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
) -> RawCapture | None:
    """The capture of a finished request, or None when its body outgrew `acc.keep`."""
    want_req, want_resp = _bodies_for(path)
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
    return RawCapture(
        request.raw_headers,
        acc.req_body if want_req else None,
        tuple(response.headers.items()),
        resp_body,
    )
