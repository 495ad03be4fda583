"""The CLI's command lines as both adapters write them (SPEC.md section 6): which flags set
which request fields (:data:`COMMON_FLAGS`, :data:`FIELD_HINTS`), the command line that makes a
next decision (:func:`recommended_command`, for ``perfledger status`` and the MCP ``status``
tool), a missing field's refusal naming its flag, and the MCP tool call that does what a quoted
command does (:func:`tool_call`, :func:`translate_hints`).

Light by design: the operation catalog and the Target-kind projection only, so that the CLI
builds its commands from this table without loading a rule.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, NoReturn

from perfledger.commands.registry.catalog import OPERATIONS
from perfledger.errors import BadRequest
from perfledger.projections.target_kind import MEASURED_BY, measuring_command

#: The help of ``--target`` where it sets a request's ``target_id``.
TARGET_FIELD_HELP = "The Target id (sets target_id)."
#: Request fields that flags may set, per flag: (flag, field, help).
COMMON_FLAGS = (
    ("--target", "target_id", TARGET_FIELD_HELP),
    ("--experiment", "experiment_id", "The experiment id (sets experiment_id)."),
    ("--samples", "samples_id", "The samples id (sets samples_id)."),
    ("--expected-current", "expected_current",
     "The champion you saw: `original` or its experiment id (sets expected_current; R13 "
     "compare-and-swap)."),
    ("--closes", "closes", "What the rejection closes: implementation, integration or mechanism "
     "(sets closes; R15)."),
    ("--reason", "reason", "Why, in words (sets reason)."),
)  # fmt: skip

#: Which common-flag fields each operation's request has, so that building the CLI needs no
#: import of the request models (kept in step with the models by ``tests/workflow/test_schemas.py``).
FIELD_HINTS: dict[str, tuple[str, ...]] = {
    "target.supersede": ("target_id", "reason"),
    "readiness.record": ("target_id",),
    "metric-audit.record": ("target_id",),
    "baseline.record": ("target_id",),
    "resolution.record": ("target_id",),
    "evidence.add": ("target_id",),
    "upstream-check.record": ("target_id",),
    "experiment.create": ("target_id", "experiment_id"),
    "samples.record": ("target_id", "experiment_id", "samples_id"),
    "verdict.record": ("samples_id",),
    "local-result.record": ("samples_id",),
    "reject": ("experiment_id", "closes", "reason"),
    "reconcile": ("experiment_id",),
    "champion.select": ("target_id", "samples_id", "expected_current", "reason"),
    "final-audit.record": ("target_id", "samples_id"),
    "host-advice.record": ("target_id", "reason"),
    "handoff.record": ("target_id",),
    "conflict.resolve": ("target_id", "reason"),
    "activity.explain": ("samples_id",),
    "target.freeze": ("target_id",),
    "formal-run.start": ("experiment_id", "samples_id"),
}


def flag_of_missing_field(message: str) -> tuple[str, str] | None:
    """``(flag, help)`` of the :data:`COMMON_FLAGS` entry that sets the required field a
    validation ``message`` says is missing (msgspec: ``Object missing required field
    `expected_current```), or None."""

    found = re.search(r"missing required field `([A-Za-z_]+)`", message)
    if found is None:
        return None
    return next(((f, h) for f, field, h in COMMON_FLAGS if field == found.group(1)), None)


def refuse_with_flag_hint(exc: BadRequest, name: str, *, request_given: bool) -> NoReturn:
    """Raise ``exc`` (a write's refused request of operation ``name``) with a hint naming the
    flag that sets a missing required field, or, when no ``--request`` was given
    (``request_given`` False), the measurement that records the operation or ``--request``.
    Raises: BadRequest (exit 2), always."""
    flag = flag_of_missing_field(exc.message)
    bare = not request_given and "invalid request" in exc.message
    if flag is not None:  # a field a flag sets: name the flag first
        raise BadRequest(
            f"no --request given: {exc.message}" if bare else exc.message,
            hint=f"pass {flag[0]}: {flag[1]} (or the field in --request FILE; "
            f"`perfledger schema {name}` shows every field)",
        ) from None
    if bare:
        measured = MEASURED_BY.get(name)
        raise BadRequest(
            f"no --request given: {exc.message}",
            hint=(f"`{measured}` measures and records it; or " if measured else "")
            + "pass the request with --request FILE (or - for stdin); "
            f"`perfledger schema {name}` shows its fields",
        ) from None
    raise exc


#: The command that records a handoff derived from the state (R18).
HANDOFF_COMMAND = (
    "perfledger handoff record --target T --gpu-used S --stop-reason TEXT --feedback TEXT"
)


def recommended_command(state: Any, target_id: str, decision: Any) -> str:
    """The command line that makes ``decision`` (a NextDecision on ``target_id``): the
    measurement of the Target's kind that records it where one does
    (:func:`~perfledger.projections.target_kind.measuring_command`: ``perfledger measure
    workload ...`` or ``perfledger measure kernel ...``, R4-R5, R11), else the write with the
    common flags its request takes and ``--request FILE`` for the fields the caller supplies."""

    op, request = decision.op, decision.request
    # the handoff's command derives the request from the state; the caller adds what it spent
    measured_by = {o: measuring_command(state, target_id, o, decision.about) for o in MEASURED_BY}
    made_by = {**measured_by, "handoff.record": HANDOFF_COMMAND}
    if op in made_by and request is None:
        command = made_by[op].replace(" T ", f" {target_id} ")
        target = state.targets.get(target_id)
        if op == "handoff.record" and target is not None and not target.definition.budget.gpu_s:
            # offer only what the Target budgets: without a GPU budget, no GPU time is stated
            command = command.replace(" --gpu-used S", "")
        return command
    fields = dict(request) if request is not None else {}
    if request is None and "target_id" in FIELD_HINTS.get(op, ()):
        fields["target_id"] = target_id
    words = ["perfledger", command_of(op)]
    for flag, field, _ in COMMON_FLAGS:
        if field in fields and isinstance(fields[field], str):
            words += [flag, shlex.quote(fields.pop(field))]
    if op == "review.record":  # R17: the review that explains activity is another actor's
        words += ["--actor", "REVIEWER"]
    if request is None or fields:  # fields only a request carries
        words.append("--request FILE")
    return " ".join(words)


def final_audit_next(ledger: Any, selected: dict[str, Any]) -> str:
    """What R13 asks after ``selected`` (a ``ChampionSelected`` payload choosing an
    experiment) on the open ``ledger``: its final audit against the original, measured as the Target's kind measures
    (kernel or workload, :func:`~perfledger.projections.target_kind.measuring_command`) and
    recorded with ``final-audit record``; one line."""
    target_id, chosen = selected["target_id"], selected["experiment_id"]
    measure = measuring_command(ledger.state(), target_id, "samples.record", chosen)
    return (
        f"next (R13): its final audit against the original: `{measure}`, then "
        f"`perfledger final-audit record --target {target_id} --samples ID`"
    )


def command_of(op: str) -> str:
    """The CLI command of operation ``op`` (``final-audit.record`` -> ``final-audit record``)."""
    return op.replace(".", " ")


def tool_name(operation: str) -> str:
    """The tool name of an operation: ``final-audit.record`` -> ``final_audit_record``."""
    return operation.replace(".", "_").replace("-", "_")


def refuse_unknown_tool(name: str, known: Any) -> None:
    """Refuse an MCP tool call naming no tool (``known``: the tool names, a container).

    Raises: BadRequest (exit 2) when ``name`` is not in ``known``."""
    if name not in known:
        raise BadRequest(f"unknown tool {name!r}", hint="list the tools")


#: Read commands of the CLI -> the read tool that answers them.
READ_COMMANDS = {
    "status": "status", "state": "state", "claims": "claims", "champion show": "champion",
    "handoff": "handoff", "handoff show": "handoff", "target show": "status", "schema": "schema",
}  # fmt: skip
#: A read command's positional argument -> the read tool's field.
_READ_POSITIONAL = {"champion": "target_id", "handoff": "target_id", "schema": "operation"}
#: A command in backquotes in a hint, a warning or a message: ```perfledger verdict record ...```.
_QUOTED = re.compile(r"`(perfledger [^`]+)`")
#: Keys of an answer whose text may name a shell command (never a recorded payload's).
_TEXT_KEYS = frozenset({"hint", "message", "warnings", "lines"})


def tool_call(command: str) -> str | None:
    """The MCP tool call that does what the shell ``command`` (``perfledger verdict record
    --samples S``) does: ``verdict_record {"samples_id": "S"}`` for a write operation (its
    common flags as request fields; ``--request -`` as "the request's fields"), ``status {}``
    for a read model, else ``cli {"args": [...]}``. Returns None when ``command`` is not a
    perfledger command line."""

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 2 or words[0] != "perfledger":
        return None
    words = [w for w in words[1:] if w != "--json"]
    if words[0].startswith("-") or words[0] == "mcp":  # another ledger or server: not a call
        return None
    verbs = [w for w in words[:2] if not w.startswith("-")]
    flag_fields = {flag: field for flag, field, _ in COMMON_FLAGS}
    for n in (2, 1):
        op = ".".join(verbs[:n])
        if len(verbs) >= n and op in OPERATIONS:
            fields: dict[str, str] = {}
            rest, request = words[n:], False
            while rest:
                flag = rest.pop(0)
                if flag == "--request" and rest:
                    rest.pop(0)
                    request = True
                elif flag in flag_fields and rest:
                    fields[flag_fields[flag]] = rest.pop(0)
                else:  # a flag the tool has no field for: the cli tool runs it as it is
                    return f"cli {json.dumps({'args': words})}"
            body = json.dumps(fields)
            if request:  # the request's own fields go beside the flags'
                body = body[:-1] + (", " if fields else "") + "...the request's fields}"
            return f"{tool_name(op)} {body}"
        read = " ".join(verbs[:n])
        if len(verbs) >= n and read in READ_COMMANDS:
            tool = READ_COMMANDS[read]
            rest = words[n:]
            args: dict[str, str] = {}
            if "--target" in rest[:-1]:
                args["target_id"] = rest[rest.index("--target") + 1]
            elif rest and not rest[0].startswith("-") and tool in _READ_POSITIONAL:
                args[_READ_POSITIONAL[tool]] = rest[0]
            return f"{tool} {json.dumps(args)}"
    return f"cli {json.dumps({'args': words})}"


def _with_tool_forms(text: str) -> str:
    """``text`` with the tool call beside every quoted perfledger command in it."""

    def beside(match: re.Match[str]) -> str:
        call = tool_call(match.group(1))
        return f"{match.group(0)} (MCP: `{call}`)" if call else match.group(0)

    return _QUOTED.sub(beside, text)


def translate_hints(answer: Any, key: str | None = None) -> Any:
    """``answer`` (a CLI or tool answer, an error object) with the MCP tool form beside each
    shell command quoted in its hints, messages and warnings, and a ``record_mcp`` (``command_mcp``)
    beside each ``record`` (``command``) command line (an MCP client has tools, not a shell); recorded payloads are left as
    they are."""
    if isinstance(answer, dict):
        out = {
            k: v if k in ("payload", "events") else translate_hints(v, k) for k, v in answer.items()
        }
        for name in ("record", "command"):  # a command line to run: its tool call beside it
            line = answer.get(name)
            if isinstance(line, str) and (call := tool_call(line)) is not None:
                out[f"{name}_mcp"] = call
        return out
    if isinstance(answer, list):
        return [translate_hints(v, key) for v in answer]
    if isinstance(answer, str) and key in _TEXT_KEYS and "`perfledger " in answer:
        return _with_tool_forms(answer)
    return answer


#: What a command says to ``--explain-foreign`` (R17): the option is gone.
EXPLAIN_FOREIGN_REMOVED = (
    "--explain-foreign was removed: a typed explanation of foreign activity decides nothing "
    "(R17). After the samples, another actor reviews them (`perfledger review record`) and "
    "`perfledger activity explain --samples ID --request -` cites that review; or measure "
    "again on a quieter machine"
)


def refuse_explain_foreign(value: str | None) -> None:
    """Refuse ``--explain-foreign`` when it was given (``value`` not None): R17 takes no typed
    explanation. Raises: BadRequest (exit 2, :data:`EXPLAIN_FOREIGN_REMOVED`)."""
    if value is not None:
        raise BadRequest(
            EXPLAIN_FOREIGN_REMOVED,
            hint="another actor records `perfledger review record`; `perfledger activity explain` cites it",
        )


__all__ = [
    "COMMON_FLAGS",
    "EXPLAIN_FOREIGN_REMOVED",
    "FIELD_HINTS",
    "HANDOFF_COMMAND",
    "READ_COMMANDS",
    "TARGET_FIELD_HELP",
    "command_of",
    "final_audit_next",
    "flag_of_missing_field",
    "recommended_command",
    "refuse_explain_foreign",
    "refuse_unknown_tool",
    "refuse_with_flag_hint",
    "tool_call",
    "tool_name",
    "translate_hints",
]
