"""R4's resolution from A/A comparisons of the kernel harness: only valid comparisons count
(:func:`perfledger.kernels.harness.resolution_from_aa`). CPU only: the comparisons are built
from their parts."""

from __future__ import annotations

from typing import Any

import pytest


def _aa(ci: tuple[float, float], flags: list[str]) -> Any:
    from perfledger.kernels.harness import Comparison, CorrectnessReport
    from perfledger.kernels.stats import PairedStats

    ok = CorrectnessReport("s", True, ())
    stats = PairedStats(12, 1.0, ci[0], ci[1], 0.95, 10_000, 0.5, 1e-3, 1e-3, 1e-3, 0)
    return Comparison(ok, ok, None, None, [], stats, "ci", flags, {})


def test_r4_resolution_leaves_out_invalid_aa_comparisons_and_says_how_many() -> None:
    from perfledger.kernels.harness import resolution_from_aa

    good = [_aa((0.999, 1.001), ["no_ceilings"]), _aa((0.998, 1.0015), [])]
    # a flagged run (here narrow: would have made the resolution smaller) does not count
    flagged = _aa((0.9999, 1.0001), ["pause:candidate"])
    got = resolution_from_aa([*good, flagged])
    assert got["resolution"] == pytest.approx(0.002) and got["repeats"] == 2
    assert got["excluded"] == 1
    with pytest.raises(ValueError, match=r"none of the 2 A/A comparisons is valid.*clock:ref"):
        resolution_from_aa([flagged, _aa((0.9, 1.1), ["clock:reference"])])
