"""``measure workload`` leads to what decides (R5, issue 34): with no ``--protocol`` it measures
under the worker protocol whatever the Target's primary, so a Target whose primary the subject
reports (made ready by an older perfledger) is refused before anything runs, naming the way out
(supersede it with an observed primary), instead of recording figures the subject reports,
which no verdict's champion and no final audit may rest on; the self-timed driver runs only when
asked for by name."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from test_measure_workload import BENCH, _cmd, _setup
from wf_legacy import before_reported

from perfledger.api import Ledger
from perfledger.app.measure_self import MeasureWorkloadStage, driver_timed, measure_workload_stage
from perfledger.errors import BadRequest


def test_a_reported_primary_is_refused_by_default_with_the_way_to_an_observed_one(
    tmp_path: Path,
) -> None:
    bench = tmp_path / "bench.py"
    bench.write_text(BENCH)
    path = tmp_path / "ledger"
    with before_reported("ReadinessRecorded"):  # a reported primary: made ready as before
        _setup(path, bench, primary="time_ms")
    marker = tmp_path / "marker"
    request = MeasureWorkloadStage(
        experiment_id="e1", stage="screen", ref=_cmd(bench, "--marker", str(marker)),
        cand=_cmd(bench), monitor="none", pairs=5, warmup=0, actor="agent",
    )  # fmt: skip
    with Ledger.open(path) as ledger:
        head = ledger.head()
        with pytest.raises(BadRequest) as refused:
            measure_workload_stage(ledger, request)
        assert ledger.head() == head
        state = ledger.state()
    assert "'time_ms' is a figure the subject reports" in refused.value.message
    hint = refused.value.hint or ""
    assert "perfledger target supersede" in hint and '"wall_time"' in hint
    assert "deciding nothing" in hint  # the self-timed driver is named only as what it is
    assert not marker.exists()  # nothing ran
    # the MCP server measures the default in its own process; the driver only when named
    assert driver_timed(state, request) is False
    assert driver_timed(state, msgspec.structs.replace(request, protocol="self")) is True
