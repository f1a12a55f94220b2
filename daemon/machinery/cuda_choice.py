"""Which CUDA checkpoint backend this host gets (`cuda_backend.py` says what each is): a module
of its own, so that the backends import the interface and the interface imports no backend."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .cuda_backend import CHECKPOINT_ENV, MODES, CheckpointBackend, Unavailable


def make_checkpointer(environ: Mapping[str, str] | None = None) -> CheckpointBackend | Unavailable:
    """The backend `$SWAPD_CUDA_CHECKPOINT` asks for (see the module's docstring); never raises:
    what cannot be used is `Unavailable`."""
    env = os.environ if environ is None else environ
    mode = env.get(CHECKPOINT_ENV) or "auto"
    if mode not in MODES:
        return Unavailable(f"{CHECKPOINT_ENV}={mode!r} is none of {', '.join(MODES)}")
    if mode == "none":
        return Unavailable(f"{CHECKPOINT_ENV}=none")
    if mode == "fake" or (mode == "auto" and env.get("SWAPD_GPU_BACKEND") == "fake"):
        from .cuda_fake import FakeCheckpointer

        return FakeCheckpointer.from_env(env)
    from .cuda_driver import DriverCheckpointer

    return DriverCheckpointer.open()
