"""A derived handoff (R18) as the request body of ``handoff record``: what ``perfledger
handoff record`` submits and what ``perfledger resume`` offers as the next decision."""

from __future__ import annotations

from typing import Any

from perfledger.errors import BadRequest


def handoff_request(
    handoff: Any, *, gpu_used_s: float | None, wall_used_s: float | None
) -> dict[str, Any]:
    """Map a derived handoff to a ``handoff.record`` request body (R18): what only the agent
    states (the seconds used, the stop reason, feedback, the open questions). What the ledger
    knows (champion, achieved, gain figures, local results, rejections, reconciliations, budget
    left, resume needs) is left out: the decider fills it from the ledger
    (``HandoffRecorded`` schema :data:`~perfledger.events.workflow.R18_LEDGER_FILLED`).

    GPU time is never known to the ledger, so ``gpu_used_s`` must be given; ``wall_used_s``
    defaults to the span of the event timestamps.
    Raises: BadRequest when either is unknown.
    """
    wall, gpu = wall_used_s, gpu_used_s
    if wall is None or gpu is None:
        raise BadRequest(
            "the budget used is not known to the ledger: GPU seconds are stated by the agent",
            hint="pass --gpu-used SECONDS (and --wall-used SECONDS), or a request with budget_used",
        )
    return {
        "target_id": handoff.target_id,
        "unresolved_questions": list(handoff.unresolved_questions),
        "stop_reason": handoff.stop_reason,
        "budget_used": {"wall_s": wall, "gpu_s": gpu},
        "feedback": handoff.feedback,
    }


__all__ = ["handoff_request"]
