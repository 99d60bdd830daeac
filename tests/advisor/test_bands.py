"""`kvwise plan --workload`: every recommended configuration carries its out-of-sample bands."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main
from kvwise.sim.bands import band_table

ARGV = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--workload", "agent",
        "--sessions", "4", "--turns", "8", "--max-tokens", "256"]  # fmt: skip


def test_each_recommendation_row_has_a_band_per_metric_from_the_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*ARGV, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cells = band_table()["cells"]
    for row in data["recommendations"]:
        bands = row["bands"]
        assert set(bands) == {"output_throughput", "mean_tpot_ms", "median_ttft_ms"}
        for metric, cell in bands.items():
            assert cell["gpu_class"] == "consumer"
            assert cell["regime"] in ("low", "saturation", "overload")
            assert cell["n"] == cells[cell["cell"]][metric]["n"] >= 5
            assert cell["p10_relative_error"] <= cell["p90_relative_error"]


def test_the_table_shows_the_throughput_band(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGV) == 0
    out = capsys.readouterr().out
    assert "tok/s band" in out or "80% of out-of-sample errors within" in out
    assert "80% of out-of-sample errors within: output_throughput" in " ".join(out.split())
