"""``perfledger mcp``: perfledger as an MCP server over stdio (SPEC.md section 6), built on the
official ``mcp`` SDK's low-level server (``pip install 'perfledger[mcp]'``).

A thin skin over the same library calls as the CLI:

- one tool per write operation (``target_freeze``, ``experiment_create``, ...: the operation's
  name with ``.`` and ``-`` as ``_``); its input schema is the request's JSON Schema
  (:func:`perfledger.commands.registry.operations.json_schema`) and its result the CLI's ``--json``
  answer (``{"op", "event_id", "kind", "lamport", "payload", "events"}``). ``readiness_record``
  snapshots ``original.subject`` and ``experiment_create`` ``candidate.subject`` as the CLI
  does (R11);
- read models as tools: ``status``, ``state``, ``claims``, ``champion``, ``handoff``, ``schema``;
- ``cli``: any other ``perfledger`` command with ``--json`` on the same ledger, in this
  process: its words read by the CLI's own click command (passed in by ``perfledger mcp``:
  :func:`perfledger.app.options.parse_words`, the CLI's usage errors word for word), then the
  application function that command calls, answering the command's ``--json`` answer
  (``init``, ``env``, ``audit``: :data:`IN_PROCESS`; ``measure aa|kernel|workload|serving|
  baseline``: :data:`MEASURES`; reads and writes: :data:`perfledger.commands.mcp.answers.ANSWERS`).
  A subprocess (``perfledger ... --json``) runs only ``--help``, the commands of
  :data:`perfledger.commands.mcp.answers.SUBPROCESS` (each with its reason) and a measurement
  by the self-timed driver: its watch of its own process (SIGCONT) runs only on a main thread,
  which this server's tool calls are not.

A refusal is a tool error (``is_error``) whose text and structured content are the CLI's error
object ``{"error": {"code", "rule", "message", "hint"}}``; nothing was appended. Each call opens
the ledger, acts and closes it, so the server never holds a stale view.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import click
import mcp_types as types
import msgspec

from perfledger._version import __version__
from perfledger.api import Ledger, find_ledger_path
from perfledger.app.actors import refuse_empty_actor, resolve_actor
from perfledger.app.argv import hoist_global_options, refuse_misplaced_ledger
from perfledger.app.audit import audit_exit_code, audit_ledger
from perfledger.app.baseline import measure_baseline
from perfledger.app.command_lines import refuse_unknown_tool, tool_name, translate_hints
from perfledger.app.context import environment_payload
from perfledger.app.decisions import record_decision
from perfledger.app.handoff import current_handoff
from perfledger.app.ledgers import (
    found_ledger,
    init_ledger,
    init_message,
    init_tool_hint,
    ledger_location,
)
from perfledger.app.measure_aa import measure_aa
from perfledger.app.measure_kernel import measure_kernel
from perfledger.app.measure_self import driver_timed, measure_workload_stage
from perfledger.app.measure_serving_load import measure_serving
from perfledger.app.options import parse_words
from perfledger.app.readmodels import TargetQuery, champion_of, champions_of, claims_of
from perfledger.app.request_options import measure_request
from perfledger.app.status import session_status_with_commands
from perfledger.commands.cli.common import to_json_text
from perfledger.commands.mcp.answers import ANSWERS, MEASURING, Call, plain
from perfledger.commands.registry.operations import OPERATIONS, get_operation, json_schema
from perfledger.commands.workflow.field_docs import DRIVER_CONTRACT, OUTPUT_FORMATS
from perfledger.errors import BadRequest, PerfledgerError
from perfledger.projections.handoff import render_markdown

#: The server's name in the MCP handshake.
SERVER_NAME = "perfledger"
#: Wall seconds a ``cli`` tool call may run (a measurement can take minutes).
CLI_TIMEOUT_S = 3600.0

#: What the server tells a client at the handshake: the session's steps in the rules' order,
#: with the two that are ``cli`` commands rather than write tools (``init``, ``measure aa``).
INSTRUCTIONS = (
    "perfledger records a performance-optimization session as a ledger of decisions, each "
    "checked by the rules R1-R25. Call `status` first. If it answers not_a_ledger, create "
    'the ledger with the `cli` tool, args ["init"]. Then, in the order of the rules: '
    "target_freeze (R1); readiness_record (R2; its environment is "
    '`cli` ["env"]\'s readiness_environment); metric_audit_record (R3); the baseline (R4): '
    '`cli` ["measure", "baseline", "--target", T, "--cmd", CMD] (a baseline typed through '
    "baseline_record is recorded as declared and decides nothing: no A/A, experiment or "
    "reference watch uses it); "
    'the A/A resolution (R4): `cli` ["measure", "aa", "--target", T, "--cmd", CMD, '
    '"--record"] (a resolution typed through resolution_record is recorded as declared and '
    "decides nothing: no verdict passes on it); evidence_add (R6); "
    "experiment_create (R7-R10; candidate.subject: the candidate's code directory, which "
    "perfledger hashes, R11); samples through "
    '`cli` ["measure", "workload", "--experiment", E, "--stage", "screen"|"target"|'
    '"final_audit", "--ref", CMD, "--cand", CMD, ...] (formal stages (target, final_audit) '
    'need a monitor: for a CPU workload pass "--monitor", "host"; foreign activity is '
    "explained only by another actor's review (review_record, then activity_explain citing "
    'it), never by a typed text; screens may pass "--no-monitor"); '
    "verdict_record (R12); champion_select (R13); final_audit_record; "
    '`cli` ["handoff", "record", ...] or handoff_record with target_id, budget_used, '
    "stop_reason and feedback: perfledger fills the rest from the ledger (R18); "
    '`cli` ["audit"]. `schema` gives each request\'s '
    'JSON Schema (`cli` ["schema", OP, "--example"] a valid example). A refusal is a tool '
    "error naming its rule and a hint; nothing was appended. The workload driver (readiness "
    "driver; measure's --cmd/--ref/--cand): " + DRIVER_CONTRACT + " " + OUTPUT_FORMATS
)

#: The ``target_id`` field of the read tools.
_TARGET_ID = {
    "type": "string",
    "description": "A Target's id (as target_freeze named it); absent: every current Target",
}
#: The read tools: name -> (description, input schema).
READ_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "status": (
        "Where the session stands: each current Target, its readiness chain, the champion and "
        "its final audit, open experiments, obligations and the next decisions the rules accept.",
        {"type": "object", "properties": {"target_id": _TARGET_ID},
         "additionalProperties": False},
    ),
    "state": (
        "The folded state at the head: {head, state_hash, state}.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
    "claims": (
        "ROI claims against outcomes: f, s, bound, measured improvement with CI, prediction "
        "error, reconciliation (R7, R14).",
        {"type": "object", "properties": {"target_id": _TARGET_ID},
         "additionalProperties": False},
    ),
    "champion": (
        "The current champion of every Target (or of target_id, with its lineage) and its "
        "final-audit standing (R13).",
        {"type": "object", "properties": {"target_id": _TARGET_ID},
         "additionalProperties": False},
    ),
    "handoff": (
        "The handoff of R18 derived from the state (JSON; markdown: true for Markdown).",
        {"type": "object", "properties": {"target_id": _TARGET_ID,
                                          "markdown": {"type": "boolean", "description":
                                                       "true: the handoff as Markdown text "
                                                       "({markdown}); false or absent: JSON "
                                                       "({handoff})"}},
         "additionalProperties": False},
    ),
    "schema": (
        "The JSON Schema of an operation's request (operation: e.g. experiment.create), or the "
        "list of operations without one.",
        {"type": "object", "properties": {"operation": {
            "type": "string", "description": "An operation's name (experiment.create) or its "
            "tool name (experiment_create); absent: the list of operations"}},
         "additionalProperties": False},
    ),
    "cli": (
        "Run any other perfledger command on this ledger with --json and return its answer, e.g. "
        'args ["measure", "workload", "--experiment", "e1", "--stage", "screen", "--ref", CMD, '
        '"--cand", CMD, "--no-monitor"], ["env"], ["audit"] (["audit", "--allowed-signers", '
        'FILE]: every review\'s SSH signature checked against your allowed-signers file, R12, '
        'R17), ["handoff", "record", "--target", '
        '"t1", "--gpu-used", "0", "--stop-reason", TEXT, "--feedback", "none"].',
        {"type": "object", "required": ["args"], "additionalProperties": False,
         "properties": {"args": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                 "description": "perfledger's arguments after `perfledger`, "
                                 "one word per item (no shell: no quoting); --json and this "
                                 "server's --ledger are added"},
                        "stdin": {"type": "string",
                                  "description": "text for the command's stdin (--request -)"}}},
    ),
}  # fmt: skip


def _write_tools() -> dict[str, str]:
    """Tool name -> operation name, for every write operation."""

    return {tool_name(name): name for name in OPERATIONS}


class Tools:
    """The tools of one server: what to list and how to call each (plain synchronous calls on
    the ledger at ``ledger_path``, acting as ``actor``). ``commands``: the CLI's root group
    (``perfledger mcp`` passes its own), whose commands read the ``cli`` tool's words; without
    it every ``cli`` call runs as a subprocess (the server cannot import the CLI that starts
    it)."""

    def __init__(
        self, ledger_path: str | None, actor: str, commands: click.Group | None = None
    ) -> None:
        self.ledger_path = ledger_path
        self.actor = actor
        self.commands = commands
        self.writes = _write_tools()

    def _open(self) -> Any:

        try:
            return Ledger.open(find_ledger_path(self.ledger_path))
        except PerfledgerError as exc:
            if exc.code == "not_a_ledger":  # the CLI's hint names a command this client lacks
                exc.hint = init_tool_hint(self.ledger_path)
            raise

    def listing(self) -> list[tuple[str, str, dict[str, Any]]]:
        """``(name, description, input schema)`` of every tool: writes first, then reads."""

        out = []
        for name, op in self.writes.items():
            operation = OPERATIONS[op]
            rules = f" Rules: {operation.rules}." if operation.rules else ""
            description = f"{operation.help}{rules} (perfledger {op.replace('.', ' ')})"
            out.append((name, description, json_schema(op)))
        out += [(name, text, schema) for name, (text, schema) in READ_TOOLS.items()]
        return out

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run tool ``name`` with ``arguments``; returns its JSON-able answer.

        Raises: PerfledgerError (BadRequest for an unknown tool), as the CLI would."""
        if name in self.writes:
            return self._write(self.writes[name], arguments)
        refuse_unknown_tool(name, READ_TOOLS)
        return getattr(self, f"_read_{name}")(**arguments)

    def _write(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        """One write operation through :func:`perfledger.app.decisions.record_decision` (the
        snapshots of R11 taken as the CLI takes them)."""
        ledger = self._open()
        try:
            return record_decision(ledger, op, body, actor=self.actor).to_json()
        finally:
            ledger.close()

    def _read_status(self, target_id: str | None = None) -> Any:
        return self._read(session_status_with_commands, target_id)

    def _read_state(self) -> Any:
        return json.loads(self._read(Ledger.state_json))

    def _read(self, use_case: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``use_case(ledger, *args, **kw)`` on a fresh open of the ledger (another process may
        have appended)."""
        ledger = self._open()
        try:
            return use_case(ledger, *args, **kw)
        finally:
            ledger.close()

    def _read_claims(self, target_id: str | None = None) -> Any:
        return msgspec.to_builtins(self._read(claims_of, TargetQuery(target_id=target_id)))

    def _read_champion(self, target_id: str | None = None) -> Any:
        if target_id is None:
            return msgspec.to_builtins(self._read(champions_of))
        shown = self._read(champion_of, TargetQuery(target_id=target_id), snapshot=False)
        return shown.to_json()

    def _read_handoff(self, target_id: str | None = None, markdown: bool = False) -> Any:
        _, handoff, _ = self._read(
            current_handoff, target_id, no_target_hint="call target_freeze first"
        )
        if markdown:
            return {"markdown": render_markdown(handoff)}
        return {"handoff": msgspec.to_builtins(handoff)}

    def _read_schema(self, operation: str | None = None) -> Any:

        if operation is None:
            return {"operations": {tool_name(n): n for n in sorted(OPERATIONS)}}
        # the tool name (experiment_create) names the operation as well as its own name does
        return json_schema(get_operation(self.writes.get(operation, operation)).name)

    def _read_cli(self, args: list[str], stdin: str | None = None) -> Any:
        """``perfledger ARGS --json`` on this ledger, as this actor: in this process (the words
        read by the CLI's own click command, :func:`perfledger.app.options.parse_words`, then
        the application function it calls: :data:`IN_PROCESS`, :data:`MEASURES`,
        :data:`perfledger.commands.mcp.answers.ANSWERS`), except ``--help`` and
        :data:`perfledger.commands.mcp.answers.SUBPROCESS` (a subprocess). Raises:
        PerfledgerError, the CLI's error for the same words."""
        if not args or _SHELL_ONLY.intersection(args) or self.commands is None:
            return self._subprocess(args, stdin)
        words, ledger_path = _global_options(self.commands, args)
        tools = self if ledger_path is None else Tools(ledger_path, self.actor, self.commands)
        if words[:1] == ["measure"] and words[1:2] and words[1] in MEASURES:
            return tools._measure(words, args, stdin)
        # --json before a `--` (evidence ncu's COMMAND follows it): the command's, not COMMAND's
        cut = words.index("--") if "--" in words else len(words)
        path, params = parse_words(self.commands, [*words[:cut], "--json", *words[cut:]])
        if path in IN_PROCESS:
            answer = IN_PROCESS[path](tools, params)
        elif path in ANSWERS:
            call = Call(read=tools._read, open_ledger=tools._open,
                        ledger_path=tools.ledger_path, actor=self.actor,
                        stdin=stdin or "")  # never the server's own stdin: the transport  # fmt: skip
            answer = ANSWERS[path](call, params)
        else:
            answer = self._subprocess(args, stdin)
        if path == ("init",) and isinstance(answer, dict) and "path" in answer:
            answer["message"] = self._init_message(answer["path"])
        return answer

    def _init(self, options: dict[str, Any]) -> dict[str, Any]:
        """``cli ["init", PATH?, "--name", N?, "--actor", A?]`` through
        :func:`perfledger.app.ledgers.init_ledger` (the actor: --actor, remembered, else the
        server's)."""
        actor = options["actor"]
        refuse_empty_actor(actor)
        done = init_ledger(
            ledger_location(options["path"], self.ledger_path), name=options["name"],
            actor=actor or self.actor, remember_actor=actor is not None,
        )  # fmt: skip
        return msgspec.to_builtins(done)

    def _env(self, options: dict[str, Any]) -> dict[str, Any]:
        """``cli ["env", "--device", N?, "--no-tools"?]``: the environment identity."""
        return environment_payload(options["device"], tools=not options["no_tools"])

    def _audit(self, options: dict[str, Any]) -> dict[str, Any]:
        """``cli ["audit", "--allowed-signers", FILE?]``: the auditor's replay through
        :func:`perfledger.app.audit.audit_ledger`, as ``perfledger audit`` runs it (with the
        file, every review's SSH signature is checked against it: R12, R17); findings are a
        tool error with the audit's exit code (5, or 7 for a ledger a newer perfledger wrote),
        each finding in its message. Raises: BadRequest when FILE does not exist."""
        report = self._read(audit_ledger, options["allowed_signers"], full=options["full"])
        if report.ok:
            return report.to_json()
        listed = "; ".join(f"{f.rule} {f.event_id[:16] or '-'} {f.kind}: {f.message}"
                           for f in report.findings)  # fmt: skip
        exc = CliFailed(f"audit: {len(report.findings)} finding(s): {listed}")
        exc.exit_code = audit_exit_code(report)
        raise exc

    def _measure(self, words: list[str], args: list[str], stdin: str | None) -> Any:
        """``cli ["measure", NAME, ...]`` through the application layer, in this process: the
        words read into the use case's request by
        :func:`perfledger.app.request_options.measure_request` (the options the CLI's command is
        built from, checked as it checks them) and measured (:data:`MEASURES`); the answer is
        the command's ``--json`` answer.

        A measurement by the self-timed driver (``--protocol self``, or an A/A or baseline of a
        Target whose primary the subject reports) still runs as ``perfledger measure ...`` in a subprocess: the driver watches its own
        process for stops (SIGCONT, R11) only from a main thread, and this server's tool calls
        run on worker threads (:func:`perfledger.app.measure_self.driver_timed`)."""
        with MEASURING:  # one at a time: a measurement's process-wide settings are its own
            return self._measure_alone(words, args, stdin)

    def _measure_alone(self, words: list[str], args: list[str], stdin: str | None) -> Any:
        """:meth:`_measure`, with no other measurement running in this process (``words``:
        ``args`` without the global options)."""
        name = words[1]
        request = measure_request(
            name, words[2:], lambda given: resolve_actor(given, self.ledger_path),
            default_actor=self.actor,
        )  # fmt: skip
        measure = MEASURES[name]
        if name == "serving":  # a report needs no ledger: opened only where it records
            return plain(measure(request, open_ledger=self._open).answer)
        ledger = self._open()
        try:
            if driver_timed(ledger.state(), request):
                ledger.close()
                ledger = None
                return self._subprocess(args, stdin)
            return plain(measure(ledger, request).answer())
        finally:
            if ledger is not None:
                ledger.close()

    def _subprocess(self, args: list[str], stdin: str | None) -> Any:
        """Run ``perfledger ARGS --json`` as a subprocess on this ledger, as this actor."""
        argv = [sys.executable, "-m", "perfledger"]
        if self.ledger_path:
            argv += ["--ledger", self.ledger_path]
        env = {**os.environ, "PERFLEDGER_ACTOR": self.actor}
        try:
            done = subprocess.run(
                # --help of a command group takes no --json: ask for JSON only of a command
                [*argv, *args, *([] if "--help" in args else ["--json"])],
                input=stdin, capture_output=True, text=True, env=env,
                timeout=CLI_TIMEOUT_S, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise PerfledgerError(
                f"perfledger {' '.join(args)} ran past {CLI_TIMEOUT_S:.0f} s"
            ) from None
        try:
            answer = json.loads(done.stdout) if done.stdout.strip() else {}
        except ValueError:
            answer = {"output": done.stdout}
        if done.returncode != 0:
            error = answer.get("error") if isinstance(answer, dict) else None
            exc = CliFailed(
                (error or {}).get("message") or done.stderr.strip() or f"exit {done.returncode}",
                hint=(error or {}).get("hint"),
            )
            exc.rule = (error or {}).get("rule")
            exc.exit_code = done.returncode
            exc.code = (error or {}).get("code") or CliFailed.code
            raise exc
        return answer

    def _init_message(self, path: str) -> str:
        """:func:`perfledger.app.ledgers.init_message` of ``path``; a server started where there
        was no ledger acts on this one from now on."""
        mine = found_ledger(self.ledger_path)
        if mine is None:
            self.ledger_path = path
            mine = os.path.realpath(path)
        return init_message(path, mine)


class CliFailed(PerfledgerError):
    """A ``cli`` tool call whose command exited non-zero (its error object, rule and exit code
    carried over)."""

    code = "cli_failed"


#: ``cli`` commands answered in this process: name -> the Tools method that answers them.
IN_PROCESS: dict[tuple[str, ...], Callable[[Tools, dict[str, Any]], Any]] = {
    ("init",): Tools._init, ("env",): Tools._env, ("audit",): Tools._audit,
}  # fmt: skip

#: Words whose answer is text for a shell (help, the version): the CLI prints it, in a
#: subprocess.
_SHELL_ONLY = frozenset({"--help", "-h", "--version"})


def _global_options(commands: click.Group, args: list[str]) -> tuple[list[str], str | None]:
    """``args`` without the root's options, and the ledger its ``--ledger`` names (None:
    this server's), read as the CLI reads them (:func:`perfledger.app.argv.hoist_global_options`).
    Raises: BadRequest for a misplaced ``--ledger`` (the CLI's refusal)."""
    refuse_misplaced_ledger(args, commands.list_commands(click.Context(commands)))
    words = hoist_global_options(args)
    ledger_path = None
    while words and (words[0] == "--json" or words[0].split("=", 1)[0] == "--ledger"):
        if words[0] == "--json":
            words = words[1:]
        elif "=" in words[0]:
            ledger_path, words = words[0].split("=", 1)[1], words[1:]
        else:
            ledger_path, words = words[1], words[2:]
    return words, ledger_path


#: ``cli ["measure", NAME, ...]`` measured in this process: NAME -> the application function
#: (its request: :func:`perfledger.app.request_options.measure_request`).
MEASURES: dict[str, Callable[..., Any]] = {
    "aa": measure_aa, "kernel": measure_kernel, "workload": measure_workload_stage,
    "serving": measure_serving, "baseline": measure_baseline,
}  # fmt: skip


def _result(tools: Tools, name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
    """``(answer, is_error)`` of one tool call; a PerfledgerError becomes its error object."""
    try:
        return translate_hints(tools.call(name, arguments)), False
    except PerfledgerError as exc:
        data = exc.to_json()
        data["error"]["exit_code"] = exc.exit_code  # type: ignore[index]
        return translate_hints(data), True
    except TypeError as exc:  # arguments a read tool does not take
        return BadRequest(
            f"{name}: {exc}", hint="the tool's input schema (tools/list) gives each field"
        ).to_json(), True


def build_server(ledger_path: str | None, actor: str, commands: click.Group | None = None) -> Any:
    """The MCP low-level ``Server`` with perfledger's tools (see the module docstring;
    ``commands``: the CLI's root group, :class:`Tools`).

    Raises: ImportError when the ``mcp`` SDK is not installed."""
    import anyio  # noqa: PLC0415 (the MCP SDK's runtime: optional (perfledger[mcp]))
    from mcp.server.lowlevel import Server  # noqa: PLC0415 (the MCP SDK: optional (perfledger[mcp]))

    tools = Tools(ledger_path, actor, commands)
    listing = [
        types.Tool(name=name, description=text, input_schema=schema)
        for name, text, schema in tools.listing()
    ]

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listing)

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        arguments = dict(params.arguments or {})
        # the ledger and the measurements block: keep the event loop free for the transport
        answer, is_error = await anyio.to_thread.run_sync(_result, tools, params.name, arguments)
        return types.CallToolResult(
            content=[types.TextContent(text=to_json_text(answer))],
            structured_content=answer,
            is_error=is_error,
        )

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def serve(ledger_path: str | None, actor: str, commands: click.Group | None = None) -> None:
    """Serve the tools over stdin/stdout until the client closes the connection (``commands``:
    the CLI's root group, :class:`Tools`).

    Raises: BadRequest (exit 2) when the ``mcp`` SDK is not installed."""
    try:
        import anyio  # noqa: PLC0415 (the MCP SDK's runtime: optional (perfledger[mcp]))
        from mcp.server.stdio import stdio_server  # noqa: PLC0415 (the MCP SDK: optional (perfledger[mcp]))
    except ImportError:
        raise BadRequest(
            "perfledger mcp needs the MCP SDK", hint="pip install 'perfledger[mcp]'"
        ) from None
    server = build_server(ledger_path, actor, commands)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
