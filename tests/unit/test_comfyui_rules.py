"""The `/comfyui/` ignored-path rule on its own (no processes): every path the seed page names.

The same rows run end to end through swapd in `test_comfyui_endpoint.py`; this table pins the
matching itself (GET only, fixed patterns, query and escaping) cheaply and exhaustively."""

from __future__ import annotations

import pytest

from swapd.proxy.routing.comfyui import IGNORED_PATH, is_ignored

IGNORED = [
    "/scripts/app.js",
    "/style.css",
    "/templates/default.json",
    "/api/userdata/workflows%2Fmine.json",  # a saved workflow, as the frontend fetches it
    "/favicon.ico",
    "/logo.png",
    "/a.gif",
    "/a.jpg",
    "/a.jpeg",
    "/robots.txt",
    "/ws",
    "/ws/",
    "/ws/anything/below",
    "/api/jobs",
]
STARTS = [
    "/",  # the page itself
    "/api/prompt",
    "/wsapi",  # not /ws
    "/api/jobs/12",  # not /api/jobs
    "/api/jobs/",
    "/api/queue",
    "/api/object_info",
    "/scripts/app.js.map",
    "/prefix/ws",  # ^/ws is anchored
    "/api/jobsx",
]


@pytest.mark.parametrize("path", IGNORED)
def test_get_to_an_ignored_path_is_ignored(path: str) -> None:
    assert is_ignored("GET", path)


@pytest.mark.parametrize("path", STARTS)
def test_other_paths_are_not_ignored(path: str) -> None:
    assert not is_ignored("GET", path)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
@pytest.mark.parametrize("path", ["/api/jobs", "/ws", "/scripts/app.js", "/templates/x.json"])
def test_only_get_is_ignored(method: str, path: str) -> None:
    assert not is_ignored(method, path)


def test_the_rule_is_on_the_decoded_path() -> None:
    # An escaped letter still names the same file; an escaped slash still ends in .json.
    assert is_ignored("GET", "/scripts/app%2Ejs")
    assert is_ignored("GET", "/%77s")  # /ws


def test_the_reason_is_the_seed_fragment() -> None:
    assert IGNORED_PATH == "ignored ComfyUI paths cannot start it"
