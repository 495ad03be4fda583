"""The MCP server's ``cli`` tool in this process: each ``perfledger`` command's words read by the
CLI's own click command (:func:`perfledger.app.options.parse_words`: one parser, the CLI's
usage errors), the application function the click command calls, and the command's ``--json``
answer as plain JSON values (:data:`ANSWERS`).

What still runs as ``perfledger ... --json`` in a subprocess is :data:`SUBPROCESS`, each for a
stated reason; ``--help`` (text for a shell) too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from perfledger.api import Ledger
from perfledger.app import evidence, handoff
from perfledger.app.actors import resolve_actor
from perfledger.app.argv import refuse_evidence_form
from perfledger.app.attest import attest, verify_attestation, write_attestation
from perfledger.app.checkpoints import (
    listed_json,
    sign_checkpoint,
    signed_json,
    verify,
    witness_checkpoint,
    witnessed_json,
)
from perfledger.app.command_lines import refuse_with_flag_hint
from perfledger.app.decisions import record_decision, signed_review_request
from perfledger.app.event_lookup import (
    ArtifactGet,
    Note,
    artifacts_of,
    get_artifact,
    record_note,
    show_event,
)
from perfledger.app.examples import schema_example
from perfledger.app.gc import collect_garbage
from perfledger.app.identity import checkout
from perfledger.app.knowledge import KnowledgeQuery, card_of, load_cards, query_knowledge
from perfledger.app.loop import (
    CloseIteration,
    FinalizeRun,
    LoopSetup,
    close_iteration,
    dims_of,
    finalize_run,
    finalized_json,
    loop_run,
    loop_setup,
    run_state_json,
    silent,
)
from perfledger.app.readmodels import (
    TargetQuery,
    champion_of,
    champions_of,
    claims_of,
    evidence_list,
    evidence_show,
    experiment_of,
    experiments_of,
    lineage_of,
    rejected_of,
    reviews_of,
    targets_of,
    verdict_explained,
)
from perfledger.app.report import build_report
from perfledger.app.request_json import read_request
from perfledger.app.status import session_status_with_commands
from perfledger.app.sync import (
    clone_ledger,
    pull_ledger,
    push_ledger,
    raise_joined_conflicts,
    remote_rows,
    sync_ledger,
)
from perfledger.app.triage import TriageRequest, triage_report
from perfledger.commands.cli.common import to_json_text
from perfledger.commands.cli.readmodels import NO_TARGET_HINT
from perfledger.commands.registry.catalog import OPERATIONS
from perfledger.commands.registry.request_models import json_schema
from perfledger.errors import BadRequest
from perfledger.ledger.checkpoints import CheckpointPolicy
from perfledger.ledger.remotes import add_remote, remove_remote
from perfledger.projections.handoff import render_markdown
from perfledger.skill import install

#: Commands the ``cli`` tool still runs as ``perfledger ... --json`` in a subprocess, and why.
SUBPROCESS: dict[tuple[str, ...], str] = {
    ("mcp",): "a server over this process's own stdin and stdout: never from a tool call",
}

#: Commands that take no ``--json`` (their output is text or bytes for people and tools): the
#: CLI refuses ``--json``, and so does the ``cli`` tool, in this process, with the CLI's error.
NO_JSON: dict[tuple[str, ...], str] = {
    ("skill",): "SKILL.md (--print) or the help: text",
    ("review", "content"): "the bytes a reviewer signs",
    ("loop", "summary"): "summary.md: text",
    ("loop", "propose"): "methods.json and a draft analysis: files or text",
}

#: Held while a ``cli`` call measures in this process (``measure``, ``loop setup|close-iter|
#: finalize``, ``evidence ncu``): a measurement sets process-wide state (the child subreaper
#: of :mod:`perfledger.kernels.proc`, the monitor) that a second one at the same time would
#: share.
MEASURING = threading.Lock()


def plain(answer: Any) -> Any:
    """``answer`` as plain JSON values (what the CLI's ``--json`` prints, read back)."""
    return json.loads(to_json_text(answer))


class Call(msgspec.Struct):
    """One ``cli`` call in this process: ``read(use_case, ...)`` runs a use case on a fresh open
    of the ledger; ``open_ledger`` opens it; ``ledger_path`` the server's (or the words'
    ``--ledger``); ``actor`` the server's actor; ``stdin`` the tool's stdin text (empty where it gives none:
    never this process's stdin, the MCP transport)."""

    read: Callable[..., Any]
    open_ledger: Callable[[], Any]
    ledger_path: str | None
    actor: str
    stdin: str

    def actor_of(self, given: str | None) -> str:
        """Who acts: ``--actor`` (checked as the CLI checks it), else the server's actor (the
        subprocess's ``$PERFLEDGER_ACTOR``). Raises: BadRequest for an empty ``--actor``."""
        return resolve_actor(given, self.ledger_path) if given is not None else self.actor


def _target(p: dict[str, Any]) -> TargetQuery:
    return TargetQuery(target_id=p["target_id"])


def _log(call: Call, p: dict[str, Any]) -> Any:
    entries = call.read(lambda ledger: ledger.log(p["limit"]))
    return plain({"events": [entry.__dict__ for entry in entries]})


def _policy(p: dict[str, Any]) -> CheckpointPolicy:
    """What ``--signers``, ``--trust``, ``--require-signer`` and ``--max-unsigned-events``
    demand of the ledger's checkpoints. Raises: BadRequest for --trust or --require-signer
    without --signers."""
    return CheckpointPolicy(
        p["signers_file"], p["trusted_dir"], tuple(p["require_signers"]), p["max_unsigned_events"]
    )


def _verify(call: Call, p: dict[str, Any]) -> Any:
    report = call.read(verify, _policy(p))
    if not report.ok and report.error is not None:  # 5, or 7 for a ledger a newer one wrote
        raise report.error
    return plain(report.to_json())


def _champion_show(call: Call, p: dict[str, Any]) -> Any:
    if p["target_id"] is not None:
        return plain(call.read(champion_of, _target(p)).to_json())
    return plain(call.read(champions_of))


def _schema(call: Call, p: dict[str, Any]) -> Any:
    operation = p["operation"]
    if p["example"]:
        done = schema_example(operation, open_ledger=call.open_ledger, variants=p["json_flag"])
        if done.refusal is not None:
            raise done.refusal
        return plain(done.body)
    if operation is None:
        return {"operations": sorted(OPERATIONS)}
    return plain(json_schema(operation))


def _handoff_show(call: Call, p: dict[str, Any]) -> Any:
    _, shown, _ = call.read(handoff.current_handoff, p["target_id"], no_target_hint=NO_TARGET_HINT)
    if p["md_flag"]:  # Markdown: the CLI prints text, not JSON
        return {"output": render_markdown(shown)}
    return plain({"handoff": shown})


def _remote_list(call: Call, p: dict[str, Any]) -> Any:
    return {"remotes": call.read(remote_rows)}


def _remote_add(call: Call, p: dict[str, Any]) -> Any:
    remote = call.read(lambda ledger: add_remote(ledger.store.repo, p["name"], p["url"]))
    return {"name": remote.name, "url": remote.url}


def _remote_remove(call: Call, p: dict[str, Any]) -> Any:
    call.read(lambda ledger: remove_remote(ledger.store.repo, p["name"]))
    return {"removed": p["name"]}


def _checkpoint_sign(call: Call, p: dict[str, Any]) -> Any:
    tag = call.read(sign_checkpoint, p["key_path"], actor=call.actor_of(p["actor"]),
                    signers_file=p["signers_file"])  # fmt: skip
    return signed_json(tag)


def _checkpoint_witness(call: Call, p: dict[str, Any]) -> Any:
    target, tag, paths = call.read(
        witness_checkpoint, p["key_path"], signers_file=p["signers_file"],
        copy_dir=p["copy_dir"], actor=call.actor_of(p["actor"]), checkpoint=p["checkpoint"],
    )  # fmt: skip
    return witnessed_json(target, tag, paths)


def _attest(call: Call, p: dict[str, Any]) -> Any:
    envelope = call.read(attest, p["experiment"], p["key_path"])
    if p["out"] is None:  # the envelope itself is the answer
        return plain(envelope)
    return write_attestation(envelope, p["out"], p["experiment"])


def _artifact_get(call: Call, p: dict[str, Any]) -> Any:
    request = ArtifactGet(event=p["event"], name=p["name"], output=p["output"], json=True)
    done = get_artifact(request, open_ledger=call.open_ledger)
    return {"event_id": done.event_id, "name": p["name"], "path": p["output"], "size": done.size}


def _review_record(call: Call, p: dict[str, Any]) -> Any:
    if p["sign_with"] is None:
        return _write("review.record")(call, {k: v for k, v in p.items() if k != "sign_with"})
    body = signed_review_request(read_request(p["request_source"], call.stdin), p["sign_with"])
    return submit(call, "review.record", body, p)


def _overrides(p: dict[str, Any]) -> dict[str, Any]:
    """The request fields an ``evidence add|ncu`` flag sets."""
    return {k: p[k] for k in ("evidence_id", "applicability", "layer", "shapes", "graph",
                              "description", "target_id")}  # fmt: skip


def _evidence_add(call: Call, p: dict[str, Any]) -> Any:
    refuse_evidence_form(p["kind"], p["report"])
    if p["kind"] is None:  # the generic write: a closed request
        fields = ("request_source", "idempotency_key", "actor", "json_flag", "dry_run",
                  "target_id")  # fmt: skip
        return _write("evidence.add")(call, {k: p[k] for k in fields})
    request = evidence.AddReport(
        kind=p["kind"], report=p["report"],
        context=read_request(p["request_source"], call.stdin), overrides=_overrides(p),
        tool_version=p["tool_version"], grouping=p["grouping"], binary=p["binary"],
        binary_hash=p["binary_hash"], ncu_path=p["ncu_path"], actor=call.actor_of(p["actor"]),
        idempotency_key=p["idempotency_key"], dry_run=p["dry_run"],
    )  # fmt: skip
    return plain(evidence.add_report(request, open_ledger=call.open_ledger).to_json())


def _evidence_ncu(call: Call, p: dict[str, Any]) -> Any:
    request = evidence.NcuProfile(
        command=list(p["command"]), overrides=_overrides(p), ncu_path=p["ncu_path"],
        sections=list(p["sections"]), extra=list(p["ncu_options"]), timeout_s=p["timeout_s"],
        actor=call.actor_of(p["actor"]), idempotency_key=p["idempotency_key"],
    )  # fmt: skip
    with MEASURING:
        return plain(evidence.add_ncu_profile(request, open_ledger=call.open_ledger).to_json())


def _knowledge_query(call: Call, p: dict[str, Any]) -> Any:
    request = KnowledgeQuery(
        env_path=p["env_path"], phenomena=list(p["phenomena"]), mechanisms=list(p["mechanisms"]),
        dtype=p["dtype"], libraries=list(p["libraries"]), card_dirs=list(p["card_dirs"]),
        shipped=not p["no_shipped"], evidence_id=p["evidence_id"], layer=p["layer"],
        target_id=p["target_id"], stdin=call.stdin,
    )  # fmt: skip
    done = query_knowledge(request, open_ledger=call.open_ledger,
                           actor=lambda: call.actor_of(p["actor"]))  # fmt: skip
    return plain({**done.data, "recorded": done.recorded})


def _knowledge_check(call: Call, p: dict[str, Any]) -> Any:
    cards, digest = load_cards(p["directories"])
    return {"cards": len(cards), "cards_digest": digest, "ok": True}


def _triage(call: Call, p: dict[str, Any]) -> Any:
    request = TriageRequest(
        report=p["report"], known_paths=p["known_paths"], mapping=p["mapping"], top=p["top"],
        denominator=p["denominator"], evidence_id=p["evidence_id"], target_id=p["target_id"],
        of_target=p["of_target"],
    )  # fmt: skip
    done = triage_report(request, open_ledger=call.open_ledger,
                         actor=lambda: call.actor_of(p["actor"]))  # fmt: skip
    return plain({**done.answer, "recorded": done.recorded})


def _loop_setup(call: Call, p: dict[str, Any]) -> Any:
    request = LoopSetup(
        baseline=p["baseline"], ref=p["ref_path"], dims=dims_of(p["dims"]), run_id=p["run_id"],
        iterations=p["iterations"], ncu_num=p["ncu_num"], min_effect=p["min_effect"],
        entry=p["entry"], driver=p["driver"], catalog=p["catalog_path"], sm_arch=p["sm_arch"],
        actor=call.actor_of(p["actor"]),
    )  # fmt: skip
    with MEASURING:
        return plain(loop_setup(request, open_ledger=call.open_ledger, say=silent))


def _loop_close(call: Call, p: dict[str, Any]) -> Any:
    request = CloseIteration(
        run_id=p["run_id"], iteration=p["iteration"], kernel=p["kernel"],
        methods=p["methods_path"], analysis=p["analysis_path"], pairs=p["pairs"],
        actor=call.actor_of(p["actor"]),
    )  # fmt: skip
    with MEASURING:
        return plain(close_iteration(request, open_ledger=call.open_ledger, say=silent))


def _loop_finalize(call: Call, p: dict[str, Any]) -> Any:
    request = FinalizeRun(run_id=p["run_id"], pairs=p["pairs"], stop_reason=p["stop_reason"],
                          actor=call.actor_of(p["actor"]))  # fmt: skip
    with MEASURING:
        done = call.read(finalize_run, request, say=silent)
    return finalized_json(p["run_id"], done, p["out"])


def _clone(call: Call, p: dict[str, Any]) -> Any:
    done = clone_ledger(p["url"], p["path"], remote=p["remote"], policy=_policy(p))
    return plain({"path": done.path, **done.result.to_json()})


def _pull(call: Call, p: dict[str, Any]) -> Any:
    path, result, conflicts = call.read(pull_ledger, p["remote"], policy=_policy(p))
    raise_joined_conflicts(conflicts)  # exit 6, as the CLI's
    return plain({"ledger": path, **result.to_json(), "conflicts": conflicts})


def _push(call: Call, p: dict[str, Any]) -> Any:
    path, result = call.read(push_ledger, p["remote"])
    return plain({"ledger": path, **result.to_json()})


def _sync(call: Call, p: dict[str, Any]) -> Any:
    path, result, conflicts = call.read(sync_ledger, p["remote"], policy=_policy(p))
    raise_joined_conflicts(conflicts)  # exit 6, as the CLI's
    return plain({"ledger": path, **result.to_json(), "conflicts": conflicts})


def _note(call: Call, p: dict[str, Any]) -> Any:
    note = Note(text=p["text"], tags=list(p["tags"]), actor=call.actor_of(p["actor"]),
                idempotency_key=p["idempotency_key"])  # fmt: skip
    done = record_note(note, open_ledger=call.open_ledger)
    return {"event_id": done.event_id, "lamport": done.lamport}


def submit(
    call: Call, op: str, body: dict[str, Any], p: dict[str, Any], *, request_given: bool = True
) -> Any:
    """Decide and append (``--dry-run``: decide only) one request of operation ``op`` through
    :func:`perfledger.app.decisions.record_decision`, as the CLI's writes do; the answer is
    their ``--json`` answer. Raises: BadRequest (2), RuleRefused (3), ConcurrentAppend (4)."""
    ledger = call.open_ledger()
    try:
        recorded = record_decision(
            ledger, op, body, actor=call.actor_of(p["actor"]),
            idempotency_key=p["idempotency_key"], dry_run=p["dry_run"],
        )  # fmt: skip
    except BadRequest as exc:
        refuse_with_flag_hint(exc, op, request_given=request_given)
    finally:
        ledger.close()
    return plain(recorded.dry_run_json() if recorded.dry_run else recorded.to_json())


#: The parameters of a generic write command that are not request fields.
_WRITE_PARAMS = ("request_source", "idempotency_key", "actor", "json_flag", "dry_run")


def _write(op: str) -> Callable[[Call, dict[str, Any]], Any]:
    """The answer of ``perfledger GROUP VERB`` (operation ``op``): ``--request`` and the flags
    that set the request's fields, submitted."""

    def answer(call: Call, p: dict[str, Any]) -> Any:
        body = read_request(p["request_source"], call.stdin)
        for field, value in p.items():
            if field not in _WRITE_PARAMS and value is not None:
                body[field] = value
        return submit(call, op, body, p, request_given=p["request_source"] is not None)

    return answer


def _resolve(call: Call, p: dict[str, Any]) -> Any:
    body = read_request(p["request_source"], call.stdin)
    fields = {k: p[k] for k in ("target_id", "conflict_id", "keep", "reason")}
    body.update({k: v for k, v in fields.items() if v is not None})
    return submit(call, "conflict.resolve", body, p)


def _handoff_record(call: Call, p: dict[str, Any]) -> Any:
    if p["example"]:
        from perfledger.commands.registry.request_examples import shown  # noqa: PLC0415 (as the CLI's command: off the server's start-up path)

        return plain(shown("handoff.record"))
    statement = handoff.HandoffStatement(
        target_id=p["target_id"], override=read_request(p["request_source"], call.stdin),
        stop_reason=p["stop_reason"], feedback=p["feedback"], wall_used_s=p["wall_used"],
        gpu_used_s=p["gpu_used"], questions=list(p["questions"]),
    )  # fmt: skip
    draft = call.read(handoff.draft_handoff_record, statement, no_target_hint=NO_TARGET_HINT)
    return submit(call, "handoff.record", draft.request, p)


def _words(op: Any) -> tuple[str, ...]:
    """The CLI's words of operation ``op``: ``(group, verb)``, or ``(verb,)`` at the top."""
    return (op.group, op.verb) if op.group else (op.verb,)


#: Writes whose CLI command is not the generic one (a report file, an SSH signature).
_OWN_WRITES = {("evidence", "add"), ("review", "record")}

#: ``cli`` commands answered in this process: the command's words -> its answer from the
#: parameters its click command read (``--json`` always given).
ANSWERS: dict[tuple[str, ...], Callable[[Call, dict[str, Any]], Any]] = {
    **{  # the generic writes (``--request`` and field flags); a command of its own below
        _words(op): _write(op.name)
        for op in OPERATIONS.values()
        if op.generic_cli and _words(op) not in _OWN_WRITES
    },
    ("log",): _log,
    ("show",): lambda c, p: plain(c.read(show_event, p["event_id"]).to_json()),
    ("verify",): _verify,
    ("state",): lambda c, p: json.loads(c.read(Ledger.state_json)),
    ("note",): _note,
    ("status",): lambda c, p: plain(c.read(session_status_with_commands, p["target_id"])),
    ("claims",): lambda c, p: plain(c.read(claims_of, _target(p))),
    ("rejected",): lambda c, p: plain(c.read(rejected_of, _target(p))),
    ("champion", "show"): _champion_show,
    ("champion", "lineage"): lambda c, p: plain(c.read(lineage_of, _target(p))),
    ("target", "show"): lambda c, p: plain(c.read(targets_of, _target(p)).to_json()),
    ("experiment", "show"): lambda c, p: plain(c.read(experiment_of, p["experiment_id"])),
    ("experiment", "list"): lambda c, p: plain(c.read(experiments_of, _target(p))),
    ("verdict", "explain"): lambda c, p: plain(
        c.read(verdict_explained, p["samples_id"]).to_json()
    ),
    ("evidence", "list"): lambda c, p: plain(c.read(evidence_list)),
    ("evidence", "show"): lambda c, p: plain(c.read(evidence_show, p["evidence_id"])),
    ("review", "list"): lambda c, p: plain(
        {"reviews": c.read(reviews_of, unresolved=p["unresolved"], target_id=p["target_id"])}
    ),
    ("artifact", "list"): lambda c, p: plain(
        (lambda done: {"event_id": done.event_id, "artifacts": done.artifacts})(
            c.read(artifacts_of, p["event"])
        )
    ),
    ("remote", "list"): _remote_list,
    ("schema",): _schema,
    ("handoff",): _handoff_show,
    ("handoff", "record"): _handoff_record,
    ("resume",): lambda c, p: plain(
        c.read(handoff.resume, p["target_id"], no_target_hint=NO_TARGET_HINT)
    ),
    ("gc",): lambda c, p: plain(
        {"dry_run": p["dry_run"], **collect_garbage(c.ledger_path, dry_run=p["dry_run"]).to_json()}
    ),
    ("resolve",): _resolve,
    ("remote", "add"): _remote_add,
    ("remote", "remove"): _remote_remove,
    ("checkpoint", "list"): lambda c, p: listed_json(c.read(verify, _policy(p))),
    ("checkpoint", "sign"): _checkpoint_sign,
    ("checkpoint", "witness"): _checkpoint_witness,
    ("attest",): _attest,
    ("verify-attestation",): lambda c, p: plain(
        {"ok": True, **c.read(verify_attestation, p["file"], p["signers_file"])}
    ),
    ("checkout",): lambda c, p: plain(c.read(checkout, p["snapshot"], p["directory"])),
    ("skill", "install"): lambda c, p: {"installed": [str(f) for f in install(p["directory"])]},
    ("artifact", "get"): _artifact_get,
    ("review", "record"): _review_record,
    ("evidence", "add"): _evidence_add,
    ("evidence", "ncu"): _evidence_ncu,
    ("knowledge", "query"): _knowledge_query,
    ("knowledge", "check"): _knowledge_check,
    ("knowledge", "show"): lambda c, p: plain(card_of(p["card_id"], p["card_dirs"])),
    ("triage",): _triage,
    ("loop", "setup"): _loop_setup,
    ("loop", "close-iter"): _loop_close,
    ("loop", "finalize"): _loop_finalize,
    ("loop", "state"): lambda c, p: plain(
        run_state_json(c.read(lambda ledger: loop_run(ledger.state(), p["run_id"])))
    ),
    ("clone",): _clone,
    ("pull",): _pull,
    ("push",): _push,
    ("sync",): _sync,
    ("report",): lambda c, p: plain(c.read(build_report, p["html_path"], target_id=p["target_id"])),
}


__all__ = ["ANSWERS", "MEASURING", "NO_JSON", "SUBPROCESS", "Call", "plain", "submit"]
