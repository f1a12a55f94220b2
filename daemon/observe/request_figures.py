"""The request figures of `/metrics`, counted from the activity records the proxies report:
requests by model, route and status; duration, time to first byte and wait histograms; tokens
and token speeds by model.

They are a prometheus-client custom collector over plain counts rather than `Counter` and
`Histogram` children: a record costs a few list increments (`bisect` for the bucket) instead of
one locked `observe`/`inc` per figure, which was most of the daemon's share of a request's
observability cost (benchmarks/observability_cost.py). The exposition is the same families,
labels and buckets, without the optional `_created` series.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ...ipc.activity import ActivityRecord

# Request durations, time to first byte and waits: from a ready model's milliseconds to a cold
# start's minutes.
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
SPEEDS = (1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class _Histogram:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf only)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: the first bound >= value
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out = []
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            out.append((floatToGoString(bound), float(total)))
        out.append(("+Inf", float(total + self.counts[-1])))
        return out


class _PerRoute:
    __slots__ = ("duration", "ttfb")

    def __init__(self) -> None:
        self.duration = _Histogram(SECONDS)
        self.ttfb = _Histogram(SECONDS)


class _PerModel:
    __slots__ = ("cached", "gen_speed", "generated", "prompt", "prompt_speed", "wait")

    def __init__(self) -> None:
        self.wait = _Histogram(SECONDS)
        self.prompt_speed = _Histogram(SPEEDS)
        self.gen_speed = _Histogram(SPEEDS)
        self.prompt = self.generated = self.cached = 0


class RequestFigures(Collector):
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}
        self.routes: dict[tuple[str, str], _PerRoute] = {}
        self.models: dict[str, _PerModel] = {}

    def add(self, records: Iterable[ActivityRecord]) -> None:
        requests, routes, models = self.requests, self.routes, self.models
        for r in records:
            model = r.model
            key = (model, r.route, r.resp_status_code)
            requests[key] = requests.get(key, 0) + 1
            per_route = routes.get(key[:2])
            if per_route is None:
                per_route = routes[key[:2]] = _PerRoute()
            per_model = models.get(model)
            if per_model is None:
                per_model = models[model] = _PerModel()
            per_route.duration.observe(r.duration_ms / 1000)
            if r.ttfb_ms >= 0:
                per_route.ttfb.observe(r.ttfb_ms / 1000)
            if r.wait_ms > 0:
                per_model.wait.observe(r.wait_ms / 1000)
            t = r.tokens
            if t.input_tokens > 0:
                per_model.prompt += t.input_tokens
            if t.output_tokens > 0:
                per_model.generated += t.output_tokens
            if t.cache_tokens > 0:
                per_model.cached += t.cache_tokens
            if t.prompt_per_second > 0:
                per_model.prompt_speed.observe(t.prompt_per_second)
            if t.tokens_per_second > 0:
                per_model.gen_speed.observe(t.tokens_per_second)

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
