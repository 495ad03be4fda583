"""R11 at ``experiment create`` (``ExperimentCreated`` schema 6): on a Target bound to code, the
candidate's directory is named (``candidate.subject``) and snapshotted there; its content hash
is computed, a typed one at most checked against it; a candidate holding the reference's code is
refused with what to do; later samples measure the code snapshotted at creation. On a Target
without a subject directory, a typed hash is recorded as declared. In-process on real ledgers
and real directories; the application layer's edge (:func:`perfledger.app.snapshots.candidate_edge`)
takes the snapshots exactly as the CLI and the MCP server call it."""

from __future__ import annotations

import copy
import dataclasses
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from wf_scenario import (
    ACTOR,
    Session,
    baseline,
    evidence,
    experiment,
    metric_audit,
    readiness,
    resolution,
    target_freeze,
)

from perfledger.app.identity import readiness_edge
from perfledger.app.snapshots import candidate_edge, take_as_original
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow import identity
from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.deciders import DecisionContext, decide_experiment_create
from perfledger.errors import BadRequest, RuleRefused
from perfledger.events.workflow import R11_CANDIDATE_SNAPSHOT, SCHEMA_VERSIONS

KERNEL = "__global__ void attn() { /* the original */ }\n"
FASTER = "__global__ void attn() { /* fused, one pass */ }\n"


def _code(root: Path, name: str, kernel: str = KERNEL) -> Path:
    """A subject directory: the driver script and a kernel inside the scope."""
    d = root / name
    (d / "src" / "kernels").mkdir(parents=True)
    (d / "bench.py").write_text("print('{}')\n")
    (d / "src" / "kernels" / "attn.cu").write_text(kernel)
    return d


@pytest.fixture
def bound(bare: Session, tmp_path: Path) -> Session:
    """A ready Target whose readiness driver declares ``{subject}`` and recorded the original's
    snapshot (``tmp/code/orig``)."""
    code = tmp_path / "code"
    bare.orig = _code(code, "orig")  # type: ignore[attr-defined]
    bare.code = code  # type: ignore[attr-defined]
    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    body = readiness(driver={"argv": ["python", "{subject}/bench.py", "--out", "{output}"]})
    body["original"] = {**body["original"], "subject": str(bare.orig)}  # type: ignore[attr-defined]
    body, artifacts = readiness_edge(bare.ledger, body)
    execute(bare.ledger, "readiness.record", body, actor=ACTOR, artifacts=artifacts)
    for op, request in (("metric-audit.record", metric_audit()), ("baseline.record", baseline()),
                        ("resolution.record", resolution())):  # fmt: skip
        bare.run(op, request)
    return bare


def _body(experiment_id: str = "e1", **candidate: Any) -> dict[str, Any]:
    body = experiment(experiment_id)
    body["candidate"] = {"label": "fused", **candidate}
    return body


def _create(session: Session, body: dict[str, Any]) -> Any:
    """``experiment.create`` as the CLI and the MCP server run it: the edge, then the decider."""
    body, artifacts = candidate_edge(session.ledger, copy.deepcopy(body))
    (envelope,) = execute(
        session.ledger, "experiment.create", body, actor=ACTOR, artifacts=artifacts or None,
        now=datetime(2026, 1, 2, tzinfo=UTC),
    )  # fmt: skip
    return envelope, session.ledger.payload(envelope.id)


def _refused(session: Session, body: dict[str, Any], error: type = RuleRefused) -> Any:
    head = session.ledger.head()
    with pytest.raises(error) as caught:
        _create(session, body)
    assert session.ledger.head() == head  # nothing appended
    return caught.value


def test_r11_candidate_directory_is_snapshotted_and_hashed_at_creation(bound: Session) -> None:
    assert SCHEMA_VERSIONS["ExperimentCreated"] >= R11_CANDIDATE_SNAPSHOT
    cand = _code(bound.code, "fused", FASTER)  # type: ignore[attr-defined]
    envelope, payload = _create(bound, _body(subject=str(cand)))
    created = payload.candidate
    assert created.content_hash == "blake3:" + created.snapshot.digest
    assert created.content_hash_source == "computed"
    assert created.changed_paths == ("src/kernels/attn.cu",)
    assert created.snapshot.subject == str(cand)
    # the candidate's code travels with the ledger, and the stored request holds no path alone
    kernel = created.snapshot.files["src/kernels/attn.cu"].blake3
    assert f"file-{kernel}" in envelope.artifacts
    assert "subject" not in envelope.request["body"]["candidate"]
    assert audit(bound.ledger).ok


def test_r11_typed_hash_that_is_not_the_directorys_is_refused_with_the_computed_one(
    bound: Session,
) -> None:
    cand = _code(bound.code, "fused", FASTER)  # type: ignore[attr-defined]
    error = _refused(bound, _body(subject=str(cand), content_hash="sha256:" + "1" * 16))
    computed = "blake3:" + take_as_original(bound.state().targets["t1"], str(cand)).snapshot.digest
    assert error.rule == "R11" and computed in error.message
    assert "leave candidate.content_hash out" in error.hint
    # honest control: the computed value, typed, is accepted (checked, not trusted)
    assert (
        _create(bound, _body(subject=str(cand), content_hash=computed))[1].candidate.content_hash
        == computed
    )


def test_r11_candidate_holding_the_originals_code_is_refused_with_what_to_do(
    bound: Session,
) -> None:
    copy_dir = bound.code / "copy"  # type: ignore[attr-defined]
    shutil.copytree(bound.orig, copy_dir)  # type: ignore[attr-defined]
    error = _refused(bound, _body(subject=str(copy_dir)))
    assert "holds the same code as the original" in error.message
    assert "`perfledger checkout " in error.hint and "candidate.subject" in error.hint


def test_r11_candidate_directory_with_a_link_out_of_it_is_refused(
    bound: Session, tmp_path: Path
) -> None:
    cand = _code(bound.code, "escape", FASTER)  # type: ignore[attr-defined]
    outside = tmp_path / "elsewhere.cu"
    outside.write_text("// code that could change after the snapshot\n")
    os.symlink(os.path.relpath(outside, cand / "src" / "kernels"), cand / "src/kernels/more.cu")
    error = _refused(bound, _body(subject=str(cand)))
    assert error.rule == "R11" and "leads out of the subject" in error.message


def test_r11_candidate_directory_linked_from_outside_the_tree_is_hashed_by_its_content(
    bound: Session, tmp_path: Path
) -> None:
    """A candidate named by a path outside the code's work tree that is a link to the original's
    directory is the original's code: the snapshot reads content, not names."""
    alias = tmp_path / "outside" / "cand"
    alias.parent.mkdir()
    os.symlink(bound.orig, alias)  # type: ignore[attr-defined]
    error = _refused(bound, _body(subject=str(alias)))
    assert "holds the same code as the original" in error.message
    # honest control: a real change in a directory outside the work tree is its content's
    real = _code(tmp_path / "outside", "real", FASTER)
    created = _create(bound, _body(subject=str(real)))[1].candidate
    assert created.snapshot.git is None and created.changed_paths == ("src/kernels/attn.cu",)


def test_r11_candidate_directory_that_is_not_a_directory_is_a_bad_request(
    bound: Session, tmp_path: Path
) -> None:
    error = _refused(bound, _body(subject=str(tmp_path / "missing")), BadRequest)
    assert "is not a directory" in error.message


def test_r11_candidate_change_outside_the_scope_is_refused_at_creation(bound: Session) -> None:
    cand = _code(bound.code, "driver-edit", FASTER)  # type: ignore[attr-defined]
    (cand / "bench.py").write_text("print('{\"correct\": true}')\n")  # the driver: not in scope
    error = _refused(bound, _body(subject=str(cand)))
    assert (
        "outside the Target's modification scope" in error.message and "bench.py" in error.message
    )


def test_r11_target_bound_to_code_needs_the_candidates_directory(bound: Session) -> None:
    error = _refused(bound, _body(content_hash="sha256:" + "1" * 16))
    assert "name the candidate's directory" in error.message
    assert '"candidate": {"subject": "DIR"' in error.hint


def test_r11_samples_must_measure_the_code_snapshotted_at_creation(bound: Session) -> None:
    cand = _code(bound.code, "fused", FASTER)  # type: ignore[attr-defined]
    _create(bound, _body(subject=str(cand)))
    target = bound.state().targets["t1"]
    ref = take_as_original(target, str(bound.orig)).snapshot  # type: ignore[attr-defined]
    other = _code(bound.code, "other", FASTER.replace("one pass", "two passes"))  # type: ignore[attr-defined]

    def check(directory: Path) -> Any:
        snap = take_as_original(target, str(directory)).snapshot
        ident = msgspec.convert(
            {"reference": msgspec.to_builtins(ref), "candidate": msgspec.to_builtins(snap)},
            rq.SamplesIdentity,
        )
        return identity.r11_check_identity(
            bound.state(), target, ident, reference_kind="original", champion=None,
            stage="screen", experiment_id="e1", payload_of=bound.ledger.payload,
        )  # fmt: skip

    with pytest.raises(RuleRefused, match="was created for the code snapshotted") as caught:
        check(other)
    assert "`perfledger checkout " in caught.value.hint
    assert check(cand).candidate.digest == identity.created_candidate(bound.state(), "e1").digest


def test_r11_target_without_a_subject_directory_records_the_typed_hash_as_declared(
    ready: Session,
) -> None:
    created = ready.run("experiment.create", experiment("e1"))["candidate"]
    assert created["content_hash_source"] == "declared" and "snapshot" not in created
    with pytest.raises(RuleRefused, match="has no subject directory") as caught:
        candidate_edge(
            ready.ledger, _body("e2", subject="anywhere", changed_paths=["src/kernels/attn.cu"])
        )
    assert "type candidate.content_hash" in caught.value.hint


def test_r11_candidate_typed_as_the_originals_hash_is_refused_with_a_hint(ready: Session) -> None:
    body = experiment("e1", candidate="sha256:" + "0" * 16)  # the original's hash
    error = ready.refused("experiment.create", body, "R11")
    assert "is the original's" in error.message and "own content hash" in error.hint


def test_r11_experiments_created_before_schema_6_re_decide_with_their_typed_hash(
    bound: Session,
) -> None:
    """What an auditor's replay runs for an experiment recorded under schema 5 on a Target bound
    to code: the typed hash, no directory, accepted as it was."""
    body = experiment("e1")
    del body["candidate"]["changed_paths"]  # computed from samples on a Target bound to code
    request = msgspec.convert(body, rq.ExperimentCreate)
    ctx = DecisionContext(
        op="experiment.create", actor=ACTOR, ts=datetime(2026, 1, 2, tzinfo=UTC),
        idempotency_key=None, request={"op": "experiment.create", "body": body},
        schema=R11_CANDIDATE_SNAPSHOT - 1,
    )  # fmt: skip
    (draft,) = decide_experiment_create(bound.state(), request, ctx)
    assert draft.payload.candidate.content_hash == body["candidate"]["content_hash"]
    assert draft.payload.candidate.content_hash_source is msgspec.UNSET
    with pytest.raises(RuleRefused, match="name the candidate's directory"):
        decide_experiment_create(bound.state(), request, dataclasses.replace(ctx, schema=None))
