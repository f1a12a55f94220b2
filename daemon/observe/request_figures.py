"""The request figures of `/metrics`, counted from the activity records the proxies report:
requests by model, route and status; duration, time to first byte and wait histograms; tokens
and token speeds by model.

They are a prometheus-client custom collector over plain counts rather than `Counter` and
`Histogram` children: a record costs a few dict and list operations instead of one locked
`observe`/`inc` per figure, which was most of the daemon's share of a request's observability
cost (benchmarks/observability_cost.py). A histogram appends each value and sorts them into its
buckets at a scrape, or once FOLD have piled up (one `sort` and a `bisect` per bucket for the
lot, a few times cheaper than a `bisect` per value). The exposition is the same families,
labels and buckets, without the optional `_created` series.

The `model` label is bounded by the config, never by what clients send: a record counts under
its model's id only when the config names that model (a local id or alias, a peer's
`peer/model`, a selector), and under `OTHER` otherwise. A name a client made up (a typo, a
scan, a key sent as the model) is then one more count of one series, not a new set of ~90
series kept forever and rendered at every scrape.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ...ipc.activity import ActivityRecord
from ...ipc.routing_table import RoutePeer
from ..config import Config

# Request durations, time to first byte and waits: from a ready model's milliseconds to a cold
# start's minutes.
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
SPEEDS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
# Values a histogram holds before it sorts them into its buckets (some 64 KiB of floats).
FOLD = 2048
# The `model` label of every request whose model the config does not name. A model id cannot
# be empty, and one spelled like this is unlikely enough: the label only has to be fixed.
OTHER = "(other)"


def model_labels(config: Config) -> dict[str, str]:
    """Every name a request's record may carry that gets a label of its own: local model ids
    and their aliases (an alias counts as its model), each peer's models as `peer/model`, the
    name a peer's record carries, and the selectors (a request a selector served counts under
    the model it chose; one it refused, under the selector)."""
    labels = {peer_model: peer_model for peer_model in _peer_models(config)}
    labels.update((selector, selector) for selector in config.selectors)
    for model in config.models.values():
        labels.update(dict.fromkeys(model.aliases, model.id))
    labels.update((model_id, model_id) for model_id in config.models)  # ids win over aliases
    return labels


def _peer_models(config: Config) -> Iterator[str]:
    peers: Iterable[RoutePeer] = config.peers.values()
    for peer in peers:
        for model in peer.models:
            yield f"{peer.id}/{model}"


class _Histogram:
    __slots__ = ("bounds", "counts", "sum", "values")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf only)
        self.sum = 0.0
        self.values: list[float] = []  # observed, not yet in `counts`

    def copy(self) -> _Histogram:
        twin = _Histogram(self.bounds)
        twin.counts, twin.sum, twin.values = self.counts[:], self.sum, self.values[:]
        return twin

    def fold(self) -> None:
        values = self.values
        if not values:
            return
        self.sum += sum(values)
        values.sort()
        counts, below = self.counts, 0
        for i, bound in enumerate(self.bounds):
            upto = bisect_right(values, bound)  # le: the values <= bound
            counts[i] += upto - below
            below = upto
        counts[-1] += len(values) - below
        self.values = []

    def buckets(self) -> list[tuple[str, float]]:
        self.fold()
        out = []
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            out.append((floatToGoString(bound), float(total)))
        out.append(("+Inf", float(total + self.counts[-1])))
        return out


class _PerRoute:
    __slots__ = ("duration", "histograms", "ttfb")

    def __init__(self) -> None:
        self.duration = _Histogram(SECONDS)
        self.ttfb = _Histogram(SECONDS)
        self.histograms = (self.duration, self.ttfb)

    def copy(self) -> _PerRoute:
        twin = _PerRoute()
        twin.duration, twin.ttfb = self.duration.copy(), self.ttfb.copy()
        twin.histograms = (twin.duration, twin.ttfb)
        return twin


class _PerModel:
    __slots__ = (
        "cached", "gen_speed", "generated", "histograms", "prompt", "prompt_speed", "wait",
    )  # fmt: skip

    def __init__(self) -> None:
        self.wait = _Histogram(SECONDS)
        self.prompt_speed = _Histogram(SPEEDS)
        self.gen_speed = _Histogram(SPEEDS)
        self.histograms = (self.wait, self.prompt_speed, self.gen_speed)
        self.prompt = self.generated = self.cached = 0

    def copy(self) -> _PerModel:
        twin = _PerModel()
        twin.wait, twin.prompt_speed, twin.gen_speed = (h.copy() for h in self.histograms)
        twin.histograms = (twin.wait, twin.prompt_speed, twin.gen_speed)
        twin.prompt, twin.generated, twin.cached = self.prompt, self.generated, self.cached
        return twin


class RequestFigures(Collector):
    def __init__(self, labels: dict[str, str] | None = None) -> None:
        """`labels`: record model name -> its `model` label (`model_labels`); any other name
        counts as `OTHER`."""
        self.labels = labels or {}
        self.requests: dict[tuple[str, str, int], int] = {}
        self.routes: dict[tuple[str, str], _PerRoute] = {}
        self.models: dict[str, _PerModel] = {}

    def add(self, records: Iterable[ActivityRecord]) -> None:
        requests, routes, models, labels = self.requests, self.routes, self.models, self.labels
        for r in records:
            model = labels.get(r.model, OTHER)
            key = (model, r.route, r.resp_status_code)
            requests[key] = requests.get(key, 0) + 1
            per_route = routes.get(key[:2])
            if per_route is None:
                per_route = routes[key[:2]] = _PerRoute()
            per_model = models.get(model)
            if per_model is None:
                per_model = models[model] = _PerModel()
            per_route.duration.values.append(r.duration_ms / 1000)
            if r.ttfb_ms >= 0:
                per_route.ttfb.values.append(r.ttfb_ms / 1000)
            if r.wait_ms > 0:
                per_model.wait.values.append(r.wait_ms / 1000)
            t = r.tokens
            if t.input_tokens > 0:
                per_model.prompt += t.input_tokens
            if t.output_tokens > 0:
                per_model.generated += t.output_tokens
            if t.cache_tokens > 0:
                per_model.cached += t.cache_tokens
            if t.prompt_per_second > 0:
                per_model.prompt_speed.values.append(t.prompt_per_second)
            if t.tokens_per_second > 0:
                per_model.gen_speed.values.append(t.tokens_per_second)
        every: list[_PerRoute | _PerModel] = [*routes.values(), *models.values()]
        for figures in every:
            for histogram in figures.histograms:
                if len(histogram.values) >= FOLD:
                    histogram.fold()

    def frozen(self) -> RequestFigures:
        """A copy that no record changes, to collect and render away from the daemon's loop
        (`Metrics.exposition`): a few list copies per series, where building and formatting its
        lines costs some 8 µs each."""
        twin = RequestFigures(self.labels)
        twin.requests = dict(self.requests)
        twin.routes = {key: figures.copy() for key, figures in self.routes.items()}
        twin.models = {key: figures.copy() for key, figures in self.models.items()}
        return twin

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "swapd_requests", "model requests answered", labels=["model", "route", "status"]
        )
        for (model, route, status), count in sorted(self.requests.items()):
            requests.add_metric([model, route, str(status)], float(count))
        yield requests
        duration = HistogramMetricFamily(
            "swapd_request_duration_seconds", "arrival to the last byte", labels=["model", "route"]
        )
        ttfb = HistogramMetricFamily(
            "swapd_request_ttfb_seconds",
            "arrival to the upstream's response head",
            labels=["model", "route"],
        )
        for labels, per_route in sorted(self.routes.items()):
            _add(duration, list(labels), per_route.duration)
            _add(ttfb, list(labels), per_route.ttfb)
        yield from (duration, ttfb)
        wait = HistogramMetricFamily(
            "swapd_request_wait_seconds",
            "time requests waited for a start, swap or drain",
            labels=["model"],
        )
        tokens = CounterMetricFamily(
            "swapd_tokens", "tokens the models reported", labels=["model", "kind"]
        )
        prompt_speed = HistogramMetricFamily(
            "swapd_prompt_tokens_per_second",
            "prompt processing speed the models reported",
            labels=["model"],
        )
        gen_speed = HistogramMetricFamily(
            "swapd_generation_tokens_per_second",
            "generation speed the models reported",
            labels=["model"],
        )
        for model, per_model in sorted(self.models.items()):
            _add(wait, [model], per_model.wait)
            _add(prompt_speed, [model], per_model.prompt_speed)
            _add(gen_speed, [model], per_model.gen_speed)
            for kind, count in (
                ("prompt", per_model.prompt),
                ("generated", per_model.generated),
                ("cached", per_model.cached),
            ):
                tokens.add_metric([model, kind], float(count))
        yield from (wait, tokens, prompt_speed, gen_speed)


def _add(family: HistogramMetricFamily, labels: list[str], hist: _Histogram) -> None:
    family.add_metric(labels, hist.buckets(), hist.sum)
