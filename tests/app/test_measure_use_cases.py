"""The measuring use cases of the application layer as their adapters call them (issue 33): a
refusal of the options is raised by the use case, not by click; the MCP server's ``cli``
tool measures in its own process, and hands a self-timed driver's measurement to a subprocess
(its SIGCONT watch runs only on a main thread). Real git ledgers; nothing is measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from perfledger.api import Ledger
from perfledger.app.baseline import MeasureBaseline
from perfledger.app.decisions import record_decision
from perfledger.app.measure_aa import MeasureAA, measure_aa
from perfledger.app.measure_self import MeasureWorkloadStage, driver_timed
from perfledger.app.measure_serving_load import MeasureServing, measure_serving
from perfledger.errors import BadRequest, PerfledgerError


def _ledger(path: Path) -> Path:
    """A ledger with two workload Targets: ``obs`` (wall_time, perfledger observes it) and
    ``self`` (cpu_ms, the subject reports it)."""
    with Ledger.init(path, name="uc", actor="alice") as ledger:
        for target_id, metric in (("obs", "wall_time"), ("self", "cpu_ms")):
            record_decision(ledger, "target.freeze", {
                "target_id": target_id, "title": "t", "min_effect": 0.05,
                "primary": {"name": metric, "unit": "ms", "direction": "lower_is_better",
                            "statistic": "median"},
                "scope": ["src/*"], "risk_boundary": "none",
                "budget": {"wall_s": 60.0, "gpu_s": 0.0},
            }, actor="alice")  # fmt: skip
    return path


def test_driver_timed_names_the_measurements_of_the_self_timed_driver(tmp_path: Path) -> None:
    with Ledger.open(_ledger(tmp_path / "l")) as ledger:
        state = ledger.state()
    aa = {t: MeasureAA(target_id=t, cmd="python3 bench.py {case}") for t in ("obs", "self")}
    assert driver_timed(state, aa["self"]) and not driver_timed(state, aa["obs"])
    base = MeasureBaseline(target_id="self", cmd="python3 bench.py", actor="alice")
    assert driver_timed(state, base)
    # a kernel spec, an unknown Target or experiment: not the driver (the use case refuses)
    assert not driver_timed(state, MeasureAA(target_id="self", spec="spec.py"))
    assert not driver_timed(state, MeasureAA(target_id="nope", cmd="x"))
    stage = MeasureWorkloadStage(experiment_id="e9", stage="screen", ref="a", cand="b",
                                 actor="alice")  # fmt: skip
    assert not driver_timed(state, stage)


def test_option_refusals_are_the_use_cases(tmp_path: Path) -> None:
    with Ledger.open(_ledger(tmp_path / "l")) as ledger:
        head = ledger.head()
        with pytest.raises(BadRequest, match="pass exactly one of --cmd"):
            measure_aa(ledger, MeasureAA(target_id="obs", cmd="x", spec="y"))
        with pytest.raises(BadRequest, match="no Target 'nope'"):
            measure_aa(ledger, MeasureAA(target_id="nope", cmd="x"))
        assert ledger.head() == head  # nothing appended
    # a report needs no ledger; recording does, and the shape of the options comes first
    with pytest.raises(BadRequest, match="exactly one of --rate"):
        measure_serving(MeasureServing(ref_url="http://127.0.0.1:9/v1", requests_path="r"))
    with pytest.raises(BadRequest, match="go together"):
        measure_serving(MeasureServing(ref_url="http://127.0.0.1:9/v1", requests_path="r",
                                       concurrency=1, experiment_id="e1"))  # fmt: skip


def test_mcp_measures_in_process_and_hands_the_driver_to_a_subprocess(tmp_path: Path) -> None:
    pytest.importorskip("mcp_types", reason="the MCP SDK is the optional extra perfledger[mcp]")
    from perfledger.commands.cli.app import cli
    from perfledger.commands.mcp.server import Tools

    tools = Tools(str(_ledger(tmp_path / "l")), "alice", cli)
    handed: list[list[str]] = []

    def subprocess(args: list[str], stdin: str | None) -> Any:
        handed.append(args)
        return {"ran": "as a subprocess"}

    tools._subprocess = subprocess  # type: ignore[method-assign]
    # an observed primary: the use case runs here, and refuses here (no readiness, R2)
    with pytest.raises(PerfledgerError) as refused:
        tools.call("cli", {"args": ["measure", "aa", "--target", "obs", "--cmd", "x {case}"]})
    assert handed == [] and refused.value.exit_code in (2, 3)
    # the same options parsed as the CLI parses them: an unknown one is the CLI's refusal
    with pytest.raises(BadRequest, match="No such option"):
        tools.call("cli", {"args": ["measure", "aa", "--target", "obs", "--no-such"]})
    # a self-reported primary: the self-timed driver, in a process of its own
    args = ["measure", "aa", "--target", "self", "--cmd", "x {case}"]
    assert tools.call("cli", {"args": args}) == {"ran": "as a subprocess"}
    assert handed == [args]
