"""Prometheus text exposition (format 0.0.4) for the gateway, without a client library.

Counters, gauges and histograms with labels; `render()` writes them in the order they were
declared. Gauges that mirror live state (queue depth, KV tokens in use) are read through
callbacks at scrape time, so they are never stale.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

LabelValues = tuple[str, ...]

# Seconds; covers a 1 ms gateway hop up to a minute-long queue wait.
# The gateway's own share of a request: tens of microseconds to a few milliseconds.
OVERHEAD_BUCKETS_S = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05)
LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: LabelValues, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


@dataclass
class Counter:
    name: str
    help: str
    label_names: tuple[str, ...] = ()
    values: dict[LabelValues, float] = field(default_factory=dict)
    kind = "counter"

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def samples(self) -> Iterable[str]:
        for labels, value in self.values.items():
            yield f"{self.name}{_labels(self.label_names, labels)} {value:g}"


@dataclass
class Gauge:
    """A value read at scrape time: `read()` returns {label values: value}. `kind` "counter"
    exposes a count that something else keeps (e.g. the admission controller's totals)."""

    name: str
    help: str
    read: Callable[[], dict[LabelValues, float]]
    label_names: tuple[str, ...] = ()
    kind: str = "gauge"

    def samples(self) -> Iterable[str]:
        for labels, value in self.read().items():
            yield f"{self.name}{_labels(self.label_names, labels)} {value:g}"


@dataclass
class _Series:
    bucket_counts: list[int]
    total: float = 0.0
    count: int = 0


@dataclass
class Histogram:
    name: str
    help: str
    label_names: tuple[str, ...] = ()
    buckets: tuple[float, ...] = LATENCY_BUCKETS_S
    series: dict[LabelValues, _Series] = field(default_factory=dict)
    kind = "histogram"

    def observe(self, value: float, *labels: str) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = _Series([0] * len(self.buckets))
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.buckets):
            series.bucket_counts[index] += 1
        series.total += value
        series.count += 1

    def count(self, *labels: str) -> int:
        series = self.series.get(labels)
        return series.count if series else 0

    def samples(self) -> Iterable[str]:
        for labels, series in self.series.items():
            cumulative = 0
            for bound, n in zip(self.buckets, series.bucket_counts, strict=True):
                cumulative += n
                le = _labels(self.label_names, labels, f'le="{bound:g}"')
                yield f"{self.name}_bucket{le} {cumulative}"
            inf = _labels(self.label_names, labels, 'le="+Inf"')
            yield f"{self.name}_bucket{inf} {series.count}"
            yield f"{self.name}_sum{_labels(self.label_names, labels)} {series.total:g}"
            yield f"{self.name}_count{_labels(self.label_names, labels)} {series.count}"


Metric = Counter | Gauge | Histogram
M = TypeVar("M", Counter, Gauge, Histogram)


class Registry:
    def __init__(self) -> None:
        self._metrics: list[Metric] = []

    def add(self, metric: M) -> M:
        self._metrics.append(metric)
        return metric

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics:
            lines.append(f"# HELP {metric.name} {metric.help}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            lines.extend(metric.samples())
        return "\n".join(lines) + "\n"


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
        self.responses = registry.add(
            Counter("kvwise_http_responses_total", "responses by status", ("code",))
        )
        self.rate_limited = registry.add(
            Counter("kvwise_rate_limited_total", "requests over a key's rate limit")
        )
        self.disconnects = registry.add(
            Counter("kvwise_client_disconnects_total", "clients gone mid-request")
        )
        self.failovers = registry.add(
            Counter("kvwise_failovers_total", "requests moved to another replica")
        )
        self.broken_streams = registry.add(
            Counter(
                "kvwise_broken_streams_total",
                "streams ended with an error event after a replica failed",
            )
        )
        self.upstream_latency = registry.add(
            Histogram(
                "kvwise_request_duration_seconds",
                "request time, arrival to last byte",
                ("replica",),
            )
        )
        self.ttft = registry.add(
            Histogram("kvwise_ttft_seconds", "time to first token, at the gateway")
        )
        self.ttft_overhead = registry.add(
            Histogram(
                "kvwise_gateway_ttft_overhead_seconds",
                "the gateway's own processing on the TTFT path (queue wait excluded)",
                buckets=OVERHEAD_BUCKETS_S,
            )
        )
        self.tpot = registry.add(
            Histogram("kvwise_tpot_seconds", "time per output token after the first")
        )
