"""A model's process tree: signalling its process group, killing what survives, waiting for the
exit through a pidfd."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import psutil

from . import pid_watch


def signal_group(pid: int, signum: int) -> None:
    # circus starts every process in its own process group: signal the group (as llama-swap
    # does) so a shell wrapper's children hear it too.
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:
        pass


def kill_tree(pid: int, tree: list[psutil.Process]) -> None:
    signal_group(pid, signal.SIGKILL)
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        descendants = _descendants(pid)
        if descendants is None:
            return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    tree = [root]
    for child in descendants:
        with contextlib.suppress(psutil.Error):
            tree.append(psutil.Process(child))
    return tree


async def wait_gone(pid: int, timeout: float) -> bool:
    if not pid_watch.is_alive(pid):
        return True
    if timeout <= 0:
        return False
    try:
        await asyncio.wait_for(pid_watch.wait_exit(pid), timeout)
    except TimeoutError:
        return not pid_watch.is_alive(pid)
    return True


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


_PROC_CHILDREN = os.path.exists("/proc/thread-self/children")


def _descendants(pid: int) -> list[int] | None:
    """Every descendant of `pid`, from the kernel's per-thread `children` lists: a few small
    reads where psutil's `children()` reads the stat of every process on the host (ms, on the
    swap path). None where the kernel has no such lists (CONFIG_PROC_CHILDREN off)."""
    if not _PROC_CHILDREN:
        return None
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found
