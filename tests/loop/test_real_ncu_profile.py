"""The loop on a real H200 ncu profile of the naive transpose (tests/loop/fixtures): the
catalog's metrics are found under their real names, the derived store sectors per request shows
the strided writes (32), and the R24 checks and the strict-priority proposer work on them."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_helpers import RUN, close_body, do, setup_body

from perfledger.api import Ledger
from perfledger.commands.loop.rules import propose_selection
from perfledger.errors import RuleRefused
from perfledger.events import catalog as cat
from perfledger.kernels.loop.measure import LAUNCHES_METRIC, profile_from_ncu_csv

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_raw_transpose_v0_h200.csv"


def _profile() -> dict:
    catalog, _, _ = cat.load_default_catalog()
    return profile_from_ncu_csv(FIXTURE, "2025.3.1.0", catalog, "transpose", grouping="en_US")


def test_every_catalog_metric_is_found_in_a_real_h200_report() -> None:
    catalog, _, _ = cat.load_default_catalog()
    profile = _profile()
    assert profile["limitations"] == []
    assert set(cat.catalog_metric_names(catalog)) <= set(profile["metrics"])
    assert profile["metrics"][LAUNCHES_METRIC] == 1.0
    st = cat.metric_value(catalog, profile["metrics"], "perfledger__global_st_sectors_per_request")
    ld = cat.metric_value(catalog, profile["metrics"], "perfledger__global_ld_sectors_per_request")
    assert st == pytest.approx(32.0, rel=1e-3) and ld == pytest.approx(4.0)
    assert profile["units"]["gpu__time_duration.sum"] == "ns"


def test_rules_on_the_real_profile(tmp_path: Path) -> None:
    profile = _profile()
    with Ledger.init(tmp_path / "ledger", name="loop", actor="agent") as ledger:
        do(ledger, "loop.setup", setup_body())
        best = ledger.state().loop.runs[RUN].best_hash
        do(ledger, "loop.profile", {"run_id": RUN, "iteration": 1, "attempt": 0, "role": "input",
                                    "kernel_hash": best, "tool_version": profile["tool_version"],
                                    **{k: v for k, v in profile.items() if k != "tool_version"}})  # fmt: skip
        run = ledger.state().loop.runs[RUN]
        selection, analysis = propose_selection(run, 1)
        assert selection["memory"]["chosen"] == "memory.coalescing"  # 32 sectors per store
        skipped = {s["method"]: s["reason"] for s in selection["memory"]["skipped"]}
        assert skipped == {"memory.kernel_fusion": "skip_condition"}  # one launch
        # claiming that coalescing is not triggered is refused against the recorded metrics
        lie = {**selection, "memory": {"chosen": "memory.shared_memory_tiling", "skipped": [
            {"method": "memory.kernel_fusion", "reason": "skip_condition"},
            {"method": "memory.coalescing", "reason": "no_trigger"}]}}  # fmt: skip
        head = ledger.head()
        with pytest.raises(RuleRefused) as info:
            do(ledger, "loop.close-iter", close_body(1, 1, 0.5, selection=lie,
                                                     analysis=analysis + " memory.coalescing"))  # fmt: skip
        assert info.value.rule == "R24" and "perfledger__global_st_sectors_per_request" in (
            info.value.message
        )
        assert ledger.head() == head
        done = do(ledger, "loop.close-iter", close_body(1, 1, 0.5, selection=selection,
                                                        analysis=analysis))  # fmt: skip
        assert done[0].payload["status"] == "improved"
