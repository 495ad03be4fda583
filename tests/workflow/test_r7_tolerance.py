"""R7's stated bound (issue 3: tolerance 1e-9 relative; issue 9, item 3: a new user could not
tell what to state): accepted within the documented relative tolerance
(``amdahl.STATED_BOUND_REL_TOLERANCE``), refused beyond it or when missing with the exact value
in the hint; the request schema says the bound is required for a mean/median/throughput primary.
"""

from __future__ import annotations

from wf_scenario import Session, experiment

from perfledger.commands.operations import json_schema
from perfledger.projections import amdahl


def _claim(f: float, s: float, bound: float | None) -> dict:
    exp = experiment()
    exp["claim"]["coverage"], exp["claim"]["local_speedup"] = f, s
    if bound is None:
        del exp["claim"]["stated_bound"]
    else:
        exp["claim"]["stated_bound"] = bound
    return exp


def test_r7_tolerance_is_a_documented_named_constant() -> None:
    assert amdahl.STATED_BOUND_REL_TOLERANCE == 1e-9
    assert amdahl.bound_matches(32.2893122376, amdahl.amdahl_bound(0.97, 1000.0))
    assert not amdahl.bound_matches(32.29, amdahl.amdahl_bound(0.97, 1000.0))


def test_r7_bound_as_the_hint_prints_it_is_accepted(ready: Session) -> None:
    created = ready.run("experiment.create", _claim(0.97, 1000.0, 32.2893122376))
    assert created["claim"]["stated_bound"] == 32.2893122376  # recorded as stated
    assert abs(created["figures"]["bound"] - 32.2893122376) < 1e-9  # recomputed, full precision


def test_r7_bound_beyond_tolerance_is_refused_with_the_exact_value(ready: Session) -> None:
    error = ready.refused("experiment.create", _claim(0.97, 1000.0, 32.29), "R7")
    assert "32.2893122376" in error.message and "relative tolerance 1e-09" in error.message
    assert '"stated_bound": 32.2893' in error.hint and "1e-09" in error.hint


def test_r7_missing_bound_is_refused_with_the_exact_value_in_the_hint(ready: Session) -> None:
    error = ready.refused("experiment.create", _claim(0.97, 1000.0, None), "R7")
    assert "must state its end-to-end bound" in error.message
    assert '"stated_bound": 32.2893' in error.hint


def test_r7_schema_says_the_bound_is_required_for_mean_primaries() -> None:
    schema = json_schema("experiment.create")
    claim = schema["$defs"]["OpportunityClaim"]["properties"]["stated_bound"]
    assert "Required for a mean, median or throughput primary" in claim["description"]
    assert "1e-9" in claim["description"]
