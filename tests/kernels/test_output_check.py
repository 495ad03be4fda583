"""The workload driver judges outputs itself (SPEC.md section 5, "Workload driver"; R5): a
candidate's output is compared in the measuring process with the reference's output of the same
pair, so a command whose own accuracy check is rigged is incorrect all the same. Real processes
(``output_workload.py``), no mocks; each cheat has an honest control beside it."""

from __future__ import annotations

import io
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from perfledger.derive import outputs as derive_outputs
from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.driver import DriverRun, Subject, run_pairs

WORKLOAD = Path(__file__).resolve().parent / "output_workload.py"
EXACT = {"compare": "exact"}


def _argv(*extra: str) -> list[str]:
    return [sys.executable, str(WORKLOAD), "--out", "{output}", "--seed", "{seed}",
            "--case", "{case}", *extra]  # fmt: skip


def _run(cand: list[str], ref: list[str] | None = None, accuracy: dict | None = None,
         pairs: int = 5) -> DriverRun:  # fmt: skip
    run = run_pairs(
        Subject("ref", _argv(*(ref or []))), Subject("cand", _argv(*cand)), cases=["a"],
        pairs_per_case=pairs, warmup_calls=0, timeout_s=60, accuracy=accuracy or EXACT,
    )  # fmt: skip
    assert not run.failed_calls, [(c.call_id, c.message, c.stderr_tail) for c in run.failed_calls]
    return run


#: Pairs where every call is judged alike and the time is not under test: two pairs (each side
#: called twice, in both orders) show the judgement on more than one call at a fraction of the
#: cost of R12's five (each call starts a Python that imports NumPy).
JUDGED_PAIRS = 2


def _npy(value: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, value)
    return buf.getvalue()


# ---------------------------------------------------------------- cheats


@pytest.mark.slow
def test_cheat_candidate_that_claims_correct_with_wrong_output_is_incorrect() -> None:
    run = _run(["--mode", "wrong"], pairs=JUDGED_PAIRS)
    for pair in run.pairs:
        assert pair.cand.self_correct is True  # what it said
        assert pair.cand.correct is False  # what the driver found
        assert pair.cand.output is not None and not pair.cand.output["ok"]
        assert "differ from the reference's exactly" in pair.cand.output["reason"]
        assert pair.ref.correct and pair.ref.output["ok"]  # the reference is not blamed


@pytest.mark.slow
def test_cheat_int_subclass_eq_always_true_is_caught() -> None:
    run = _run(["--mode", "int_eq"], accuracy={"compare": "allclose", "rtol": 1e-6, "atol": 0.0},
               pairs=JUDGED_PAIRS)  # fmt: skip
    assert all(p.cand.self_correct is True and p.cand.correct is False for p in run.pairs)
    assert "within rtol=1e-06" in run.pairs[0].cand.output["reason"]


@pytest.mark.slow
def test_cheat_candidate_writing_the_reference_output_file_of_an_earlier_call(
    tmp_path: Path,
) -> None:
    # the candidate copies any output an earlier call left, else replays its own first output;
    # each call's place is private and removed once read, and each pair has a fresh seed
    run = _run(["--mode", "steal", "--cache", str(tmp_path / "first.npy")], pairs=6)
    later = run.pairs[1:]
    assert all(not p.cand.correct for p in later), [p.cand.output for p in later]
    assert all(p.cand.self_correct for p in later)
    seeds = [p.ref.seed for p in run.pairs]
    assert len(set(seeds)) == len(seeds)  # no two pairs draw the same inputs
    assert all(p.cand.seed == p.ref.seed for p in run.pairs)  # both calls the same inputs


def test_an_output_place_is_private_fresh_and_removed_once_read() -> None:
    first, second = outputs.OutputPlace(), outputs.OutputPlace()
    assert first.directory != second.directory
    assert oct(Path(first.directory).stat().st_mode & 0o777) == "0o700"
    Path(first.path + ".npy").write_bytes(_npy(np.arange(3.0)))
    read = first.collect()
    assert read.data is not None and read.size == len(read.data)
    assert not Path(first.directory).exists()
    assert "wrote no output" in second.collect().error and not Path(second.directory).exists()


def test_an_output_written_after_the_clock_never_counts() -> None:
    # inside the clock only the bytes are read (read_bytes); the listing after it (finish) sees
    # a second file written late, and a first one written late does not make a missing one
    late_beside, late_only = outputs.OutputPlace(), outputs.OutputPlace()
    try:
        Path(late_beside.path).write_bytes(b"[1.0]")
        inside = late_beside.read_bytes()
        assert inside.data == b"[1.0]" and inside.blake3 is None  # digested after the clock
        Path(late_beside.path + ".npy").write_bytes(_npy(np.arange(3.0)))
        assert "several outputs" in late_beside.finish(inside).error
        inside = late_only.read_bytes()
        Path(late_only.path + ".json").write_bytes(b"[1.0]")
        assert "wrote no output" in late_only.finish(inside).error
        Path(late_only.path + ".json").unlink()
        Path(late_only.path).write_bytes(b"[2.0]")
        read = late_only.finish(late_only.read_bytes())
        assert read.data == b"[2.0]" and read.blake3 == outputs.read_output(late_only.path).blake3
    finally:
        late_beside.remove()
        late_only.remove()


@pytest.mark.slow
def test_cheat_candidate_writing_no_output_is_incorrect() -> None:
    run = _run(["--mode", "nothing"], pairs=JUDGED_PAIRS)
    assert all(not p.cand.correct for p in run.pairs)
    assert "wrote no output" in run.pairs[0].cand.output["reason"]


@pytest.mark.slow
def test_output_larger_than_the_limit_is_an_incorrect_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outputs, "OUTPUT_MAX_BYTES", 4_000)
    run = _run(["--n", "1000"], ref=["--n", "10"], pairs=1)  # 8 kB of float64, and 80 bytes
    assert run.pairs[0].ref.correct
    assert not run.pairs[0].cand.correct and "more than the" in run.pairs[0].cand.output["reason"]


@pytest.mark.slow
def test_cheat_named_pipe_at_the_output_path_is_incorrect_and_does_not_block() -> None:
    started = time.monotonic()
    run = _run(["--mode", "fifo"], pairs=1)
    assert time.monotonic() - started < 30
    assert not run.pairs[0].cand.correct
    assert "not a regular file" in run.pairs[0].cand.output["reason"]


def test_output_symlink_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.npy"
    target.write_bytes(_npy(np.zeros(2)))
    (tmp_path / "output").symlink_to(target)
    read = outputs.read_output(str(tmp_path / "output"))
    assert read.data is None and "cannot be opened" in read.error


@pytest.mark.slow
def test_reference_without_output_is_the_references_failure() -> None:
    run = _run([], ref=["--mode", "nothing"], pairs=1)
    pair = run.pairs[0]
    assert not pair.ref.correct and "wrote no output" in pair.ref.output["reason"]
    assert "nothing to compare with" in pair.cand.output["reason"]


# ---------------------------------------------------------------- honest controls


@pytest.mark.slow
def test_honest_candidate_with_identical_output_is_correct_and_small_outputs_are_kept() -> None:
    run = _run([], accuracy=EXACT)
    assert all(p.ref.correct and p.cand.correct for p in run.pairs)
    out = run.pairs[0].cand.output
    assert out["method"] == derive_outputs.METHOD and out["compare"] == "exact"
    assert out["blake3"] == run.pairs[0].ref.output["blake3"] and out["size"] > 8000
    assert out["stored"] in run.outputs  # 8 kB: kept for an auditor
    assert run.settings["outputs"]["accuracy"] == EXACT


@pytest.mark.slow
def test_output_within_tolerance_passes_allclose_but_not_exact() -> None:
    close = _run(["--mode", "noise"], accuracy={"compare": "allclose", "rtol": 1e-6, "atol": 0},
                 pairs=JUDGED_PAIRS)  # fmt: skip
    assert all(p.cand.correct for p in close.pairs)
    exact = _run(["--mode", "noise"], accuracy=EXACT, pairs=1)
    assert not exact.pairs[0].cand.correct


@pytest.mark.slow
def test_real_regression_with_correct_output_is_still_measured() -> None:
    run = _run(["--work-s", "0.25"], ref=["--work-s", "0.05"])
    assert all(p.cand.correct for p in run.pairs)
    assert all(p.cand.metrics["time_ms"][0] > p.ref.metrics["time_ms"][0] + 100 for p in run.pairs)


@pytest.mark.slow
def test_json_outputs_are_compared_by_the_rule() -> None:
    run = _run(["--json"], ref=["--json"], pairs=1)
    assert run.pairs[0].cand.correct
    wrong = _run(["--json", "--mode", "wrong"], ref=["--json"], pairs=1)
    assert not wrong.pairs[0].cand.correct and "$.cumsum[" in wrong.pairs[0].cand.output["reason"]


def test_one_subject_declaring_output_and_the_other_not_is_refused() -> None:
    with pytest.raises(ValueError, match="both subjects or neither"):
        run_pairs(Subject("ref", _argv()), Subject("cand", ["true"]), cases=["a"],
                  accuracy=EXACT)  # fmt: skip
    with pytest.raises(ValueError, match="accuracy rule that compares"):
        run_pairs(Subject("ref", _argv()), Subject("cand", _argv()), cases=["a"])


# ---------------------------------------------------------------- the comparison rule


def test_nan_is_never_equal_to_nan() -> None:
    a = _npy(np.array([1.0, np.nan]))
    b = _npy(np.array([1.0, np.nan]))
    assert "differ" in derive_outputs.compare(a, b, "exact")
    assert "differ" in derive_outputs.compare(a, b, "allclose", rtol=1.0, atol=1.0)
    assert "NaN is never equal" in derive_outputs.compare(b"[NaN]", b"[NaN]", "exact")


def test_exact_needs_the_same_shape_dtype_and_json_types() -> None:
    assert "shape" in derive_outputs.compare(_npy(np.zeros(3)), _npy(np.zeros(4)), "exact")
    assert "dtype" in derive_outputs.compare(
        _npy(np.zeros(3)), _npy(np.zeros(3, np.float32)), "exact"
    )
    assert derive_outputs.compare(b'{"a": [1, 2.5]}', b'{"a": [1, 2.5]}', "exact") == ""
    assert "bool in the candidate" in derive_outputs.compare(b"[1]", b"[true]", "exact")
    assert "keys" in derive_outputs.compare(b'{"a": 1}', b'{"b": 1}', "exact")
    assert "inf" not in derive_outputs.compare(
        _npy(np.array([np.inf])), _npy(np.array([np.inf])), "exact"
    )


def test_npz_archives_compare_every_named_array() -> None:
    def npz(**arrays: np.ndarray) -> bytes:
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        return buf.getvalue()

    ref = npz(x=np.arange(3.0), y=np.ones(2))
    assert derive_outputs.compare(ref, npz(x=np.arange(3.0), y=np.ones(2)), "exact") == ""
    assert "array 'y'" in derive_outputs.compare(ref, npz(x=np.arange(3.0), y=np.zeros(2)), "exact")
    assert "arrays" in derive_outputs.compare(ref, npz(x=np.arange(3.0)), "exact")


def test_npz_that_inflates_beyond_the_limit_and_deep_json_are_unreadable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, x=np.zeros(100_000))  # ~1 kB on disk, 800 kB inflated
    monkeypatch.setattr(derive_outputs, "NPZ_MAX_INFLATED_BYTES", 100_000)
    assert "inflates to" in derive_outputs.compare(buf.getvalue(), buf.getvalue(), "exact")
    deep = b"[" * 100_000 + b"]" * 100_000
    assert "unreadable" in derive_outputs.compare(deep, deep, "exact")


def test_identical_outputs_holding_nan_do_not_match() -> None:
    same = derive_outputs.Output(_npy(np.array([np.nan])), "ab" * 32, 136)
    assert "differ" in derive_outputs.judge_pair(same, same, "allclose", 1e-3, 1e-3)


def test_unreadable_output_and_object_arrays_are_mismatches() -> None:
    assert "candidate's output is unreadable" in derive_outputs.compare(
        _npy(np.zeros(2)), b"\x00garbage", "exact"
    )
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)  # would need pickle
    assert "reference's output is unreadable" in derive_outputs.compare(
        buf.getvalue(), buf.getvalue(), "exact"
    )


def _npy_header(shape: tuple[int, ...], payload: bytes = b"\0" * 32) -> bytes:
    """An .npy file whose header declares ``shape`` (float64) but holds only ``payload``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f8", "fortran_order": False, "shape": shape}
    )
    return buf.getvalue() + payload


def test_cheat_npy_header_declaring_a_huge_array_is_unreadable_not_a_crash() -> None:
    # numpy allocates what the header declares before reading: 8 TiB, or 64 GiB it then
    # cannot fill; the measuring process must not die (or swap) for a candidate's header
    ref = _npy(np.zeros(4))
    for shape in [(2**40,), (2**33,), (2**20, 2**20)]:
        reason = derive_outputs.compare(ref, _npy_header(shape), "exact")
        assert "candidate's output is unreadable" in reason and "declares" in reason, reason
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("x.npy", _npy_header((2**40,)))
    reference = io.BytesIO()
    np.savez(reference, x=np.zeros(4))
    reason = derive_outputs.compare(reference.getvalue(), zipped.getvalue(), "exact")
    assert "candidate's output is unreadable" in reason and "declares" in reason, reason
    # an honest array is read as before
    assert derive_outputs.compare(ref, _npy(np.zeros(4)), "exact") == ""


def test_cheat_json_integer_beyond_float_range_is_judged_not_a_crash() -> None:
    huge = b"[" + b"9" * 400 + b"]"
    other = b"[" + b"9" * 399 + b"8]"
    assert derive_outputs.compare(huge, huge, "exact") == ""
    assert derive_outputs.compare(huge, huge, "allclose", 1e-5, 0.0) == ""
    assert "in the candidate" in derive_outputs.compare(huge, other, "exact")
    assert derive_outputs.compare(huge, other, "allclose", 1e-5, 0.0) == ""  # relatively 1e-400 off
    assert "in the candidate" in derive_outputs.compare(huge, b"[1.0]", "allclose", 1e-5, 0.0)
    assert "in the candidate" in derive_outputs.compare(b"[1e308]", huge, "allclose", 1e-5, 0.0)


@pytest.mark.slow
def test_cheat_subject_writing_a_lying_npy_header_fails_its_calls_and_the_run_completes(
    tmp_path: Path,
) -> None:
    liar = tmp_path / "liar.py"
    liar.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_output_check import _npy_header\n"
        "out = sys.argv[sys.argv.index('--out') + 1]\n"
        "open(out + '.npy', 'wb').write(_npy_header((2**40,)))\n"
        'print(\'{"correct": true, "metrics": {"time_ms": [1.0]}}\')\n'
    )
    run = run_pairs(
        Subject("ref", _argv()), Subject("cand", [sys.executable, str(liar), "--out", "{output}"]),
        cases=["a"], pairs_per_case=2, warmup_calls=0, timeout_s=60, accuracy=EXACT,
    )  # fmt: skip
    for pair in run.pairs:
        assert pair.cand.self_correct is True and pair.cand.correct is False
        assert "unreadable" in pair.cand.output["reason"] and pair.ref.correct
