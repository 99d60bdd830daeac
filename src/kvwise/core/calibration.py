"""The user's calibration file: step-time coefficients fitted by `kvwise calibrate`.

One file per user, `$XDG_CONFIG_HOME/kvwise/calibration.json` (default
`~/.config/kvwise/calibration.json`), holding one entry per (GPU, model): the GPU's catalog name
(`GpuSpec.name`) and the model's id (`ModelSpec.model_id`). The coefficients are stored by the
names of `kvwise.sim.steptime.StepTimeCoefficients`; core stays below the simulator, so they
are a plain mapping here and the simulator builds its dataclass from them:

    calibration = load_calibration(gpu.name, model.model_id)
    if calibration is not None:
        coefficients = StepTimeCoefficients(**calibration.coefficients)   # and say so

A missing file means "not calibrated"; a malformed one is a DataError naming the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvwise.errors import DataError

FILE_FORMAT = "kvwise-calibration/1"


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpu: str
    model: str
    coefficients: dict[str, float]
    fitted_at: str  # ISO 8601, UTC
    results_files: list[str] = Field(default_factory=list)
    num_requests: int = 0
    fit_error_before: dict[str, float] = Field(default_factory=dict)
    fit_error_after: dict[str, float] = Field(default_factory=dict)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = FILE_FORMAT
    entries: list[_Entry] = Field(default_factory=list)


@dataclass(frozen=True)
class Calibration:
    gpu: str
    model: str
    coefficients: dict[str, float]  # StepTimeCoefficients field name -> value
    fitted_at: str
    path: Path  # the file it came from (or goes to)
    results_files: tuple[str, ...] = ()
    num_requests: int = 0
    fit_error_before: dict[str, float] = field(default_factory=dict)
    fit_error_after: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for reports: "calibrated from N requests on DATE (FILE)"."""
        return (
            f"calibrated step time for {self.gpu} / {self.model} from {self.num_requests} "
            f"measured requests ({self.fitted_at[:10]}, {self.path})"
        )


def calibration_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kvwise" / "calibration.json"


def _read(path: Path) -> _File:
    if not path.exists():
        return _File()
    try:
        return _File.model_validate(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise DataError(f"{path}: not a kvwise calibration file ({first})") from exc


def load_calibration(gpu: str, model: str, path: Path | None = None) -> Calibration | None:
    """The user's fitted coefficients for this GPU and model, or None when there are none."""
    path = path or calibration_path()
    for entry in _read(path).entries:
        if entry.gpu == gpu and entry.model == model:
            return Calibration(
                gpu=entry.gpu,
                model=entry.model,
                coefficients=dict(entry.coefficients),
                fitted_at=entry.fitted_at,
                path=path,
                results_files=tuple(entry.results_files),
                num_requests=entry.num_requests,
                fit_error_before=dict(entry.fit_error_before),
                fit_error_after=dict(entry.fit_error_after),
            )
    return None


def save_calibration(calibration: Calibration) -> Path:
    """Add or replace the (GPU, model) entry; other entries are kept as they are."""
    path = calibration.path
    current = _read(path)
    entries = [
        e for e in current.entries if (e.gpu, e.model) != (calibration.gpu, calibration.model)
    ]
    entries.append(
        _Entry(
            gpu=calibration.gpu,
            model=calibration.model,
            coefficients=calibration.coefficients,
            fitted_at=calibration.fitted_at,
            results_files=list(calibration.results_files),
            num_requests=calibration.num_requests,
            fit_error_before=calibration.fit_error_before,
            fit_error_after=calibration.fit_error_after,
        )
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(_File(entries=entries).model_dump_json(indent=2) + "\n")
    tmp.replace(path)  # atomic: a crash never leaves half a file
    return path
