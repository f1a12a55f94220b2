"""The request figures' `model` label is bounded by the config (issue 29, finding 2): a record
counts under its model's id only when the config names that model (an id, an alias, a peer's
`peer/model`, a selector), everything else under the one `OTHER` label; and a scrape renders
from a copy (`RequestFigures.frozen`) that the records arriving meanwhile do not change."""

from __future__ import annotations

import asyncio
import textwrap

from prometheus_client.parser import text_string_to_metric_families

from swapd.daemon.config.loader import load_config_text
from swapd.daemon.observe.metrics import Metrics
from swapd.daemon.observe.request_figures import OTHER, RequestFigures, model_labels
from swapd.ipc.activity import ActivityRecord

CONFIG = textwrap.dedent(
    """
    models:
      alpha:
        cmd: sleep 100
        proxy: http://127.0.0.1:9
        aliases: [a, first]
      beta:
        cmd: sleep 100
        proxy: http://127.0.0.1:9
    selectors:
      pick:
        strategy: pin
        targets: [alpha, beta]
    peers:
      far:
        proxy: http://127.0.0.1:8
        models: [gamma, delta]
    """
)
KEY = "sk-live-0123456789abcdef"


def _record(model: str, status: int = 200, route: str = "model") -> ActivityRecord:
    return ActivityRecord(
        timestamp=1.0,
        model=model,
        route=route,
        method="POST",
        req_path="/v1/chat/completions",
        resp_status_code=status,
        duration_ms=2.0,
    )


def _model_labels(text: str) -> set[str]:
    found = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "model" in sample.labels:
                found.add(sample.labels["model"])
    return found


def _requests(text: str) -> dict[tuple[str, str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "swapd_requests_total":
                out[(s.labels["model"], s.labels["route"], s.labels["status"])] = s.value
    return out


def test_labels_are_the_configs_models_aliases_and_peer_models() -> None:
    labels = model_labels(load_config_text(CONFIG, environ={}))
    assert labels == {
        "alpha": "alpha",
        "a": "alpha",
        "first": "alpha",
        "beta": "beta",
        "far/gamma": "far/gamma",
        "far/delta": "far/delta",
        "pick": "pick",
    }


def test_unknown_names_share_one_label_and_the_exposition_does_not_grow() -> None:
    metrics = Metrics()
    metrics.request_figures.labels = model_labels(load_config_text(CONFIG, environ={}))
    metrics.records([_record("alpha"), _record("a"), _record("far/gamma", route="peer")])
    metrics.records([_record("no-such-model", 404), _record("-", 404, route="upstream")])
    before = asyncio.run(metrics.exposition())
    metrics.records(_record(f"unknown-{i}", 404) for i in range(2000))
    metrics.records([_record(KEY, 404), _record("gamma", 404)])  # a bare peer name: not a label
    after = asyncio.run(metrics.exposition()).decode()

    assert KEY not in after
    assert _model_labels(after) == {"alpha", "far/gamma", OTHER}
    counts = _requests(after)
    assert counts[("alpha", "model", "200")] == 2  # the alias counts as its model
    assert counts[(OTHER, "model", "404")] == 1 + 2000 + 2
    assert counts[(OTHER, "upstream", "404")] == 1
    # The same series as before the 2,002 names: only the numbers in them changed.
    assert len(after.splitlines()) == len(before.decode().splitlines())


def test_a_reload_changes_the_labels_of_requests_from_then_on() -> None:
    figures = RequestFigures({"old": "old"})
    figures.add([_record("old"), _record("new")])
    figures.labels = {"new": "new"}  # the reload removed `old` and added `new`
    figures.add([_record("old"), _record("new")])
    counts = {
        (s.labels["model"]): s.value
        for family in figures.collect()
        for s in family.samples
        if s.name == "swapd_requests_total"
    }
    # What was counted stays where it was counted (the config's history bounds it).
    assert counts == {"old": 1, "new": 1, OTHER: 2}


def test_the_frozen_copy_renders_what_was_counted_when_it_was_taken() -> None:
    figures = RequestFigures({"m": "m"})
    figures.add([_record("m")] * 3)
    frozen = figures.frozen()
    figures.add([_record("m")] * 5)  # records that arrive while the copy renders
    frozen_families = {f.name: f for f in frozen.collect()}
    (requests,) = frozen_families["swapd_requests"].samples
    assert requests.value == 3
    durations = frozen_families["swapd_request_duration_seconds"].samples
    assert [s.value for s in durations if s.name.endswith("_count")] == [3]
    # ... and rendering it (which folds its own values) left the live figures as they were.
    live = {f.name: f for f in figures.collect()}
    assert live["swapd_requests"].samples[0].value == 8
    assert [
        s.value for s in live["swapd_request_duration_seconds"].samples if s.name.endswith("_count")
    ] == [8]
