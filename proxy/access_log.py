"""The access log: one INFO line per request on the `swapd.proxy.access` logger, in the proxy's
log stream (and so in `/logs`), written by aiohttp's server once the response is complete.

    127.0.0.1 "POST /v1/chat/completions" 200 1234B 12.3ms model=alpha waited=0.0ms

The path is logged without its query (a `?token=` link must not end up in a log) and cut at
`PATH_LIMIT` characters; headers, keys and bodies never are. `waited` is the time the request spent
waiting for the daemon (a start, a swap, a drain). Every line also counts in `stats.STATS`.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from .pipeline import ACCOUNT, Account
from .stats import STATS

LOGGER = logging.getLogger("swapd.proxy.access")
PATH_LIMIT = 200
_NONE = Account()


class AccessLog(AbstractAccessLogger):
    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        STATS.requests += 1
        if not self.logger.isEnabledFor(logging.INFO):
            return
        path = request.rel_url.raw_path
        if len(path) > PATH_LIMIT:
            path = path[:PATH_LIMIT] + "..."
        account = request.get(ACCOUNT, _NONE)
        self.logger.info(
            '%s "%s %s" %d %dB %.1fms model=%s waited=%.1fms',
            request.remote or "-",
            request.method,
            path,
            response.status,
            response.body_length,
            time * 1000,
            account.model,
            account.waited * 1000,
        )

    @property
    def enabled(self) -> bool:
        return True
