"""Measure the original's baseline and record it (SPEC.md section 5; R2, R4, R5, R11).

:func:`measure_baseline` is the use case behind ``perfledger measure baseline``: the original
measured by :func:`perfledger.app.measure_baseline.measure_baseline_of` (a workload's command
``calls`` times per case, or a kernel Target's REFERENCE timed by the harness), then
``baseline.record`` appended with the calls' raw table attached (``baseline.json``, bound to the
Target's original) that the decider re-derives the values from (R4: only a measured baseline
decides; ``BaselineRecorded`` schema 2), or on a dry run decided and not appended. The result names the next step (R4: the A/A resolution).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Any

import msgspec

from perfledger.app.measure_baseline import (
    BASELINE_ARTIFACT,
    DEFAULT_CALLS,
    Progress,
    measure_baseline_of,
    medians,
    no_progress,
)
from perfledger.app.recording import append_measured, json_artifact
from perfledger.commands.registry.operations import preview
from perfledger.commands.workflow.aa_table import aa_binding
from perfledger.projections.target_kind import measuring_command


class MeasureBaseline(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to measure (and record) a Target's baseline (R4).

    Attributes:
        target_id: the Target.
        cmd: a workload Target: the original's command line (the readiness driver with the
            original's directory in its ``{subject}`` place).
        spec: a kernel Target: the spec whose REFERENCE is the original.
        directory: a kernel Target whose readiness bound the original's directory (R11).
        cases: the cases (empty: the readiness's test set).
        calls: calls of the original per case.
        timeout_s: the most one call may take, seconds.
        dry_run: measure and decide, append nothing.
        actor: who records.
        idempotency_key: a retry-safe key for the append.
    """

    target_id: str
    cmd: str | None = None
    spec: str | None = None
    directory: str | None = None
    cases: tuple[str, ...] = ()
    calls: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = DEFAULT_CALLS
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 600.0
    dry_run: bool = False
    actor: str
    idempotency_key: str | None = None


class MeasuredBaselineRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_baseline` measured (and recorded).

    Attributes:
        metric, unit: the Target's primary metric and its unit.
        values: baseline values measured (every value of the primary a valid call gave).
        per_case_median: case -> the median of its values.
        calls: calls per case.
        request: the ``baseline.record`` body on a dry run (None otherwise).
        event_id, kind: the appended event (None on a dry run).
        next_command: the next step's command (R4: the A/A resolution), once recorded.
    """

    metric: str
    unit: str
    values: int
    per_case_median: dict[str, float]
    calls: int
    request: dict[str, Any] | None = None
    event_id: str | None = None
    kind: str | None = None
    next_command: str | None = None

    def answer(self) -> dict[str, Any]:
        """The ``--json`` answer of ``perfledger measure baseline``."""
        out: dict[str, Any] = {
            "values": self.values, "per_case_median": self.per_case_median, "unit": self.unit,
        }  # fmt: skip
        if self.request is not None:
            out["request"] = self.request
        if self.event_id is not None:
            out.update(event_id=self.event_id, kind=self.kind)
        return out


def measure_baseline(
    ledger: Any, request: MeasureBaseline, *, progress: Progress = no_progress
) -> MeasuredBaselineRecord:
    """Measure the baseline of ``request.target_id`` on the open ``ledger`` and record it
    (module docstring).

    Returns: the :class:`MeasuredBaselineRecord`.
    Raises: BadRequest (exit 2: unknown Target, options that do not fit its kind, no cases);
        RuleRefused (exit 3: R2 no readiness, R4, R11 not the original's code or environment;
        also on a dry run); MeasurementError (exit 1: a failed call, R5).
    """
    state = ledger.state()
    measured = measure_baseline_of(
        state, request.target_id, cmd=request.cmd, spec_path=request.spec,
        kernel_dir=request.directory, cases=list(request.cases), calls=request.calls,
        timeout_s=request.timeout_s, progress=progress,
    )  # fmt: skip
    body, rows, env = measured.request, measured.rows, measured.environment
    target = state.targets[request.target_id]
    primary = target.definition.primary
    # R4: the values are re-derived from this table (bound to the Target's original), so the
    # baseline decides; a typed `baseline record` is recorded as declared and decides nothing
    body["raw_table"] = BASELINE_ARTIFACT
    artifact = {
        "kind": "baseline", "environment": env, "table": rows, "command": request.cmd,
        "binding": aa_binding(request.target_id, target.readiness.original.content_hash),
        **measured.settings,
    }  # fmt: skip
    figures = {
        "metric": primary.name, "unit": primary.unit, "values": len(body["values"]),
        "per_case_median": medians(body["cases"], body["values"]), "calls": request.calls,
    }  # fmt: skip
    if request.dry_run:  # decided, not appended: a refusal still exits 3
        preview(ledger, "baseline.record", body, actor=request.actor,
                artifacts={BASELINE_ARTIFACT: json_artifact(artifact)})  # fmt: skip
        return MeasuredBaselineRecord(**figures, request=body)
    event = append_measured(
        ledger, "baseline.record", body, BASELINE_ARTIFACT, artifact, actor=request.actor,
        idempotency_key=request.idempotency_key,
    )  # fmt: skip
    nxt = measuring_command(state, request.target_id, "resolution.record", None)
    if request.cmd is not None:
        nxt = nxt.replace(" --cmd CMD ", f" --cmd {shlex.quote(request.cmd)} ")
    elif request.spec is not None:
        nxt = nxt.replace(" --spec SPEC ", f" --spec {shlex.quote(request.spec)} ")
    elif request.directory is not None:
        nxt = nxt.replace(" --dir DIR ", f" --dir {shlex.quote(request.directory)} ")
    return MeasuredBaselineRecord(**figures, event_id=event.id, kind=event.kind, next_command=nxt)


__all__ = ["MeasureBaseline", "MeasuredBaselineRecord", "measure_baseline"]
