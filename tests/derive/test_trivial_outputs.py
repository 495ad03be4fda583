"""R5: an accuracy rule is checked against what the reference wrote
(perfledger.derive.outputs.trivial_output_passes): a rule under which an output that does no
work (zeros, a constant, the reference's rows reordered) passes cannot judge a candidate."""

from __future__ import annotations

import io
import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from perfledger.derive.outputs import compare, trivial_output_passes


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def test_a_tolerance_wider_than_the_outputs_accepts_zeros() -> None:
    softmax = np.random.default_rng(1).random((8, 5))
    softmax /= softmax.sum(axis=1, keepdims=True)
    ref = _npy(softmax)
    assert "zeros" in trivial_output_passes(ref, "allclose", 0.0, 1.0)  # red37's atol
    assert "zeros" in trivial_output_passes(ref, "allclose", 1.0, 0.0)  # rtol 1: |0-x| <= |x|
    assert trivial_output_passes(ref, "allclose", 1e-7, 1e-9) == ""
    assert trivial_output_passes(ref, "exact", 0.0, 0.0) == ""


def test_rows_in_another_order_and_a_constant_reference_are_caught() -> None:
    # nearly a palindrome: its rows reversed are within 0.2 of it, zeros and its mean are not
    rows = np.repeat(np.array([10.0, 20.0, 20.1, 10.1])[:, None], 3, axis=1)
    assert "reverse" in trivial_output_passes(_npy(rows), "allclose", 0.0, 0.2)
    assert trivial_output_passes(_npy(rows), "allclose", 0.0, 0.05) == ""
    constant = np.full((4, 3), 0.25)  # the inputs make no difference to the output
    assert "mean" in trivial_output_passes(_npy(constant), "exact", 0.0, 0.0)
    assert "zeros" in trivial_output_passes(json.dumps([0.0, 0.0]).encode(), "exact", 0.0, 0.0)
    assert trivial_output_passes(json.dumps({"sum": 3.25}).encode(), "allclose", 0.0, 1e-6) == ""


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=2, min_side=2, max_side=6),
        elements=st.floats(1.0, 1e3),
        unique=True,
    )
)
def test_property_an_exact_rule_on_distinct_values_accepts_no_trivial_output(
    array: np.ndarray,
) -> None:
    ref = _npy(array)
    assert trivial_output_passes(ref, "exact", 0.0, 0.0) == ""
    # and the check agrees with the comparison itself: zeros differ under the rule
    assert compare(ref, _npy(np.zeros_like(array)), "exact") != ""
