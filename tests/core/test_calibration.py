"""The user's calibration file: per (GPU, model), under the XDG config dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvwise.core.calibration import (
    Calibration,
    calibration_path,
    load_calibration,
    save_calibration,
)
from kvwise.errors import DataError


def _calibration(path: Path, gpu: str = "RTX 4090", step_s: float = 0.004) -> Calibration:
    return Calibration(
        gpu=gpu,
        model="Qwen/Qwen2.5-7B-Instruct",
        coefficients={"step_overhead_s": step_s, "prefill_compute": 2.0},
        fitted_at="2026-11-30T10:00:00+00:00",
        path=path,
        num_requests=48,
    )


def test_path_follows_xdg_config_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert calibration_path() == tmp_path / "kvwise" / "calibration.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert calibration_path() == Path.home() / ".config" / "kvwise" / "calibration.json"


def test_saved_entries_are_found_by_gpu_and_model_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    assert load_calibration("RTX 4090", "Qwen/Qwen2.5-7B-Instruct", path) is None
    save_calibration(_calibration(path))
    save_calibration(_calibration(path, gpu="H100 SXM"))
    save_calibration(_calibration(path, step_s=0.003))  # refit: replaces the RTX 4090 entry
    found = load_calibration("RTX 4090", "Qwen/Qwen2.5-7B-Instruct", path)
    assert found is not None and found.coefficients["step_overhead_s"] == 0.003
    assert load_calibration("H100 SXM", "Qwen/Qwen2.5-7B-Instruct", path) is not None
    assert load_calibration("RTX 4090", "Qwen/Qwen3-8B", path) is None


def test_a_malformed_file_is_a_data_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text('{"entries": [{"gpu": "x"}]}')
    with pytest.raises(DataError, match=str(path)):
        load_calibration("RTX 4090", "m", path)
