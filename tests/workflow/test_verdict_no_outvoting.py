"""A case that lost cannot be outvoted by the other cases (R12, method ``per_case/v2``), and an
explanation of foreign activity cannot by itself let a formal stage pass (R17): the pure
derivation, then the deciders on a real ledger, and the re-derivation of verdicts recorded under
the earlier rule (schema 2, ``per_case/v1``)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from wf_scenario import (
    ENV_ID,
    PRIMARY,
    Session,
    baseline,
    evidence,
    explain_by_review,
    make_pairs,
    metric_audit,
    readiness,
    samples,
    target_freeze,
)

from perfledger.commands.workflow import deciders
from perfledger.commands.workflow.foreign_share import FOREIGN_SHARE_LIMIT
from perfledger.commands.workflow.requests import FinalAuditRecord, VerdictRecord
from perfledger.events.workflow import (
    R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT,
    R17_FOREIGN_SHARE_BY_REVIEW_VERDICT,
)
from perfledger.projections.verdict_cases import (
    LOSING,
    METHOD_V1,
    METHOD_V2,
    UNRESOLVED,
    UNRESOLVED_WIDTH,
    derive_case_verdict,
)
from perfledger.projections.verdict_explain import explain_verdict
from perfledger.projections.verdicts import Pair


def _outvoted(big_slow: tuple[float, float] = (2.0, 0.6)) -> list[Pair]:
    """Four cases whose candidate takes half the time; case ``big`` takes ``big_slow[0]`` times
    the reference in 3 calls of 5 and ``big_slow[1]`` times in the other 2: its median loses
    (x2), but its CI is too wide to call it regressed."""
    out = []
    for index, case in enumerate(("c1", "c2", "c3", "c4")):
        for i in range(5):
            ref = 3.3 * (1 + 0.01 * ((i + index) % 3))
            out.append(Pair(case, (ref,), (ref * 0.45 * (1 + 0.01 * (i % 2)),)))
    for i in range(5):
        ref = 12.0 * (1 + 0.01 * (i % 3))
        out.append(Pair("big", (ref,), (ref * big_slow[0 if i % 5 in (0, 2, 4) else 1],)))
    return out


KW: dict[str, Any] = {"direction": "lower_is_better", "min_effect": 0.10, "resolution": 0.02}


def test_r12_a_case_that_lost_more_than_the_minimum_effect_cannot_be_outvoted() -> None:
    pairs = _outvoted()
    v1 = derive_case_verdict(pairs, method=METHOD_V1, **KW)
    big_v1 = {c.case: c for c in v1.cases}["big"]
    # the earlier rule: `big` is not regressed (its CI reaches above zero) and the geomean passes
    assert v1.status == "pass" and not big_v1.regressed and big_v1.ci_high is not None
    assert big_v1.ci_high > 0 and big_v1.estimate is not None and big_v1.estimate < -0.5
    v2 = derive_case_verdict(pairs, **KW)
    assert v2.method == METHOD_V2 and v2.status == "inconclusive"
    assert v2.reason.startswith(LOSING) and "big (improvement -98.02 %" in v2.reason
    assert v2.blocking == ("big",)
    # the same bootstrap as v1: only the status differs
    assert v2.cases == v1.cases and (v2.ci_low, v2.ci_high) == (v1.ci_low, v1.ci_high)


def test_r12_a_case_whose_ci_is_too_wide_is_named_unresolved() -> None:
    v = derive_case_verdict(_outvoted(), **KW)
    big = {c.case: c for c in v.cases}["big"]
    assert big.ci_low is not None and big.ci_high is not None
    assert big.ci_high - big.ci_low > UNRESOLVED_WIDTH * KW["min_effect"]
    assert v.reason.endswith(f"{UNRESOLVED} (CI wider than 4 x the minimum effect): big "
                             "(measure more pairs to resolve them)")  # fmt: skip
    assert UNRESOLVED not in derive_case_verdict(_outvoted(), method=METHOD_V1, **KW).reason


def test_r12_a_losing_case_does_not_cap_the_verdict_where_the_target_allows_it() -> None:
    v = derive_case_verdict(_outvoted(), allow_case_regression=True, **KW)
    assert v.status == "pass" and v.blocking == ()


def test_r12_a_case_whose_ci_lies_below_zero_caps_a_passing_verdict() -> None:
    """Case ``b`` is 5 % slower in every call: less than the minimum effect, but its whole CI is
    below zero (and within the resolution of 10 %, so it has not regressed)."""
    pairs = _outvoted()[:20] + [
        Pair("b", (10.0 + 0.01 * i,), ((10.0 + 0.01 * i) * (1.05 + 0.002 * (i % 3)),))
        for i in range(5)
    ]
    kw = {**KW, "resolution": 0.1}
    v = derive_case_verdict(pairs, **kw)
    b = {c.case: c for c in v.cases}["b"]
    assert not b.regressed and b.ci_high is not None and b.ci_high < 0
    assert b.estimate is not None and b.estimate > -kw["min_effect"]
    assert derive_case_verdict(pairs, method=METHOD_V1, **kw).status == "pass"
    assert v.status == "inconclusive" and v.blocking == ("b",)


def test_r12_an_unknown_per_case_method_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown per-case method"):
        derive_case_verdict(_outvoted(), method="per_case/v9", **KW)


# ------------------------------------------------------------------------ through the deciders


def _decide(session: Session, samples_id: str, schema: int | None) -> Any:
    """Decide ``verdict.record`` of ``samples_id`` as a new request (None) or as the auditor
    re-decides a verdict recorded under ``schema``."""
    ctx = deciders.DecisionContext(
        op="verdict.record", actor="agent", ts=session.clock,
        payload_of=session.ledger.payload, schema=schema,
    )  # fmt: skip
    req = VerdictRecord(samples_id=samples_id)
    [draft] = deciders.decide_verdict_record(session.state(), req, ctx)
    return draft.payload


def _as_body(pairs: list[Pair]) -> list[dict[str, Any]]:
    def subject(call: str, values: tuple[float, ...]) -> dict[str, Any]:
        return {"call_id": call, "correct": True, "values": {PRIMARY: list(values)},
                "environment_id": ENV_ID}  # fmt: skip

    out = []
    for i, p in enumerate(pairs):
        call = f"{p.case}-{i}"
        out.append({"case": p.case, "ref": subject(call, p.ref), "cand": subject(call, p.cand),
                    "same_process": True, "monitor": {"observed": True}})  # fmt: skip
    return out


def test_r12_verdicts_recorded_under_schema_2_are_re_derived_by_per_case_v1(
    bare: Session,
) -> None:
    median = {"name": PRIMARY, "unit": "ms", "direction": "lower_is_better", "statistic": "median"}
    bare.run("target.freeze", target_freeze(primary=median))
    for op, body in (("evidence.add", evidence()), ("readiness.record", readiness()),
                     ("metric-audit.record", metric_audit()), ("baseline.record", baseline())):  # fmt: skip
        bare.run(op, body)
    bare.measure_aa()
    bare.screened()
    # the test set's two cases: `small` 55 % better; `large` 30 % slower in 3 calls of 5
    pairs = [p for p in _outvoted((1.3, 0.5)) if p.case in ("c1", "big")]
    renamed = [Pair({"c1": "small", "big": "large"}[p.case], p.ref, p.cand) for p in pairs]
    body = samples("e1-target", "target", pairs=_as_body(renamed))
    bare.run("samples.record", body)
    old, new = _decide(bare, "e1-target", 2), _decide(bare, "e1-target", None)
    assert old.primary.method == METHOD_V1 and old.status == "pass"
    assert new.primary.method == METHOD_V2 and new.status == "inconclusive"
    recorded = bare.run("verdict.record", {"samples_id": "e1-target"})
    assert recorded["status"] == "inconclusive" and recorded["primary"]["blocking"] == ["large"]
    explained = explain_verdict(recorded)
    assert explained["condition"] == "case_lost" and "large" in explained["reason"]


def _foreign(share_of: int, explained: str | None = None) -> dict[str, Any]:
    """Target samples (20 % better) whose first ``share_of`` of 12 pairs saw foreign activity."""
    pairs = make_pairs(0.2, tag="e1-target")
    for index, pair in enumerate(pairs):
        if index < share_of:
            pair["monitor"] = {"observed": True, "foreign_activity": True, "explained": explained}
    return samples("e1-target", "target", pairs=pairs)


def _record_explained(session: Session, body: dict[str, Any]) -> None:
    """Record ``body``'s samples, then explain their foreign activity as R17 asks: by another
    actor's review (a typed text explains nothing)."""
    session.run("samples.record", body)
    explain_by_review(session.ledger, body["samples_id"], "shared host")


def test_r17_foreign_activity_on_many_pairs_passes_only_by_another_actors_review(
    bare: Session,
) -> None:
    """12 of 12 pairs loaded, each explained citing a review of the samples by ``reviewer``:
    the rule before ``VerdictRecorded`` 11 kept it inconclusive (an explanation could not by
    itself let it pass, only the readiness flag could); from 11 that review, by an actor other
    than the experiment's, is the evidence that lifts the 20 % limit, and the note says so."""
    bare.ready()
    bare.screened()
    _record_explained(bare, _foreign(12))
    assert _decide(bare, "e1-target", 2).status == "pass"  # the earlier rule cleared it
    old = _decide(bare, "e1-target", R17_FOREIGN_SHARE_BY_REVIEW_VERDICT - 1)
    assert old.primary.status == "pass" and old.status == "inconclusive"
    note = next(n for n in old.notes if "quiet host" in n)
    assert "12 of 12 pairs" in note
    assert explain_verdict(msgspec.to_builtins(old))["condition"] == "foreign_share"
    verdict = bare.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "pass"
    assert any(n.startswith("reviewed (R17)") and "'reviewer'" in n for n in verdict["notes"])


def test_r17_explained_foreign_activity_on_few_pairs_still_passes(bare: Session) -> None:
    bare.ready()
    bare.screened()
    few = int(FOREIGN_SHARE_LIMIT * 12)  # 2 of 12 pairs: within the share
    _record_explained(bare, _foreign(few))
    assert bare.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"


def test_r17_screens_keep_clearing_explained_foreign_activity(bare: Session) -> None:
    bare.ready()
    bare.screened()
    body = {**_foreign(12), "samples_id": "e1-screen2", "stage": "screen"}
    _record_explained(bare, body)
    verdict = bare.run("verdict.record", {"samples_id": "e1-screen2"})
    assert not any("quiet host" in n for n in verdict["notes"])
    assert any(n.startswith("R11: a screen") for n in verdict["notes"])  # it would have passed


def test_r17_a_loaded_final_audit_passes_only_by_another_actors_review(bare: Session) -> None:
    bare.ready()
    bare.passed()
    bare.champion()
    _record_explained(bare, {**_foreign(12), "samples_id": "e1-final", "stage": "final_audit"})
    req = FinalAuditRecord(target_id="t1", samples_id="e1-final")
    for schema, status in ((2, "pass"), (R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT - 1,
                                         "inconclusive")):  # fmt: skip
        ctx = deciders.DecisionContext(
            op="final-audit.record", actor="agent", ts=bare.clock,
            payload_of=bare.ledger.payload, schema=schema,
        )  # fmt: skip
        [old] = deciders.decide_final_audit_record(bare.state(), req, ctx)
        assert old.payload.status == status, schema
    audit = bare.run("final-audit.record", {"target_id": "t1", "samples_id": "e1-final"})
    assert audit["status"] == "pass"
    assert any(n.startswith("reviewed (R17)") for n in audit["notes"])


def _flagged_ready(session: Session) -> None:
    """The Target made ready with a readiness that sets the waiver flag (what an agent types)."""
    session.run("target.freeze", target_freeze())
    body = readiness()
    body["statistics"] = {**body["statistics"], "allow_explained_foreign_activity": True}
    for op, request in (("evidence.add", evidence()), ("readiness.record", body),
                        ("metric-audit.record", metric_audit()), ("baseline.record", baseline())):  # fmt: skip
        session.run(op, request)
    session.measure_aa()


def test_r17_the_readiness_flag_decided_before_the_review_rule_and_is_ignored_from_it(
    bare: Session,
) -> None:
    """The flag let an explained, loaded target stage pass under ``VerdictRecorded`` 10
    (verdicts so recorded re-derive so); from 11 it decides nothing and a note says so."""
    _flagged_ready(bare)
    bare.screened()
    _record_explained(bare, _foreign(12))
    old = _decide(bare, "e1-target", R17_FOREIGN_SHARE_BY_REVIEW_VERDICT - 1)
    assert old.status == "pass"
    assert any("allow_explained_foreign_activity" in n for n in old.notes)
    verdict = bare.run("verdict.record", {"samples_id": "e1-target"})
    assert any(n.startswith("ignored (R17)") for n in verdict["notes"])
    assert not any(n.startswith("allowed by the readiness") for n in verdict["notes"])
