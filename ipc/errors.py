"""The one error shape both sides share: what failed, as the client will be told.

A daemon error (a start that failed, a health check that timed out, circus unavailable, ...)
travels to the proxy as an `Error` reply and is raised there again; both ends subclass `Failure`,
so the four fields are declared once. The proxy alone maps `status` to OpenAI's error `type`.
"""

from __future__ import annotations

from collections.abc import Sequence


class Failure(Exception):
    """A request that cannot be served: `status` is the HTTP status the client gets."""

    default_status = 500
    default_code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        log_tail: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status if status is not None else self.default_status
        self.code = code if code is not None else self.default_code
        self.log_tail = tuple(log_tail)
