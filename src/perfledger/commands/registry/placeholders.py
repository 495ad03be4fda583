"""Placeholders for the free text of an example request (issue 38).

An example's prose (an activity explanation, a rejection's reason, a review's challenge) is
something only the agent or its reviewer can know. Shown as plausible sentences, it was recorded
unedited, and the ledger then stated what nobody observed. ``perfledger schema OP --example``
therefore shows each such field as a placeholder in angle brackets (``<what you observed ...>``),
and a new request whose free-text field is still a placeholder is a bad request (exit 2) whose
hint says what to write instead.

The refusal is checked where a new request enters (:func:`perfledger.commands.registry.operations.execute`
and ``preview``), not by the deciders: the auditor's replay re-decides recorded requests exactly
as before, so no rule version is needed.
"""

from __future__ import annotations

import re
from typing import Any

from perfledger.errors import BadRequest

#: Free-text field -> the placeholder an example shows in it (what the agent writes there).
PLACEHOLDERS: dict[str, str] = {
    "explanation": "<what you observed running in these windows, and why it cannot move the "
    "primary metric>",
    "reason": "<why, in your words, from what was measured or seen>",
    "challenge": "<the reviewer's own question about the subject>",
    "response": "<the answer to the challenge, from what was measured>",
    "stop_reason": "<why you stop now>",
    "feedback": "<the friction you met in this session, or none>",
    "scenario": "<the scenario in which this secondary gain holds, as measured>",
    "advice": "<the host change you advise (perfledger never applies it)>",
    "rationale": "<why, in your words>",
    "findings": "<what you found>",
    "notes": "<what you noted>",
}
#: Operation -> field -> its placeholder, where the generic wording would mislead.
PLACEHOLDERS_OF: dict[str, dict[str, str]] = {
    "experiment.create": {
        "title": "<what the candidate changes, in a few words>",
        "replaced_region": "<the code the candidate replaces (its function or loop)>",
        "execution_form": "<how the new code runs (one process, threads, a graph, a library call)>",
        "replacement_boundary": "<the call the driver times that holds the replaced code>",
    },
    "metric-audit.record": {
        "numerator": "<what the metric counts or times per unit of work, in its unit>",
    },
    "reconcile": {
        "explanation": "<why the measured result fell outside the claim's interval>",
        "description": "<the corrected cost model, in your words>",
    },
}
#: Every field whose value may not be a placeholder in a new request.
CHECKED = frozenset(PLACEHOLDERS) | {f for fields in PLACEHOLDERS_OF.values() for f in fields}
#: A value that is wholly a placeholder: ``<...>`` (surrounding blanks ignored).
_PLACEHOLDER = re.compile(r"\s*<[^<>]+>\s*")


def with_placeholders(op: str, body: Any) -> Any:
    """``body`` (an example request of ``op``, builtins) with every free-text field at any depth
    (:data:`PLACEHOLDERS`, :data:`PLACEHOLDERS_OF`) holding a non-empty string replaced by its
    placeholder. ``body`` is not changed."""
    table = {**PLACEHOLDERS, **PLACEHOLDERS_OF.get(op, {})}
    if isinstance(body, dict):
        return {
            k: table[k] if k in table and isinstance(v, str) and v else with_placeholders(op, v)
            for k, v in body.items()
        }
    if isinstance(body, list):
        return [with_placeholders(op, v) for v in body]
    return body


def placeholder_in(body: Any, path: str = "") -> tuple[str, str] | None:
    """The first free-text field of ``body`` (builtins) still holding a placeholder:
    ``(dotted path, its value)``, or None."""
    if isinstance(body, dict):
        for k, v in body.items():
            where = f"{path}.{k}" if path else str(k)
            if k in CHECKED and isinstance(v, str) and _PLACEHOLDER.fullmatch(v):
                return where, v
            found = placeholder_in(v, where)
            if found is not None:
                return found
    elif isinstance(body, list):
        for i, v in enumerate(body):
            found = placeholder_in(v, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
    return None


def refuse_placeholders(op: str, body: Any) -> None:
    """Refuse a new request of ``op`` whose free text is still an example's placeholder.

    Raises: BadRequest (exit 2) naming the field, with a hint that says what to write."""
    found = placeholder_in(body)
    if found is None:
        return
    where, value = found
    shown = value.strip()
    raise BadRequest(
        f"{op}: {where} is still the example's placeholder {shown}: perfledger records it as "
        "written, so the ledger would state what nobody observed",
        hint=f"replace the placeholder {shown} with {shown[1:-1]}",
    )


def filled(body: Any) -> Any:
    """``body`` with each placeholder replaced by its own words without the angle brackets
    (a request the rules can decide; for tests and demonstrations, not for a ledger's facts)."""
    if isinstance(body, dict):
        return {k: filled(v) for k, v in body.items()}
    if isinstance(body, list):
        return [filled(v) for v in body]
    if isinstance(body, str) and _PLACEHOLDER.fullmatch(body):
        return body.strip()[1:-1]
    return body
