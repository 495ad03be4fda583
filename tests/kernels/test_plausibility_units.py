"""Plausibility by the unit that does the work, and the second protocol's settings (CPU only:
the check is pure arithmetic on measured ceilings)."""

from __future__ import annotations

import pytest

from perfledger.derive.stats import paired_stats
from perfledger.errors import MeasurementError
from perfledger.kernels.cuda.ceilings import FLOP_UNITS, Ceilings, check_plausible
from perfledger.kernels.harness.harness import HarnessConfig, Problem

#: An H200's figures: 4 TB/s copy, 67 TFLOP/s fp32 and 34 fp64 on CUDA cores, 730 fp16 and
#: 1450 fp8 on tensor cores.
H200 = Ceilings(
    4e12,
    7.3e14,
    7.3e14,
    5e13,
    "h200",
    unit_flops_per_s={
        "cuda_fp32": 6.7e13,
        "cuda_fp64": 3.4e13,
        "tensor_fp16": 7.3e14,
        "tensor_fp8": 1.45e15,
    },
    version=2,
)
FLOP = 10**12  # per call


def test_cuda_core_rate_above_its_ceiling_is_refused_though_below_the_tensor_rate() -> None:
    # 200 TFLOP/s: impossible on CUDA cores, ordinary for tensor cores
    with pytest.raises(MeasurementError, match=r"cuda_fp32 ceiling 67\.0 TFLOP/s"):
        check_plausible(
            median_s=FLOP / 2e14, bytes_per_call=None, flops_per_call=FLOP, ceilings=H200,
            flops_unit="cuda_fp32",
        )  # fmt: skip
    figures = check_plausible(
        median_s=FLOP / 2e14, bytes_per_call=None, flops_per_call=FLOP, ceilings=H200,
        flops_unit="tensor_fp16",
    )  # fmt: skip
    assert figures["flops_ceiling"] == 7.3e14


def test_fp64_is_checked_against_the_fp64_ceiling() -> None:
    with pytest.raises(MeasurementError, match="cuda_fp64"):
        check_plausible(
            median_s=FLOP / 5e13, bytes_per_call=None, flops_per_call=FLOP, ceilings=H200,
            flops_unit="cuda_fp64",
        )  # fmt: skip


def test_honest_cuda_core_rate_passes_with_its_share_of_the_unit() -> None:
    figures = check_plausible(
        median_s=FLOP / 6e13, bytes_per_call=None, flops_per_call=FLOP, ceilings=H200,
        flops_unit="cuda_fp32",
    )  # fmt: skip
    assert figures["flops_share"] == pytest.approx(6e13 / 6.7e13)


def test_undeclared_unit_is_checked_against_the_fastest_unit() -> None:
    # never refused wrongly, but only an impossible rate on any unit trips it
    figures = check_plausible(
        median_s=FLOP / 1e15, bytes_per_call=None, flops_per_call=FLOP, ceilings=H200
    )
    assert figures["flops_ceiling"] == 1.45e15
    with pytest.raises(MeasurementError, match="fastest unit's ceiling"):
        check_plausible(
            median_s=FLOP / 2e15, bytes_per_call=None, flops_per_call=FLOP, ceilings=H200
        )


def test_a_unit_not_measured_here_falls_back_to_the_fastest() -> None:
    assert H200.flops_ceiling("tensor_bf16") == ("any", 1.45e15)
    old = Ceilings(4e12, 7.3e14, 7.3e14, 5e13, "old")  # a first-version record: no units
    assert old.flops_ceiling("cuda_fp32") == ("any", 7.3e14)


def test_problem_refuses_an_unknown_flops_unit() -> None:
    def noop(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ValueError, match="unknown flops_unit 'tensor_fp4'"):
        Problem("p", noop, noop, {"y": ((1,), "float32")}, flops_unit="tensor_fp4")
    for unit in FLOP_UNITS:
        assert Problem("p", noop, noop, {"y": ((1,), "float32")}, flops_unit=unit).flops_unit


def test_protocol_settings_are_validated_and_default_to_the_second_protocol() -> None:
    config = HarnessConfig()
    assert config.protocol == 2 and config.fresh_inputs and not config.poison_every_call
    assert 0 < config.recheck_share <= 1
    with pytest.raises(ValueError, match="protocol"):
        HarnessConfig(protocol=3)
    with pytest.raises(ValueError, match="recheck_share"):
        HarnessConfig(recheck_share=0.0)


def test_paired_stats_say_what_their_medians_are_of() -> None:
    s = paired_stats([2.0, 2.2, 2.1], [1.0, 1.1, 1.2], resamples=200)
    assert s.medians_per == "sample" and s.to_json()["medians_per"] == "sample"
