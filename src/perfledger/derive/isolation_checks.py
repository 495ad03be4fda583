"""What the isolated kernel path's checks can see (issue 36; docs/kernel-harness.md, "Reveals:
how many" and "What the parent's clock can confirm"): how many calls to reveal so that a subject
skipping a share of its calls escapes with a bounded probability (hole 3), and whether the
parent's clock can confirm a claimed saving (hole 1).

Pure arithmetic on figures the measuring process recorded (call counts, seconds), so an auditor
re-derives them from the settings of a comparison. Imports: the standard library only; no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Hole 3 of issue 36 (docs/kernel-harness.md, "Reveals"): the share of its timed calls a
#: subject may skip (no work, a wrong output committed) ...
REVEAL_SKIP_SHARE = 0.01
#: ... and the most probability it may have of escaping every reveal.
REVEAL_ESCAPE = 0.001


def _skipped(calls: int, skip_share: float) -> int:
    """The calls a subject skipping ``skip_share`` of ``calls`` skips: at least one (skipping
    fewer than one call is skipping none)."""
    return max(1, math.ceil(skip_share * calls - 1e-9))


def reveal_sample_size(
    calls: int, skip_share: float = REVEAL_SKIP_SHARE, escape: float = REVEAL_ESCAPE
) -> int:
    """How many of a run's ``calls`` to check, drawn uniformly without replacement, so that a
    subject skipping ``skip_share`` of them escapes with probability at most ``escape``.

    With ``m = skip_share x n`` bad calls among ``n`` and ``k`` drawn, the escape probability is
    ``C(n - m, k) / C(n, k) <= (1 - skip_share)^k``, so ``k = ceil(ln escape / ln(1 -
    skip_share))`` is enough for every ``n``: 688 for 1 % and 0.001. A run of at most that many
    calls checks every call (``min(calls, k)``).

    Raises: ValueError unless ``0 < skip_share < 1`` and ``0 < escape < 1``.
    """
    if not (0.0 < skip_share < 1.0 and 0.0 < escape < 1.0):
        raise ValueError("skip_share and escape must be in (0, 1)")
    k = math.ceil(math.log(escape) / math.log1p(-skip_share) - 1e-9)
    return max(0, min(int(calls), k))


def reveals_per_pair(
    calls_per_batch: int,
    planned_calls: int,
    skip_share: float = REVEAL_SKIP_SHARE,
    escape: float = REVEAL_ESCAPE,
) -> int:
    """Calls to reveal of each pair of batches (``calls_per_batch`` calls on the same seeds,
    ``r`` indices drawn without replacement after both replies) so that a subject skipping
    ``skip_share`` of a run of at least ``planned_calls`` calls escapes with probability at
    most ``escape``.

    A batch holding ``j`` skipped calls escapes its draw with probability ``C(c - r, j) / C(c,
    j) <= (1 - r/c)^j``, and draws are independent, so ``m`` skipped calls escape with at most
    ``(1 - r/c)^m`` however they are spread (:func:`escape_bound`). Every call is revealed
    (``r = c``) when the plan is no longer than :func:`reveal_sample_size`'s ``k``; else ``r =
    ceil(c x (1 - escape^(1/m)))`` with ``m`` the skipped calls of ``planned_calls``, at least 1.

    Raises: ValueError for ``calls_per_batch < 1`` or shares outside (0, 1).
    """
    if calls_per_batch < 1:
        raise ValueError("calls_per_batch must be >= 1")
    if reveal_sample_size(planned_calls, skip_share, escape) >= planned_calls:
        return calls_per_batch  # a run no longer than the sample size: every call
    share = 1.0 - escape ** (1.0 / _skipped(planned_calls, skip_share))
    return min(calls_per_batch, max(1, math.ceil(share * calls_per_batch - 1e-9)))


def escape_bound(
    calls: int, calls_per_batch: int, reveals: int, skip_share: float = REVEAL_SKIP_SHARE
) -> float:
    """The most probability that a subject which skipped ``skip_share`` of ``calls`` timed calls
    escaped every reveal, ``reveals`` drawn per pair of batches of ``calls_per_batch`` calls:
    ``(1 - reveals / calls_per_batch)^m`` (:func:`reveals_per_pair`); 1.0 for a run of no calls."""
    if calls <= 0:
        return 1.0
    share = min(1.0, reveals / calls_per_batch)
    return (1.0 - share) ** _skipped(calls, skip_share)


#: The verdict note of a claimed saving the parent's clock cannot confirm (issue 36, hole 1):
#: a comparison that carries it supports no pass (docs/kernel-harness.md, "What the parent's
#: clock can confirm").
NOT_CONFIRMABLE = "not confirmable by the parent's clock"


@dataclass(frozen=True)
class ClockConfirmation:
    """Whether the parent's clock can confirm a candidate's claimed saving (:func:`clock_confirms`).

    Attributes:
        confirmable: the claimed saving per call exceeds what the clock cannot see per call.
        saving_s: the claimed saving per call (the reference's median reported call minus the
            candidate's; seconds; <= 0 when the candidate claims none).
        resolution_s: the most per call the parent's clock cannot see (seconds).
        note: :data:`NOT_CONFIRMABLE` and the figures when not confirmable, else None.
    """

    confirmable: bool
    saving_s: float
    resolution_s: float
    note: str | None = None


def clock_confirms(
    ref_call_s: float, cand_call_s: float, limit_s: float, calls_per_batch: int = 1,
    clock_tick_s: float = 0.0,
) -> ClockConfirmation:  # fmt: skip
    """Whether the parent's own clock can confirm that the candidate saves what it reports
    (issue 36, hole 1; docs/kernel-harness.md, "What the parent's clock can confirm").

    The candidate reports its own times; the parent bounds them with its wall time per batch.
    A candidate may under-report, unseen, up to the clock check's limit per call (``limit_s``:
    :attr:`ClockCheck.limit_s` of the candidate), and the batch clock cannot resolve less than
    its tick over a batch (``clock_tick_s / calls_per_batch`` per call). A claimed saving per
    call (``ref_call_s - cand_call_s``) no larger than the larger of the two could be nothing
    but an under-report: it is not confirmable, and the note says so (a verdict carrying it is
    not a pass). A candidate that claims no saving needs no confirmation (confirmable).

    Args:
        ref_call_s, cand_call_s: median reported seconds per call of each subject (> 0).
        limit_s: the clock check's limit for the candidate, seconds per call (>= 0).
        calls_per_batch: calls in one batch the parent times (>= 1).
        clock_tick_s: the parent's clock's resolution (seconds, >= 0; ``time.get_clock_info
            ("monotonic").resolution``).
    Raises: ValueError for a call time that is not finite and positive, a negative limit or
        tick, or ``calls_per_batch < 1``.
    """
    if not all(math.isfinite(t) and t > 0 for t in (ref_call_s, cand_call_s)):
        raise ValueError("call times must be finite and positive")
    if not (math.isfinite(limit_s) and limit_s >= 0 and math.isfinite(clock_tick_s)
            and clock_tick_s >= 0):  # fmt: skip
        raise ValueError("limit_s and clock_tick_s must be finite and >= 0")
    if calls_per_batch < 1:
        raise ValueError("calls_per_batch must be >= 1")
    saving = ref_call_s - cand_call_s
    resolution = max(limit_s, clock_tick_s / calls_per_batch)
    if saving <= 0 or saving > resolution:
        return ClockConfirmation(True, saving, resolution)
    note = (
        f"{NOT_CONFIRMABLE}: a claimed saving of {saving * 1e6:.3g} us per call "
        f"({saving / ref_call_s:.1%} of the reference's call) is within the {resolution * 1e6:.3g}"
        " us per call the parent's clock cannot see (the candidate's own report may be all of it)"
    )
    return ClockConfirmation(False, saving, resolution, note)


__all__ = [
    "NOT_CONFIRMABLE",
    "REVEAL_ESCAPE",
    "REVEAL_SKIP_SHARE",
    "ClockConfirmation",
    "clock_confirms",
    "escape_bound",
    "reveal_sample_size",
    "reveals_per_pair",
]
