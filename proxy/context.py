"""The per-process objects every handler needs, stored on the app under `CTX`.

Other proxy modules (and `comfyui.py`) get them with `request.app[CTX]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from .admission import Admission
from .daemon_link import DaemonLink
from .log_hub import LogHub
from .state import ProxyState
from .upstream_client import UpstreamPool


@dataclass(slots=True)
class ProxyContext:
    run_dir: Path
    processes: int
    state: ProxyState
    link: DaemonLink
    admission: Admission
    session: aiohttp.ClientSession
    pool: UpstreamPool
    logs: LogHub


CTX: web.AppKey[ProxyContext] = web.AppKey("swapd_proxy", ProxyContext)
