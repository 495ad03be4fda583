"""Appending what a measuring use case measured (SPEC.md section 5): the decision through the
operation registry with its raw table attached as a JSON artifact, bound to the samples it was
measured for (R5). Shared by :mod:`perfledger.app.measure_aa`, :mod:`perfledger.app.measure_kernel`,
:mod:`perfledger.app.measure_self`, :mod:`perfledger.app.measure_serving_load` and
:mod:`perfledger.app.baseline`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.ledger.base import Artifact

#: A hook that is handed warnings as soon as a use case knows them (an adapter prints them on
#: stderr before the decision is appended, so that a refusal does not hide them).
Warn = Callable[[list[str]], None]


def no_warnings(_warnings: list[str]) -> None:
    """A :data:`Warn` that says nothing (a Python caller reads ``result.warnings``)."""


def json_artifact(data: dict[str, Any]) -> Artifact:
    """``data`` as a JSON artifact (sorted keys; what JSON cannot hold as text)."""
    return Artifact(json.dumps(data, sort_keys=True, default=str).encode(), "application/json")


def append_measured(
    ledger: Any,
    op: str,
    body: dict[str, Any],
    artifact_name: str,
    artifact: dict[str, Any],
    *,
    actor: str,
    idempotency_key: str | None,
    extra: dict[str, Any] | None = None,
) -> Any:
    """Append ``op`` with ``body`` on the open ``ledger``, ``artifact`` attached as
    ``artifact_name`` (and the ``extra`` artifacts: snapshots' files, small outputs). The raw
    table of ``samples.record`` names the samples it was measured for (R5). Returns: the first
    appended envelope. Raises: what the decider refuses (nothing appended)."""
    if op == "samples.record":  # R5: the raw table names the samples it was measured for
        artifact = {**artifact, "binding": binding_of(body)}
    envelopes = execute(
        ledger,
        op,
        body,
        actor=actor,
        idempotency_key=idempotency_key,
        artifacts={artifact_name: json_artifact(artifact), **(extra or {})},
    )
    return envelopes[0]


__all__ = ["Warn", "append_measured", "json_artifact", "no_warnings"]
