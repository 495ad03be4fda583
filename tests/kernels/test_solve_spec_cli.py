"""``perfledger measure kernel --spec spec.json`` (host-launched ``solve`` subjects) through the
real CLI on a real ledger: a malformed spec is a bad request (exit 2) with a clear message,
before anything is built or measured, and the ledger is unchanged."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from wf_scenario import (
    TEST_SET_HASH,
    Session,
    baseline,
    evidence,
    experiment,
    metric_audit,
    readiness,
    resolution,
    target_freeze,
)

from perfledger.api import Ledger
from subprocess_env import isolated_env, perfledger_command

ARGS = [["x", "in", "float32*", ["n"]], ["y", "out", "float32*", ["n"]], ["n", "int"],
        ["stream", "stream"]]  # fmt: skip
SOURCE = 'extern "C" void solve(const float* x, float* y, int n, cudaStream_t stream) {}\n'


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A ready Target and experiment e1."""
    path = tmp_path / "ledger"
    session = Session(Ledger.init(path, name="solve", actor="agent"))
    session.run("target.freeze", target_freeze())
    session.run("evidence.add", evidence())
    session.run(
        "readiness.record",
        readiness(test_set={"hash": TEST_SET_HASH, "case_count": 1, "cases": []}),
    )
    for op, body in [("metric-audit.record", metric_audit()), ("baseline.record", baseline()),
                     ("resolution.record", resolution()), ("experiment.create", experiment())]:  # fmt: skip
        session.run(op, body)
    session.ledger.close()
    return path


def _head(path: Path) -> list[str]:
    ledger = Ledger.open(path)
    try:
        return [e.id for e in ledger.events()]
    finally:
        ledger.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"ref": "ref.py", "reference": "v0.cu"}, "missing keys ['dims']"),
        ({"ref": "ref.py", "reference": "v0.cu", "candidate": "v1.cu", "dims": {"n": 64}},
         "candidate v1.cu: the argument spec does not match solve's signature"),
        ({"ref": "ref.py", "reference": "v0.cu", "candidate": "v0.cu", "dims": {"m": 64}},
         "no value for the scalar parameter 'n'"),
        ({"ref": "ref.py", "reference": "v0.cu", "candidate": "v0.cu", "dims": {"n": 64},
          "args": [["x", "in", "float32*", ["n"]], ["y", "out", "float32*", ["n"]], ["n", "int"]]},
         "exactly one cudaStream_t"),
    ],
)  # fmt: skip
def test_a_malformed_solve_spec_is_refused_with_a_clear_message_and_no_ledger_change(
    ledger_path: Path, tmp_path: Path, spec: dict[str, object], message: str
) -> None:
    (tmp_path / "ref.py").write_text(f"ARGS = {ARGS!r}\ndef reference(x, n): return 2 * x\n")
    (tmp_path / "v0.cu").write_text(SOURCE)
    (tmp_path / "v1.cu").write_text(SOURCE.replace("const float* x", "const double* x"))
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    before = _head(ledger_path)
    out = subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger_path), "measure", "kernel", "--experiment",
         "e1", "--stage", "screen", "--spec", str(path), "--json", "--quiet"],
        capture_output=True, text=True, env={**isolated_env(tmp_path), "PERFLEDGER_ACTOR": "agent"},
        timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in json.loads(out.stdout)["error"]["message"]
    assert "Traceback" not in out.stderr
    assert _head(ledger_path) == before
