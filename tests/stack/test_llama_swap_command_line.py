"""llama-swap's command line against the real stack (issue 25): swapd started as llama-swap is,
`-config FILE -listen ADDR` with no sub-command; and TLS (`--tls-cert-file`/`--tls-key-file`),
served by the proxy with a self-signed certificate this test makes (openssl), to a client that
trusts it, with `X-Forwarded-Proto: https` upstream. tests/support/upstreams/fake_model.py stands
for llama-server."""

from __future__ import annotations

import json
import shlex
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.proxy import local_model, model_ports
from tests.support.stack import Stack, fake_model_cmd, http_get

pytestmark = pytest.mark.processes


def _self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def _config() -> dict[str, object]:
    (port,) = model_ports(1)
    return {"healthCheckTimeout": 15, "models": {"m": local_model("m", port)}}


def test_started_with_llama_swaps_flags_and_a_config_only_llama_swap_took(
    stack_factory: Callable[..., Stack],
) -> None:
    """`swapd -config FILE -listen ADDR`, with a config swapd once refused and llama-swap loads:
    a key in a flow list from the environment, a `defs:` holding the model's anchor, a key no
    swapd knows (a warning at its line), a number as an alias (a warning: issue 29)."""
    (port,) = model_ports(1)
    text = f"""\
apiKeys: [${{env.SWAPD_T_KEY}}]
websocketStrategy: proxy
defs:
  base: &base
    cmd: {shlex.quote(fake_model_cmd("m", port=str(port)))}
    proxy: http://127.0.0.1:{port}
models:
  m:
    <<: *base
    aliases: [1]
"""
    stack = stack_factory(text, llama_swap_flags=True, env={"SWAPD_T_KEY": "sk-from-env"})
    assert http_get(stack.url + "/v1/models")[0] == 401
    request = urllib.request.Request(
        stack.url + "/v1/models", headers={"Authorization": "Bearer sk-from-env"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        listing = json.load(resp)
    assert [m["id"] for m in listing["data"]] == ["m"]
    output = stack.output()
    assert f"{stack.config_path}:2 websocketStrategy: unknown key 'websocketStrategy'" in output
    assert f"{stack.config_path}:10 models.m.aliases[0]: expected a string, got 1" in output
    assert "unknown key 'defs'" not in output  # a home for anchors: nothing to say


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make a certificate")
def test_tls_with_a_self_signed_certificate(
    stack_factory: Callable[..., Stack], tmp_path: Path
) -> None:
    stack = stack_factory(_config(), tls=_self_signed(tmp_path))
    assert stack.url.startswith("https://")
    body = json.dumps({"model": "m", "messages": []}).encode()
    request = urllib.request.Request(
        stack.url + "/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30, context=stack.ssl_context) as resp:
        answer = json.load(resp)
    assert answer["served_by"]["name"] == "m"
    # The model learns the client came over TLS.
    assert answer["request_headers"]["X-Forwarded-Proto"] == "https"
    # A client that does not trust the certificate is refused the handshake, and plain HTTP on
    # the TLS port gets no answer.
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(stack.url + "/health", timeout=10)
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    plain = stack.url.replace("https://", "http://") + "/health"
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(plain, timeout=10)
