"""Every error the daemon raises, in one tree. Each is an `ipc.errors.Failure`, so it carries the
HTTP status, the `code`, the message and the log tail it is answered with (`Error` reply); the
proxy maps the status to OpenAI's error `type`, once, on its side.

Hierarchy:

    Failure (ipc.errors)
    └── DaemonError                  500 internal
        ├── EnsureError              a request the scheduler cannot serve
        │   ├── ModelNotFound        404 model_not_found
        │   ├── ShuttingDown         503 shutting_down
        │   ├── BackingOff           503 backing_off     (failed too often in a row)
        │   ├── ModelUnloaded        503 model_unloaded  (`swapd unload` while it waited)
        │   ├── NoGpuRoom            503 no_gpu_room     (`gpus: auto`: no GPU has room for it)
        │   ├── CannotSleep          400 cannot_sleep    (`swapd sleep` of a model without `sleep`)
        │   ├── NotRunning           409 model_not_loaded (`swapd sleep` of a model not running)
        │   └── StartFailed          502 start_failed    (a start that did not reach `ready`)
        │       ├── ExitedDuringStart    502 start_failed
        │       ├── HealthCheckTimeout   504 health_check_timeout
        │       └── PortStillInUse       502 start_failed   (the port lingers after a stop)
        ├── InvalidConfig            400 invalid_config  (a reload refused; the old config stays)
        ├── SleepFailed              500 sleep_failed    (the scheduler stops the model instead)
        ├── WakeFailed               500 wake_failed     (the scheduler stops, then starts it)
        │   └── WakeUnverified       500 wake_unverified (its `wakeProbe` failed, or was wrong)
        ├── CircusUnavailable        503 circus_unavailable (circusd did not answer in time)
        ├── CircusError              502 circus_error    (circusd answered `status: error`)
        └── GpuError                 500 gpu_error       (NVML unusable, or `gpus` names no GPU)

The config loader's own `config.ConfigError` (with file, line and key path per issue) stays in the
config seam; a reload that meets one answers `InvalidConfig` with its text.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ipc.errors import Failure
from ..ipc.messages import Error

__all__ = [
    "BackingOff",
    "CannotSleep",
    "CircusError",
    "CircusUnavailable",
    "DaemonError",
    "EnsureError",
    "ExitedDuringStart",
    "Failure",
    "GpuError",
    "HealthCheckTimeout",
    "InvalidConfig",
    "ModelNotFound",
    "ModelUnloaded",
    "NoGpuRoom",
    "NotRunning",
    "PortStillInUse",
    "ShuttingDown",
    "SleepFailed",
    "StartFailed",
    "WakeFailed",
    "WakeUnverified",
]


class DaemonError(Failure):
    """Anything the daemon could not do."""

    default_status = 500
    default_code = "internal"


class EnsureError(DaemonError):
    """An ensure (or unload) that cannot be served; `status` is what the proxy answers with."""


class ModelNotFound(EnsureError):
    default_status = 404
    default_code = "model_not_found"


class ShuttingDown(EnsureError):
    default_status = 503
    default_code = "shutting_down"

    def __init__(self, message: str = "swapd is shutting down") -> None:
        super().__init__(message)


class BackingOff(EnsureError):
    default_status = 503
    default_code = "backing_off"


class ModelUnloaded(EnsureError):
    default_status = 503
    default_code = "model_unloaded"


class NoGpuRoom(EnsureError):
    """A `gpus: auto` model fits on no GPU, even after evicting every idle model (or it waited
    for busy ones too long); the message says how much it needs and what holds the memory."""

    default_status = 503
    default_code = "no_gpu_room"


class CannotSleep(EnsureError):
    """A sleep asked of a model that has no `sleep` setting."""

    default_status = 400
    default_code = "cannot_sleep"


class NotRunning(EnsureError):
    """A sleep asked of a model whose process is not running (nothing to put to sleep)."""

    default_status = 409
    default_code = "model_not_loaded"


class StartFailed(EnsureError):
    """A start that did not reach `ready`: the scheduler answers the waiting requests with it."""

    default_status = 502
    default_code = "start_failed"


class ExitedDuringStart(StartFailed):
    pass


class HealthCheckTimeout(StartFailed):
    default_status = 504
    default_code = "health_check_timeout"


class PortStillInUse(StartFailed):
    """The model's port is still listened on by what an earlier stop left behind."""

    def __init__(self, message: str, *, port: int, log_tail: Sequence[str] = ()) -> None:
        super().__init__(message, log_tail=log_tail)
        self.port = port


class InvalidConfig(DaemonError):
    default_status = 400
    default_code = "invalid_config"


class SleepFailed(DaemonError):
    """A sleep that did not end asleep: a call failed or timed out, or the model's GPU memory did
    not come back. The message says which; the model is stopped instead."""

    default_code = "sleep_failed"


class WakeFailed(DaemonError):
    """A wake that did not end ready: a call or the health check failed or timed out. The model
    is stopped and started cold instead."""

    default_code = "wake_failed"


class WakeUnverified(WakeFailed):
    """A wake whose calls and health check went well, but whose `wakeProbe` got no answer or the
    wrong one: its server may be serving corrupted weights. Stopped and started cold, as any
    failed wake, with a cause of its own."""

    default_code = "wake_unverified"


class CircusUnavailable(DaemonError):
    """circusd did not answer in time."""

    default_status = 503
    default_code = "circus_unavailable"


# circus's answer while another lifecycle command holds its arbiter-wide lock.
_LOCK_BUSY = ("already running", "arbiter is restarting", "arbiter is stopping")


class CircusError(DaemonError):
    """circusd answered `status: error`."""

    default_status = 502
    default_code = "circus_error"

    def __init__(self, command: str, reason: str, errno: int | None) -> None:
        super().__init__(f"circus {command}: {reason}")
        self.command = command
        self.reason = reason
        self.errno = errno

    @property
    def lock_busy(self) -> bool:
        return any(text in self.reason for text in _LOCK_BUSY)


class GpuError(DaemonError):
    """NVML could not be used, or a `gpus` entry names no GPU. `str()` is the message to show."""

    default_code = "gpu_error"

    def __init__(self, message: str, *, library_missing: bool = False) -> None:
        super().__init__(message)
        # True when NVML's shared library is absent (a host without the NVIDIA driver), as
        # opposed to present but failing (driver not loaded, no permission): only the latter
        # is an error when models name GPUs.
        self.library_missing = library_missing


def error_reply(request_id: int, exc: DaemonError, *, with_tail: bool = True) -> Error:
    """The `Error` reply that answers a request with `exc`."""
    return Error(
        id=request_id,
        status=exc.status,
        code=exc.code,
        message=exc.message,
        log_tail=exc.log_tail if with_tail else (),
    )
