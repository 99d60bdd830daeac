"""The user's own step-time coefficients (`kvwise calibrate`), read for a GPU and model."""

from __future__ import annotations

from kvwise.core.calibration import Calibration, load_calibration
from kvwise.errors import DataError
from kvwise.sim.steptime import StepTimeCoefficients


def calibrated_coefficients(calibration: Calibration) -> StepTimeCoefficients:
    """The stored coefficients; a DataError when they name terms this kvwise does not have (a
    file written by another version of the step-time model)."""
    try:
        return StepTimeCoefficients(**calibration.coefficients)
    except TypeError as exc:
        raise DataError(
            f"{calibration.path}: the {calibration.gpu} / {calibration.model} entry was fitted for "
            "another step-time model; run kvwise calibrate again"
        ) from exc


def user_calibration(gpu_name: str, model_id: str) -> tuple[StepTimeCoefficients, str] | None:
    """(coefficients, one-line note) when the user calibrated this GPU and model."""
    calibration = load_calibration(gpu_name, model_id)
    if calibration is None:
        return None
    return calibrated_coefficients(calibration), calibration.describe()
