"""The handoff use cases (R18; docs/workflow.md): what a handoff needs from outside the folded
state (head, remotes, artifacts, wall time, the champion's snapshot), the handoff derived for a
Target now, the next decisions the rules allow (``resume``), the ``handoff.record`` request
drafted from the derived handoff and the caller's statements, and the warnings a recorded
handoff gets for an overspent budget. Used by ``perfledger handoff``, ``handoff record``,
``resume``, ``status`` and the MCP server's ``handoff`` tool."""

from __future__ import annotations

import os
from typing import Any

import msgspec

from perfledger.app.handoff_request import handoff_request
from perfledger.app.next_steps import allowed_decisions
from perfledger.app.snapshots import champion_snapshot
from perfledger.errors import BadRequest
from perfledger.events.envelope import parse_ts
from perfledger.ledger.gitdir import read_remotes
from perfledger.projections.handoff import ResumeContext, default_target, derive_handoff


def _remotes(store: Any) -> dict[str, str]:
    """``{name: url}`` of the ledger repository's remotes: read from its config file without
    dulwich where the file is plain (dulwich's import and ``Repo`` would double the start-up of
    ``perfledger status``), else through dulwich."""
    remotes = read_remotes(store.controldir)
    if remotes is not None:
        return remotes
    remotes = {}
    config = store.repo.get_config()
    for section in config.sections():
        if len(section) == 2 and section[0] == b"remote":
            try:
                remotes[section[1].decode()] = config.get(section, b"url").decode()
            except KeyError:
                continue
    return remotes


def resume_context(ledger: Any, state: Any, target_id: str, *, artifacts: bool = True) -> Any:
    """Gather what a handoff needs from outside the state: head, remotes (from the repository
    config), artifacts, and the wall seconds from the Target's freezing to the newest event (the
    last in the total order: one event read, whatever the ledger's length). ``artifacts``:
    list every attached file (a walk of the whole history); False leaves the list empty, for
    read models that do not show it (``status``)."""
    remotes = _remotes(ledger.store)
    attached: list[str] = []
    if artifacts:
        for envelope in ledger.store.iter_events():
            attached += [f"{envelope.id[:12]}/{name}" for name in sorted(envelope.artifacts)]
    frozen_ts = ledger.get(state.targets[target_id].frozen_event).ts
    wall = None
    if state.last_event_id:
        last_ts = ledger.get(state.last_event_id).ts
        wall = max(0.0, (parse_ts(last_ts) - parse_ts(frozen_ts)).total_seconds())
    return ResumeContext(
        head=ledger.head(),
        remotes=remotes,
        artifacts=attached,
        wall_used_s=wall,
        path=os.path.abspath(ledger.path),
        champion_snapshot=champion_snapshot(ledger, state, state.targets[target_id]),
    )


def current_handoff(
    ledger: Any, target_id: str | None, *, no_target_hint: str
) -> tuple[Any, Any, Any]:
    """The handoff of ``target_id`` (default: the most recently frozen current Target) on the
    open ``ledger``: ``(state, Handoff, ResumeContext)``. ``no_target_hint``: what the caller's
    user runs to freeze a Target (a command, or a tool call). Raises: BadRequest without a
    Target, or for an unknown ``target_id``."""
    state = ledger.state()
    tid = target_id or default_target(state)
    if tid is None:
        raise BadRequest("no Target is frozen", hint=no_target_hint)
    if tid not in state.targets:
        raise BadRequest(f"no Target {tid!r}", hint="`perfledger status` lists the Targets")
    resume = resume_context(ledger, state, tid)
    return state, derive_handoff(state, tid, resume), resume


#: What ``handoff record`` records for a stop reason or feedback the agent did not give (R18:
#: the handoff states them; the tool never invents them).
NOT_STATED = "not stated"


def budget_warnings(budget: Any, used: Any) -> list[str]:
    """Warnings for a budget overspent (R18): ``budget`` is the derived
    :class:`~perfledger.projections.handoff.BudgetLine` (its totals, seconds), ``used`` the
    request's ``budget_used`` (``{"wall_s", "gpu_s"}``, seconds). Returns one line per budget
    whose used seconds exceed the Target's total (left is then recorded as 0)."""
    out = []
    if not isinstance(used, dict):
        return out
    for field, label in (("wall_s", "wall"), ("gpu_s", "GPU")):
        total, spent = getattr(budget, field), used.get(field)
        if isinstance(spent, int | float) and spent > total:
            out.append(
                f"{label} budget overspent: {spent:,.0f} s used of the Target's {total:,.0f} s "
                f"(left is recorded as 0 s)"
            )
    return out


def handoff_record_request(
    handoff: Any,
    resume: Any,
    override: dict[str, Any],
    *,
    stop_reason: str | None,
    feedback: str | None,
    wall_used: float | None,
    gpu_used: float | None,
    questions: tuple[str, ...] = (),
) -> tuple[dict[str, Any], list[str]]:
    """The ``handoff.record`` request of the derived ``handoff`` (R18): what the ledger knows,
    then the caller's ``override`` fields, ``stop_reason`` and ``feedback`` (``not stated``
    where none is given: never invented), the wall seconds used (default: the ledger's, from
    ``resume``), the GPU seconds (0 on a Target whose GPU budget is 0) and extra unresolved
    ``questions``. Returns ``(request, warnings)``: one warning per overspent budget."""
    if wall_used is None:
        wall_used = resume.wall_used_s
    if gpu_used is None and handoff.budget.gpu_s == 0:
        gpu_used = 0.0  # a Target with no GPU budget declared its work uses none (a CPU session)
    body = handoff_request(handoff, gpu_used_s=gpu_used, wall_used_s=wall_used)
    body["stop_reason"] = f"{NOT_STATED} (the ledger shows: {handoff.stop_reason})"
    body["feedback"] = NOT_STATED
    body.update(override)
    if stop_reason is not None:
        body["stop_reason"] = stop_reason
    if feedback is not None:
        body["feedback"] = feedback
    warnings = budget_warnings(handoff.budget, body.get("budget_used"))
    if questions:
        body["unresolved_questions"] = [*body["unresolved_questions"], *questions]
    return body, warnings


class Resumed(msgspec.Struct, kw_only=True):
    """The handoff of the current head and the next decisions the rules allow (``perfledger
    resume --json``): each one offered only if its decider, run dry on the head, accepts it."""

    handoff: Any
    next: list[Any]


def resume(ledger: Any, target_id: str | None, *, no_target_hint: str) -> Resumed:
    """The handoff of ``target_id`` (default: the most recently frozen current Target) and the
    next decisions the rules allow (R18; :func:`perfledger.app.next_steps.allowed_decisions`,
    the verdict deciders reading recorded samples from the open ``ledger``).
    Raises: BadRequest without a Target, or for an unknown ``target_id``."""
    state, handoff, _ = current_handoff(ledger, target_id, no_target_hint=no_target_hint)
    probe = handoff_request(handoff, gpu_used_s=0.0, wall_used_s=0.0)
    return Resumed(
        handoff=handoff,
        next=allowed_decisions(state, handoff.target_id, ledger.payload, probe),
    )


class HandoffStatement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the caller of ``handoff record`` states (R18); perfledger fills the rest.

    Attributes:
        target_id: the Target (None: ``override``'s, else the most recently frozen one).
        override: fields of a ``handoff.record`` request that override the derived handoff
            (its ``budget_used`` seconds stand where ``wall_used_s``/``gpu_used_s`` are None).
        stop_reason, feedback: why work stops, friction (None: ``not stated``).
        wall_used_s, gpu_used_s: seconds used (wall default: the ledger's span; GPU default: 0
            on a Target whose GPU budget is 0).
        questions: unresolved questions added to the derived ones.
    """

    target_id: str | None = None
    override: dict[str, Any] = {}
    stop_reason: str | None = None
    feedback: str | None = None
    wall_used_s: float | None = None
    gpu_used_s: float | None = None
    questions: list[str] = []


class HandoffDraft(msgspec.Struct, kw_only=True):
    """The ``handoff.record`` request drafted (``request``) and a warning per overspent budget."""

    request: dict[str, Any]
    warnings: list[str]


def draft_handoff_record(
    ledger: Any, statement: HandoffStatement, *, no_target_hint: str
) -> HandoffDraft:
    """The ``handoff.record`` request of the handoff derived on the open ``ledger`` and the
    caller's ``statement`` (:func:`handoff_record_request`), to decide and record (R18).
    Raises: BadRequest without a Target, for an unknown one, or with the GPU seconds unknown."""
    override = dict(statement.override)
    wall, gpu = statement.wall_used_s, statement.gpu_used_s
    if "budget_used" in override:
        used = override["budget_used"] if isinstance(override["budget_used"], dict) else {}
        wall = wall if wall is not None else used.get("wall_s")
        gpu = gpu if gpu is not None else used.get("gpu_s")
    tid = statement.target_id or override.get("target_id")
    _, handoff, context = current_handoff(ledger, tid, no_target_hint=no_target_hint)
    body, warnings = handoff_record_request(
        handoff, context, override, stop_reason=statement.stop_reason,
        feedback=statement.feedback, wall_used=wall, gpu_used=gpu,
        questions=tuple(statement.questions),
    )  # fmt: skip
    return HandoffDraft(request=body, warnings=warnings)


__all__ = [
    "NOT_STATED",
    "HandoffDraft",
    "HandoffStatement",
    "Resumed",
    "budget_warnings",
    "current_handoff",
    "draft_handoff_record",
    "handoff_record_request",
    "resume",
    "resume_context",
]
