"""What a capture shows of a request's headers (issue 29, finding 6): credentials redacted by
their header's name (the ones real clients send, and any name with a credential word in it) and
by their value (a configured key in any header, as it is or inside `Basic` credentials), while
other headers keep their values."""

from __future__ import annotations

import base64

import pytest

from swapd.daemon.observe.captures import (
    REDACTED,
    Secrets,
    capture_of,
    headers_of,
    raw_headers_of,
    secret_name,
)
from swapd.ipc.activity import RawCapture

KEY = "sk-configured-0123456789"
PEER_KEY = "peer-key-abcdef"


@pytest.mark.parametrize(
    "name",
    [
        "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Api-Key",
        "api-key",  # Azure OpenAI
        "x-goog-api-key",  # Gemini
        "Ocp-Apim-Subscription-Key", "x-functions-key", "Private-Token", "X-Amz-Security-Token",
        "X-Custom-Auth", "x-my-api-key", "X-ApiKey", "x-access-token", "X-Client-Secret",
        "x_session_token", "X-Auth-Token", "x-password",
    ],
)  # fmt: skip
def test_credential_header_names_are_redacted(name: str) -> None:
    assert secret_name(name)
    assert headers_of([(name, "anything")])[0] == {name: REDACTED}


@pytest.mark.parametrize(
    "name",
    ["Content-Type", "User-Agent", "x-ratelimit-remaining-tokens", "Accept", "X-Request-Id",
     "Keep-Alive", "Host", "OpenAI-Organization"],
)  # fmt: skip
def test_other_header_names_keep_their_values(name: str) -> None:
    assert not secret_name(name)
    assert headers_of([(name, "value")])[0] == {name: "value"}


@pytest.mark.parametrize(
    "value",
    [
        KEY,
        f"Bearer {KEY}",
        f"token={KEY}; other=1",
        f"prefix{PEER_KEY}suffix",
        "Basic " + base64.b64encode(f"user:{KEY}".encode()).decode(),
        "basic  " + base64.b64encode(f":{PEER_KEY}".encode()).decode(),
    ],
)
def test_a_value_that_holds_a_configured_key_is_redacted_in_any_header(value: str) -> None:
    secrets = Secrets([KEY, PEER_KEY, ""])
    kept, size = headers_of([("X-Whatever", value), ("Accept", "*/*")], secrets)
    assert kept == {"X-Whatever": REDACTED, "Accept": "*/*"}
    assert size == len("X-Whatever") + len(REDACTED) + len("Accept") + len("*/*")


def test_values_without_a_key_are_kept() -> None:
    secrets = Secrets([KEY])
    other = "Basic " + base64.b64encode(b"user:something-else").decode()
    pairs = [("X-Trace", "sk-configured-01234"), ("X-Basic", other), ("X-Bad", "Basic !!")]
    assert headers_of(pairs, secrets)[0] == dict(pairs)
    assert not Secrets().held_in(KEY)  # no keys configured: nothing to look for


def test_a_capture_redacts_request_and_response_headers_by_value() -> None:
    raw = RawCapture(
        ((b"X-Forward-Me", f"Bearer {KEY}".encode()), (b"Accept", b"\xffjson")),
        b"{}",
        (("X-Echo", KEY), ("Content-Type", "application/json")),
        b"{}",
    )
    capture = capture_of(raw, 7, "/v1/chat/completions", Secrets([KEY]))
    assert capture.req_headers == {"X-Forward-Me": REDACTED, "Accept": "\ufffdjson"}
    assert capture.resp_headers == {"X-Echo": REDACTED, "Content-Type": "application/json"}
    # The same bytes without a configured key: only the names decide.
    assert raw_headers_of(raw.req_headers)[0]["X-Forward-Me"] == f"Bearer {KEY}"


def test_the_session_headers_the_ui_shows_keep_their_values_unless_they_hold_a_key() -> None:
    # llama-swap's UI shows `ui.activity.session_id`'s headers as the request's session (issue
    # 41): `X-Session-ID` has a credential word in its name, and once read `[REDACTED]`.
    secrets = Secrets([KEY], shown=["X-Session-ID", "X-Litellm-Session-Id"])
    pairs = [
        ("x-session-id", "chat-7"),
        ("X-Litellm-Session-Id", f"Bearer {KEY}"),  # a key in it is still hidden
        ("X-Session-Token", "abc"),  # not a session header the UI shows
        ("Authorization", "Bearer other"),
    ]
    assert headers_of(pairs, secrets)[0] == {
        "x-session-id": "chat-7",
        "X-Litellm-Session-Id": REDACTED,
        "X-Session-Token": REDACTED,
        "Authorization": REDACTED,
    }
