"""Outputs compared by perfledger keep the reference's form (R5; SPEC.md section 5, "Workload
driver"): under ``allclose`` too, an array must have the reference's dtype (precision and byte
order) and shape, an archive its names, a JSON document its structure; a mismatch is an
accuracy failure with the reason. Checks recorded under ``outputs_v1`` are re-made by that
rule."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest

from perfledger.derive import outputs
from perfledger.kernels.workload.driver import Subject, run_pairs

WORKLOAD = Path(__file__).resolve().parent / "output_workload.py"
LOOSE = {"compare": "allclose", "rtol": 1e-2, "atol": 1e-2}


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, value)
    return buf.getvalue()


def _npz(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


REF = np.linspace(1.0, 2.0, 12, dtype=np.float32)


@pytest.mark.parametrize(
    "cand",
    [
        REF.astype(np.float16),  # precision downgrade, values within the tolerance
        REF.astype(np.float64),  # precision change the other way
        REF.astype(">f4"),  # byte-swapped copy of the same values
        np.round(REF).astype(np.int32),  # numbers of another kind
    ],
    ids=["float16", "float64", "big-endian", "int32"],
)
def test_allclose_refuses_an_array_of_another_dtype_whatever_its_values(cand: np.ndarray) -> None:
    reason = outputs.compare(_npy(REF), _npy(cand), "allclose", rtol=1.0, atol=1.0)
    assert "dtype" in reason and REF.dtype.str in reason and cand.dtype.str in reason


def test_allclose_refuses_another_shape_and_an_archive_member_of_another_dtype() -> None:
    assert "shape" in outputs.compare(_npy(REF), _npy(REF.reshape(3, 4)), "allclose", 1.0, 1.0)
    assert "shape" in outputs.compare(_npy(REF[:1]), _npy(REF[0]), "allclose", 1.0, 1.0)
    ref = _npz(x=REF, y=np.ones(2))
    reason = outputs.compare(
        ref, _npz(x=REF.astype(np.float16), y=np.ones(2)), "allclose", 1.0, 1.0
    )
    assert "array 'x'" in reason and "dtype" in reason


def test_allclose_accepts_the_same_dtype_within_tolerance_and_json_keeps_its_structure() -> None:
    assert outputs.compare(_npy(REF), _npy(REF * np.float32(1.001)), "allclose", 1e-2, 0) == ""
    assert "list in the candidate" in outputs.compare(
        b'{"a": 1.0}', b'{"a": [1.0]}', "allclose", 1, 1
    )
    assert "keys" in outputs.compare(b'{"a": 1.0}', b'{"a": 1.0, "b": 2}', "allclose", 1, 1)
    assert "items" in outputs.compare(b"[1.0, 2.0]", b"[1.0]", "allclose", 1, 1)
    assert "str in the candidate" in outputs.compare(b"[1.0]", b'["1.0"]', "allclose", 1, 1)


def test_checks_recorded_under_outputs_v1_are_rejudged_by_their_own_rule() -> None:
    ref, cand = _npy(REF), _npy(REF.astype(np.float16))
    assert outputs.rejudge(ref, cand, "allclose", 1e-2, 1e-2, outputs.METHOD_V1) is True
    assert outputs.rejudge(ref, cand, "allclose", 1e-2, 1e-2) is False
    assert outputs.METHOD != outputs.METHOD_V1
    with pytest.raises(ValueError, match="unknown output comparison method"):
        outputs.compare(ref, cand, "allclose", method="outputs_v0")


@pytest.mark.slow
def test_a_candidate_writing_float16_fails_its_accuracy_check_through_the_driver() -> None:
    argv = [sys.executable, str(WORKLOAD), "--out", "{output}", "--seed", "{seed}", "--case",
            "{case}", "--work-s", "0"]  # fmt: skip
    run = run_pairs(
        Subject("ref", argv), Subject("cand", [*argv, "--mode", "downcast"]), cases=["a"],
        pairs_per_case=1, warmup_calls=0, timeout_s=60, accuracy=LOOSE,
    )  # fmt: skip
    (pair,) = run.pairs
    assert pair.ref.correct and not pair.cand.correct and pair.cand.self_correct is True
    assert "dtype <f2" in pair.cand.output["reason"]
    assert pair.cand.output["method"] == outputs.METHOD == run.settings["outputs"]["method"]
