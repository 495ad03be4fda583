"""R5: samples that claim to be measured by perfledger also agree with what their raw table's
settings declare: the table is of its protocol's kind, the provenance's settings are the
table's, every call carries the driver's wall time (so the wall-clock check runs, R12) and each
pair's monitor verdict is its window's (R17). Measured for real (``measure workload``); the
forgeries go through the public API (``execute`` with artifacts) and the raw store."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_measure_raw_table_bound import Screened, _plant
from test_measure_raw_table_bound import screened as screened  # the module fixture

from perfledger.api import Ledger
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import execute
from perfledger.errors import RuleRefused
from perfledger.ledger.base import Artifact


def _refused(ledger: Path, body: dict[str, Any], arts: dict[str, Artifact]) -> str:
    """Record ``body`` with ``arts`` through the library; assert R5 refuses it, nothing
    appended; returns the message."""
    with Ledger.open(ledger) as opened:
        before = opened.store.count()
        with pytest.raises(RuleRefused) as refused:
            execute(opened, "samples.record", body, actor="forger", artifacts=arts)
        assert opened.store.count() == before
    assert refused.value.rule == "R5", refused.value.message
    return refused.value.message


def _renamed(body: dict[str, Any], arts: dict[str, Artifact], table: dict[str, Any] | None = None):
    """``body`` as new samples ``e1-screen-b`` with its table rebound to them."""
    table = copy.deepcopy(table if table is not None else json.loads(arts["samples.json"].data))
    table["binding"]["samples_id"] = "e1-screen-b"
    data = Artifact(json.dumps(table).encode(), "application/json")
    return {**copy.deepcopy(body), "samples_id": "e1-screen-b"}, {**arts, "samples.json": data}


@pytest.mark.slow
def test_r5_measured_calls_without_the_drivers_wall_time_are_refused(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    forged, rebound = _renamed(body, arts)
    for pair in forged["pairs"]:  # without wall_s the wall-clock check has nothing to run on
        for label in ("ref", "cand"):
            del pair[label]["wall_s"]
    assert "wall_s None" in _refused(ledger, forged, rebound)
    honest, rebound = _renamed(body, arts)
    with Ledger.open(ledger) as opened:
        execute(opened, "samples.record", honest, actor="agent", artifacts=rebound)


@pytest.mark.slow
def test_r5_provenance_settings_unlike_the_raw_tables_are_refused(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    forged, rebound = _renamed(body, arts)
    forged["provenance"]["settings"]["pairs_per_case"] = 50
    assert "settings differ" in _refused(ledger, forged, rebound)


@pytest.mark.slow
def test_r5_a_raw_table_of_no_known_kind_or_another_protocol_is_refused(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    table = json.loads(arts["samples.json"].data)
    kindless = {k: v for k, v in table.items() if k != "kind"}  # it would re-derive nothing
    forged, rebound = _renamed(body, arts, kindless)
    assert "of kind None" in _refused(ledger, forged, rebound)
    forged, rebound = _renamed(body, arts)
    forged["provenance"]["protocol"] = "my_protocol"
    assert "not one perfledger measures by" in _refused(ledger, forged, rebound)


@pytest.mark.slow
def test_r5_a_pair_monitor_verdict_the_raw_table_does_not_hold_is_refused(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)  # measured with --no-monitor: no windows
    forged, rebound = _renamed(body, arts)
    forged["pairs"][0]["monitor"] = {"observed": True, "foreign_activity": False, "flags": []}
    assert "pair 0: a monitor verdict the table does not hold" in _refused(ledger, forged, rebound)


@pytest.mark.slow
def test_r5_audit_finds_planted_samples_without_the_drivers_wall_time(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    forged, rebound = _renamed(body, arts)
    for pair in forged["pairs"]:
        del pair["cand"]["wall_s"], pair["ref"]["wall_s"]
    planted = _plant(ledger, forged, rebound)
    with Ledger.open(ledger) as opened:
        report = audit(opened)
    found = {f.event_id: f for f in report.findings}
    assert found[planted].rule == "R5" and "wall_s None" in found[planted].message
    assert [f for f in report.findings if f.event_id != planted] == []
