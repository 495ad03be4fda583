"""The application's side of outputs judged by perfledger (R5; SPEC.md section 5, "Workload driver";
docs/measurement.md): what ``measure workload``/``measure aa`` pass to the driver, record per
call and say when they return, and the warning ``readiness record`` gives a readiness whose
correctness would be judged by the subject alone.
"""

from __future__ import annotations

import shlex
from typing import Any

from perfledger.commands.workflow.output_rules import compared, declares_output
from perfledger.errors import BadRequest
from perfledger.ledger.base import Artifact
from perfledger.projections.target_kind import driver_kind

#: The driver's per-pair seed placeholder (:data:`perfledger.kernels.workload.outputs.SEED_PLACEHOLDER`).
SEED_PLACEHOLDER = "{seed}"

#: The keys of a call's output check recorded in the samples (``OutputCheck``).
RECORDED_KEYS = ("method", "compare", "blake3", "size", "ok", "reason")


def accuracy_for(target: Any, commands: dict[str, str]) -> dict[str, Any] | None:
    """The accuracy rule the driver compares outputs by (``{"compare", "rtol", "atol"}``), or
    None where the Target's readiness compares none; each command (option -> shell words) must
    declare ``{output}`` exactly when the readiness compares outputs. Raises: BadRequest."""
    rule = compared(target.readiness)
    for option, command in commands.items():
        try:
            has = declares_output(shlex.split(command))
        except ValueError:
            continue  # the driver reports an unparsable command
        if rule is not None and not has:
            raise BadRequest(
                f"{option}: the Target's readiness compares outputs ({rule['compare']}), and "
                "this command declares no {output} place; nothing was measured",
                hint="pass the readiness driver's command, with {output} where it writes its "
                "output (`perfledger target show` prints the driver)",
            )
        if rule is None and has:
            raise BadRequest(
                f"{option}: the command declares an {{output}} place, but the Target's readiness "
                "has no accuracy rule that compares outputs; nothing was measured",
                hint='record readiness with "accuracy": {"compare": "exact"} (or "allclose")',
            )
    return rule


def recorded_output(call: Any) -> dict[str, Any] | None:
    """A driver call's output check as a samples request records it, or None when the driver
    judged no output (``call``: :class:`perfledger.kernels.workload.driver.CallResult`)."""
    if call.output is None:
        return None
    return {
        **{key: call.output.get(key) for key in RECORDED_KEYS},
        "self_correct": call.self_correct,
    }


def output_artifacts(run: Any) -> dict[str, Any]:
    """The kept outputs of a driver run as artifacts (name -> Artifact), attached to the samples
    so an auditor can compare them again."""

    return {name: Artifact(data, "application/octet-stream") for name, data in run.outputs.items()}


def judged_findings(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Who judged the correctness of the recorded calls (R5): ``{"by_perfledger": n,
    "by_subject": n, "output_mismatches": [call ids]}`` and the lines ``measure`` prints."""
    sides = [p[label] for p in body["pairs"] for label in ("ref", "cand")]
    judged = [s for s in sides if s.get("output") is not None]
    mismatched = [
        s["call_id"] for p in body["pairs"] for s in [p["cand"]]
        if s.get("output") is not None and not s["output"]["ok"]
    ]  # fmt: skip
    summary = {
        "by_perfledger": len(judged),
        "by_subject": len(sides) - len(judged),
        "output_mismatches": mismatched,
    }
    if judged:
        rule = judged[0]["output"]["compare"]
        lines = [
            f"accuracy: {len(judged)}/{len(sides)} calls judged by perfledger (each candidate "
            f"output compared {rule} with the reference's of its pair) and by the subject's own "
            "check; both must hold"
        ]
        for p in body["pairs"]:
            output = p["cand"].get("output")
            if output is not None and not output["ok"]:
                lines.append(f"  {p['cand']['call_id']}: {output['reason']}")
                if len(lines) > 6:
                    break
    else:
        lines = [
            f"note accuracy: {len(sides)} calls judged by the subject's own check only (the "
            "readiness driver declares no {output} place to compare outputs)"
        ]
    return summary, lines


def readiness_warning(body: Any, observed_primary: bool = False) -> str | None:
    """The warning for a readiness request whose workload correctness would be judged by the
    subject alone: a driver without an ``{output}`` place and no ``accuracy.compare:
    self_reported`` stating that outputs cannot be compared; or with ``{output}`` but no
    ``{seed}``, so that every pair's expected output is the same (a candidate could replay one
    it computed once). None otherwise (or for a body that is not a workload readiness: a kernel Target's driver is
    the kernel harness, which judges every output itself, R5); no ``{seed}`` warning for a
    Target whose primary perfledger observes (``observed_primary``): its worker protocol hands
    every call a fresh seed itself (SPEC.md section 5)."""
    if not isinstance(body, dict):
        return None
    driver = body.get("driver")
    argv = driver.get("argv") if isinstance(driver, dict) else None
    if not isinstance(argv, list):
        return None
    if driver_kind(argv) == "kernel":  # the kernel harness judges every output itself (R5)
        return None
    if declares_output([str(w) for w in argv]):
        if observed_primary or any(SEED_PLACEHOLDER in str(w) for w in argv):
            return None
        return (
            "the driver declares {output} but no {seed} place: every pair's inputs, and so its "
            "expected output, are the same, and a candidate that replays an output it computed "
            "once is not caught by the comparison; draw the inputs from {seed} (a fresh seed "
            "per pair, the same for both calls) where the workload allows it"
        )
    accuracy = body.get("accuracy")
    if isinstance(accuracy, dict) and accuracy.get("compare") == "self_reported":
        return None
    return (
        "the driver declares no {output} place: each call's correctness will be judged by the "
        "command itself, which a rigged check passes; put {output} (and {seed}) in the driver "
        'argv with "accuracy": {"compare": "exact"} (or "allclose" with rtol/atol), or state '
        '"accuracy": {"compare": "self_reported"} if outputs cannot be compared '
        "(docs/measurement.md)"
    )


__all__ = [
    "accuracy_for",
    "judged_findings",
    "output_artifacts",
    "readiness_warning",
    "recorded_output",
]
