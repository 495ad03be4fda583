"""The loop's use cases (perfledger.app.loop) called from Python as the CLI calls them (issue
33): the files are read and preflighted before the ledger is opened, a run is set up in process,
and a selection that breaks a rule is refused before anything is measured, the ledger's head
unchanged. Real git ledgers and the embedded CPU example (examples/loop/cpu)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.app.loop import (
    CloseIteration,
    FinalizeRun,
    LoopSetup,
    close_iteration,
    finalize_run,
    loop_setup,
)
from perfledger.errors import BadRequest, RuleRefused

CPU_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "loop" / "cpu"


def _never() -> Ledger:
    raise AssertionError("the ledger was opened before the request was checked")


def test_loop_setup_refuses_a_missing_file_and_a_driverless_stand_in_before_opening() -> None:
    missing = LoopSetup(baseline="/nonexistent/k.py", ref=str(CPU_EXAMPLE / "ref.py"),
                        dims={"M": 16, "N": 32}, actor="a")  # fmt: skip
    with pytest.raises(BadRequest, match="cannot read the baseline"):
        loop_setup(missing, open_ledger=_never)
    no_driver = LoopSetup(baseline=str(CPU_EXAMPLE / "kernel_v0.py"),
                          ref=str(CPU_EXAMPLE / "ref.py"), dims={"M": 16, "N": 32}, actor="a")  # fmt: skip
    with pytest.raises(BadRequest, match="give --driver"):
        loop_setup(no_driver, open_ledger=_never)


@pytest.mark.slow
def test_loop_use_cases_set_up_refuse_a_selection_and_finalize(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    Ledger.init(path, name="loop", actor="a").close()
    driver = f"{sys.executable} {CPU_EXAMPLE / 'subject.py'} {{kernel}} {{ref}} {{dims}} {{entry}}"
    told: list[str] = []
    done = loop_setup(
        LoopSetup(
            baseline=str(CPU_EXAMPLE / "kernel_v0.py"), ref=str(CPU_EXAMPLE / "ref.py"),
            dims={"M": 16, "N": 32}, run_id="cpu", driver=driver,
            catalog=str(CPU_EXAMPLE / "catalog.toml"), sm_arch="sm_90", actor="a",
        ),
        open_ledger=lambda: Ledger.open(path), say=told.append,
    )  # fmt: skip
    assert done.run_id == "cpu" and done.baseline_median_ms > 0 and done.sm_arch == "sm_90"
    assert told[0] == "checking the baseline's correctness ..."
    with Ledger.open(path) as ledger:
        head = ledger.head()
    methods = tmp_path / "methods.json"  # R19: one axis without a selection
    methods.write_text(json.dumps({"compute": {"chosen": "compute.vectorize"},
                                   "memory": {"chosen": "memory.in_place"}}))  # fmt: skip
    analysis = tmp_path / "analysis.md"
    analysis.write_text("compute.vectorize\n")
    request = CloseIteration(run_id="cpu", iteration=1, kernel=str(CPU_EXAMPLE / "kernel_v1.py"),
                             methods=str(methods), analysis=str(analysis), actor="a")  # fmt: skip
    with pytest.raises(RuleRefused) as refused:
        close_iteration(request, open_ledger=lambda: Ledger.open(path))
    assert refused.value.rule == "R19"
    with Ledger.open(path) as ledger:
        assert ledger.head() == head
        with pytest.raises(BadRequest, match="stop-reason"):  # a stop before the last iteration
            finalize_run(ledger, FinalizeRun(run_id="cpu", actor="a"))
        finished = finalize_run(ledger, FinalizeRun(run_id="cpu", stop_reason="enough", actor="a"))
    assert finished.best_hash == done.baseline_hash and finished.summary_md.startswith("#")
