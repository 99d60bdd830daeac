"""Error bands: every prediction carries the out-of-sample error of its GPU class and regime.

The shipped file (src/kvwise/sim/data/error_bands.json, benchmarks/error_bands.py) is checked
against its own per-point errors and against the committed fidelity runs in
benchmarks/results/ (produced by benchmarks/sim_fidelity.py, not by the band generator).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from importlib import resources
from pathlib import Path

import pytest

from kvwise.cli import main
from kvwise.sim.bands import MIN_POINTS, band, band_table, gpu_class

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks/results"


def shipped() -> dict:
    return json.loads(resources.files("kvwise.sim").joinpath("data/error_bands.json").read_text())


def test_the_band_file_names_its_data_and_the_n_of_every_cell() -> None:
    table = shipped()
    provenance = table["provenance"]
    assert "serving_benchmarks.jsonl" in provenance["data"]["loso"]
    assert "serving_benchmarks_unseen.jsonl" in provenance["data"]["unseen"]
    assert provenance["in_sample"] == "never used"
    assert "benchmarks/error_bands.py" in provenance["command"]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", provenance["generated"])
    for key, row in table["cells"].items():
        for metric, cell in row.items():
            assert cell["n"] == sum(cell["n_by_dataset"].values()), (key, metric)
            assert (cell["p10"] is None) == (cell["n"] == 0), (key, metric)
    assert {p["dataset"] for p in table["points"]} == {"loso", "unseen"}


def test_the_cells_are_the_percentiles_of_the_points_in_the_file() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from error_bands import cells  # the generator's own binning

    table = shipped()
    assert cells(table["points"]) == table["cells"]


def _committed_unseen_errors() -> list[tuple[str, dict[str, float]]]:
    """Per case, in file order (ids as printed: 90 characters at most), the signed errors in
    whole percent."""
    text = (RESULTS / "sim_fidelity_unseen.txt").read_text().split("# after:")[1]
    found = []
    for line in text.splitlines():
        errors = re.findall(r"(output_throughput|mean_tpot_ms|median_ttft_ms) ([+-]\d+)%", line)
        if errors and not line.startswith(("#", " ")):
            found.append((line[:90].rstrip(), {k: float(v) for k, v in errors}))
    return found


def test_the_unseen_points_are_the_committed_out_of_sample_run() -> None:
    committed = _committed_unseen_errors()
    points = [p for p in shipped()["points"] if p["dataset"] == "unseen"]
    assert len(points) == len(committed) == 203
    for p, (case, printed) in zip(points, committed, strict=True):
        assert p["case"][:90] == case
        assert set(printed) == set(p["errors"]), p["case"]
        for metric, error in p["errors"].items():
            assert abs(error * 100 - printed[metric]) <= 0.51, (p["case"], metric)


def _committed_loso_table() -> dict[tuple[str, str, str], tuple[float, int]]:
    text = (RESULTS / "sim_fidelity.txt").read_text().split("## after")[1]
    metrics = ("output_throughput", "mean_tpot_ms", "median_ttft_ms")
    table = {}
    for cls, reg, rest in re.findall(r"^  (consumer|datacenter) +(\w+) +(.*)$", text, re.M):
        loso = re.findall(r"/ +([\d.]+)% \( *(\d+)\)", rest)
        for metric, (value, n) in zip(metrics, loso, strict=True):
            table[cls, reg, metric] = (float(value), int(n))
    return table


def test_the_loso_points_give_the_committed_leave_one_source_out_table() -> None:
    """Median |error| per GPU class and measured regime, as benchmarks/sim_fidelity.py --loso
    printed it: the band file holds those very points."""
    committed = _committed_loso_table()
    points = [p for p in shipped()["points"] if p["dataset"] == "loso"]
    assert len(committed) == 18
    for (cls, reg, metric), (median, n) in committed.items():
        errs = [
            abs(p["errors"][metric])
            for p in points
            if (p["class"], p["measured_regime"]) == (cls, reg) and metric in p["errors"]
        ]
        assert len(errs) == n, (cls, reg, metric)
        assert statistics.median(errs) * 100 == pytest.approx(median, abs=0.051)


def test_a_thin_cell_borrows_the_wider_cell_and_says_so() -> None:
    cells = band_table()["cells"]
    thin = [
        (key, metric)
        for key, row in cells.items()
        for metric, cell in row.items()
        if not key.startswith("any") and not key.endswith("/any") and cell["n"] < MIN_POINTS
    ]
    assert thin  # the data has thin cells (workstation cards: two points)
    for key, metric in thin:
        cls, reg = key.split("/")
        found = band(
            metric,
            {
                "consumer": "RTX 4090",
                "workstation": "RTX PRO 6000 Blackwell",
                "datacenter": "H100 SXM",
            }[cls],
            reg,
        )
        assert found.cell != key and found.n >= MIN_POINTS
    assert gpu_class("RTX PRO 6000 Blackwell") == "workstation"


SIM = [
    "simulate",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--max-model-len",
    "4096",
    "--workload",
    "random",
]
CONSUMER_LOW = [*SIM, "--gpu", "rtx4090", "--num-prompts", "8", "--input-len", "500",
                "--output-len", "64", "--max-concurrency", "1"]  # fmt: skip
DATACENTER_OVERLOAD = [*SIM, "--gpu", "h100", "--num-prompts", "400", "--input-len", "2000",
                       "--output-len", "64", "--request-rate", "200"]  # fmt: skip


def _simulated(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def width(cell: dict) -> float:
    return float(cell["p90_relative_error"] - cell["p10_relative_error"])


def test_an_overloaded_datacenter_prediction_carries_a_wider_band_than_a_calm_consumer_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calm = _simulated(CONSUMER_LOW, capsys)["bands"]
    busy = _simulated(DATACENTER_OVERLOAD, capsys)["bands"]
    assert {c["regime"] for c in calm.values()} == {"low"}
    assert {c["gpu_class"] for c in calm.values()} == {"consumer"}
    assert {c["regime"] for c in busy.values()} == {"overload"}
    assert {c["gpu_class"] for c in busy.values()} == {"datacenter"}
    cells = shipped()["cells"]
    for metric in ("output_throughput", "median_ttft_ms"):
        assert width(busy[metric]) > width(calm[metric]), metric
        for found, key in ((busy, busy[metric]["cell"]), (calm, calm[metric]["cell"])):
            assert found[metric]["n"] == cells[key][metric]["n"]
            assert found[metric]["p90_relative_error"] == cells[key][metric]["p90"]


def test_the_json_band_gives_the_measurements_it_allows(capsys: pytest.CaptureFixture[str]) -> None:
    found = _simulated(DATACENTER_OVERLOAD, capsys)
    for metric, cell in found["bands"].items():
        assert cell["predicted"] == pytest.approx(found[metric], rel=1e-6)
        assert set(cell) >= {"cell", "n", "p10_relative_error", "median_relative_error",
                             "p90_relative_error", "coverage", "measured_range"}  # fmt: skip
        low, high = cell["measured_range"]
        # predicted = measured * (1 + error): the lowest measurement goes with the highest error
        assert low * (1 + cell["p90_relative_error"]) == pytest.approx(cell["predicted"])
        assert high * (1 + cell["p10_relative_error"]) == pytest.approx(cell["predicted"])


def test_the_table_prints_each_prediction_with_its_band(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(DATACENTER_OVERLOAD) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "error bands (overload regime):" in out
    cell = shipped()["cells"]["datacenter/overload"]["output_throughput"]
    expected = (
        f"(80% of out-of-sample cases within {cell['p10']:+.0%} to {cell['p90']:+.0%}, "
        f"datacenter/overload, n={cell['n']})"
    )
    assert re.search(r"output [\d,]+ tok/s " + re.escape(expected), out)
