"""The embedded default config: what `swapd run` serves when no `-c` is given."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

PYTHON_ENV = "SWAPD_PYTHON"
CONFIG_NAME = "default_config.yaml"


def default_config_path() -> Path:
    """The packaged default_config.yaml (a real file: the package is installed unzipped)."""
    return Path(str(resources.files("swapd.daemon.config").joinpath(CONFIG_NAME)))


def demo_environ() -> dict[str, str]:
    """What the daemon's environment needs for the default config's `${env.SWAPD_PYTHON}`."""
    return {PYTHON_ENV: sys.executable}


def _client_host(listen: str) -> str:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):  # a wildcard listens on loopback too
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def describe_default(listen: str) -> str:
    """Lines for `swapd run` to print: which demo models it serves and a curl to try."""
    raw: dict[str, Any] = yaml.safe_load(default_config_path().read_text())
    models: dict[str, Any] = raw.get("models") or {}
    url = f"http://{_client_host(listen)}"
    lines = [f"swapd: no -c given, serving the embedded demo config ({default_config_path()})"]
    for model_id, spec in models.items():
        aliases = ", ".join(spec.get("aliases") or ())
        also = f" (alias {aliases})" if aliases else ""
        lines.append(f"  {model_id}{also}: {spec.get('description', '')}".rstrip())
    first = next(iter(models), "demo-small")
    lines += [
        "Try:",
        f"  curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' \\",
        f'    -d \'{{"model": "{first}", "messages": [{{"role": "user", "content": "hi"}}]}}\'',
        f"  curl -s {url}/v1/models",
        "Write your own config (llama-swap's format) and run `swapd run -c config.yaml`.",
    ]
    return "\n".join(lines)
