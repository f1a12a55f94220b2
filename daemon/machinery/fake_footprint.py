"""What a process on the fake GPU holds (`gpu_fake.py` lists it; `cuda_fake.py` copies it): the
bytes in `$SWAPD_FAKE_GPU_MEM_DIR/<pid>` when the process declared them there, else its
`SWAPD_FAKE_GPU_MEM`, else 1 GiB."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

MEM_ENV = "SWAPD_FAKE_GPU_MEM"
MEM_DIR_ENV = "SWAPD_FAKE_GPU_MEM_DIR"
DEFAULT_PROCESS_MEM = 1024**3


def declared_memory(env: Mapping[str, str], pid: str) -> int:
    """Process `pid`'s bytes; `env`: its environment (or one with the same `MEM_DIR_ENV`)."""
    folder = env.get(MEM_DIR_ENV)
    if folder:
        try:
            return int(Path(folder, pid).read_text())
        except (OSError, ValueError):
            pass  # not declared (yet): the environment's value
    try:
        return int(env.get(MEM_ENV, DEFAULT_PROCESS_MEM))
    except ValueError:
        return DEFAULT_PROCESS_MEM
