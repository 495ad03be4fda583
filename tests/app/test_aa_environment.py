"""R11: a formal stage runs under the influencing variables its Target's A/A ran under
(:mod:`perfledger.app.aa_environment`): the A/A's medians are the reference watch's yardstick,
and an A/A measured under a variable that slows every Python process would read slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_measure_workload import _request, _setup, bench  # noqa: F401 (a fixture)
from wf_scenario import AA_TABLE, measured_resolution, target_aa_rows

from perfledger.api import Ledger
from perfledger.app.aa_environment import check_aa_environment, environment_difference
from perfledger.app.measure_workload import measure_workload
from perfledger.commands.registry.operations import execute
from perfledger.errors import RuleRefused
from perfledger.kernels.workload.subject_env import influencing_environment
from perfledger.ledger.base import Artifact


def _aa_under(ledger: Ledger, environment: dict[str, str]) -> None:
    """A measured A/A whose raw table records ``environment`` as its settings' (as
    ``perfledger measure aa --record`` writes it)."""
    body, artifacts = measured_resolution(ledger, "t1", rows=target_aa_rows(ledger, "t1"))
    table = json.loads(artifacts[AA_TABLE].data)
    table["settings"] = {"environment": environment}
    raw = json.dumps(table, sort_keys=True).encode()
    execute(ledger, "resolution.record", body, actor="agent",
            artifacts={AA_TABLE: Artifact(raw, "application/json")})  # fmt: skip


def test_environment_difference_names_each_variable_set_differently() -> None:
    assert environment_difference({"A": "1", "B": "2"}, {"A": "1", "B": "2"}) == []
    assert environment_difference({"PYTHONTRACEMALLOC": "25"}, {"OMP_NUM_THREADS": "4"}) == [
        "OMP_NUM_THREADS (A/A: unset, now: 4)",
        "PYTHONTRACEMALLOC (A/A: 25, now: unset)",
    ]


def test_python_settings_are_influencing_variables() -> None:
    assert "PYTHONTRACEMALLOC" in influencing_environment({"PYTHONTRACEMALLOC": "25"})


@pytest.mark.slow
def test_cheat_an_aa_measured_under_tracemalloc_refuses_the_target_stage(
    tmp_path: Path,
    bench: Path,  # noqa: F811
) -> None:
    """The A/A ran with ``PYTHONTRACEMALLOC=25`` (20x slower in a hostile review, which made
    the watch's yardstick 20x too slow); the target stage, run without it, is refused before
    anything runs, naming the variable, and the ledger is unchanged. Screens are not
    concerned; the same A/A environment as now passes."""
    path = tmp_path / "ledger"
    _setup(path, bench, primary="cpu_time")
    with Ledger.open(path) as ledger:
        _aa_under(ledger, {**influencing_environment(), "PYTHONTRACEMALLOC": "25"})
        head = ledger.head()
        with pytest.raises(RuleRefused) as refused:
            measure_workload(ledger, _request(bench, stage="target", monitor="host"))
        assert refused.value.rule == "R11"
        assert "PYTHONTRACEMALLOC (A/A: 25, now: unset)" in refused.value.message
        assert ledger.head() == head
        target = ledger.state().targets["t1"]
        check_aa_environment(ledger, target, "screen")  # the watch reads formal stages only
        _aa_under(ledger, influencing_environment())  # honest: the same settings
        check_aa_environment(ledger, ledger.state().targets["t1"], "target")
