"""The model page's Learned panel (proxy/ui/static/learned.js) and `swapd status`'s note, their
words only: the page-cache
share of the model's weight files, who follows it, and "off" when `learn.enabled: false` (the
status entry's `learned` is null). The stack test (tests/stack/test_learned_traffic.py) holds the
figures the daemon puts in `/api/status`."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from swapd.daemon.cli.operator import learned_note
from swapd.ipc.model_status import Follower, Learned, ModelStatus, PageCache
from swapd.ipc.states import ModelState
from tests.support.ui_modules import evaluate, module_url, needs_node


def _words(status: ModelStatus) -> list[list[str]]:
    entry: Any = msgspec.to_builtins(status)
    script = (
        f"import * as m from {module_url('learned.js')};"
        f"console.log(JSON.stringify(m.learnedWords({json.dumps(entry)})));"
    )
    words: list[list[str]] = evaluate(script)
    return words


@needs_node
def test_the_learned_panels_words() -> None:
    learned = Learned(
        followers=(Follower("b", 3.0, 0.75, 2.5),),
        likely_next="b",
        returns=(65.0,),
        prefetched_at=1.0,
        prefetched_bytes=1024 * 1024,
    )
    cache = PageCache(
        files=1, size=4 * 1024 * 1024, cached=1024 * 1024, fraction=0.25, sampled_at=1
    )
    words = dict(_words(ModelStatus("a", ModelState.READY, learned=learned, page_cache=cache)))
    assert words["in the page cache"] == "25 % (1.0 MiB of 4.0 MiB, 1 file(s))"
    assert words["followed by"] == "b (3.0 times, 75 %, after 2.50 s)"
    assert words["likely next"].startswith("b ")
    assert words["asked again after"] == "1m 5s"
    assert words["read ahead"].startswith("1.0 MiB")
    off = dict(_words(ModelStatus("a", ModelState.STOPPED)))
    assert off["learning"] == "off (learn.enabled: false)"
    assert off["in the page cache"].startswith("\u2013")


def test_swapd_status_notes_the_likely_next_model_and_the_page_cache() -> None:
    learned = Learned(followers=(Follower("b", 3.0, 0.75, 2.5),), likely_next="b")
    gib = 2**30
    cache = PageCache(files=2, size=8 * gib, cached=6 * gib, fraction=0.75, sampled_at=1)
    status = ModelStatus("a", ModelState.READY, learned=learned, page_cache=cache)
    assert learned_note(status) == (
        "a: usually followed by b (after 2.50s); 75% of its weight files in the page cache"
        " (6.0 of 8.0 GiB)"
    )
    assert learned_note(ModelStatus("a", ModelState.READY, learned=Learned())) == ""
    assert learned_note(ModelStatus("a", ModelState.READY)) == ""
