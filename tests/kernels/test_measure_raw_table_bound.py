"""R5: samples that claim to be measured by perfledger must be what their attached raw table
holds, re-derived, and the table must be bound to them (samples id, stage, ...). Measured for
real (``measure workload`` on real commands, a real git ledger, the real CLI); the forgeries are
what anyone with the repository can do: the public API, or the raw store (git plumbing)."""

from __future__ import annotations

import copy
import json
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_measure_cli import SELF, _cli, _experiment, _record_resolution, _setup

from perfledger.api import Ledger
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import _prepare, decider, execute, validate
from perfledger.commands.workflow.requests import dump
from perfledger.errors import RuleRefused
from perfledger.ledger.base import Artifact, EventDraft

WORKLOAD = Path(__file__).resolve().parent / "adversarial_workload.py"


def _cmd(*args: str) -> str:
    return shlex.join([sys.executable, "-S", str(WORKLOAD), *args])


def _screened(tmp: Path) -> tuple[Path, dict[str, Any], dict[str, Artifact]]:
    """A ledger whose e1 screen was measured honestly; returns it, the screen's request body and
    the artifacts of its event."""
    ledger = tmp / "ledger"
    _setup(ledger, cases=("small",))
    _record_resolution(ledger)
    _experiment(ledger)
    _cli(ledger, tmp, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
         "--ref", _cmd("--work-s", "0.2"), "--cand", _cmd("--work-s", "0.1"), "--case", "small",
         "--pairs", "5", "--warmup", "0", "--quiet", "--no-monitor", "--samples", "e1-screen")  # fmt: skip
    with Ledger.open(ledger) as opened:
        event_id = opened.state().samples["e1-screen"].event_id
        envelope = opened.store.get_event(event_id)
        arts = {
            name: Artifact(opened.store.read_artifact(event_id, name), ref.media_type)
            for name, ref in envelope.artifacts.items()
        }
        body = copy.deepcopy(envelope.request["body"])
    return ledger, body, arts


Screened = tuple[Path, dict[str, Any], dict[str, Artifact]]


@pytest.fixture(scope="module")
def screened(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Screened]:
    """:func:`_screened` measured once for the module: each test gets its own copy of the
    ledger (in its ``tmp_path``) and of the body, as if it had measured the screen itself."""
    ledger, body, arts = _screened(tmp_path_factory.mktemp("screened"))

    def copy_to(tmp: Path) -> Screened:
        own = tmp / "ledger"
        shutil.copytree(ledger, own, symlinks=True)
        return own, copy.deepcopy(body), dict(arts)

    return copy_to


def _inflate_ref(body: dict[str, Any]) -> dict[str, Any]:
    """The reference's times 4x (and its wall time, to keep the wall-clock check consistent)."""
    body = copy.deepcopy(body)
    for pair in body["pairs"]:
        pair["ref"]["wall_s"] += 3 * sum(pair["ref"]["values"]["time_ms"]) / 1e3
        pair["ref"]["values"]["time_ms"] = [4 * v for v in pair["ref"]["values"]["time_ms"]]
    return body


def _plant(ledger: Path, body: dict[str, Any], arts: dict[str, Artifact]) -> str:
    """Append SamplesRecorded for ``body`` through the raw store, past the deciders (what git
    plumbing with recomputed ids can do); returns the event id."""
    model = validate("samples.record", body)
    with Ledger.open(ledger) as opened:
        # the payload the decider derives from the request (the forger runs it too)
        prepared = _prepare(opened, "samples.record", body, "forger", None, None)
        assert isinstance(prepared, tuple)
        request, ctx = prepared
        payload = decider("samples.record")(opened.state(), request, ctx)[0].payload
        draft = EventDraft("SamplesRecorded", payload, "forger",
                           request={"op": "samples.record", "body": dump(model)},
                           artifacts=arts)  # fmt: skip
        return opened.store.append(draft).id


@pytest.mark.slow
def test_r5_refuses_forged_samples_carrying_the_raw_table_of_other_samples(
    tmp_path: Path,
    screened: Callable[[Path], Screened],
) -> None:
    ledger, body, arts = screened(tmp_path)
    forged = {**_inflate_ref(body), "samples_id": "e1-screen-b"}
    forged_arts = dict(arts)
    with Ledger.open(ledger) as opened, pytest.raises(RuleRefused) as refused:
        before = opened.store.count()
        execute(opened, "samples.record", forged, actor="forger", artifacts=forged_arts)
    assert refused.value.rule == "R5"
    # the table is bound to e1-screen, so the binding is the first difference found
    assert "measured for other samples" in refused.value.message
    with Ledger.open(ledger) as opened:
        assert opened.store.count() == before


@pytest.mark.slow
def test_r5_refuses_a_raw_table_reused_for_another_stage(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    moved = {**body, "samples_id": "e1-target", "stage": "target"}
    with Ledger.open(ledger) as opened, pytest.raises(RuleRefused) as refused:
        execute(opened, "samples.record", moved, actor="forger", artifacts=arts)
    assert refused.value.rule == "R5" and "stage: table 'screen'" in refused.value.message


@pytest.mark.slow
def test_r5_refuses_values_unlike_the_raw_table_even_with_a_rebound_table(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    table = json.loads(arts["samples.json"].data)
    table["binding"]["samples_id"] = "e1-screen-b"  # rebinding is easy; the values are not
    rebound = {**arts, "samples.json": Artifact(json.dumps(table).encode(), "application/json")}
    forged = {**_inflate_ref(body), "samples_id": "e1-screen-b"}
    with Ledger.open(ledger) as opened, pytest.raises(RuleRefused) as refused:
        execute(opened, "samples.record", forged, actor="forger", artifacts=rebound)
    assert refused.value.rule == "R5" and "values of 'time_ms' differ" in refused.value.message
    # dropping a round of the table is refused too (no slow round can be left out)
    dropped = {**body, "samples_id": "e1-screen-b", "pairs": body["pairs"][1:]}
    with Ledger.open(ledger) as opened, pytest.raises(RuleRefused) as refused:
        execute(opened, "samples.record", dropped, actor="forger", artifacts=rebound)
    assert "round 0" in refused.value.message
    # the untouched pairs with their rebound table are accepted
    honest = {**body, "samples_id": "e1-screen-b"}
    with Ledger.open(ledger) as opened:
        execute(opened, "samples.record", honest, actor="agent", artifacts=rebound)


@pytest.mark.slow
def test_r5_audit_finds_planted_samples_unlike_their_raw_table(
    tmp_path: Path, screened: Callable[[Path], Screened]
) -> None:
    ledger, body, arts = screened(tmp_path)
    table = json.loads(arts["samples.json"].data)
    table["binding"]["samples_id"] = "e1-screen-b"
    rebound = {**arts, "samples.json": Artifact(json.dumps(table).encode(), "application/json")}
    planted = _plant(ledger, {**_inflate_ref(body), "samples_id": "e1-screen-b"}, rebound)
    reused = _plant(ledger, {**body, "samples_id": "e1-screen-c"}, arts)
    with Ledger.open(ledger) as opened:
        report = audit(opened)
    found = {f.event_id: f for f in report.findings}
    assert found[planted].rule == "R5" and "values of 'time_ms' differ" in found[planted].message
    assert found[reused].rule == "R5" and "measured for other samples" in found[reused].message
    assert not report.ok
    honest = [f for f in report.findings if f.event_id not in (planted, reused)]
    assert honest == [], [msgspec.to_builtins(f) for f in honest]
    rc = _cli(ledger, tmp_path, "audit", check=False).returncode
    assert rc == 5
