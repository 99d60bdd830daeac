"""Which step-time coefficients a card gets, and what the report says about where they come
from: its own fitted set, a measured card of its family, or the documented family figure."""

from __future__ import annotations

from kvwise.core.gpus import find_gpu
from kvwise.sim.coefficients import FITTED, coefficients_with_source
from kvwise.sim.gpu_family import family_of


def test_a_measured_card_gets_its_own_fitted_set() -> None:
    gpu = find_gpu("rtx4090")
    chosen, source = coefficients_with_source(gpu)
    assert chosen.gemm_compute == FITTED["RTX 4090"]["gemm_compute"]
    assert source == "fitted on measurements of RTX 4090"


def test_a_measured_card_computes_no_faster_than_its_family_is_documented_to() -> None:
    gpu = find_gpu("h100 sxm")  # its own set was fitted at ~94 % of dense peak
    chosen, source = coefficients_with_source(gpu)
    efficiency = family_of(gpu).gemm_efficiency
    assert efficiency is not None and FITTED["H100 SXM"]["gemm_compute"] < 1 / efficiency
    assert chosen.gemm_compute == 1 / efficiency
    assert source.startswith("fitted on measurements of H100 SXM")
    assert "GEMM at most 45% of peak" in source
    # everything else stays as fitted on the card's own measurements
    assert chosen.kv_read == FITTED["H100 SXM"]["kv_read"]


def test_an_unmeasured_card_borrows_a_measured_sibling_and_says_so() -> None:
    gpu = find_gpu("h200")  # Hopper, like the measured H100 SXM, with more bandwidth
    chosen, source = coefficients_with_source(gpu)
    assert "no measurements of H200" in source and "H100 SXM" in source
    assert chosen.kv_read == FITTED["H100 SXM"]["kv_read"]
    # the family's documented GEMM efficiency bounds what no measurement of this card shows
    efficiency = family_of(gpu).gemm_efficiency
    assert efficiency is not None
    assert chosen.gemm_compute >= 1 / efficiency - 1e-12


def test_a_card_of_an_unmeasured_family_gets_spec_derived_coefficients() -> None:
    gpu = find_gpu("a100-80gb")
    chosen, source = coefficients_with_source(gpu, 2)
    assert "no measurements of" in source and "Ampere HBM" in source
    assert "38% of peak" in source  # BLIS's calibrated A100 prefill MFU
    assert chosen.gemm_compute >= 1 / 0.38 - 1e-12
    # a consumer card of a family nobody measured: the all-GPU set, named as such
    _, source = coefficients_with_source(find_gpu("rtx3090"))
    assert "across all measured GPUs" in source


def test_geforce_and_datacenter_cards_of_one_architecture_are_different_families() -> None:
    assert family_of(find_gpu("rtx4090")).name == "Ada GeForce"
    assert family_of(find_gpu("l40s")).name == "Ada"
    assert family_of(find_gpu("rtx pro 6000")).name == "Blackwell workstation"
