"""How a process's end is said, the same wherever swapd reports one (a start that failed, a
ready model's crash): an exit code as a number, a death by signal by the signal's name and what
it means, since `exit code -4` tells a reader nothing and `killed by SIGILL (illegal
instruction)` tells them the binary does not suit this CPU.

Exit codes come as circus and Python report them: -N for a process killed by signal N. A shell
or `docker run` in between reports its child's death by signal N as 128 + N, which is said too.
"""

from __future__ import annotations

import signal

# Said after the signal's own description where a reader needs more than its name.
_HINTS = {
    signal.SIGKILL: "the kernel's out-of-memory killer sends it too",
}


def signal_of(code: int | None) -> signal.Signals | None:
    """The signal that ended a process with exit code `code` (-N), or None."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code)
    except ValueError:
        return None


def killed_by(sig: signal.Signals) -> str:
    """`killed by SIGILL (illegal instruction)`."""
    described = (signal.strsignal(sig) or sig.name).lower()
    hint = _HINTS.get(sig)
    return f"killed by {sig.name} ({described}{'; ' + hint if hint else ''})"


def said(code: int | None) -> str:
    """The end of a process with exit code `code` (None: not known), in words: `exit code 1`,
    `killed by SIGILL (illegal instruction)`, `an unknown exit code`."""
    if code is None:
        return "an unknown exit code"
    sig = signal_of(code)
    if sig is not None:
        return killed_by(sig)
    if 128 < code < 128 + 65:
        try:
            through = signal.Signals(code - 128)
        except ValueError:
            return f"exit code {code}"
        return f"exit code {code} (a shell's or docker's way of saying: {killed_by(through)})"
    return f"exit code {code}"
