"""A derived handoff (R18) as the request body of ``handoff record``: what ``perfledger
handoff record`` submits and what ``perfledger resume`` offers as the next decision."""

from __future__ import annotations

from typing import Any

from perfledger.commands.cli.common import signed_pct_text
from perfledger.errors import BadRequest


def handoff_request(
    handoff: Any, *, gpu_used_s: float | None, wall_used_s: float | None
) -> dict[str, Any]:
    """Map a derived handoff to a ``handoff.record`` request body (R18), with the seconds used.

    GPU time is never known to the ledger, so ``gpu_used_s`` must be given; ``wall_used_s``
    defaults to the span of the event timestamps.
    Raises: BadRequest when either is unknown.
    """
    b = handoff.budget
    wall, gpu = wall_used_s, gpu_used_s
    if wall is None or gpu is None:
        raise BadRequest(
            "the budget used is not known to the ledger: GPU seconds are stated by the agent",
            hint="pass --gpu-used SECONDS (and --wall-used SECONDS), or a request with budget_used",
        )
    gains = [
        f"{g.experiment_id} {g.stage} {g.samples_id}: {g.status}, improvement "
        f"{signed_pct_text(g.estimate)} (CI {signed_pct_text(g.ci_low)}..{signed_pct_text(g.ci_high)})"
        for g in handoff.gains
    ]
    return {
        "target_id": handoff.target_id,
        "primary_achieved": handoff.primary_achieved,
        "champion": handoff.champion,
        "key_evidence": list(handoff.key_evidence),
        "gains": gains,
        "local_results": [r.result_id for r in handoff.local_results],
        "rejected": [
            {"experiment_id": r.experiment_id, "closes": r.closes} for r in handoff.rejected
        ],
        "prediction_corrections": sorted({c.experiment_id for c in handoff.prediction_corrections}),
        "unresolved_questions": list(handoff.unresolved_questions),
        "stop_reason": handoff.stop_reason,
        "budget_used": {"wall_s": wall, "gpu_s": gpu},
        "budget_left": {"wall_s": max(0.0, b.wall_s - wall), "gpu_s": max(0.0, b.gpu_s - gpu)},
        "resume_needs": list(handoff.resume_needs),
        "feedback": handoff.feedback,
    }


__all__ = ["handoff_request"]
