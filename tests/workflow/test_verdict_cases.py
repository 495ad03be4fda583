"""Per-case verdicts with the Target's statistic and aggregation (R12), samples' provenance (R5)
and the re-derivation of verdicts recorded under the pooled rule (schema 1).

Pure derivations first (``derive_case_verdict``), then the decider on a real ledger, then
properties over generated samples (hypothesis). The decider's tests derive per-request
statistics (several values per call) from typed pairs, which only a Target whose primary the
subject reports takes: ``wf_legacy``'s, made ready as an older perfledger did (R5 refuses such
a readiness since ``ReadinessRecorded`` 6)."""

from __future__ import annotations

import json
import math
import statistics
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wf_legacy import (
    ENV_ID,
    PRIMARY,
    Session,
    baseline,
    before_reported,
    evidence,
    experiment,
    metric_audit,
    readiness,
    resolution,
    samples,
    target_freeze,
)

from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.errors import RuleRefused
from perfledger.ledger.base import Artifact
from perfledger.projections.verdict_cases import (
    METHOD,
    METHOD_V1,
    aa_resolution,
    derive_case_guardrail,
    derive_case_verdict,
    tail_min_values,
)
from perfledger.projections.verdicts import Pair, derive_verdict


def _pairs(ratios: dict[str, float], n: int = 8, ref: float = 10.0, k: int = 3) -> list[Pair]:
    """``n`` pairs per case whose candidate takes ``ratio`` times the reference (±0.5 % jitter)."""
    out = []
    for index, (case, ratio) in enumerate(ratios.items()):
        for i in range(n):
            jitter = 1.0 + 0.005 * ((i * 3 + index) % 5 - 2) / 2
            r = tuple(ref * (1 + 0.3 * index) * (1 + 0.001 * j) for j in range(k))
            out.append(Pair(case, r, tuple(v * ratio * jitter for v in r)))
    return out


# ------------------------------------------------------------------------ pure derivations


def test_r12_two_cases_are_not_pooled_a_case_regressed_beyond_resolution_blocks_pass() -> None:
    """50 % better on one case, 10 % worse on the other, minimum effect 20 %: the pooled median
    (the old rule) passes on the midpoint; per case, the regressed case fails the verdict."""
    pairs = _pairs({"small": 0.5, "large": 1.1})
    assert derive_verdict(pairs, direction="lower_is_better", min_effect=0.2).status == "pass"
    v = derive_case_verdict(pairs, direction="lower_is_better", min_effect=0.2, resolution=0.01)
    assert v.method == METHOD and v.statistic == "median" and v.aggregation == "geomean"
    assert v.status == "fail" and v.blocking == ("large",) and "large" in v.reason
    assert v.ci_low is not None and v.ci_low > 0.2  # the aggregate alone would have passed
    cases = {c.case: c for c in v.cases}
    assert cases["small"].status == "pass" and not cases["small"].regressed
    assert cases["large"].regressed and cases["large"].status == "fail"
    # absolute per-call figures with CIs, original -> candidate
    large = cases["large"]
    assert large.ref is not None and large.cand is not None and large.cand > large.ref
    assert large.ref_low is not None and large.ref_high is not None
    assert large.ref_low <= large.ref <= large.ref_high
    assert large.cand == pytest.approx(large.ref * 1.1, rel=0.01)


def test_r12_a_per_case_regression_passes_where_the_target_allows_it() -> None:
    pairs = _pairs({"small": 0.5, "large": 1.1})
    v = derive_case_verdict(
        pairs, direction="lower_is_better", min_effect=0.2, allow_case_regression=True
    )
    assert v.status == "pass" and v.blocking == ()
    assert v.estimate == pytest.approx(1 - math.sqrt(0.5 * 1.1), abs=0.005)


def test_r12_total_aggregation_weighs_cases_by_their_time() -> None:
    """Case a: 10 ms -> 5 ms; case b: 100 ms -> 110 ms. The test set's total got slower (-4.5 %)
    although the geometric mean of the ratios improved (25.8 %)."""
    pairs = _pairs({"a": 0.5}, ref=10.0) + [
        Pair("b", (100.0 + i * 0.01,), ((100.0 + i * 0.01) * 1.1,)) for i in range(8)
    ]
    common: dict[str, Any] = {"direction": "lower_is_better", "min_effect": 0.05,
                              "allow_case_regression": True}  # fmt: skip
    total = derive_case_verdict(pairs, aggregation="total", **common)
    geomean = derive_case_verdict(pairs, aggregation="geomean", **common)
    assert total.estimate == pytest.approx(1 - 115.0 / 110.0, abs=0.002)
    assert total.status == "fail" and total.clear_loss
    assert geomean.estimate == pytest.approx(1 - math.sqrt(0.5 * 1.1), abs=0.003)
    assert geomean.status == "pass"


def test_r12_every_case_aggregation_needs_every_case_to_pass() -> None:
    pairs = _pairs({"a": 0.5, "b": 0.98})
    common: dict[str, Any] = {"direction": "lower_is_better", "min_effect": 0.2}
    assert derive_case_verdict(pairs, **common).status == "pass"  # geometric mean 30 %
    v = derive_case_verdict(pairs, aggregation="every_case", **common)
    assert v.status == "fail" and "['b']" in v.reason


def test_r12_higher_is_better_cases_use_cand_over_ref() -> None:
    pairs = _pairs({"a": 1.5, "b": 1.2})
    v = derive_case_verdict(pairs, direction="higher_is_better", min_effect=0.1)
    assert v.status == "pass"
    assert {c.case: round(c.estimate or 0, 2) for c in v.cases} == {"a": 0.5, "b": 0.2}


def test_r12_the_declared_statistic_is_what_is_derived() -> None:
    """Calls whose candidate has one slow request in three: the median halves, the mean
    doubles, p95 follows the slow requests, throughput is the harmonic mean."""
    pairs = [
        Pair("a", tuple([10.0 + 0.01 * i] * 300), tuple([5.0] * 200 + [50.0] * 100))
        for i in range(5)
    ]
    kw: dict[str, Any] = {"direction": "lower_is_better", "min_effect": 0.05}
    median = derive_case_verdict(pairs, statistic="median", **kw)
    mean = derive_case_verdict(pairs, statistic="mean", **kw)
    p95 = derive_case_verdict(pairs, statistic="p95", **kw)
    ref_values = np.concatenate([p.ref for p in pairs])
    cand_values = np.concatenate([p.cand for p in pairs])
    assert median.cases[0].cand == 5.0 and median.status == "pass"
    assert mean.cases[0].ref == pytest.approx(float(np.mean(ref_values)))
    assert mean.cases[0].cand == pytest.approx(20.0) and mean.status == "fail"
    assert p95.cases[0].cand == pytest.approx(float(np.quantile(cand_values, 0.95)))
    assert p95.cases[0].ref == pytest.approx(float(np.quantile(ref_values, 0.95)))
    rates = [Pair("a", (2.0, 4.0), (4.0, 4.0)) for _ in range(5)]
    throughput = derive_case_verdict(
        rates, statistic="throughput", direction="higher_is_better", min_effect=0.05
    )
    assert throughput.cases[0].ref == pytest.approx(2 / (1 / 2.0 + 1 / 4.0))  # 8/3, not 3
    assert throughput.cases[0].cand == pytest.approx(4.0)


def test_r12_tail_statistics_need_enough_per_request_values() -> None:
    assert (tail_min_values("p95"), tail_min_values("p99"), tail_min_values("mean")) == (
        200, 1000, 1,
    )  # fmt: skip
    short = [Pair("a", tuple([10.0] * 30), tuple([9.0] * 30)) for _ in range(6)]  # 180 values
    with pytest.raises(ValueError, match="need 200"):
        derive_case_verdict(short, direction="lower_is_better", min_effect=0.05, statistic="p95")


def test_r12_guardrail_is_judged_per_case() -> None:
    """Memory regresses 30 % on one case only, 20 % allowed: the geometric mean (14 %) is within
    the allowance, the case is not."""
    pairs = _pairs({"a": 1.0, "b": 1.3})
    g = derive_case_guardrail("memory_mb", pairs, direction="lower_is_better",
                              allowed_regression=0.2)  # fmt: skip
    assert g.regression is not None and g.regression < 0.2
    assert g.status == "fail" and "['b']" in g.reason
    assert g.method == METHOD_V1 and [c.case for c in g.cases] == ["a", "b"]


def test_r12_per_case_derivation_is_deterministic() -> None:
    pairs = _pairs({"small": 0.8, "large": 0.85})
    kw: dict[str, Any] = {"direction": "lower_is_better", "min_effect": 0.1}
    assert derive_case_verdict(pairs, **kw) == derive_case_verdict(list(pairs), **kw)


# ------------------------------------------------------------------------ through the decider


@pytest.fixture
def bare(tmp_path: Any) -> Any:
    """A :mod:`wf_legacy` session on a fresh ledger."""
    from perfledger.api import Ledger

    with Ledger.init(tmp_path / "ledger", name="wf", actor="agent") as ledger:
        yield Session(ledger)


def _ready(bare: Session, primary: dict[str, Any] | None = None, **stats: Any) -> None:
    bare.run("target.freeze", target_freeze(**({"primary": primary} if primary else {})))
    bare.run("evidence.add", evidence())
    body = readiness()
    body["statistics"] = {**body["statistics"], **stats}
    if not body["statistics"]["allow_outside_samples"]:  # R11: hand-written pairs, no code
        body["original"] = {**body["original"], "unsnapshotted": "pairs written by the test"}
    with before_reported("ReadinessRecorded"):  # as an older perfledger made it ready
        bare.run("readiness.record", body)
    bare.run("metric-audit.record", metric_audit())
    bare.run("baseline.record", baseline())
    if (primary or {}).get("statistic") in ("p95", "p99"):  # the A/A of a tail needs 1,000 values
        bare.run("resolution.record", resolution())  # declared: these tests never reach a pass
    else:
        bare.measure_aa()


def _pair(case: str, k: int, ref: list[float], cand: list[float]) -> dict[str, Any]:
    subject = lambda call, values: {  # noqa: E731
        "call_id": call, "correct": True, "values": {PRIMARY: values}, "environment_id": ENV_ID,
    }  # fmt: skip
    call = f"{case}-{k}"
    return {"case": case, "ref": subject(call, ref), "cand": subject(call, cand),
            "same_process": True, "monitor": {"observed": True}}  # fmt: skip


def test_r12_a_mean_primary_is_derived_as_the_mean_not_the_median(bare: Session) -> None:
    """Each candidate call has one slow request in three: medians say 50 % better, the mean
    (what the Target declares) says 50 % worse."""
    primary = {"name": PRIMARY, "unit": "ms", "direction": "lower_is_better",
               "statistic": "mean"}  # fmt: skip
    _ready(bare, primary)
    bare.run("experiment.create", experiment())
    pairs = [
        _pair(case, k, [10.0 + 0.01 * k] * 3, [5.0, 5.0, 35.0 + 0.01 * k])
        for case in ("small", "large")
        for k in range(6)
    ]
    bare.run("samples.record", samples("e1-screen", "screen", pairs=pairs))
    verdict = bare.run("verdict.record", {"samples_id": "e1-screen"})
    primary_v = verdict["primary"]
    assert primary_v["statistic"] == "mean" and primary_v["method"] == METHOD
    assert primary_v["estimate"] == pytest.approx(-0.5, abs=0.01)
    assert verdict["status"] == "fail" and primary_v["clear_loss"]
    assert [c["cand"] for c in primary_v["cases"]] == pytest.approx([15.0, 15.0], abs=0.01)


def test_r12_a_tail_primary_without_enough_per_request_values_is_refused(bare: Session) -> None:
    primary = {"name": PRIMARY, "unit": "ms", "direction": "lower_is_better",
               "statistic": "p99"}  # fmt: skip
    _ready(bare, primary)
    exp = experiment()
    del exp["claim"]["stated_bound"]
    exp["claim"]["exposure"] = {"affected_share": 0.3, "critical_path": "prefill of long prompts"}
    exp["claim"]["expected_improvement"] = {"low": 0.05, "high": 0.2}
    bare.run("experiment.create", exp)
    bare.run("samples.record", samples("e1-screen", "screen"))  # two values per call
    error = bare.refused("verdict.record", {"samples_id": "e1-screen"}, "R12")
    assert "at least 1000 per-request values per case" in error.message
    assert "large: ref 12, cand 12 values (need 1000)" in error.message


def test_r5_formal_samples_from_outside_are_refused_unless_readiness_allows_them(
    bare: Session,
) -> None:
    _ready(bare, allow_outside_samples=False)
    bare.screened()
    target = samples("e1-target", "target")
    error = bare.refused("samples.record", target, "R5")
    assert "recorded from outside" in error.message
    measured = {**target, "provenance": {"source": "perfledger", "protocol": "workload_abba",
                                         "raw_table": "samples.json"}}  # fmt: skip
    assert "raw table 'samples.json'" in bare.refused("samples.record", measured, None).message
    kindless = Artifact(json.dumps({"binding": binding_of(measured)}).encode(), "application/json")
    unbound = Artifact(b'{"table": []}', "application/json")  # not bound to these samples
    with pytest.raises(RuleRefused, match="carries no binding"):
        execute(bare.ledger, "samples.record", measured, actor="agent",
                artifacts={"samples.json": unbound})  # fmt: skip
    with pytest.raises(RuleRefused, match="of kind None"):  # a table that re-derives nothing
        execute(bare.ledger, "samples.record", measured, actor="agent",
                artifacts={"samples.json": kindless})  # fmt: skip
    # the driver's per-call table of these pairs (as `measure workload` writes it)
    rows, windows = [], []
    for n, pair in enumerate(measured["pairs"]):
        if pair.get("monitor") is not None:
            m = pair["monitor"]
            windows.append({"call_ids": [pair["ref"]["call_id"], pair["cand"]["call_id"]],
                            "observed": m.get("observed"), "reasons": m.get("flags", []),
                            "foreign_activity": m.get("foreign_activity", False)})  # fmt: skip
        for label in ("ref", "cand"):
            side = pair[label]
            side["wall_s"] = 1.0
            rows.append({"subject": label, "pair": n, "warmup": False, "case": pair["case"],
                         "call_id": side["call_id"], "ok": True, "correct": side["correct"],
                         "metrics": side["values"], "wall_s": 1.0, "start_s": 2.0 * n,
                         "end_s": 2.0 * n + 1.0})  # fmt: skip
    measured["provenance"]["settings"] = {}
    table = Artifact(json.dumps({"kind": "workload", "settings": {}, "table": rows,
                                 "monitor": {"windows": windows},
                                 "binding": binding_of(measured)}).encode(), "application/json")  # fmt: skip
    # R14: measured formal samples are those of a started run
    bare.run("formal-run.start", {"experiment_id": "e1", "stage": "target",
                                  "samples_id": "e1-target", "protocol": "workload_abba"})  # fmt: skip
    [event] = execute(bare.ledger, "samples.record", measured, actor="agent",
                      artifacts={"samples.json": table})  # fmt: skip
    assert event.payload["provenance"]["source"] == "perfledger"
    screen = bare.ledger.payload(bare.state().samples["e1-screen"].event_id)
    assert screen.provenance.source == "outside"  # a screen takes them, marked
    verdict = bare.state().verdicts["e1-screen"]  # recorded by bare.screened()
    assert verdict.samples_provenance == "outside" and verdict.unit == "ms"


def test_r12_verdicts_recorded_under_schema_1_are_re_derived_by_the_pooled_median(
    bare: Session,
) -> None:
    """The auditor re-decides an event with the rule of the schema it was recorded under: a
    schema-1 verdict by the pooled median (no per-case figures), a new one per case."""
    from perfledger.commands.workflow import deciders
    from perfledger.commands.workflow.requests import VerdictRecord

    _ready(bare)
    bare.run("experiment.create", experiment())
    bare.run("samples.record", samples("e1-screen", "screen"))
    state = bare.state()

    def decide(schema: int | None) -> Any:
        ctx = deciders.DecisionContext(
            op="verdict.record", actor="agent", ts=bare.clock, payload_of=bare.ledger.payload,
            schema=schema,
        )  # fmt: skip
        [draft] = deciders.decide_verdict_record(state, VerdictRecord(samples_id="e1-screen"), ctx)
        return draft.payload

    old, new = decide(1), decide(None)
    assert old.primary.method is None and old.primary.cases == () and old.unit is None
    assert new.primary.method == METHOD and len(new.primary.cases) == 2 and new.unit == "ms"
    assert decide(3) == new
    assert decide(2).primary.method == METHOD_V1  # schema 2: per_case/v1 (same figures)
    assert decide(2).primary.cases == new.primary.cases


# ------------------------------------------------------------------------ properties

_ratio = st.floats(min_value=0.2, max_value=5.0, allow_nan=False)
# unique (and the two cases' ratios unequal): tied gains send scipy's Wilcoxon test (the
# verdict's p-value) to a permutation test over every sign, most of this test's time
_noise = st.lists(
    st.integers(-20_000, 20_000).map(lambda micro: micro / 1e6), min_size=5, max_size=8, unique=True
)  # millionths: distinct noise gives distinct ratios (tiny floats all round to a ratio of 1)


@settings(max_examples=25, deadline=None)
@given(
    ratios=st.tuples(_ratio, _ratio).filter(lambda r: r[0] != r[1]),  # untied, as _noise
    noise=_noise,
    scale=st.floats(0.01, 100.0),
)
def test_r12_improvements_do_not_depend_on_the_metrics_scale(
    ratios: tuple[float, float], noise: list[float], scale: float
) -> None:
    def build(factor: float) -> list[Pair]:
        return [
            Pair(case, (factor * 10 * (1 + e),), (factor * 10 * r * (1 - e),))
            for case, r in zip(("a", "b"), ratios, strict=True)
            for e in noise
        ]

    kw: dict[str, Any] = {"direction": "lower_is_better", "min_effect": 0.05, "resamples": 1000}
    one, scaled = derive_case_verdict(build(1.0), **kw), derive_case_verdict(build(scale), **kw)
    assert one.estimate == pytest.approx(scaled.estimate, abs=1e-9)
    for c1, c2 in zip(one.cases, scaled.cases, strict=True):
        assert c1.estimate == pytest.approx(c2.estimate, abs=1e-9)
        assert c2.ref == pytest.approx(scale * (c1.ref or 0), rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(
        st.lists(st.floats(min_value=0.5, max_value=50.0), min_size=1, max_size=4),
        min_size=5, max_size=9,
    ),
    statistic=st.sampled_from(["median", "mean", "throughput"]),
)  # fmt: skip
def test_r12_a_subject_against_itself_never_passes_and_figures_are_plain_statistics(
    values: list[list[float]], statistic: str
) -> None:
    pairs = [Pair("a", tuple(v), tuple(v)) for v in values]
    v = derive_case_verdict(pairs, direction="lower_is_better", min_effect=0.01,
                            statistic=statistic, resamples=1000)  # fmt: skip
    assert v.status != "pass"
    flat = [x for row in values for x in row]
    expected = {
        "median": statistics.median(statistics.median(row) for row in values),
        "mean": statistics.fmean(flat),
        "throughput": statistics.harmonic_mean(flat),
    }[statistic]
    assert v.cases[0].ref == pytest.approx(expected, rel=1e-9)
    assert v.cases[0].ref == v.cases[0].cand


@settings(max_examples=20, deadline=None)
@given(
    worse=st.floats(min_value=1.2, max_value=3.0), better=st.floats(min_value=0.05, max_value=0.8)
)
def test_r12_a_case_regressed_beyond_resolution_never_passes_by_default(
    worse: float, better: float
) -> None:
    pairs = _pairs({"good": better, "bad": worse})
    v = derive_case_verdict(pairs, direction="lower_is_better", min_effect=0.01, resamples=1000,
                            resolution=0.05)  # fmt: skip
    assert v.status == "fail" and v.blocking == ("bad",)


def test_r4_baseline_per_case_derives_each_cases_median(bare: Session) -> None:
    bare.run("target.freeze", target_freeze())
    with before_reported("ReadinessRecorded"):
        bare.run("readiness.record", readiness())
    body = {**baseline(), "values": [10.0, 11.0, 12.0, 30.0, 31.0],
            "cases": ["small", "small", "small", "large", "large"]}  # fmt: skip
    recorded = bare.run("baseline.record", body)
    assert recorded["per_case_median"] == {"large": 30.5, "small": 11.0}
    assert recorded["median"] == 12.0
    # typed (declared) bodies: the decider checks them before any table (R4)
    bare.refused("baseline.record", {**body, "cases": ["small"]}, None, {})  # one case per value
    unknown = {**body, "cases": ["small"] * 4 + ["huge"]}
    assert "huge" in bare.refused("baseline.record", unknown, "R11", {}).message


def test_r4_aa_resolution_is_per_case_and_the_aggregates_noise() -> None:
    """An A/A of a quiet case (±1 %) and a noisy one (±10 %): each case has its own resolution,
    and the Target's is the noise of the geometric mean a verdict judges, below the noisy
    case's; a case with one valid pair cannot give one."""
    noise = [0.0, 0.7, -0.4, 1.0, -1.0, 0.3, -0.8, 0.5, -0.2, 0.9]
    pairs = [
        Pair(case, (10.0 * (1 + scale * e),), (10.0 * (1 - scale * e),))
        for case, scale in (("quiet", 0.01), ("noisy", 0.1))
        for e in noise
    ]
    resolution, per_case = aa_resolution(pairs, direction="lower_is_better", resamples=2000)
    assert per_case["quiet"] < 0.03 < per_case["noisy"] < 0.3
    assert per_case["quiet"] < resolution < per_case["noisy"]
    every, _ = aa_resolution(pairs, direction="lower_is_better", aggregation="every_case",
                             resamples=2000)  # fmt: skip
    assert every == per_case["noisy"]
    with pytest.raises(ValueError, match="at least 2 valid pairs"):
        aa_resolution([*pairs, Pair("lonely", (1.0,), (1.0,))], direction="lower_is_better")


def test_cheat_tail_resolution_from_too_few_values_is_refused_not_taken_from_the_median() -> None:
    """A p99 Target's A/A with 20 values per call and 5 pairs (100 per subject, 1,000 needed):
    the median of such calls barely moves (±1 %), their 99th percentile does (one value in 20 is
    up to 3x), so the median's noise would understate the resolution a p99 verdict needs."""
    pairs = []
    for i in range(5):
        body = [10.0 * (1 + 0.001 * k) for k in range(19)]
        pairs.append(Pair("c", (*body, 10.0 * (1 + 0.4 * i)), (*body, 10.0 * (3 - 0.4 * i))))
    median, _ = aa_resolution(pairs, direction="lower_is_better", resamples=2000)
    assert median < 0.01
    with pytest.raises(ValueError, match="too few per-request values for p99"):
        aa_resolution(pairs, direction="lower_is_better", statistic="p99", resamples=2000)


def test_r12_verdict_text_shows_every_case_and_each_guardrails_decision() -> None:
    """The text a verdict prints: the deciding condition, a line per case with the absolute
    per-call figures original -> candidate and their CIs, a line per guardrail."""
    import msgspec

    from perfledger.projections.verdict_explain import explain_verdict, verdict_lines

    pairs = _pairs({"small": 0.5, "large": 1.1})
    primary = derive_case_verdict(pairs, direction="lower_is_better", min_effect=0.2)
    guardrail = derive_case_guardrail("memory_mb", _pairs({"small": 1.0, "large": 1.3}),
                                      direction="lower_is_better", allowed_regression=0.2)  # fmt: skip
    payload = {"status": primary.status, "stage": "target", "primary": primary,
               "guardrails": [guardrail], "unit": "ms", "samples_provenance": "perfledger"}  # fmt: skip
    lines = verdict_lines(msgspec.to_builtins(payload))
    assert lines[0].startswith("status fail: R12: case(s) regressed beyond their resolution: large")
    [large] = [line for line in lines if line.startswith("  case large: ")]
    # a case's recorded "fail" is shown for what it is: its CI lies below the minimum effect
    assert " ms [" in large and "-> " in large and large.endswith("below_min_effect, regressed")
    explained = explain_verdict(msgspec.to_builtins(payload))
    assert {c["case"]: (c["status"], c["label"]) for c in explained["cases"]}["large"] == (
        "fail",
        "below_min_effect",
    )
    assert "  guardrail memory_mb: fail: regression CI lower end above allowed" in "\n".join(lines)
    assert not any("outside" in line for line in lines)  # measured samples carry no mark
