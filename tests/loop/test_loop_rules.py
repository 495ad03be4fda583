"""One test per rule of the kernel-iteration loop (SPEC.md R19-R25), on real git ledgers: each
refusal names its rule and leaves the ledger's head where it was (plus R16 for profiles)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loop_helpers import (
    ANALYSIS,
    RUN,
    attempt_body,
    close_body,
    do,
    profile_body,
    selection,
    set_up,
    setup_body,
)

from perfledger.api import Ledger
from perfledger.errors import BadRequest, RuleRefused


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    opened = Ledger.init(tmp_path / "ledger", name="loop", actor="agent")
    try:
        yield opened
    finally:
        opened.close()


def refused(ledger: Ledger, rule: str, op: str, body: dict[str, Any]) -> RuleRefused:
    """Assert that ``op`` is refused with ``rule`` and that the ledger's head did not move."""
    head = ledger.head()
    with pytest.raises(RuleRefused) as info:
        do(ledger, op, body)
    assert info.value.rule == rule, info.value.message
    assert info.value.message.startswith(rule)
    assert ledger.head() == head
    return info.value


def closed_improved(ledger: Ledger) -> None:
    """Iteration 1 closes improved (candidate 20 % faster) with the default selection, and the
    input profile of iteration 2 is recorded (same metrics)."""
    answer = do(ledger, "loop.close-iter", close_body(1, 1, 0.8))
    assert answer[0].payload["status"] == "improved"
    best = ledger.state().loop.runs[RUN].best_hash
    do(ledger, "loop.profile", profile_body(2, best))


def test_r19_every_axis_needs_exactly_one_method(ledger: Ledger) -> None:
    set_up(ledger)
    sel = selection()
    del sel["latency"]
    refused(ledger, "R19", "loop.close-iter", close_body(1, 1, 0.8, selection=sel))
    wrong_axis = selection(latency={"chosen": "memory.vectorized_access"})
    error = refused(ledger, "R19", "loop.close-iter", close_body(1, 1, 0.8, selection=wrong_axis))
    assert "memory method" in error.message
    unknown = selection(compute={"chosen": "compute.magic"})
    refused(ledger, "R19", "loop.close-iter", close_body(1, 1, 0.8, selection=unknown))


def test_r20_a_selected_method_is_not_selected_again(ledger: Ledger) -> None:
    set_up(ledger)
    closed_improved(ledger)
    again = close_body(2, 2, 0.7)  # the same three methods as iteration 1
    error = refused(ledger, "R20", "loop.close-iter", again)
    assert "compute.launch_configuration" in error.message


def test_r21_ineffective_method_needs_a_changed_bottleneck(ledger: Ledger) -> None:
    baseline = set_up(ledger)
    answer = do(ledger, "loop.close-iter", close_body(1, 1, 1.0))  # no gain: not improved
    assert answer[0].payload["status"] == "not_improved"
    state = ledger.state().loop.runs[RUN]
    assert state.ineffective == {
        "compute.launch_configuration": 1, "latency.async_pipeline": 1, "memory.coalescing": 1
    }  # fmt: skip
    # the bottleneck moved: achieved occupancy 40 % -> 55 % (+37.5 %), store sectors unchanged
    moved = {**profile_body(2, baseline)["metrics"],
             "sm__warps_active.avg.pct_of_peak_sustained_active": 55.0}  # fmt: skip
    do(ledger, "loop.profile", profile_body(2, baseline, moved))
    plain = close_body(2, 2, 0.8)
    error = refused(ledger, "R21", "loop.close-iter", plain)
    assert "ineffective in iteration 1" in error.message
    unchanged = selection()
    for axis in unchanged:
        unchanged[axis]["reuse_metric"] = "perfledger__global_st_sectors_per_request"
    refused(ledger, "R21", "loop.close-iter", close_body(2, 2, 0.8, selection=unchanged))
    moved_sel = selection()
    for axis in moved_sel:
        moved_sel[axis]["reuse_metric"] = "sm__warps_active.avg.pct_of_peak_sustained_active"
    done = do(ledger, "loop.close-iter", close_body(2, 2, 0.8, selection=moved_sel))
    evidence = done[0].payload["selection"]["compute"]["reuse_evidence"]
    assert evidence["before"] == 40.0 and evidence["after"] == 55.0
    assert evidence["relative_change"] == pytest.approx(0.375)


def test_r22_coupled_pipelines_are_never_selected_together(ledger: Ledger) -> None:
    set_up(ledger)
    sel = selection(memory={"chosen": "memory.multi_stage_pipeline"})
    error = refused(ledger, "R22", "loop.close-iter", close_body(1, 1, 0.8, selection=sel))
    assert "memory.multi_stage_pipeline and latency.async_pipeline" in error.message


def test_r23_methods_must_fit_the_sm_architecture(ledger: Ledger) -> None:
    set_up(ledger, sm_arch="sm_80")  # no clusters, no TMA, no wgmma on sm_80
    sel = selection(
        latency={
            "chosen": "latency.cooperative_groups_clusters",
            "skipped": [
                {"method": "latency.shuffle_sync_removal", "reason": "no_trigger"},
                {"method": "latency.fewer_barriers", "reason": "no_trigger"},
                {"method": "latency.async_pipeline", "reason": "no_trigger"},
            ],
        }
    )
    error = refused(ledger, "R23", "loop.close-iter", close_body(1, 1, 0.8, selection=sel))
    assert "clusters" in error.message
    # an architecture the catalog does not map is refused at setup
    refused(ledger, "R23", "loop.setup", setup_body(run_id="r2", sm_arch="sm_42"))


def test_r23_feature_map_is_explicit_per_architecture() -> None:
    from perfledger.events.catalog import load_default_catalog, method, missing_features

    catalog, _, _ = load_default_catalog()
    wgmma = catalog.architectures
    assert "wgmma" in wgmma["sm_90"] and "wgmma" not in wgmma["sm_100"]  # sm_90 only
    assert "cp_async" in wgmma["sm_80"] and "cp_async" not in wgmma["sm_75"]
    clusters = method(catalog, "latency.cooperative_groups_clusters")
    assert clusters is not None
    assert missing_features(catalog, clusters, "sm_89") == ["clusters"]
    assert missing_features(catalog, clusters, "sm_90") == []


def test_r24_every_higher_priority_method_needs_a_true_reason(ledger: Ledger) -> None:
    set_up(ledger)
    missing = selection(compute={"chosen": "compute.launch_configuration", "skipped": [
        {"method": "compute.tensor_cores", "reason": "skip_condition"}]})  # fmt: skip
    error = refused(ledger, "R24", "loop.close-iter", close_body(1, 1, 0.8, selection=missing))
    assert "compute.compute_memory_overlap" in error.message
    # no_trigger is checked against the input profile: coalescing IS triggered (32 sectors/req)
    false_no_trigger = selection(memory={"chosen": "memory.shared_memory_tiling", "skipped": [
        {"method": "memory.kernel_fusion", "reason": "skip_condition"},
        {"method": "memory.coalescing", "reason": "no_trigger"}]})  # fmt: skip
    text = ANALYSIS + "memory.coalescing: not triggered.\n"
    error = refused(ledger, "R24", "loop.close-iter",
                    close_body(1, 1, 0.8, selection=false_no_trigger, analysis=text))  # fmt: skip
    assert "holds in the input profile" in error.message and "32" in error.message
    # skip_condition must hold: the compute SOL is 20 %, not below 10 %
    false_skip = selection(compute={"chosen": "compute.launch_configuration", "skipped": [
        {"method": "compute.tensor_cores", "reason": "skip_condition"},
        {"method": "compute.compute_memory_overlap", "reason": "skip_condition"}]})  # fmt: skip
    refused(ledger, "R24", "loop.close-iter", close_body(1, 1, 0.8, selection=false_skip))
    # already_selected / arch_incompatible must be true
    lie = selection(compute={"chosen": "compute.launch_configuration", "skipped": [
        {"method": "compute.tensor_cores", "reason": "arch_incompatible"},
        {"method": "compute.compute_memory_overlap", "reason": "already_selected"}]})  # fmt: skip
    refused(ledger, "R24", "loop.close-iter", close_body(1, 1, 0.8, selection=lie))
    # the analysis must name every skipped method
    silent = close_body(1, 1, 0.8, analysis="faster now")
    error = refused(ledger, "R24", "loop.close-iter", silent)
    assert "never names it" in error.message


def test_r24_unrecorded_metric_cannot_justify_no_trigger(ledger: Ledger) -> None:
    do(ledger, "loop.setup", setup_body())
    baseline = ledger.state().loop.runs[RUN].best_hash
    do(ledger, "loop.profile", profile_body(1, baseline, metrics={}, limitations=[
        "ERR_NVGPUCTRPERM: no access to GPU performance counters"]))  # fmt: skip
    error = refused(ledger, "R24", "loop.close-iter", close_body(1, 1, 0.8))
    assert "not recorded" in error.message


def test_r25_at_most_three_correctness_attempts(ledger: Ledger) -> None:
    set_up(ledger)
    first = do(ledger, "loop.attempt", attempt_body(1, 1, 1))
    assert [e.kind for e in first] == ["AttemptRecorded"]
    do(ledger, "loop.attempt", attempt_body(1, 2, 2))
    third = do(ledger, "loop.attempt", attempt_body(1, 3, 3))
    assert [e.kind for e in third] == ["AttemptRecorded", "IterationClosed"]
    assert third[1].payload["status"] == "failed_correctness"
    refused(ledger, "R25", "loop.attempt", attempt_body(1, 4, 4))
    refused(ledger, "R25", "loop.close-iter", close_body(1, 4, 0.8, attempt=4))
    run = ledger.state().loop.runs[RUN]
    assert run.iterations["1"].failed_attempts == [1, 2, 3]
    assert run.current_iteration == 2 and run.best_iteration == 0


def test_r16_counter_permission_failure_is_a_limitation_not_metrics(ledger: Ledger) -> None:
    do(ledger, "loop.setup", setup_body())
    baseline = ledger.state().loop.runs[RUN].best_hash
    zeros = {name: 0.0 for name in profile_body(1, baseline)["metrics"]}
    refused(ledger, "R16", "loop.profile", profile_body(1, baseline, zeros, limitations=[
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"]))  # fmt: skip


def test_profiles_are_never_overwritten(ledger: Ledger) -> None:
    baseline = set_up(ledger)
    head = ledger.head()
    with pytest.raises(BadRequest, match="never overwritten"):
        do(ledger, "loop.profile", profile_body(1, baseline))
    assert ledger.head() == head


def test_proposed_selection_is_accepted_by_the_rules(ledger: Ledger) -> None:
    from perfledger.commands.loop.rules import propose_selection

    set_up(ledger)
    run = ledger.state().loop.runs[RUN]
    sel, analysis = propose_selection(run, 1)
    assert sel["compute"]["chosen"] == "compute.launch_configuration"
    assert sel["memory"]["chosen"] == "memory.coalescing"
    reasons = {s["method"]: s["reason"] for s in sel["latency"]["skipped"]}
    assert reasons["latency.shuffle_sync_removal"] == "no_trigger"
    done = do(ledger, "loop.close-iter", close_body(1, 1, 0.8, selection=sel, analysis=analysis))
    assert done[0].payload["status"] == "improved"
