"""A reusable optimization scenario: valid requests for every operation, paired-sample
generators and an in-process session that appends through the real decide + append path.

Nothing is mocked: a :class:`Session` wraps a real git ledger and calls
:func:`perfledger.commands.registry.operations.execute`, exactly as the CLI does.

The Target's primary is an observed metric (``wall_time`` in ms: perfledger's own clock of every
call), its guardrail and secondary the other one (``cpu_time``: the kernel's CPU accounting), so
every samples body is recorded as ``perfledger measure workload --protocol worker`` records it
(:func:`measured`: provenance ``worker/v1`` and the per-call raw table every pair re-derives
from, R5). A figure the subject reports never decides (issue 34); tests of samples recorded
from outside or self-timed build their Target with :mod:`wf_legacy` (the scenario before).
"""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from perfledger.api import Ledger
from perfledger.commands.audit.schema_floor import IMPLIES
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.aa_table import aa_binding, rederive_aa
from perfledger.commands.workflow.deciders import environment_id
from perfledger.commands.workflow.output_rules import compared
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.errors import PerfledgerError, RuleRefused
from perfledger.events.kinds import get_kind
from perfledger.events.workflow import OBSERVED_METRICS, R4_MEASURED_BASELINE
from perfledger.ledger.base import Artifact
from perfledger.projections.target_kind import target_kind
from perfledger.projections.verdict_cases import tail_min_values
from perfledger.projections.workflow import formal_runs as started_runs

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
PRIMARY = "wall_time"
#: The guardrail and the secondary: the subject's CPU time, observed by the kernel (R5).
GUARD = "cpu_time"
#: The readiness's accuracy rule: perfledger compares every call's output with the reference's.
ACCURACY = {"compare": "exact", "rtol": 0.0, "atol": 0.0}
#: The bootstrap resamples the scenario's readiness declares; None: the Target's default
#: (10,000), as the benchmarks built on this scenario keep. tests/conftest.py sets 1,000 (the
#: least R12 accepts): the scenario's effects stand far from every bound, and the bootstrap was
#: most of the CPU time of a recorded verdict.
RESAMPLES: int | None = None
#: Claim of experiment e1: f=0.6, s=2 -> bound 1/(0.4+0.3).
BOUND_E1 = 1.0 / (0.4 + 0.6 / 2.0)


def target_freeze(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A valid ``target.freeze`` body: lower-is-better mean wall time (observed, ms), 5 % minimum
    effect, a CPU-time guardrail and the same CPU time pre-declared as a secondary."""
    body = {
        "target_id": target_id,
        "title": "decode wall time of the demo workload",
        "primary": {
            "name": PRIMARY,
            "unit": "ms",
            "direction": "lower_is_better",
            "statistic": "mean",
        },
        "min_effect": 0.05,
        "guardrails": [
            {
                "metric": GUARD,
                "unit": "ms",
                "direction": "lower_is_better",
                "allowed_regression": 0.02,
            }
        ],
        "secondaries": [
            {"name": GUARD, "unit": "ms", "direction": "lower_is_better", "threshold": 0.05}
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
        "driver": {
            "argv": ["python", "bench.py", "--out", "{output}"],
            "env": {"CUDA_VISIBLE_DEVICES": "0"},
        },
        "accuracy": dict(ACCURACY),  # every call's output compared (the worker protocol)
        "environment": dict(ENVIRONMENT),
        # an observed primary takes measured samples only (R5); outside samples stay allowed so
        # that the original need not be bound to a snapshot (R11's `{subject}`)
        "statistics": {"min_pairs_per_case": 5, "allow_outside_samples": True},
    }
    if RESAMPLES is not None:
        body["statistics"]["resamples"] = RESAMPLES
    body.update(over)
    if (body.get("driver") is None and "accuracy" not in over) or body["accuracy"] is None:
        del body["accuracy"]  # no outputs to compare (R2)
    return body


def metric_audit(target_id: str = T1, **over: Any) -> dict[str, Any]:
    """A valid ``metric-audit.record`` body for the primary."""
    body = {
        "target_id": target_id,
        "metric": PRIMARY,
        "numerator": "perfledger's monotonic clock of one call (ms)",
        "denominator": "one call",
        "unit": "ms",
        "source": "perfledger worker protocol: wall_s",
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


#: The name ``perfledger measure baseline`` attaches the original's raw table under.
BASELINE_TABLE = "baseline.json"


def measured_baseline(
    ledger: Ledger, body: dict[str, Any], binding: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Artifact]]:
    """``body`` (a ``baseline.record`` body) and the raw table ``perfledger measure baseline``
    attaches, as that command writes them (R4: the values re-derive from the table, so the
    baseline decides): worker-protocol rows whose clocks give an observed primary's values
    (the values become the clocks' exact figures), else the self-timed driver's rows."""
    body = copy.deepcopy(body)
    target = ledger.state().targets[body["target_id"]]
    assert target.readiness is not None
    metric, unit = body["metric"], body["unit"]
    cases = body.get("cases") or [None] * len(body["values"])
    if target_kind(target) == "kernel":
        return _kernel_baseline(body, cases, binding or aa_binding(
            body["target_id"], target.readiness.original.content_hash))  # fmt: skip
    rows: list[dict[str, Any]] = []
    values: list[float] = []
    clock_s = 50.0
    for k, (value, case) in enumerate(zip(body["values"], cases, strict=True)):
        row: dict[str, Any] = {"call_id": f"baseline-{case}-{k}", "ok": True, "correct": True,
                               "metrics": {metric: [value]}}  # fmt: skip
        if case is not None:
            row["case"] = case
        if metric in OBSERVED_METRICS:
            seconds = value / UNITS_PER_SECOND[unit]
            value = seconds * UNITS_PER_SECOND[unit]
            row.update(wall_s=seconds, cpu_s=seconds, start_s=clock_s, end_s=clock_s + seconds,
                       metrics={metric: [value]}, output={"ok": True})  # fmt: skip
            clock_s += 1.0
        values.append(value)
        rows.append(row)
    body["values"] = values
    body["call_ids"] = [r["call_id"] for r in rows] if metric in OBSERVED_METRICS else [
        f"{r['call_id']}-0" for r in rows]  # fmt: skip
    body["raw_table"] = BASELINE_TABLE
    table = {
        "kind": "baseline", "table": rows,
        "binding": binding or aa_binding(body["target_id"], target.readiness.original.content_hash),
    }  # fmt: skip
    raw = json.dumps(table, sort_keys=True).encode()
    return body, {BASELINE_TABLE: Artifact(raw, "application/json")}


def baseline_measured(op: str, body: dict[str, Any], artifacts: Any) -> bool:
    """Whether a session records ``body`` as ``perfledger measure baseline`` would: a
    ``baseline.record`` with nothing attached, no table named, decided under the rule that
    takes only measured baselines (``BaselineRecorded`` 2; under :func:`wf_legacy.rules_at`
    an older one, it is recorded typed, as that perfledger did)."""
    return (
        op == "baseline.record"
        and artifacts is None
        and "raw_table" not in body
        and get_kind("BaselineRecorded").version >= R4_MEASURED_BASELINE
    )


def _kernel_baseline(
    body: dict[str, Any], cases: list[Any], binding: dict[str, str]
) -> tuple[dict[str, Any], dict[str, Artifact]]:
    """:func:`measured_baseline` of a kernel Target: one harness comparison per value."""
    scale = UNITS_PER_SECOND[body["unit"]]
    rows: list[dict[str, Any]] = []
    seen: dict[Any, int] = {}
    call_ids = []
    for value, case in zip(body["values"], cases, strict=True):
        rows.append({"case": case, "flags": [], "rows": [{"pair": 0, "ref_s": value / scale}]})
        k = seen.get(case, 0)
        seen[case] = k + 1
        call_ids.append(f"{'' if case is None else case}-{k}-0")
    body["values"] = [r["rows"][0]["ref_s"] * scale for r in rows]
    body["call_ids"], body["raw_table"] = call_ids, BASELINE_TABLE
    raw = json.dumps({"kind": "baseline", "table": rows, "binding": binding}).encode()
    return body, {BASELINE_TABLE: Artifact(raw, "application/json")}


def record_measured_baseline(ledger: Ledger, body: dict[str, Any], actor: str = ACTOR) -> Any:
    """Append ``body`` (a ``baseline.record`` body of typed values) as ``perfledger measure
    baseline`` records it (:func:`measured_baseline`: R4, a typed baseline decides nothing):
    for tests whose subject is not the baseline. Returns the appended envelope."""
    measured, table = measured_baseline(ledger, body)
    [envelope] = execute(ledger, "baseline.record", measured, actor=actor, artifacts=table)
    return envelope


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
    the case's level (``10 ms x (1 + 0.3 i)`` for the ``i``-th of :data:`CASES`, as
    :func:`make_pairs` gives the reference) times a deterministic relative jitter within
    ``spread`` (``spreads``: per case). For an observed
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
    """Paired calls with a primary improvement of about ``gain`` (ratio, ±1 % jitter), and CPU
    time (the guardrail and secondary) regressing by ``memory_regression`` and improving by
    ``secondary_gain`` (if given). One value per call of each observed metric, as the worker
    protocol measures (:func:`measured` re-derives them from the raw table's clocks).

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
            cpu_ref = 8.0 + 0.01 * k
            cpu_cand = (
                cpu_ref
                * (1.0 + memory_regression)
                * (1.0 + 0.0005 * ((k % 3) - 1) + 0.0001 * spread)
            )
            if secondary_gain is not None:
                cpu_cand *= (1.0 - secondary_gain) * jitter
            ref_values: dict[str, list[float]] = {PRIMARY: [ref], GUARD: [cpu_ref]}
            cand_values: dict[str, list[float]] = {PRIMARY: [cand], GUARD: [cpu_cand]}
            call = f"{tag}{case}-{k}"
            pairs.append(
                {
                    "case": case,
                    "ref": _subject(call, ref_values),
                    "cand": _subject(call, cand_values, cand_correct),
                    "same_process": False,  # the worker protocol: one process per subject
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
        "units": {PRIMARY: "ms", GUARD: "ms"},
        "pairs": pairs if pairs is not None else make_pairs(gain, tag=samples_id, **pair_options),
    }


#: The name ``perfledger measure workload --record`` attaches its raw per-call table under.
RAW_TABLE = "samples.json"
#: The protocol the scenario's samples are measured by (perfledger's clock, R5).
WORKLOAD_PROTOCOL = "worker/v1"
#: Seconds of a call's CPU time where its pair carries none (the primary's share).
_CPU_SHARE = 0.8


def _seconds(value_ms: float) -> float:
    """A figure in ms as the clock's seconds."""
    return value_ms / UNITS_PER_SECOND["ms"]


def measured(
    body: dict[str, Any], accuracy: dict[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Artifact]]:
    """``body`` (a ``samples.record`` body) as ``perfledger measure workload --protocol worker``
    records it (R5): provenance ``perfledger``/``worker/v1`` and its raw per-call table,
    attached, from which every pair re-derives. Each call's clocks (``wall_s``, ``cpu_s``) are
    its values of the observed metrics (ms, as the pairs give them; the recorded values are
    re-derived from the clocks, as the worker does), its output was compared with the
    reference's by ``accuracy`` (the readiness's rule; default :data:`ACCURACY`): it matched
    where the call is correct, and each pair's monitor verdict is its window's. Returns
    ``(body, artifacts)``."""
    body = copy.deepcopy(body)
    rule = dict(accuracy if accuracy is not None else ACCURACY)
    settings: dict[str, Any] = {"protocol": WORKLOAD_PROTOCOL,
                                "outputs": {"accuracy": rule, "method": "outputs_v2"}}  # fmt: skip
    body["provenance"] = {"source": "perfledger", "protocol": WORKLOAD_PROTOCOL,
                          "settings": settings, "raw_table": RAW_TABLE}  # fmt: skip
    units = body["units"]
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
            values = side["values"]
            wall_s = side.get("wall_s") or _seconds(values[PRIMARY][0])
            cpu_s = _seconds(values[GUARD][0]) if GUARD in values else _CPU_SHARE * wall_s
            clocks = {"wall_time": wall_s, "cpu_time": cpu_s}
            side["values"] = {  # every observed metric of the samples, as the worker records
                name: [clocks[name] * UNITS_PER_SECOND[unit]]
                for name, unit in units.items() if name in clocks
            }  # fmt: skip
            side["wall_s"] = wall_s
            given = side.get("output")  # a test's own output check, else the comparison's
            check = {"method": "outputs_v2", "compare": rule["compare"], "blake3": "0" * 64,
                     "size": 8, "ok": side["correct"],
                     "reason": "" if side["correct"] else "differs from the reference's"}  # fmt: skip
            if given is not None:
                check = {key: given[key] for key in check}
            self_correct = given["self_correct"] if given is not None else True
            side["output"] = {**check, "self_correct": self_correct}
            rows.append({
                "subject": label, "pair": n, "warmup": False, "case": pair["case"],
                "call_id": side["call_id"], "ok": True, "correct": side["correct"],
                "metrics": side["values"], "wall_s": wall_s, "cpu_s": cpu_s,
                "start_s": clock_s, "end_s": clock_s + wall_s, "output": check,
                "self_correct": self_correct})  # fmt: skip
            clock_s += 1.0
    table = {"kind": "worker", "settings": settings, "table": rows,
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
        from wf_legacy import rules_at

        # R17 reads no review version: the review is recorded at the oldest version the history
        # before it allows (wf_legacy.REVIEW_BEFORE where tests record verdicts as before; a
        # current one after a current champion), so that no schema floor is lowered either way
        floor = max((IMPLIES.get((e.kind, e.envelope.schema), {}).get("ReviewRecorded", 1)
                     for e in ledger.events()), default=1)  # fmt: skip
        with rules_at({"ReviewRecorded": floor}):
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
        artifacts: dict[str, Artifact] | None = None, start_run: bool = True,
    ) -> Any:  # fmt: skip
        """Execute ``op`` (with ``artifacts`` attached); returns the payload of its (single)
        event as builtins. A ``samples.record`` body without provenance or artifacts is recorded
        as measured (:meth:`as_measured`; the scenario's Target takes no other), a formal
        stage's run started first where ``start_run`` and none is (R14), as ``perfledger
        measure workload`` does."""
        import msgspec

        if op == "samples.record" and artifacts is None and "provenance" not in body:
            body, artifacts = self.as_measured(body)
            if start_run:
                self.start_run(body)
        if baseline_measured(op, body, artifacts):
            # R4: a baseline decides only when measured (`perfledger measure baseline` attaches
            # its raw table); pass artifacts={} to record a typed (declared) one
            body, artifacts = self.measured_baseline(body)
        self.clock += timedelta(seconds=1)
        envelopes = execute(
            self.ledger, op, copy.deepcopy(body), actor=ACTOR, idempotency_key=key, now=self.clock,
            artifacts=artifacts,
        )  # fmt: skip
        assert len(envelopes) == 1
        return msgspec.to_builtins(envelopes[0].payload)

    def start_run(self, body: dict[str, Any]) -> None:
        """Start the formal run of ``body`` (a ``samples.record`` body of a formal stage) where
        none is started, as ``perfledger measure workload`` does before it measures (R14)."""
        started = body["samples_id"] in started_runs(self.state())
        if body["stage"] in ("target", "final_audit") and not started:
            self.run("formal-run.start", {
                "experiment_id": body["experiment_id"], "stage": body["stage"],
                "samples_id": body["samples_id"], "protocol": WORKLOAD_PROTOCOL})  # fmt: skip

    def measured_baseline(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Artifact]]:
        """:func:`measured_baseline` of ``body`` where its Target is ready (else ``body`` as
        given, for the decider to refuse)."""
        target = self.state().targets.get(body.get("target_id"))
        if target is None or target.readiness is None or body.get("metric") is None:
            return body, {}
        return measured_baseline(self.ledger, body)

    def as_measured(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Artifact]]:
        """:func:`measured` of ``body`` by its Target's readiness's accuracy rule."""
        target = self.state().targets.get(body["target_id"])
        readiness = target.readiness if target is not None else None
        return measured(body, compared(readiness) if readiness is not None else None)

    def refused(
        self, op: str, body: dict[str, Any], rule: str | None,
        artifacts: dict[str, Artifact] | None = None,
    ) -> PerfledgerError:  # fmt: skip
        """Assert ``op`` is refused (by ``rule``, or a BadRequest when None) and that the ledger
        head did not move; returns the error."""
        head = self.ledger.head()
        expected = RuleRefused if rule is not None else PerfledgerError
        with pytest.raises(expected) as info:
            self.run(op, body, artifacts=artifacts, start_run=False)
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
        measured_body, table = self.as_measured(body)
        self.start_run(body)
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
