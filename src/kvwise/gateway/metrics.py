"""The gateway's `/metrics`: Prometheus exposition by `prometheus_client`, one registry per
gateway (tests run several in one process).

`Counter` and `Histogram` are the library's, behind a call shape the hot path keeps short
(`inc(*labels)`, `observe(value, *labels)`); `Gauge` is a collector read at scrape time, for
figures that mirror live state (queue depth, KV tokens in use) or counts kept elsewhere (the
admission controller's totals, `kind="counter"`), so they are never stale.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import prometheus_client
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

LabelValues = tuple[str, ...]

# The `_created` series (a timestamp per counter and histogram) are not part of what the
# gateway reports: without them the exposition is the one it always had
prometheus_client.disable_created_metrics()

# Seconds; covers a 1 ms gateway hop up to a minute-long queue wait.
# The gateway's own share of a request: tens of microseconds to a few milliseconds.
OVERHEAD_BUCKETS_S = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Counter:
    def __init__(
        self, name: str, help: str, label_names: tuple[str, ...] = (), *, registry: Registry
    ) -> None:
        self.name = name
        self._metric = prometheus_client.Counter(
            name, help, label_names, registry=registry.collectors
        )
        self._children = _Children(self._metric, bool(label_names))

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self._children.of(labels).inc(amount)

    def get(self, *labels: str) -> float:
        return _sample(self._metric, f"{self.name}", labels)


class Histogram(Collector):
    """A histogram exposed as `prometheus_client.Histogram` exposes it (same series, same
    text), observed with a bisection and two additions: the library's `observe` takes a lock
    per bucket and per sum (the gateway runs on one event loop; a scrape reads counts that
    an observation at most half updated, as a lock-free exposition can), and the hot path
    observes a few times per request."""

    def __init__(
        self,
        name: str,
        help: str,
        label_names: tuple[str, ...] = (),
        buckets: tuple[float, ...] = LATENCY_BUCKETS_S,
        *,
        registry: Registry,
    ) -> None:
        self.name = name
        self.help = help
        self.label_names = label_names
        self.buckets = buckets
        self._bounds = [*map(float, buckets), math.inf]
        self._les = [floatToGoString(bound) for bound in self._bounds]
        # per label values: [observations per bucket (not cumulative)..., sum]
        self._series: dict[LabelValues, list[float]] = {}
        if not label_names:  # as the library: an unlabelled histogram shows zeros from the start
            self._series[()] = [0.0] * (len(self._bounds) + 1)
        registry.add(self)

    def observe(self, value: float, *labels: str) -> None:
        series = self._series.get(labels)
        if series is None:
            if len(labels) != len(self.label_names):
                raise ValueError(f"{self.name}: label values {labels} for {self.label_names}")
            series = self._series[labels] = [0.0] * (len(self._bounds) + 1)
        series[bisect.bisect_left(self._bounds, value)] += 1  # le: value <= bound
        series[-1] += value

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.help, labels=self.label_names)
        for labels, series in list(self._series.items()):
            counts = list(itertools.accumulate(series[:-1]))
            family.add_metric(list(labels), list(zip(self._les, counts, strict=True)), series[-1])
        yield family

    def count(self, *labels: str) -> int:
        series = self._series.get(labels)
        return int(sum(series[:-1])) if series else 0

    def cumulative(self, *labels: str) -> dict[float, float]:
        """{upper bound: observations at or under it}, +Inf included; {} before the first."""
        series = self._series.get(labels)
        if not series or not any(series[:-1]):
            return {}
        return dict(zip(self._bounds, itertools.accumulate(series[:-1]), strict=True))


class _Children:
    """A metric's child per label values, looked up once: the library's `labels()` checks
    and locks on every call, and the hot path counts a handful of times per request."""

    def __init__(self, metric: Any, is_labelled: bool) -> None:
        self._metric = metric
        self._by_labels: dict[LabelValues, Any] = {} if is_labelled else {(): metric}

    def of(self, labels: LabelValues) -> Any:
        child = self._by_labels.get(labels)
        if child is None:
            child = self._by_labels[labels] = self._metric.labels(*labels)
        return child


def _label_values(labels: dict[str, str]) -> LabelValues:
    return tuple(value for name, value in labels.items() if name != "le")


def _sample(metric: Any, name: str, labels: LabelValues) -> float:
    for family in metric.collect():
        for sample in family.samples:
            if sample.name == name and _label_values(sample.labels) == labels:
                return float(sample.value)
    return 0.0


@dataclass(eq=False)  # hashable by identity: the registry keys its collectors
class Gauge(Collector):
    """A value read at scrape time: `read()` returns {label values: value}. `kind` "counter"
    exposes a count that something else keeps (e.g. the admission controller's totals)."""

    name: str
    help: str
    read: Callable[[], dict[LabelValues, float]]
    label_names: tuple[str, ...] = ()
    kind: str = "gauge"

    def collect(self) -> Iterable[Metric]:
        family_type = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        family = family_type(self.name, self.help, labels=self.label_names)
        for labels, value in self.read().items():
            family.add_metric(list(labels), value)
        yield family


C = TypeVar("C", bound=Collector)


class Registry:
    def __init__(self) -> None:
        self.collectors = prometheus_client.CollectorRegistry(auto_describe=False)

    def add(self, metric: C) -> C:
        self.collectors.register(metric)
        return metric

    def render(self) -> str:
        return prometheus_client.generate_latest(self.collectors).decode()


class GatewayMetrics:
    """Every series `/metrics` shows; live state is read from the gateway at scrape time."""

    def __init__(self, gateway: Any) -> None:
        self.registry = registry = Registry()
        admission, replicas = gateway.admission, gateway.replicas

        def per_replica(value: Callable[[Any], float]) -> Callable[[], dict[LabelValues, float]]:
            return lambda: {(r.name,): float(value(r)) for r in replicas}

        def total(value: Callable[[], float]) -> Callable[[], dict[LabelValues, float]]:
            return lambda: {(): float(value())}

        gauges = (
            ("kvwise_queue_depth", "requests waiting for KV budget", lambda: len(admission.queue)),
            (
                "kvwise_queue_tokens",
                "KV tokens the queued would reserve",
                lambda: admission.queue.queued_tokens,
            ),
            ("kvwise_sessions", "live agent sessions in the store", lambda: gateway.num_sessions),
        )
        for name, help_text, read in gauges:
            registry.add(Gauge(name, help_text, total(read)))
        counters = (
            (
                "kvwise_requests_admitted_total",
                "requests given a KV lease",
                lambda: admission.num_admitted,
            ),
            (
                "kvwise_requests_queued_total",
                "requests that had to wait",
                lambda: admission.num_queued,
            ),
            (
                "kvwise_requests_rejected_total",
                "queue full or timed out (429)",
                lambda: admission.num_rejected,
            ),
        )
        for name, help_text, read in counters:
            registry.add(Gauge(name, help_text, total(read), kind="counter"))
        replica_gauges: tuple[tuple[str, str, Callable[[Any], float]], ...] = (
            (
                "kvwise_kv_budget_tokens",
                "KV-token budget (plan or --kv-budget-tokens)",
                lambda r: r.budget_tokens,
            ),
            (
                "kvwise_kv_effective_budget_tokens",
                "budget less others' live KV use",
                lambda r: r.effective_budget_tokens(),
            ),
            (
                "kvwise_kv_reserved_tokens",
                "KV tokens reserved by requests in flight",
                lambda r: r.reserved_tokens,
            ),
            (
                "kvwise_kv_reserved_peak_tokens",
                "highest reservation seen",
                lambda r: r.peak_reserved_tokens,
            ),
            (
                "kvwise_requests_in_flight",
                "requests running on the replica",
                lambda r: r.num_in_flight,
            ),
            (
                "kvwise_replica_healthy",
                "1 when the replica passes its health check",
                lambda r: r.is_healthy,
            ),
        )
        for name, help_text, value in replica_gauges:
            registry.add(Gauge(name, help_text, per_replica(value), ("replica",)))
        self.responses = Counter(
            "kvwise_http_responses_total", "responses by status", ("code",), registry=registry
        )
        self.rate_limited = Counter(
            "kvwise_rate_limited_total", "requests over a key's rate limit", registry=registry
        )
        self.disconnects = Counter(
            "kvwise_client_disconnects_total", "clients gone mid-request", registry=registry
        )
        self.failovers = Counter(
            "kvwise_failovers_total", "requests moved to another replica", registry=registry
        )
        self.broken_streams = Counter(
            "kvwise_broken_streams_total",
            "streams ended with an error event after a replica failed",
            registry=registry,
        )
        self.upstream_latency = Histogram(
            "kvwise_request_duration_seconds",
            "request time, arrival to last byte",
            ("replica",),
            registry=registry,
        )
        self.ttft = Histogram(
            "kvwise_ttft_seconds", "time to first token, at the gateway", registry=registry
        )
        self.ttft_overhead = Histogram(
            "kvwise_gateway_ttft_overhead_seconds",
            "the gateway's own processing on the TTFT path (queue wait excluded)",
            buckets=OVERHEAD_BUCKETS_S,
            registry=registry,
        )
        self.tpot = Histogram(
            "kvwise_tpot_seconds", "time per output token after the first", registry=registry
        )
