"""Outputs judged by perfledger, not by the subject (R2, R5; SPEC.md section 5, "Workload
driver"): the readiness's accuracy rule, and what samples must carry where it compares outputs.

- Readiness (R2): ``accuracy.compare`` ``exact`` or ``allclose`` needs a driver whose argv
  declares an ``{output}`` place (the measuring process has nothing to compare otherwise);
  ``exact`` takes no tolerance; a driver that declares ``{output}`` needs an accuracy rule that
  compares (``self_reported`` says outputs cannot be compared, which an ``{output}`` place
  contradicts). Each is a bad request (exit 2): the request is malformed, no rule is weighed.
- Samples (R5, from ``SamplesRecorded`` schema
  :data:`~perfledger.events.workflow.R5_JUDGED_OUTPUTS`): a call whose output the driver judged
  is ``correct`` only when its own check and the comparison both hold; workload samples
  measured by perfledger for a Target whose readiness compares outputs carry every call's
  output check, by the readiness's rule. Samples recorded from outside carry none (they are
  marked as outside, R5).

Imports: events and the commands' rules (a workflow module; no ledger, no kernels).
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest

#: Placeholders of the driver's argv (as in :mod:`perfledger.kernels.workload.outputs`, which commands
#: may not import at decision time: kernels pull numpy).
OUTPUT_PLACEHOLDER = "{output}"
#: The comparisons the measuring process makes.
COMPARED = ("exact", "allclose")
#: The provenance protocol of the workload driver (``perfledger measure workload``).
WORKLOAD_PROTOCOL = "workload_abba"


def declares_output(argv: Any) -> bool:
    """True when a driver's argv declares an ``{output}`` place."""
    return any(OUTPUT_PLACEHOLDER in str(word) for word in (argv or ()))


def compared(readiness: Any) -> dict[str, Any] | None:
    """The accuracy rule of a readiness as JSON builtins when it compares outputs (``exact`` or
    ``allclose``), else None (no rule, or ``self_reported``)."""
    accuracy = getattr(readiness, "accuracy", msgspec.UNSET)
    if accuracy is msgspec.UNSET or accuracy is None or accuracy.compare not in COMPARED:
        return None
    return {"compare": accuracy.compare, "rtol": accuracy.rtol, "atol": accuracy.atol}


def check_readiness(req: Any) -> None:
    """R2: the readiness's accuracy rule agrees with its driver (module docstring).
    Raises: BadRequest (exit 2)."""
    argv = req.driver.argv if req.driver is not None else ()
    accuracy = req.accuracy
    has_output = declares_output(argv)
    if accuracy is msgspec.UNSET:
        if has_output:
            raise BadRequest(
                "the driver declares an {output} place but the readiness has no accuracy rule "
                "to compare the outputs by",
                hint='add "accuracy": {"compare": "exact"} (or "allclose" with rtol/atol)',
            )
        return
    if accuracy.compare == "exact" and (accuracy.rtol or accuracy.atol):
        raise BadRequest(
            f"accuracy.compare 'exact' takes no tolerance (rtol {accuracy.rtol:g}, atol "
            f"{accuracy.atol:g})",
            hint='use "compare": "allclose" with rtol/atol, or leave the tolerances out',
        )
    if accuracy.compare in COMPARED and not has_output:
        raise BadRequest(
            f"accuracy.compare {accuracy.compare!r} compares outputs, but the driver declares no "
            "{output} place to write them to",
            hint='put "{output}" in the driver argv where the command takes its output path, '
            'or declare "compare": "self_reported" if outputs cannot be compared',
        )
    if accuracy.compare == "self_reported" and has_output:
        raise BadRequest(
            "accuracy.compare 'self_reported' says outputs cannot be compared, but the driver "
            "declares an {output} place",
            hint='use "compare": "exact" or "allclose"',
        )


def check_samples(readiness: Any, req: Any) -> None:
    """R5: every judged call's ``correct`` is both checks; workload samples measured by
    perfledger carry every call's output check where the readiness compares outputs, by its
    rule. Raises: RuleRefused (R5, exit 3) or BadRequest (an output check the readiness does
    not ask for)."""
    rule = compared(readiness)
    for index, pair in enumerate(req.pairs):
        for label, side in (("ref", pair.ref), ("cand", pair.cand)):
            output = side.output
            if output is msgspec.UNSET:
                continue
            if rule is None:
                raise BadRequest(
                    f"pair {index} {label}: an output check, but the readiness compares no "
                    "outputs (accuracy.compare exact or allclose)",
                    hint="drop the output checks, or record readiness whose accuracy compares outputs",
                )
            if output.compare != rule["compare"]:
                raise refuse(
                    "R5",
                    f"pair {index} {label}: output compared {output.compare!r}, the readiness's "
                    f"accuracy rule is {rule['compare']!r}",
                    "measure again under the readiness's accuracy rule (`perfledger measure workload` applies it)",
                )
            if side.correct != (output.self_correct and output.ok):
                raise refuse(
                    "R5",
                    f"pair {index} {label}: correct {side.correct} but its own check said "
                    f"{output.self_correct} and its output check {output.ok}: a call is correct "
                    "only when both hold",
                    "mark a call correct only when its own check and its output check both hold",
                )
    provenance = req.provenance
    if (
        rule is None
        or provenance is None
        or provenance.source != "perfledger"
        or provenance.protocol != WORKLOAD_PROTOCOL
    ):
        return
    unjudged = [
        f"{pair.case}/{side.call_id}"
        for pair in req.pairs
        for side in (pair.ref, pair.cand)
        if side.output is msgspec.UNSET
    ]
    if unjudged:
        raise refuse(
            "R5",
            f"the readiness compares outputs ({rule['compare']}), but {len(unjudged)} call(s) "
            f"were judged by the subject only ({', '.join(unjudged[:8])})",
            "measure with the readiness driver's {output} place (`perfledger measure workload`)",
        )
    settings = (provenance.settings or {}).get("outputs") or {}
    if settings.get("accuracy") != rule:
        raise refuse(
            "R5",
            f"the outputs were compared by {settings.get('accuracy')!r}, the readiness's accuracy "
            f"rule is {rule!r}",
            "measure again under the readiness's accuracy rule (`perfledger measure workload` applies it)",
        )


__all__ = ["check_readiness", "check_samples", "compared", "declares_output"]
