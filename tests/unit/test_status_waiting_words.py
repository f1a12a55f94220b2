"""`swapd status`'s line for a swap that waits (`daemon/cli/operator.py`), from the typed wait: a
collation says which loaded model's queue is served first and how much longer at most."""

from __future__ import annotations

from swapd.daemon.cli.operator import waiting_words
from swapd.ipc.causes import WaitCause
from swapd.ipc.model_status import Waiting


def test_a_collation_says_whose_queue_is_served_first_and_for_how_long_at_most() -> None:
    w = Waiting(
        reason="requests in flight for gemma-a (collation)",
        since=1000.0,
        until=1005.2,
        cause=WaitCause.COLLATION,
        serving=("gemma-a",),
    )
    assert waiting_words(w, now=1001.0) == (
        "a swap to it waits (for 1s): serving gemma-a's queue first; at most 4.2 s more"
    )


def test_other_waits_keep_the_scheduler_s_words() -> None:
    w = Waiting(reason="behind the swap to c in the queue", since=1000.0, cause=WaitCause.QUEUE)
    assert waiting_words(w, now=1012.0) == (
        "a swap to it waits (for 12s): behind the swap to c in the queue"
    )
