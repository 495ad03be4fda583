"""R5: samples of ``measure kernel`` are re-derived from their raw table (per case, the harness's
per-pair rows, one recorded pair per batch, in the samples' unit). The table and the pairs are
built here the way ``perfledger measure kernel`` builds them (no GPU needed to check the rule)."""

from __future__ import annotations

import copy
import json
from typing import Any

from perfledger.commands.workflow.raw_table import binding_of, raw_table_mismatch

SCALE_MS = 1e3


def _measured(batch: int = 4, n_pairs: int = 10) -> tuple[dict[str, Any], bytes]:
    """A ``measure kernel`` body (unit ms) and its raw table, for two cases."""
    cases, pairs = [], []
    for c, case in enumerate(("a", "b")):
        ref_s = [1e-5 * (1 + 0.01 * i + c) for i in range(n_pairs)]
        cand_s = [0.8 * v for v in ref_s]
        rows = [{"pair": i, "order": "AB", "input_set": 0, "ref_s": r, "cand_s": k,
                 "ref_wall_s": r, "cand_wall_s": k} for i, (r, k) in enumerate(zip(ref_s, cand_s, strict=True))]  # fmt: skip
        for b, start in enumerate(range(0, n_pairs, batch)):
            side = {"call_id": f"{case}-b{b}", "correct": True, "environment_id": "env"}
            pairs.append({"case": case, "same_process": True,
                          "ref": {**side, "values": {"time_ms": [v * SCALE_MS for v in ref_s[start:start + batch]]}},
                          "cand": {**side, "values": {"time_ms": [v * SCALE_MS for v in cand_s[start:start + batch]]}}})  # fmt: skip
        cases.append({"case": case, "rows": rows, "settings": {"harness": {"batch": batch}}})
    body = {"samples_id": "e1-target-1", "target_id": "t1", "experiment_id": "e1",
            "stage": "target", "candidate_hash": "sha256:1", "test_set_hash": "sha256:a",
            "environment_id": "env", "units": {"time_ms": "ms"}, "pairs": pairs}  # fmt: skip
    table = {"kind": "kernel", "cases": cases, "binding": binding_of(body)}
    return body, json.dumps(table, sort_keys=True).encode()


def test_r5_kernel_samples_equal_to_their_raw_table_are_accepted() -> None:
    body, raw = _measured()
    assert raw_table_mismatch(body, raw, bound=True) is None


def test_r5_kernel_samples_with_altered_times_or_a_dropped_batch_are_found() -> None:
    body, raw = _measured()
    slower_ref = copy.deepcopy(body)
    slower_ref["pairs"][2]["ref"]["values"]["time_ms"][0] *= 1.5
    assert "pair 2 ref: values differ" in (raw_table_mismatch(slower_ref, raw, bound=True) or "")
    dropped = {**body, "pairs": body["pairs"][1:]}
    assert "batches" in (raw_table_mismatch(dropped, raw, bound=True) or "")
    other_unit = {**body, "units": {"time_ms": "us"}}  # the same numbers claimed in another unit
    found = raw_table_mismatch(other_unit, raw, bound=False) or ""
    assert "values differ" in found


def test_r5_a_kernel_raw_table_bound_to_other_samples_is_found() -> None:
    body, raw = _measured()
    other = {**body, "samples_id": "e2-target-1", "experiment_id": "e2"}
    found = raw_table_mismatch(other, raw, bound=True) or ""
    assert "measured for other samples" in found and "experiment_id" in found
    unbound = json.dumps({k: v for k, v in json.loads(raw).items() if k != "binding"}).encode()
    assert "no binding" in (raw_table_mismatch(body, unbound, bound=True) or "")
    assert raw_table_mismatch(body, unbound, bound=False) is None  # an older schema: values only


def test_r5_kernel_provenance_settings_must_be_the_raw_tables() -> None:
    body, raw = _measured()
    body["provenance"] = {"source": "perfledger", "protocol": "kernel_harness_abba",
                          "settings": {"cases": ["a", "b"], "config": {"batch": 4},
                                       "isolation": "process"},
                          "raw_table": "samples.json"}  # fmt: skip
    assert raw_table_mismatch(body, raw, bound=True, checks=True) is None
    other = copy.deepcopy(body)
    other["provenance"]["settings"]["config"] = {"batch": 2}
    assert "harness config differs" in (
        raw_table_mismatch(other, raw, bound=True, checks=True) or ""
    )
    other = copy.deepcopy(body)
    other["provenance"]["settings"]["cases"] = ["a"]
    assert "cases differ" in (raw_table_mismatch(other, raw, bound=True, checks=True) or "")
    other = copy.deepcopy(body)
    other["provenance"]["protocol"] = "workload_abba"  # a kernel table under another protocol
    found = raw_table_mismatch(other, raw, bound=True, checks=True) or ""
    assert "of kind 'kernel'" in found
    assert raw_table_mismatch(other, raw, bound=True) is None  # older schemas: not checked
