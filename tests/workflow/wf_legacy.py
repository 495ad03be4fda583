"""The workflow scenario as it was before issue 34's "self-reported figures are secondary only"
(``ReadinessRecorded`` 6, ``VerdictRecorded`` 9, ``ChampionSelected`` 7, ``FinalAuditRecorded``
11): a Target whose primary ``latency_ms`` the subject reports, measured by the self-timed
driver (``workload_abba``). Kept verbatim to build the ledgers an older perfledger wrote (at the
rule versions before those), which must audit exactly as before; new tests use
:mod:`wf_scenario`.

Nothing is mocked: a :class:`Session` wraps a real git ledger and calls
:func:`perfledger.commands.registry.operations.execute`, exactly as the CLI does.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from wf_scenario import baseline_measured, measured_baseline

from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.aa_table import aa_binding, rederive_aa
from perfledger.commands.workflow.deciders import environment_id
from perfledger.commands.workflow.output_rules import compared
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.errors import PerfledgerError, RuleRefused
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.ledger.base import Artifact
from perfledger.projections.verdict_cases import tail_min_values

ACTOR = "agent"
T1 = "t1"
ORIGINAL_HASH = "sha256:" + "0" * 16
CAND1 = "sha256:" + "1" * 16
CAND2 = "sha256:" + "2" * 16
CAND3 = "sha256:" + "3" * 16
TEST_SET_HASH = "sha256:" + "a" * 16
ENVIRONMENT = {
    "gpu": "NVIDIA H200",
    "driver": "550.54",
    "cuda": "12.4",
    "toolkit": "nvcc 12.4",
    "container_base": "unknown",
}
ENV_ID = environment_id(ENVIRONMENT)
CASES = ("small", "large")
PRIMARY = "latency_ms"
#: Claim of experiment e1: f=0.6, s=2 -> bound 1/(0.4+0.3).
BOUND_E1 = 1.0 / (0.4 + 0.6 / 2.0)


def target_freeze(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A valid ``target.freeze`` body: lower-is-better mean latency, 5 % minimum effect, a memory
    guardrail, a pre-declared p99 secondary."""
    body = {
        "target_id": target_id,
        "title": "decode latency of the demo workload",
        "primary": {
            "name": PRIMARY,
            "unit": "ms",
            "direction": "lower_is_better",
            "statistic": "mean",
        },
        "min_effect": 0.05,
        "guardrails": [
            {
                "metric": "memory_mb",
                "unit": "MB",
                "direction": "lower_is_better",
                "allowed_regression": 0.02,
            }
        ],
        "secondaries": [
            {"name": "p99_ms", "unit": "ms", "direction": "lower_is_better", "threshold": 0.05}
        ],
        "scope": ["src/kernels/*", "src/model/attention.py"],
        "risk_boundary": "no numerics change beyond fp16 tolerance",
        "budget": {"wall_s": 7200.0, "gpu_s": 3600.0},
    }
    body.update(over)
    return body


def evidence(evidence_id: str = "ev-ncu", **over: Any) -> dict[str, Any]:
    """A valid ``evidence.add`` body: an ncu report of the attention kernel."""
    body = {
        "evidence_id": evidence_id,
        "layer": "kernel",
        "tool": {"name": "ncu", "version": "2024.3.1"},
        "facts": [
            {"name": "attention_share", "value": 0.6, "unit": "ratio"},
            {"name": "dram_throughput", "value": 2.1, "unit": "TB/s"},
        ],
    }
    body.update(over)
    return body


def readiness(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A valid ``readiness.record`` body."""
    body = {
        "target_id": target_id,
        "original": {"content_hash": ORIGINAL_HASH, "label": "main@abc"},
        "test_set": {"hash": TEST_SET_HASH, "case_count": 2, "cases": list(CASES)},
        "accuracy_rule": "max rel L2 error <= 1e-2 against fp32 reference",
        "driver": {"argv": ["python", "bench.py", "--json"], "env": {"CUDA_VISIBLE_DEVICES": "0"}},
        "environment": dict(ENVIRONMENT),
        # the scenario's samples are hand-written pairs tables: outside samples (R5)
        "statistics": {"min_pairs_per_case": 5, "allow_outside_samples": True},
    }
    body.update(over)
    return body


def metric_audit(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A valid ``metric-audit.record`` body for the primary."""
    body = {
        "target_id": target_id,
        "metric": PRIMARY,
        "numerator": "wall time of decode loop (ms)",
        "denominator": "one request",
        "unit": "ms",
        "source": "driver JSON: latency_ms",
        "reconstructed": False,
        "matches_target": True,
    }
    body.update(over)
    return body


def baseline(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A valid ``baseline.record`` body."""
    body = {
        "target_id": target_id,
        "original_hash": ORIGINAL_HASH,
        "metric": PRIMARY,
        "unit": "ms",
        "values": [10.0, 10.1, 9.9, 10.05, 9.95],
        "environment_id": ENV_ID,
    }
    body.update(over)
    return body


def resolution(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A ``resolution.record`` body with typed figures (1 % from 20 A/A repeats): recorded as
    declared, it decides nothing (R4); :func:`measured_resolution` is the one that decides."""
    body = {"target_id": target_id, "resolution": 0.01, "repeats": 20}
    body.update(over)
    return body


#: The name ``perfledger measure aa --record`` attaches its A/A raw table under.
AA_TABLE = "resolution.json"


def aa_rows(
    cases: tuple[str, ...] = CASES, pairs: int = 10, spread: float = 0.002, metric: str = PRIMARY,
    unit: str = "ms", spreads: dict[str, float] | None = None, per_call: int = 1,
    levels: dict[str, float] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The per-call rows of an A/A of the original: ``pairs`` ABBA pairs per case, each side
    ``10 ms`` times a deterministic relative jitter within ``spread`` (``spreads``: per case). For an observed
    ``metric`` (``wall_time``, ``cpu_time``) each row carries the clocks its value comes from,
    as the worker protocol writes them (values in ``unit``)."""
    rows: list[dict[str, Any]] = []
    n = 0
    clock_s = 100.0
    for case in cases:
        for i in range(pairs):
            for label, phase in (("ref", 0.37), ("cand", 0.71)):
                jitter = (spreads or {}).get(case, spread) * math.sin(
                    7.3 * n + 13.1 * i + phase * 11.0 + len(case)
                )
                # the original's level of the case (seconds): as make_pairs gives its
                # reference, or ``levels`` (the Target's baseline, target_aa_rows)
                level = 0.010 * (1.0 + 0.3 * (CASES.index(case) if case in CASES else 0))
                level = (levels or {}).get(case, level)
                seconds = level * (1.0 + jitter)
                row = {
                    "pair": n, "subject": label, "case": case, "call_id": f"aa-{n}-{label}",
                    "ok": True, "correct": True, "warmup": False,
                    "metrics": {metric: [
                        seconds * UNITS_PER_SECOND.get(unit, 1000.0) * (1.0 + 1e-3 * k)
                        for k in range(per_call)  # per-request values, for a tail primary
                    ]},
                }  # fmt: skip
                if metric in OBSERVED_METRICS:
                    row.update(wall_s=seconds, cpu_s=seconds, start_s=clock_s,
                               end_s=clock_s + seconds, output={"ok": True})  # fmt: skip
                clock_s += 1.0
                rows.append(row)
            n += 1
    return rows


def measured_resolution(
    ledger: Ledger, target_id: str = T1, rows: list[dict[str, Any]] | None = None,
    binding: dict[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Artifact]]:  # fmt: skip
    """A ``resolution.record`` body and its attached A/A raw table, as ``perfledger measure aa
    --record`` writes them: the figures are the ones the table derives (R4), so it decides."""
    target = ledger.state().targets[target_id]
    assert target.readiness is not None
    table = {
        "kind": "aa",
        "binding": binding or aa_binding(target_id, target.readiness.original.content_hash),
        "table": rows if rows is not None else aa_rows(),
    }
    raw = json.dumps(table, sort_keys=True).encode()
    figure, per_case, repeats = rederive_aa(  # as measured, whatever the binding says
        raw, target=table["binding"]["target_id"], primary=target.definition.primary,
        statistics=target.readiness.statistics,
        original_hash=table["binding"]["original_hash"],
    )  # fmt: skip
    body = {"target_id": target_id, "resolution": figure, "repeats": repeats,
            "per_case": per_case, "raw_table": AA_TABLE}  # fmt: skip
    return body, {AA_TABLE: Artifact(raw, "application/json")}


def experiment(
    experiment_id: str = "e1", target_id: str = T1, candidate: str = CAND1, **over: Any
) -> dict[str, Any]:
    """A valid ``experiment.create`` body: f=0.6, s=2, bound 1/(0.4+0.3)."""
    body = {
        "experiment_id": experiment_id,
        "target_id": target_id,
        "title": "fused attention kernel",
        "candidate": {"content_hash": candidate, "changed_paths": ["src/kernels/attn.cu"]},
        "approach": "new",
        "claim": {
            "evidence": [
                {"evidence_id": "ev-ncu", "applicability": "same_boundary", "used_for": "coverage"},
                {
                    "evidence_id": "ev-ncu",
                    "applicability": "conservative_upper_bound",
                    "used_for": "local_speedup",
                },
            ],
            "scope": {
                "replaced_region": "attention forward",
                "shapes": ["B=8,H=32,S=2048,D=128"],
                "execution_form": "one CUDA graph node per layer, no fallback",
            },
            "replacement_boundary": "attention op in the decode step",
            "coverage": 0.6,
            "local_speedup": 2.0,
            "added_cost": 0.0,
            "stated_bound": BOUND_E1,
            # R14: every claim states its expected end-to-end improvement in the verdict's
            # units (the fraction of time saved: at most 1 - 1/bound)
            "expected_improvement": {"low": 0.0, "high": 1.0 - 1.0 / BOUND_E1},
        },
        "preregistration": {"rejects": "implementation"},
    }
    body.update(over)
    return body


def _subject(call: str, values: dict[str, list[float]], correct: bool = True) -> dict[str, Any]:
    return {"call_id": call, "correct": correct, "values": values, "environment_id": ENV_ID}


def make_pairs(
    gain: float,
    *,
    per_case: int = 6,
    cases: tuple[str, ...] = CASES,
    secondary_gain: float | None = None,
    memory_regression: float = 0.0,
    cand_correct: bool = True,
    monitor: dict[str, Any] | None = None,
    tag: str = "",
) -> list[dict[str, Any]]:
    """Paired calls with a primary improvement of about ``gain`` (ratio, ±1 % jitter), memory
    regressing by ``memory_regression`` and p99 improving by ``secondary_gain`` (if given).

    No two calls share a ratio and none is exactly 1: on tied or zero ratios of up to 13 pairs,
    scipy's Wilcoxon test (a verdict's p-value) enumerates all 2**n sign permutations, which was
    most of the CPU time of the tests that record verdicts; untied ratios take its exact
    distribution."""
    pairs = []
    calls = per_case * len(cases)
    for case_index, case in enumerate(cases):
        for k in range(per_case):
            # distinct per call, centred, never 0, within a step of the 0.004 grid below
            spread = (2 * (case_index * per_case + k) - calls + 1.5) / calls
            jitter = 1.0 + 0.004 * ((k * 7 + case_index * 3) % 5 - 2) + 0.001 * spread
            ref = 10.0 * (1.0 + 0.3 * case_index) * (1.0 + 0.001 * k)
            cand = ref * (1.0 - gain) * jitter
            mem_ref = 1000.0 + k
            mem_cand = (
                mem_ref
                * (1.0 + memory_regression)
                * (1.0 + 0.0005 * ((k % 3) - 1) + 0.0001 * spread)
            )
            ref_values: dict[str, list[float]] = {
                PRIMARY: [ref, ref * 1.001],
                "memory_mb": [mem_ref],
            }
            cand_values: dict[str, list[float]] = {
                PRIMARY: [cand, cand * 1.001],
                "memory_mb": [mem_cand],
            }
            if secondary_gain is not None:
                p99 = ref * 1.5
                ref_values["p99_ms"] = [p99]
                cand_values["p99_ms"] = [p99 * (1.0 - secondary_gain) * jitter]
            call = f"{tag}{case}-{k}"
            pairs.append(
                {
                    "case": case,
                    "ref": _subject(call, ref_values),
                    "cand": _subject(call, cand_values, cand_correct),
                    "same_process": True,
                    "monitor": monitor if monitor is not None else {"observed": True},
                }
            )
    return pairs


def samples(
    samples_id: str,
    stage: str,
    *,
    experiment_id: str = "e1",
    candidate: str = CAND1,
    reference: dict[str, Any] | None = None,
    gain: float = 0.2,
    target_id: str = T1,
    pairs: list[dict[str, Any]] | None = None,
    **pair_options: Any,
) -> dict[str, Any]:
    """A valid ``samples.record`` body against the original (default) with ``gain``."""
    return {
        "samples_id": samples_id,
        "target_id": target_id,
        "experiment_id": experiment_id,
        "stage": stage,
        "reference": reference or {"kind": "original", "content_hash": ORIGINAL_HASH},
        "candidate_hash": candidate,
        "test_set_hash": TEST_SET_HASH,
        "environment_id": ENV_ID,
        "units": {PRIMARY: "ms", "memory_mb": "MB", "p99_ms": "ms"},
        "pairs": pairs if pairs is not None else make_pairs(gain, tag=samples_id, **pair_options),
    }


#: The name ``perfledger measure workload --record`` attaches its raw per-call table under.
RAW_TABLE = "samples.json"
#: The protocol of the workload driver's ABBA pairs (provenance of measured samples, R5).
WORKLOAD_PROTOCOL = "workload_abba"
#: Seconds a driver call takes beyond the time its command reports (process start, I/O).
_CALL_OVERHEAD_S = 0.001


def _reported_s(values: dict[str, list[float]]) -> float:
    """A call's reported time, seconds: the sum of its primary's values (ms), else of all."""
    times = values.get(PRIMARY) or [v for vs in values.values() for v in vs]
    return sum(times) / 1000.0


def measured(
    body: dict[str, Any], accuracy: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Artifact]]:
    """``body`` (a ``samples.record`` body) as ``perfledger measure workload --record`` records
    it (R5): provenance ``perfledger`` naming the workload driver's protocol and its raw
    per-call table, attached, from which every pair re-derives (each call's ``wall_s``, where the
    pairs carry none a little above the time it reports, and each pair's monitor window). Where
    the readiness compares outputs (``accuracy``: its rule, as builtins), every call carries the
    driver's output check (the outputs matched). Returns ``(body, artifacts)``."""
    body = copy.deepcopy(body)
    settings: dict[str, Any] = {}
    if accuracy is not None:
        settings = {"outputs": {"accuracy": accuracy, "method": "outputs_v2"}}
    body["provenance"] = {"source": "perfledger", "protocol": WORKLOAD_PROTOCOL,
                          "settings": settings, "raw_table": RAW_TABLE}  # fmt: skip
    rows: list[dict[str, Any]] = []
    windows: list[dict[str, Any]] = []
    clock_s = 10.0
    for n, pair in enumerate(body["pairs"]):
        monitor = pair.get("monitor")
        if monitor is not None:
            windows.append({
                "call_ids": [pair["ref"]["call_id"], pair["cand"]["call_id"]],
                "observed": monitor.get("observed"), "reasons": list(monitor.get("flags", [])),
                "foreign_activity": monitor.get("foreign_activity", False)})  # fmt: skip
        for label in ("ref", "cand"):
            side = pair[label]
            wall_s = side.get("wall_s") or _reported_s(side["values"]) + _CALL_OVERHEAD_S
            side["wall_s"] = wall_s
            row = {
                "subject": label, "pair": n, "warmup": False, "case": pair["case"],
                "call_id": side["call_id"], "ok": True, "correct": side["correct"],
                "metrics": side["values"], "wall_s": wall_s, "start_s": clock_s,
                "end_s": clock_s + wall_s}  # fmt: skip
            if accuracy is not None:  # the driver compared the call's output (it matched)
                check = {"method": "outputs_v2", "compare": accuracy["compare"],
                         "blake3": "0" * 64, "size": 8, "ok": True, "reason": ""}  # fmt: skip
                side["output"] = {**check, "self_correct": side["correct"]}
                row.update(output=check, self_correct=side["correct"])
            rows.append(row)
            clock_s += 1.0
    table = {"kind": "workload", "settings": settings, "table": rows,
             "monitor": {"windows": windows}, "binding": binding_of(body)}  # fmt: skip
    raw = json.dumps(table, sort_keys=True).encode()
    return body, {RAW_TABLE: Artifact(raw, "application/json")}


def handoff(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A ``handoff.record`` body for a session where e1 became champion and passed its audit."""
    body = {
        "target_id": target_id,
        "primary_achieved": True,
        "champion": "e1",
        "key_evidence": ["ev-ncu", "e1-target"],
        "gains": ["the fused kernel removed a copy of the attention scores"],
        "local_results": [],
        "rejected": [],
        "prediction_corrections": [],
        "unresolved_questions": ["does the gain hold at S=8192?"],
        "stop_reason": "primary achieved",
        "budget_used": {"wall_s": 1200.0, "gpu_s": 600.0},
        "budget_left": {"wall_s": 6000.0, "gpu_s": 3000.0},
        "resume_needs": ["clone the ledger; run final audit again on new driver"],
        "feedback": "none",
    }
    body.update(over)
    return body


def record_measured_aa(
    ledger: Ledger, target_id: str = T1, *, actor: str = ACTOR, spread: float = 0.002,
    pairs: int = 10,
) -> Any:  # fmt: skip
    """Append a measured resolution to ``ledger`` as ``perfledger measure aa --record`` would
    (R4): an A/A table of the Target's primary over its test set's cases (``pairs`` per case,
    values within ``spread``), and the figures it derives. For tests whose subject is not the
    A/A itself. Returns the appended envelope."""
    rows = target_aa_rows(ledger, target_id, spread=spread, pairs=pairs)
    body, table = measured_resolution(ledger, target_id, rows=rows)
    [envelope] = execute(ledger, "resolution.record", body, actor=actor, artifacts=table)
    return envelope


def target_aa_rows(
    ledger: Ledger, target_id: str = T1, *, spread: float = 0.002, pairs: int = 10
) -> list[dict[str, Any]]:
    """:func:`aa_rows` of the Target's primary (name, unit) over its test set's cases."""
    target = ledger.state().targets[target_id]
    assert target.readiness is not None
    test_set = target.readiness.test_set
    cases = tuple(test_set.cases) if test_set is not None and test_set.cases else CASES
    primary = target.definition.primary
    per_call = -(-tail_min_values(primary.statistic) // pairs) if primary.statistic in (
        "p95", "p99") else 1  # fmt: skip
    return aa_rows(cases, pairs=pairs, spread=spread, metric=primary.name, unit=primary.unit,
                   per_call=per_call, levels=baseline_levels(target, cases))  # fmt: skip


def baseline_levels(target: Any, cases: tuple[str, ...]) -> dict[str, float]:
    """Each case's level (seconds) of an A/A of the Target's original, from its baseline: the
    case's baseline median, else the scenario's level scaled by the baseline's median over the
    scenario's 10 ms (R11: the reference watch compares formal stages with the A/A, so a
    stand-in A/A runs at the level the original was measured at). Empty without a baseline."""
    base = target.baseline
    scale = UNITS_PER_SECOND.get(target.definition.primary.unit)
    if base is None or not scale or target.definition.primary.direction != "lower_is_better":
        return {}
    per_case = dict(base.per_case_median or {})
    factor = base.median / (0.010 * scale) if base.median > 0 else 1.0
    return {
        case: (
            per_case[case] / scale
            if per_case.get(case)
            else 0.010 * factor * (1.0 + 0.3 * (CASES.index(case) if case in CASES else 0))
        )
        for case in cases
    }


def explain_by_review(
    ledger: Ledger, samples_id: str, explanation: str = "the activity cannot move the metric",
    *, reviewer: str = "reviewer", actor: str = ACTOR,
) -> list[int]:  # fmt: skip
    """R17: explain the foreign activity of ``samples_id`` as an agent must: ``reviewer`` (an
    actor other than the experiment's) reviews the samples' event, and ``actor`` explains the
    pairs with foreign activity citing that review. Returns those pairs (none: nothing
    appended)."""
    view = ledger.state().samples[samples_id]
    payload = ledger.payload(view.event_id)
    foreign = [i for i, p in enumerate(payload.pairs)
               if p.monitor is not None and p.monitor.foreign_activity]  # fmt: skip
    if foreign:
        review_id = f"rv-{samples_id}"
        with rules_at(REVIEW_BEFORE):  # R17 reads no review version; see REVIEW_BEFORE
            execute(ledger, "review.record", {
                "review_id": review_id, "reviewer": reviewer, "model_family": "human",
                "subject": "other", "subject_event": view.event_id,
                "challenge": "foreign activity in the windows", "response": explanation,
                "dissent_remains": False}, actor=reviewer)  # fmt: skip
        execute(ledger, "activity.explain", {
            "samples_id": samples_id, "pairs": foreign, "explanation": explanation,
            "review_id": review_id}, actor=actor)  # fmt: skip
    return foreign


def explain_stage_by_review(path: Any, experiment_id: str, stage: str, **over: Any) -> None:
    """:func:`explain_by_review` on every samples of ``experiment_id``'s ``stage`` in the ledger
    at ``path`` not yet explained (what a test of another rule does after each formal stage,
    since a typed explanation decides nothing, R17); ``over`` goes to it."""
    with Ledger.open(path) as ledger:
        state = ledger.state()
        for sid, view in sorted(state.samples.items()):
            mine = view.experiment_id == experiment_id and view.stage == stage
            if mine and sid not in state.explanations:
                explain_by_review(ledger, sid, **over)


class Session:
    """Drive operations in-process on a real ledger, with a deterministic clock."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.clock = datetime(2026, 1, 1, tzinfo=UTC)

    def run(
        self, op: str, body: dict[str, Any], key: str | None = None,
        artifacts: dict[str, Artifact] | None = None,
    ) -> Any:  # fmt: skip
        """Execute ``op`` (with ``artifacts`` attached); returns the payload of its (single)
        event as builtins."""
        import msgspec

        if baseline_measured(op, body, artifacts):
            # R4: a baseline decides only when measured (`perfledger measure baseline`)
            target = self.ledger.state().targets.get(body.get("target_id"))
            if target is not None and target.readiness is not None:
                body, artifacts = measured_baseline(self.ledger, body)
        self.clock += timedelta(seconds=1)
        envelopes = execute(
            self.ledger, op, copy.deepcopy(body), actor=ACTOR, idempotency_key=key, now=self.clock,
            artifacts=artifacts,
        )  # fmt: skip
        assert len(envelopes) == 1
        return msgspec.to_builtins(envelopes[0].payload)

    def refused(
        self, op: str, body: dict[str, Any], rule: str | None,
        artifacts: dict[str, Artifact] | None = None,
    ) -> PerfledgerError:  # fmt: skip
        """Assert ``op`` is refused (by ``rule``, or a BadRequest when None) and that the ledger
        head did not move; returns the error."""
        head = self.ledger.head()
        expected = RuleRefused if rule is not None else PerfledgerError
        with pytest.raises(expected) as info:
            self.run(op, body, artifacts=artifacts)
        if rule is not None:
            assert info.value.rule == rule, info.value.message
            assert info.value.exit_code == 3
        assert self.ledger.head() == head
        return info.value

    def state(self) -> Any:
        """The folded state at the head."""
        return self.ledger.state()

    # -- the scenario, step by step ------------------------------------------------------

    def ready(self, target_id: str = T1) -> Session:
        """Freeze the Target and record evidence, readiness, metric audit, baseline, resolution."""
        self.up_to_baseline(target_id).measure_aa(target_id)
        return self

    def up_to_baseline(self, target_id: str = T1) -> Session:
        """Freeze the Target and record evidence, readiness, metric audit and baseline: its
        resolution (R4) comes next."""
        self.run("target.freeze", target_freeze(target_id))
        if "ev-ncu" not in self.state().evidence:
            self.run("evidence.add", evidence())
        self.run("readiness.record", readiness(target_id))
        self.run("metric-audit.record", metric_audit(target_id))
        self.run("baseline.record", baseline(target_id))
        return self

    def measure_aa(self, target_id: str = T1, **over: Any) -> Any:
        """Record a measured resolution (:func:`measured_resolution`, ``over`` passed to it) as
        ``perfledger measure aa --record`` does; returns its payload."""
        if "rows" not in over:
            over["rows"] = target_aa_rows(self.ledger, target_id)
        body, table = measured_resolution(self.ledger, target_id, **over)
        return self.run("resolution.record", body, artifacts=table)

    def record_measured(self, body: dict[str, Any]) -> Any:
        """Record ``body`` (a ``samples.record`` body) as measured samples (:func:`measured`), as
        ``perfledger measure workload`` does: a formal stage's run is started first (R14).
        Returns the samples' payload."""
        readiness = self.state().targets[body["target_id"]].readiness
        rule = compared(readiness) if readiness is not None else None
        measured_body, table = measured(body, rule)
        if body["stage"] in ("target", "final_audit"):
            self.run("formal-run.start", {
                "experiment_id": body["experiment_id"], "stage": body["stage"],
                "samples_id": body["samples_id"], "protocol": WORKLOAD_PROTOCOL})  # fmt: skip
        return self.run("samples.record", measured_body, artifacts=table)

    def screened(self, experiment_id: str = "e1", candidate: str = CAND1, **exp: Any) -> Session:
        """Create an experiment and record a passing-looking screen and its verdict."""
        self.run("experiment.create", experiment(experiment_id, candidate=candidate, **exp))
        self.run(
            "samples.record",
            samples(f"{experiment_id}-screen", "screen", experiment_id=experiment_id,
                    candidate=candidate),
        )  # fmt: skip
        self.run("verdict.record", {"samples_id": f"{experiment_id}-screen"})
        return self

    def passed(self, experiment_id: str = "e1", candidate: str = CAND1, gain: float = 0.2,
               **pair_options: Any) -> Any:  # fmt: skip
        """Screen, then target samples with ``gain`` and their verdict; returns the verdict."""
        self.screened(experiment_id, candidate)
        self.record_measured(  # R5: a champion comes only from samples perfledger measured
            samples(f"{experiment_id}-target", "target", experiment_id=experiment_id,
                    candidate=candidate, gain=gain, **pair_options),
        )  # fmt: skip
        return self.run("verdict.record", {"samples_id": f"{experiment_id}-target"})

    def champion(self, experiment_id: str = "e1", expected: str = "original") -> Any:
        """Select ``experiment_id``'s target result as champion."""
        return self.run(
            "champion.select",
            {"target_id": T1, "samples_id": f"{experiment_id}-target",
             "expected_current": expected},
        )  # fmt: skip


#: The rule versions before issue 34's "self-reported figures are secondary only" (the versions
#: an older perfledger wrote these kinds under).
#: ``TargetFrozen`` as a perfledger before R1 fixed an observed time's direction wrote it: the
#: sessions written as older perfledgers wrote them freeze their Target so (a current Target
#: before events of older versions is a history no perfledger writes).
BEFORE_OBSERVED_DIRECTION = 3

BEFORE_REPORTED = {
    "ReadinessRecorded": 5,
    "SamplesRecorded": 14,
    "VerdictRecorded": 8,
    "ChampionSelected": 6,
    "FinalAuditRecorded": 10,
}


#: ``ReviewRecorded`` as a perfledger before issue 34's named and signed reviews recorded it
#: (schema 1). The R17 helpers record their review so: tests of other rules mix it with
#: verdicts and champions recorded as before (:func:`as_before`), and a review of a newer
#: version before them would be a history no perfledger writes (an audit finding,
#: :mod:`perfledger.commands.audit.schema_floor`); R17's explanation reads no review version.
REVIEW_BEFORE = {"ReviewRecorded": 1}


def review_as_before(path: Any, body: dict[str, Any], actor: str) -> Any:
    """``review.record`` of ``body`` by ``actor`` on the ledger at ``path``, recorded as
    :data:`REVIEW_BEFORE` (for sessions whose verdicts are recorded :func:`as_before`).
    Returns the review's payload as builtins."""
    import msgspec

    with Ledger.open(path) as ledger, rules_at(REVIEW_BEFORE):
        [event] = execute(ledger, "review.record", body, actor=actor)
    return msgspec.to_builtins(event.payload)


#: The ``BaselineRecorded`` version before R4 took only a measured baseline (issue 34).
BEFORE_MEASURED_BASELINE = 1


@contextlib.contextmanager
def rules_at(versions: dict[str, int]) -> Iterator[None]:
    """Decide and record the kinds of ``versions`` (kind -> schema version) as an older
    perfledger did, at that version and by its rule, for the duration: the ledgers it writes
    are the ones that perfledger wrote. The registry is restored on exit."""
    from perfledger.events.kinds import get_kind
    from perfledger.events.kindspec import _REGISTRY

    saved = {kind: get_kind(kind) for kind in versions}
    try:
        for kind, version in versions.items():
            _REGISTRY[kind] = dataclasses.replace(saved[kind], version=version)
        yield
    finally:
        _REGISTRY.update(saved)


def self_timed_ready(ledger: Ledger) -> Session:
    """A session whose Target's primary (``latency_ms``) the subject reports, made ready as an
    older perfledger did (``ReadinessRecorded`` schema 5, before R5 refused it), with baseline
    and measured resolution: the ledger tests of self-timed and outside samples start from."""
    session = Session(ledger)
    # its baseline typed, as that perfledger took it (BaselineRecorded 1): verdicts and
    # champions of that perfledger follow in these tests
    with rules_at({"ReadinessRecorded": BEFORE_REPORTED["ReadinessRecorded"],
                   "BaselineRecorded": BEFORE_MEASURED_BASELINE,
                   "TargetFrozen": BEFORE_OBSERVED_DIRECTION}):  # fmt: skip
        session.up_to_baseline()
    session.measure_aa()
    return session


def before_reported(kind: str) -> contextlib.AbstractContextManager[None]:
    """:func:`rules_at` ``kind``'s version before issue 34's (:data:`BEFORE_REPORTED`); the
    other kinds stay current, so the events already written stay readable."""
    return rules_at({kind: BEFORE_REPORTED[kind]})


def as_before(path: Any, op: str, body: dict[str, Any], actor: str = ACTOR) -> Any:
    """``op`` of ``body`` on the ledger at ``path``, decided and recorded as an older perfledger
    did (every kind at its version of :data:`BEFORE_REPORTED`), in-process: for tests of the
    self-timed driver whose subject is another rule. The verdicts before a champion so selected
    must be recorded so too: a ``VerdictRecorded`` of the current version shows that its writer
    knew ``ChampionSelected`` 7, and an older one after it is an audit finding
    (:mod:`perfledger.commands.audit.schema_floor`). Returns the event's payload as builtins."""
    import msgspec

    with Ledger.open(path) as ledger, rules_at(BEFORE_REPORTED):
        [event] = execute(ledger, op, body, actor=actor)
    return msgspec.to_builtins(event.payload)


def select_as_before(path: Any, body: dict[str, Any], actor: str = ACTOR) -> Any:
    """:func:`as_before` of ``champion.select``."""
    return as_before(path, "champion.select", body, actor)


def final_audit_as_before(path: Any, body: dict[str, Any], actor: str = ACTOR) -> Any:
    """:func:`as_before` of ``final-audit.record``."""
    return as_before(path, "final-audit.record", body, actor)


def freeze_as_before(path: Any, body: dict[str, Any], actor: str = ACTOR) -> None:
    """``target.freeze`` of ``body`` on the ledger at ``path`` as a perfledger before R1 fixed an
    observed time's direction recorded it (:data:`BEFORE_OBSERVED_DIRECTION`): the Target of a
    session whose later events are recorded as older perfledgers did (a current Target before
    them is a history no perfledger writes)."""
    with Ledger.open(path) as ledger, rules_at({"TargetFrozen": BEFORE_OBSERVED_DIRECTION}):
        execute(ledger, "target.freeze", body, actor=actor)


def readiness_as_before(path: Any, body: dict[str, Any], cwd: Any, actor: str = ACTOR) -> Any:
    """``readiness.record`` of ``body`` on the ledger at ``path`` as ``perfledger readiness
    record`` run in ``cwd`` records it (its edge snapshots ``original.subject``), decided as an
    older perfledger did (``ReadinessRecorded`` 5: before a primary the subject reports was
    refused): for tests of the self-timed driver whose subject is another rule. Returns the
    readiness's payload as builtins."""
    import msgspec

    from perfledger.app.identity import readiness_edge

    with contextlib.chdir(cwd), Ledger.open(path) as ledger:
        body, files = readiness_edge(ledger, body)
        with rules_at(BEFORE_REPORTED):
            [event] = execute(ledger, "readiness.record", body, actor=actor, artifacts=files)
    return msgspec.to_builtins(event.payload)
