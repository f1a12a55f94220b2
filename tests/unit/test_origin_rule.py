"""The browser rule (proxy/origin_check.py) on requests as browsers send them: what a page of this
host, a page of another site, a DNS-rebinding page, a link, an editor's webview and curl send, with
and without `security.cors.allowedOrigins`; the CORS answer and the preflight."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from swapd.ipc.routing_table import CorsPolicy
from swapd.proxy.floor.errors import Forbidden
from swapd.proxy.origin_check import (
    check_browser,
    cors_headers,
    is_local_name,
    policy_of,
    preflight,
    same_origin,
)

HOST = "127.0.0.1:8080"
OWN = "http://127.0.0.1:8080"
OTHER = "http://127.0.0.1:3000"  # a page on another loopback port
STRICT = CorsPolicy()
ALLOW_OTHER = CorsPolicy(allowed_origins=("http://127.0.0.1:3000",))
ANY = CorsPolicy(allowed_origins=("*",))


def _check(
    cors: CorsPolicy, method: str = "POST", path: str = "/v1/chat/completions", **headers: str
) -> str | None:
    sent = {"Host": HOST, **{k.replace("_", "-"): v for k, v in headers.items()}}
    return check_browser(make_mocked_request(method, path, headers=sent), cors)


def _refused(cors: CorsPolicy, method: str = "POST", path: str = "/x", **headers: str) -> str:
    with pytest.raises(Forbidden) as caught:
        _check(cors, method, path, **headers)
    assert caught.value.code == "cross_origin" and caught.value.status == 403
    return caught.value.message


def test_no_browser_is_never_looked_at() -> None:
    assert _check(STRICT) is None
    assert _check(STRICT, Host="rebind.example:8080") is None  # curl with any Host


def test_this_hosts_own_pages_pass() -> None:
    assert _check(STRICT, Origin=OWN, Sec_Fetch_Site="same-origin") is None
    assert _check(STRICT, Origin=OWN) is None  # a browser without Sec-Fetch-*
    assert _check(STRICT, "GET", "/v1/models", Sec_Fetch_Site="same-origin") is None
    assert _check(STRICT, "GET", "/ui/", Sec_Fetch_Site="none") is None  # typed in


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        # A no-cors POST with a text/plain body from a page on another port.
        ("POST", "/v1/chat/completions", {"Origin": OTHER, "Sec-Fetch-Site": "same-site"}),
        # <img src=/upstream/m/>: no Origin, the page in the Referer.
        (
            "GET",
            "/upstream/m/",
            {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Dest": "image", "Referer": OTHER + "/"},
        ),
        # new WebSocket(ws://.../comfyui/ws)
        ("GET", "/comfyui/ws", {"Origin": OTHER, "Sec-Fetch-Mode": "websocket"}),
        # a cross-origin fetch('/v1/models')
        ("GET", "/v1/models", {"Origin": OTHER, "Sec-Fetch-Site": "same-site"}),
        # llama-swap's GET /unload from an image, and a state change with this host's Origin
        # but another site as the browser says
        ("GET", "/unload", {"Sec-Fetch-Site": "cross-site", "Referer": OTHER + "/page"}),
        ("POST", "/api/models/unload", {"Origin": OWN, "Sec-Fetch-Site": "cross-site"}),
        ("POST", "/api/chat", {"Origin": "null"}),  # a sandboxed frame, a file
    ],
)
def test_another_sites_requests_are_refused_unless_allowed(
    method: str, path: str, headers: dict[str, str]
) -> None:
    with pytest.raises(Forbidden):
        check_browser(make_mocked_request(method, path, headers={"Host": HOST, **headers}), STRICT)
    request = make_mocked_request(method, path, headers={"Host": HOST, **headers})
    own_site = headers.get("Origin") in (OWN, "null")
    if own_site:
        with pytest.raises(Forbidden):
            check_browser(request, ALLOW_OTHER)
    else:
        allowed = check_browser(request, ALLOW_OTHER)
        assert allowed == (OTHER if "Origin" in headers else None)
    assert check_browser(request, ANY) in (None, headers.get("Origin"))


def test_a_request_of_another_site_that_says_not_which_is_refused_unless_any() -> None:
    image = {"Sec_Fetch_Site": "cross-site", "Sec_Fetch_Dest": "image"}  # referrerpolicy=none
    _refused(ALLOW_OTHER, "GET", "/upstream/m/", **image)
    assert _check(ANY, "GET", "/upstream/m/", **image) is None


def test_dns_rebinding_is_refused_unless_its_name_is_allowed() -> None:
    rebind = {"Host": "rebind.example:8080", "Origin": "http://rebind.example:8080"}
    message = _refused(STRICT, **rebind)
    assert "rebind.example:8080" in message and "DNS" in message
    _refused(STRICT, "GET", "/v1/models", Host="rebind.example:8080", Sec_Fetch_Site="same-origin")
    allowed = CorsPolicy(allowed_origins=("http://rebind.example:8080",))
    assert _check(allowed, **rebind) is None
    assert _check(ANY, **rebind) is None
    for name in ("localhost", "gpubox", "box.local", "box.lan", "a.internal", "x.home.arpa"):
        assert is_local_name(name), name
    for ip in ("127.0.0.1", "192.168.1.5", "::1", "203.0.113.9"):
        assert is_local_name(ip), ip
    assert not is_local_name("rebind.example") and not is_local_name("evil.com")


def test_a_link_the_user_follows_passes_but_not_to_get_unload() -> None:
    link = {
        "Sec_Fetch_Site": "cross-site",
        "Sec_Fetch_Mode": "navigate",
        "Sec_Fetch_Dest": "document",
        "Sec_Fetch_User": "?1",
    }
    assert _check(STRICT, "GET", "/ui/", **link) is None
    _refused(STRICT, "GET", "/unload", **link)
    # A script's navigation (no user activation), and a frame, are not the user's.
    _refused(STRICT, "GET", "/upstream/m/", **{**link, "Sec_Fetch_User": "?0"})
    _refused(STRICT, "GET", "/upstream/m/", **{**link, "Sec_Fetch_Dest": "iframe"})


def test_editors_and_apps_own_origins_pass_by_default() -> None:
    for origin in ("vscode-webview://1abc", "app://obsidian.md", "tauri://localhost"):
        assert _check(STRICT, "POST", "/api/chat", Origin=origin) == origin
    assert _check(STRICT, "GET", "/health", Origin=OTHER) is None  # open paths: to anyone


def test_cors_headers_replace_the_upstreams() -> None:
    headers: CIMultiDict[str] = CIMultiDict(
        {"Access-Control-Allow-Origin": "*", "Vary": "Accept-Encoding", "X": "1"}
    )
    cors_headers(OTHER, CorsPolicy(allowed_origins=(OTHER,), exposed_headers=("X",)), headers)
    assert headers.getall("Access-Control-Allow-Origin") == [OTHER]
    assert headers["Vary"] == "Accept-Encoding, Origin"
    assert headers["Access-Control-Expose-Headers"] == "X"
    wildcard: CIMultiDict[str] = CIMultiDict()
    cors_headers(OTHER, ANY, wildcard)
    assert wildcard["Access-Control-Allow-Origin"] == "*" and "Vary" not in wildcard
    credentials: CIMultiDict[str] = CIMultiDict()
    cors_headers(OTHER, CorsPolicy(allowed_origins=(OTHER,), allow_credentials=True), credentials)
    assert credentials["Access-Control-Allow-Credentials"] == "true"


def test_preflight() -> None:
    ask = {"Host": HOST, "Access-Control-Request-Headers": "content-type, x-bad header"}
    anyone = preflight(make_mocked_request("OPTIONS", "/v1/x", headers=ask), STRICT)
    assert anyone.status == 204 and anyone.headers["Access-Control-Allow-Origin"] == "*"
    assert anyone.headers["Access-Control-Allow-Headers"] == "content-type"
    request = make_mocked_request("OPTIONS", "/v1/x", headers={**ask, "Origin": OTHER})
    with pytest.raises(Forbidden):
        preflight(request, STRICT)
    answer = preflight(request, CorsPolicy(allowed_origins=(OTHER,), max_age=600))
    assert answer.headers["Access-Control-Allow-Origin"] == OTHER
    assert answer.headers["Access-Control-Max-Age"] == "600"
    assert "POST" in answer.headers["Access-Control-Allow-Methods"]


def test_origins_match_as_browsers_spell_them() -> None:
    policy = policy_of(CorsPolicy(allowed_origins=("HTTPS://Dash.Example.com:443",)))
    assert policy.allows("https://dash.example.com")
    assert not policy.allows("https://dash.example.com:8443")
    assert not policy.allows("http://dash.example.com")
    assert policy.trusted_host("dash.example.com") and not policy.trusted_host("x.example.com")
    assert same_origin("http://LOCALHOST:8080", "localhost:8080")
    assert same_origin("https://swapd.lan", "swapd.lan:443")
    assert not same_origin("null", HOST) and not same_origin(OWN, "")


# What a browser sends for a top-level navigation the user started on another site (a link, a GET
# form, a `window.open` on a click): no Origin, the page in the Referer.
NAVIGATION = {
    "Sec_Fetch_Site": "cross-site",
    "Sec_Fetch_Mode": "navigate",
    "Sec_Fetch_Dest": "document",
    "Sec_Fetch_User": "?1",
    "Referer": "https://evil.example/page",
}


@pytest.mark.parametrize(
    "path",
    [
        "/upstream/m/",  # a link to a model's own page (llama-server's web UI)
        "/upstream/m/slots?id_slot=0",
        "/props",  # llama.cpp's router: `GET /props?model=m` starts m
        "/v1/audio/voices",  # a GET form naming a model
        "/sdapi/v1/loras",
        "/comfyui/",
        "/unload",
        "/a/path/added/later",
    ],
)
@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_another_sites_navigation_to_what_may_start_a_model_is_refused(
    path: str, site: str
) -> None:
    """Issue 40 item 9: a click on another site's link, GET form or button swapped models."""
    for method in ("GET", "HEAD"):
        message = _refused(STRICT, method, path, **{**NAVIGATION, "Sec_Fetch_Site": site})
        assert message.startswith("cross-site navigation refused") and "start" in message
    # A site the operator allows may link there.
    allowed = {**NAVIGATION, "Referer": OTHER + "/page"}
    assert _check(ALLOW_OTHER, "GET", path, **allowed) is None
    assert _check(ANY, "GET", path, **NAVIGATION) is None


@pytest.mark.parametrize(
    "path", ["/", "/ui", "/ui/", "/ui/index.html", "/upstream", "/running", "/api/captures/7"]
)
def test_another_sites_navigation_to_the_ui_and_reads_passes(path: str) -> None:
    assert _check(STRICT, "GET", path, **NAVIGATION) is None
