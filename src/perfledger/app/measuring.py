"""Helpers the measuring use cases share (SPEC.md section 5): a failed driver call described for
an error message, the kernel harness's time scale, and this environment's measured ceilings."""

from __future__ import annotations

from typing import Any

from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.errors import BadRequest
from perfledger.kernels.env import collect


def failed_call_text(call: Any, tail_lines: int = 8) -> str:
    """Describe a failed driver call for an error message: ``; first: CALL_ID: REASON: MESSAGE``
    and, when the call wrote to stderr, the last ``tail_lines`` lines of it (the cause, e.g. a
    Python traceback of the workload, is usually there). ``call`` is a
    :class:`perfledger.kernels.workload.driver.CallResult`."""
    text = f"; first: {call.call_id}: {call.reason}: {call.message}"
    tail = (getattr(call, "stderr_tail", "") or "").rstrip()
    if tail:
        lines = tail.splitlines()[-tail_lines:]
        text += "\nits stderr (last lines):\n" + "\n".join(f"  {line}" for line in lines)
    return text


def time_scale(unit: str) -> float:
    """Seconds per ``unit`` of a time primary that the kernel harness measures (its samples are
    seconds). Raises: BadRequest for a primary that is no time."""
    if unit not in UNITS_PER_SECOND:
        raise BadRequest(
            f"the kernel harness measures time; the Target's primary is in {unit!r}",
            hint="use a time primary in s, ms, us or ns, or `measure workload` for other metrics",
        )
    return UNITS_PER_SECOND[unit]


def ceilings(remeasure: bool = False) -> Any:
    """This environment's measured ceilings (measured once per environment, then cached).

    ``remeasure``: measure them now, whatever the cache holds (a formal stage: the cache is a
    file a subject's worker, running as the same user, could have raised)."""
    from perfledger.kernels.cuda.ceilings import load_or_measure  # noqa: PLC0415 (numpy via perfledger.kernels.cuda.ceilings)
    from perfledger.kernels.harness.harness import require_cupy  # noqa: PLC0415 (numpy via perfledger.kernels.harness.harness)

    require_cupy()
    return load_or_measure(collect(tools=False).identity(), remeasure=remeasure)


__all__ = ["ceilings", "failed_call_text", "time_scale"]
