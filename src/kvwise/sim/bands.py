"""Error bands: how far the simulator was from real measurements it had never seen.

`data/error_bands.json` (written by `benchmarks/error_bands.py`, never by hand) holds, per metric,
GPU class and load regime, the 10th, 50th and 90th percentiles of the signed relative error
(predicted - measured) / measured over out-of-sample points only: each source of
serving_benchmarks.jsonl scored with coefficients refitted without it (leave-one-source-out)
and every scored record of the unseen file (nothing fitted on it). A prediction looks its band
up after the run: 80 % of those points had an error between p10 and p90. A cell with fewer than
MIN_POINTS points falls back to the wider cell the file names, or says there is no data.

The regime is the prediction's own, classified as the fidelity harness classifies measurements
(tests/sim/loso.py), with the simulation's own queue time: overload when requests wait in the
queue for more than OVERLOAD_TTFT_OVER_TPOT mean TPOTs or are preempted; low when one request
runs at a time or an open loop keeps up (output throughput within 10 % of the offered load);
saturation otherwise. The bands are binned by this predicted regime, so a prediction is judged
by the errors of the predictions that looked like it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kvwise.sim.workloads import WorkloadSpec

# median TTFT above this many mean TPOTs: requests wait many engine steps for their first token
OVERLOAD_TTFT_OVER_TPOT = 5.0
KEPT_UP = 0.9  # output throughput / offered load above which the server kept up
MIN_POINTS = 5  # a cell with fewer out-of-sample points borrows the wider cell's band
BAND_METRICS = ("output_throughput", "mean_tpot_ms", "median_ttft_ms")
CONSUMER_PREFIXES = ("RTX",)


def gpu_class(gpu_name: str) -> str:
    """GeForce RTX cards are consumer, RTX PRO are workstation, the rest datacenter."""
    if gpu_name.startswith("RTX PRO"):
        return "workstation"
    return "consumer" if gpu_name.startswith(CONSUMER_PREFIXES) else "datacenter"


def load_regime(
    overloaded: bool,
    max_concurrency: int | None,
    request_rate: float | None,
    output_len: int,
    output_throughput: float | None,
) -> str:
    """low, saturation or overload (the rule in this module's docstring)."""
    if overloaded:
        return "overload"
    if max_concurrency == 1:
        return "low"
    if request_rate and request_rate != float("inf") and max_concurrency is None:
        offered = request_rate * output_len
        if output_throughput and output_throughput >= KEPT_UP * offered:
            return "low"
    return "saturation"


def predicts_overload(metrics: dict[str, Any]) -> bool:
    """The simulation preempts requests, or they wait in the queue for more than
    OVERLOAD_TTFT_OVER_TPOT decode steps before they are scheduled. (A measurement has no queue
    time, so the fidelity harness reads the wait from TTFT; a simulation knows it, and a long
    prompt's own prefill is not a queue.)"""
    queue = metrics.get("mean_queue_ms") or 0.0
    tpot = max(metrics.get("mean_tpot_ms") or 0.0, 1e-9)
    return queue > OVERLOAD_TTFT_OVER_TPOT * tpot or (metrics.get("num_preemptions") or 0) > 0


def predicted_regime(spec: WorkloadSpec, metrics: dict[str, Any]) -> str:
    return load_regime(
        predicts_overload(metrics),
        spec.max_concurrency,
        spec.request_rate,
        spec.output_len,
        metrics.get("output_throughput"),
    )


@dataclass(frozen=True)
class Band:
    metric: str
    gpu_class: str
    regime: str
    low: float | None  # p10 of the signed relative error; None: no out-of-sample data
    median: float | None
    high: float | None  # p90
    n: int
    cell: str  # the cell the figures come from ("datacenter/overload", or a wider fallback)

    @property
    def known(self) -> bool:
        return self.low is not None and self.high is not None

    def measured_range(self, predicted: float) -> tuple[float, float] | None:
        """The measurements the band allows for this prediction: predicted / (1 + error)."""
        if self.low is None or self.high is None or min(self.low, self.high) <= -1:
            return None
        return predicted / (1 + self.high), predicted / (1 + self.low)

    def text(self) -> str:
        if not self.known:
            return f"no out-of-sample data for {self.gpu_class} {self.regime}"
        assert self.low is not None and self.high is not None
        return (
            f"80% of out-of-sample cases within {self.low:+.0%} to {self.high:+.0%}, "
            f"{self.cell}, n={self.n}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu_class": self.gpu_class,
            "regime": self.regime,
            "cell": self.cell,
            "n": self.n,
            "p10_relative_error": self.low,
            "median_relative_error": self.median,
            "p90_relative_error": self.high,
            "coverage": 0.8,
        }


@cache
def band_table() -> dict[str, Any]:
    text = resources.files("kvwise.sim").joinpath("data/error_bands.json").read_text()
    table: dict[str, Any] = json.loads(text)
    return table


def band(metric: str, gpu_name: str, regime: str) -> Band:
    """The band of `metric` for this GPU's class and `regime` (fallbacks as the file says)."""
    cls = gpu_class(gpu_name)
    cells = band_table()["cells"]
    for key in (f"{cls}/{regime}", f"any/{regime}", f"{cls}/any", "any/any"):
        cell = cells.get(key, {}).get(metric)
        if cell and cell["n"] >= MIN_POINTS:
            return Band(metric, cls, regime, cell["p10"], cell["p50"], cell["p90"], cell["n"], key)
    return Band(metric, cls, regime, None, None, None, 0, "none")


def bands_for(gpu_name: str, spec: WorkloadSpec, metrics: dict[str, Any]) -> dict[str, Band]:
    """Every banded metric's band for one simulation (a lookup: the run is already done)."""
    return bands_in(gpu_name, predicted_regime(spec, metrics))


def bands_in(gpu_name: str, regime: str) -> dict[str, Band]:
    return {m: band(m, gpu_name, regime) for m in BAND_METRICS}
