"""circusd, as `swapd run` execs it
(`python -m swapd.daemon.cli.circusd --log-output - circus.ini`).

Three changes to circus 0.19 (pinned). First, its periodic `manage_watchers` (every `check_delay`)
skips a tick while another command holds the arbiter-wide lock, instead of raising. circus takes
that lock for every `add`, `start` and `rm` the daemon sends during a swap, and for the whole of
its own shutdown (`arbiter_stop`, while the models drain and stop); a tick that lands then raises
`ConflictError: arbiter is already running ... command`, which circus's loop logs as an ERROR
with a traceback, and manages nothing that tick anyway. Skipping is what that tick does in effect;
the next one, `check_delay` later, manages the watchers.

Second, SIGHUP (`systemctl reload`, `kill -HUP`) goes to the daemon watcher, which reloads
the YAML as `swapd reload` does. circus's own SIGHUP restarts every process, models included,
and its config reload would remove the model watchers the daemon added at run time.

Third, a watcher's `manage_processes` reaps a process that has exited (circus's `reap`
event, with its exit code) before it drops it. Unpatched, a process that exits between the
arbiter's `waitpid` and that step of the same tick is dropped while a zombie, with no event, and
the dropped process object reaps it at once (subprocess's `Popen.__del__`): the daemon, unless it
read the zombie in between, reports "an unknown exit code"."""

from __future__ import annotations

from typing import Any


def patch_manage_watchers() -> bool:
    """Make `Arbiter.manage_watchers` skip a tick the lock is held; False when circus has changed
    in a way this does not recognise (then it is left alone)."""
    from circus.arbiter import Arbiter

    original: Any = Arbiter.__dict__.get("manage_watchers")
    if original is None or getattr(original, "_swapd_patched", False):
        return original is not None

    def manage_watchers(self: Any) -> Any:
        busy = getattr(self, "_exclusive_running_command", None) is not None
        if busy or getattr(self, "_restarting", False) or getattr(self, "_stopping", False):
            return None
        return original(self)

    manage_watchers._swapd_patched = True  # type: ignore[attr-defined]
    manage_watchers.__doc__ = original.__doc__
    Arbiter.manage_watchers = manage_watchers
    return True


def patch_manage_processes() -> bool:
    """Make `Watcher.manage_processes` reap its exited processes before dropping them; False
    when circus has changed in a way this does not recognise (then it is left alone)."""
    from circus.process import DEAD_OR_ZOMBIE
    from circus.watcher import Watcher

    original: Any = Watcher.__dict__.get("manage_processes")
    if original is None or not hasattr(Watcher, "reap_process"):
        return False
    if getattr(original, "_swapd_patched", False):
        return True

    def manage_processes(self: Any) -> Any:
        if not self.is_stopped():
            for process in list(self.processes.values()):
                # A zombie only: `reap_process` waits for a process that still runs.
                if process.status == DEAD_OR_ZOMBIE:
                    self.reap_process(process.pid)
        return original(self)

    manage_processes._swapd_patched = True  # type: ignore[attr-defined]
    manage_processes.__doc__ = original.__doc__
    Watcher.manage_processes = manage_processes
    return True


def patch_sighup() -> bool:
    """Make circusd's SIGHUP a `signal swapd-daemon HUP`; False when circus has changed."""
    import signal

    from circus.client import make_json
    from circus.sighandler import SysHandler

    from .circus_config import DAEMON_WATCHER

    if not hasattr(SysHandler, "handle_hup"):
        return False

    def handle_hup(self: Any) -> None:
        # As circus's own handlers do: hand over to the loop's thread.
        command = make_json("signal", name=DAEMON_WATCHER, signum=int(signal.SIGHUP))
        self.controller.loop.add_callback_from_signal(self.controller.dispatch, (None, command))

    SysHandler.handle_hup = handle_hup
    return True


def main() -> None:
    patch_manage_watchers()
    patch_manage_processes()
    patch_sighup()
    from circus.circusd import main as circusd_main

    circusd_main()


if __name__ == "__main__":
    main()
