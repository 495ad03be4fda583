"""The measure commands' parsed options as their use cases' requests (SPEC.md section 5): one
mapping from the option names of ``perfledger measure workload|kernel|aa|serving|baseline`` to
the request each use case takes, shared by the CLI and the MCP server's ``cli ["measure", ...]``
(which parses the same options in its process).

``options`` is click's dict of a command's parameters; ``actor`` names who records from the
``--actor`` given (the CLI's :func:`perfledger.app.actors.resolve_actor` on its ledger), asked
only where the request records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from perfledger.app.baseline import MeasureBaseline
from perfledger.app.command_lines import refuse_explain_foreign
from perfledger.app.measure_aa import MeasureAA
from perfledger.app.measure_kernel import MeasureKernel
from perfledger.app.measure_self import MeasureWorkloadStage
from perfledger.app.measure_serving_load import MeasureServing
from perfledger.errors import BadRequest

#: ``--actor``'s value -> who records. Raises: BadRequest for an empty one or no one known.
ActorOf = Callable[[str | None], str]


def units_of(pairs: Sequence[str]) -> dict[str, str]:
    """``--unit NAME=UNIT`` items as ``{name: unit}``. Raises: BadRequest for an item that is
    not NAME=UNIT."""
    out = {}
    for item in pairs:
        name, sep, unit = item.partition("=")
        if not sep or not name or not unit:
            raise BadRequest(f"--unit {item!r}: expected NAME=UNIT", hint="e.g. --unit time_ms=ms")
        out[name] = unit
    return out


def workload_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureWorkloadStage:
    """``measure workload``'s options as :class:`MeasureWorkloadStage` (R5, R11, R17).
    Raises: BadRequest for ``--explain-foreign`` (R17), a bad ``--unit`` or actor."""
    refuse_explain_foreign(kw.get("explain_foreign"))
    return MeasureWorkloadStage(
        experiment_id=kw["experiment_id"], stage=kw["stage"], ref=kw["ref_cmd"],
        cand=kw["cand_cmd"], protocol=kw["protocol"], cases=kw["cases"], pairs=kw["pairs"],
        warmup=kw["warmup"], timeout_s=kw["timeout_s"], units=units_of(kw["unit_flags"]),
        fresh_worker=kw["fresh_worker"],
        monitor="none" if kw["no_monitor"] else kw["monitor_source"],
        samples_id=kw["samples_id"], dry_run=kw["dry_run"], actor=actor(kw["actor"]),
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def kernel_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureKernel:
    """``measure kernel``'s options as :class:`MeasureKernel` (R5, R11). Raises: BadRequest
    for a bad actor."""
    return MeasureKernel(
        experiment_id=kw["experiment_id"], stage=kw["stage"], spec=kw["spec_path"],
        ref_dir=kw["ref_dir"], cand_dir=kw["cand_dir"], samples_id=kw["samples_id"],
        monitor=not kw["no_monitor"], dry_run=kw["dry_run"], actor=actor(kw["actor"]),
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def aa_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureAA:
    """``measure aa``'s options as :class:`MeasureAA` (R4; the actor asked only with
    ``--record``). Raises: BadRequest for a bad actor."""
    return MeasureAA(
        target_id=kw["target_id"], cmd=kw["cmd"], spec=kw["spec_path"],
        directory=kw["kernel_dir"], cases=kw["cases"], runs=kw["runs"],
        timeout_s=kw["timeout_s"], record=kw["record"],
        accept_resolution=kw["accept_resolution"],
        actor=actor(kw["actor"]) if kw["record"] else None,
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def baseline_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureBaseline:
    """``measure baseline``'s options as :class:`MeasureBaseline` (R4). Raises: BadRequest for
    a bad actor."""
    return MeasureBaseline(
        target_id=kw["target_id"], cmd=kw["cmd"], spec=kw["spec_path"],
        directory=kw["kernel_dir"], cases=kw["cases"], calls=kw["calls"],
        timeout_s=kw["timeout_s"], dry_run=kw["dry_run"], actor=actor(kw["actor"]),
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def serving_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureServing:
    """``measure serving``'s options as :class:`MeasureServing` (R5, R12, R17; the actor asked
    only where it records: ``--experiment`` or ``--evidence``). Raises: BadRequest for
    ``--explain-foreign`` (R17), a bad actor or option."""
    options = dict(kw)
    refuse_explain_foreign(options.pop("explain_foreign", None))
    for adapter_only in ("json_flag", "quiet"):
        options.pop(adapter_only, None)
    if options.pop("no_monitor"):
        options["monitor_source"] = "none"
    options["monitor"] = options.pop("monitor_source")
    options["metrics"] = options.pop("metric_flags")
    if options["experiment_id"] is not None or options["evidence_id"] is not None:  # it records
        options["actor"] = actor(options["actor"])
    return msgspec.convert(options, MeasureServing)


__all__ = [
    "ActorOf",
    "aa_request_of",
    "baseline_request_of",
    "kernel_request_of",
    "serving_request_of",
    "units_of",
    "workload_request_of",
]
