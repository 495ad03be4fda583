"""The measuring use case of the application layer (perfledger.app.measure_workload) on real
git ledgers and real subject processes: refusals before anything runs, samples whose values
are perfledger's own observations, a raw table the audit re-derives, self-reported figures
that decide nothing, and the rule that observed metrics are perfledger's alone (R5,
``SamplesRecorded`` schema 7)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest
from wf_legacy import before_reported
from wf_scenario import evidence, experiment, record_measured_aa, record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.app.measure_workload import MeasureWorkload, measure_original, measure_workload
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.raw_table import raw_table_mismatch
from perfledger.errors import BadRequest, MeasurementError, RuleRefused
from subprocess_env import isolated_env, perfledger_command

ORIGINAL = "sha256:" + "0" * 16
CAND = "sha256:" + "1" * 16

#: A subject speaking the worker protocol: inputs from the seed, a JSON output; ``--loops N``
#: sets its work, ``--report`` makes it report a tiny time of its own, ``--marker PATH`` writes
#: a file when it starts (to show nothing ran).
BENCH = textwrap.dedent("""
    import argparse, json, random
    from perfledger.subject import serve
    p = argparse.ArgumentParser()
    p.add_argument("--loops", type=int, default=30000)
    p.add_argument("--report", action="store_true")
    p.add_argument("--marker")
    p.add_argument("--out")
    a = p.parse_args()
    if a.marker:
        open(a.marker, "w").write("ran")
    def call(state, case, seed, output):
        rng = random.Random(f"{case}:{seed}")
        xs = [rng.random() for _ in range(1000)]
        total = 0.0
        for i in range(a.loops):
            total += xs[i % 1000] ** 2
        json.dump(round(sum(x * x for x in xs), 9), open(output, "w"))
        return {"wall_time": 1e-6} if a.report else None
    serve(lambda: None, call)
""")


def _setup(
    path: Path, bench: Path, primary: str = "wall_time", *, min_effect: float = 0.05,
    measured_baseline: bool = False, accuracy: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A workload Target (one case) ready for experiment e1: its baseline typed, or
    (``measured_baseline``) measured per case from the original's worker as ``perfledger
    measure baseline`` does."""
    env = machine_environment(tools=True)
    base: dict[str, Any] = {"values": [10.0, 11.0, 9.0]}
    if measured_baseline:
        _, base, _ = measure_original(_cmd(bench), cases=["small"], calls=7, metric=primary,
                                      unit="ms")  # fmt: skip
    driver = [sys.executable, str(bench), "--out", "{output}"]
    with Ledger.init(path, name="m", actor="agent") as ledger:
        run = lambda op, body: execute(ledger, op, body, actor="agent")  # noqa: E731
        run("target.freeze", {
            "target_id": "t1", "title": "sum of squares",
            "primary": {"name": primary, "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "min_effect": min_effect, "scope": ["src/*"], "risk_boundary": "none",
            "budget": {"wall_s": 3600.0, "gpu_s": 600.0},
        })  # fmt: skip
        run("readiness.record", {
            "target_id": "t1",
            "original": {"content_hash": ORIGINAL, "unsnapshotted": "one script, options differ"},
            "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["small"]},
            "accuracy_rule": "exact", "driver": {"argv": driver},
            "accuracy": accuracy or {"compare": "exact"},
            "environment": env["readiness_environment"],
        })  # fmt: skip
        run("metric-audit.record", {
            "target_id": "t1", "metric": primary, "numerator": "wall time", "denominator": "call",
            "unit": "ms", "source": "perfledger's clock", "reconstructed": False,
            "matches_target": True,
        })  # fmt: skip
        record_measured_baseline(ledger, {
            "target_id": "t1", "original_hash": ORIGINAL, "metric": primary, "unit": "ms",
            "environment_id": env["environment_id"], **base,
        })  # fmt: skip
        record_measured_aa(ledger, "t1")  # R4: as `measure aa --record`
        run("evidence.add", evidence())
        created = experiment("e1", candidate=CAND)
        created["candidate"]["changed_paths"] = ["src/loop.py"]
        run("experiment.create", created)
    return env


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    path = tmp_path / "bench.py"
    path.write_text(BENCH)
    return path


def _cmd(bench: Path, *extra: str) -> str:
    return shlex.join([sys.executable, str(bench), "--out", "{output}", *extra])


def _request(bench: Path, ref: tuple[str, ...] = (), cand: tuple[str, ...] = (), **kw: Any):
    kw = {"experiment_id": "e1", "stage": "screen", "monitor": "none", "pairs": 5,
          "warmup": 0, "actor": "agent", **kw}  # fmt: skip
    return MeasureWorkload(ref=_cmd(bench, *ref), cand=_cmd(bench, *cand), **kw)


def _cli(path: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*perfledger_command(), "--ledger", str(path), *args], capture_output=True, text=True,
        env=isolated_env(tmp), timeout=300,
    )  # fmt: skip


def _head(path: Path) -> str:
    with Ledger.open(path) as ledger:
        return str(ledger.head())


@pytest.mark.slow
def test_records_observed_samples_that_audit_clean_and_derive_a_verdict(
    tmp_path: Path, bench: Path
) -> None:
    path = tmp_path / "ledger"
    _setup(path, bench, primary="cpu_time")  # the kernel's accounting: no waits for a core
    with Ledger.open(path) as ledger:
        result = measure_workload(
            ledger, _request(bench, ("--loops", "60000"), ("--loops", "3000"))
        )
        assert result.event_id is not None and result.pairs_recorded == 5
        assert result.protocol == "worker/v1" and result.fresh_worker is False
        payload = ledger.payload(result.event_id)
        assert payload.provenance.protocol == "worker/v1"
        assert payload.wall_check is None  # its values are perfledger's clock
        raw = json.loads(ledger.artifact(result.event_id, "samples.json"))
        assert raw["kind"] == "worker" and raw["binding"]["samples_id"] == "e1-screen-1"
        rows = {row["call_id"]: row for row in raw["table"]}
        for pair in payload.pairs:
            assert set(pair.ref.values) == {"cpu_time"}
            cpu_s = rows[pair.ref.call_id]["cpu_s"]
            assert pair.ref.values["cpu_time"][0] == pytest.approx(cpu_s * 1e3)
            assert pair.cand.correct and pair.cand.output.ok
    verdict = _cli(path, tmp_path, "verdict", "record", "--samples", "e1-screen-1", "--json")
    assert verdict.returncode == 0, verdict.stderr
    primary = json.loads(verdict.stdout)["payload"]["primary"]
    assert primary["status"] == "pass" and primary["estimate"] > 0.5, primary  # screens: R11
    audit = _cli(path, tmp_path, "audit", "--json")
    assert json.loads(audit.stdout)["ok"] is True, audit.stdout


@pytest.mark.slow
def test_cheat_reported_times_are_kept_as_reported_and_decide_nothing(
    tmp_path: Path, bench: Path
) -> None:
    """A candidate doing the reference's work that reports a microsecond: its samples hold
    perfledger's clock only, and the verdict is not a pass."""
    path = tmp_path / "ledger"
    _setup(path, bench)
    with Ledger.open(path) as ledger:
        result = measure_workload(ledger, _request(bench, (), ("--report",)))
        assert result.cases["small"].reported == {"cand": {"wall_time": 1e-6}}
        payload = ledger.payload(result.event_id)
        assert all(p.cand.values["wall_time"][0] > 0.5 for p in payload.pairs)  # ms, observed
    verdict = _cli(path, tmp_path, "verdict", "record", "--samples", "e1-screen-1", "--json")
    primary = json.loads(verdict.stdout)["payload"]["primary"]
    assert primary["status"] != "pass" and primary["estimate"] < 0.5, primary


@pytest.mark.slow
def test_cheat_wrong_outputs_are_incorrect_calls(tmp_path: Path, bench: Path) -> None:
    path = tmp_path / "ledger"
    _setup(path, bench)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "import json\nfrom perfledger.subject import serve\n"
        "serve(lambda: None, lambda s, case, seed, out: json.dump(1.0, open(out, 'w')))\n"
    )
    with Ledger.open(path) as ledger:
        request = msgspec.structs.replace(
            _request(bench), cand=shlex.join([sys.executable, str(wrong), "--out", "{output}"])
        )
        result = measure_workload(ledger, request)
        assert result.cases["small"].cand_incorrect == 5
        assert any(line.startswith("note accuracy") for line in result.findings)
        payload = ledger.payload(result.event_id)
        assert payload.cand_failures == 5


@pytest.mark.slow
def test_cheat_accuracy_rule_accepting_outputs_that_do_no_work_refuses_formal_stages(
    tmp_path: Path, bench: Path
) -> None:
    """The agent's own readiness declares a tolerance under which any output passes (red37's
    attack I: atol 1.0 on a softmax); a candidate that computes nothing is then "correct". The
    run sees that zeros pass the rule against the reference's own output: a screen records
    with a FLAG finding, a formal stage is refused (R5) and records no samples (its started
    run stays in the ledger, a formal stage that did not pass: R14)."""
    path = tmp_path / "ledger"
    _setup(path, bench, accuracy={"compare": "allclose", "rtol": 0.0, "atol": 1e9})
    lazy = tmp_path / "lazy.py"
    lazy.write_text(
        "import json\nfrom perfledger.subject import serve\n"
        "serve(lambda: None, lambda s, case, seed, out: json.dump(0.0, open(out, 'w')))\n"
    )
    cand = shlex.join([sys.executable, str(lazy), "--out", "{output}"])
    with Ledger.open(path) as ledger:
        screen = measure_workload(ledger, msgspec.structs.replace(_request(bench), cand=cand))
        assert screen.cases["small"].cand_incorrect == 0  # the rule calls it correct
        assert any("FLAG accuracy: case small: an output of zeros" in f for f in screen.findings)
        target = msgspec.structs.replace(_request(bench), cand=cand, stage="target", monitor="host")
        with pytest.raises(RuleRefused) as caught:
            measure_workload(ledger, target)
        assert caught.value.rule == "R5" and "do no work" in caught.value.message
        assert [s.stage for s in ledger.state().samples.values()] == ["screen"]


@pytest.mark.slow
def test_refusals_come_before_anything_runs(tmp_path: Path, bench: Path) -> None:
    """A target stage before its screen (R11, from the decider previewed on a stand-in), a
    formal stage without a monitor (R17), a Target whose primary the subject reports: each
    refused with the ledger unchanged and no subject process started."""
    path = tmp_path / "ledger"
    _setup(path, bench)
    marker = tmp_path / "marker"
    before = _head(path)
    with Ledger.open(path) as ledger:
        with pytest.raises(RuleRefused) as caught:
            measure_workload(ledger, _request(bench, ("--marker", str(marker)), stage="target",
                                              monitor="host"))  # fmt: skip
        assert caught.value.rule == "R11" and "screen before target" in caught.value.message
        with pytest.raises(RuleRefused) as caught:
            measure_workload(ledger, _request(bench, ("--marker", str(marker)),
                                              stage="final_audit"))  # fmt: skip
        assert caught.value.rule in ("R11", "R17")
    assert not marker.exists() and _head(path) == before
    other = tmp_path / "other"
    with before_reported("ReadinessRecorded"):  # a reported primary: made ready as before
        _setup(other, bench, primary="time_ms")
    with Ledger.open(other) as ledger, pytest.raises(BadRequest) as refused:
        measure_workload(ledger, _request(bench, ("--marker", str(marker))))
    assert "reports" in refused.value.message and not marker.exists()


@pytest.mark.slow
def test_a_worker_that_fails_the_protocol_records_nothing(tmp_path: Path, bench: Path) -> None:
    path = tmp_path / "ledger"
    _setup(path, bench)
    dies = tmp_path / "dies.py"
    dies.write_text("import sys\nprint('cannot load', file=sys.stderr)\nsys.exit(2)\n")
    before = _head(path)
    with Ledger.open(path) as ledger, pytest.raises(MeasurementError) as caught:
        request = msgspec.structs.replace(
            _request(bench), cand=shlex.join([sys.executable, str(dies), "--out", "{output}"])
        )
        measure_workload(ledger, request)
    assert "cannot load" in caught.value.message and "nothing was recorded" in caught.value.message
    assert _head(path) == before


def test_r5_observed_primary_takes_no_typed_or_self_timed_samples(
    tmp_path: Path, bench: Path
) -> None:
    """Under SamplesRecorded schema 7: a hand-written table of an observed primary is refused,
    and so is a self-timed driver's table that carries an observed metric's values."""
    path = tmp_path / "ledger"
    env = _setup(path, bench)

    def side(call_id: str, v: float) -> dict[str, Any]:
        return {
            "call_id": call_id,
            "correct": True,
            "values": {"wall_time": [v]},
            "environment_id": env["environment_id"],
        }

    body = {
        "samples_id": "typed", "target_id": "t1", "experiment_id": "e1", "stage": "screen",
        "reference": {"kind": "original", "content_hash": ORIGINAL}, "candidate_hash": CAND,
        "test_set_hash": "sha256:" + "a" * 16, "environment_id": env["environment_id"],
        "units": {"wall_time": "ms"},
        "pairs": [{"case": "small", "ref": side(f"r{i}", 10.0), "cand": side(f"c{i}", 0.1),
                   "same_process": False} for i in range(5)],
    }  # fmt: skip
    with Ledger.open(path) as ledger:
        with pytest.raises(RuleRefused) as caught:
            execute(ledger, "samples.record", body, actor="agent")
        assert caught.value.rule == "R5" and "observed by perfledger" in caught.value.message
    other = tmp_path / "other"
    with before_reported("ReadinessRecorded"):  # a reported primary: made ready as before
        _setup(other, bench, primary="time_ms")
    body["units"] = {"time_ms": "ms", "wall_time": "ms"}
    for pair in body["pairs"]:
        for label in ("ref", "cand"):
            pair[label]["values"]["time_ms"] = [1.0]
    with Ledger.open(other) as ledger, pytest.raises(RuleRefused) as caught:
        execute(ledger, "samples.record", body, actor="agent")
    assert caught.value.rule == "R5" and "a subject cannot report them" in caught.value.message


def test_r5_raw_table_observed_values_must_be_the_clocks(tmp_path: Path, bench: Path) -> None:
    """The audit re-derives each value from its row's own clock: a table whose wall_s was
    edited (or a value that is not its row's wall_s) is found."""
    path = tmp_path / "ledger"
    _setup(path, bench)
    with Ledger.open(path) as ledger:
        result = measure_workload(ledger, _request(bench))
        samples = msgspec.to_builtins(ledger.payload(result.event_id))
        raw = json.loads(ledger.artifact(result.event_id, "samples.json"))
    assert raw_table_mismatch(samples, json.dumps(raw).encode(), bound=True, checks=True) is None
    row = next(r for r in raw["table"] if r["pair"] == 0 and r["subject"] == "cand")
    row["metrics"]["wall_time"] = [row["metrics"]["wall_time"][0] / 10]
    found = raw_table_mismatch(samples, json.dumps(raw).encode(), bound=True, checks=True)
    assert found is not None and "wall_time" in found
    row["metrics"]["wall_time"] = [row["wall_s"] * 1e3]
    row["cpu_s"] = "fast"
    samples["units"]["cpu_time"] = "ms"
    found = raw_table_mismatch(samples, json.dumps(raw).encode(), bound=True, checks=True)
    assert found is not None


@pytest.mark.slow
def test_cli_measure_workload_runs_the_worker_protocol_for_an_observed_target(
    tmp_path: Path, bench: Path
) -> None:
    path = tmp_path / "ledger"
    _setup(path, bench)
    done = _cli(path, tmp_path, "measure", "workload", "--experiment", "e1", "--stage", "screen",
                "--ref", _cmd(bench), "--cand", _cmd(bench, "--loops", "3000"), "--pairs", "5",
                "--warmup", "0", "--no-monitor", "--quiet", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["protocol"] == "worker/v1" and answer["pairs_recorded"] == 5
    assert answer["verdict_preview"] is not None


@pytest.mark.slow
def test_whole_command_protocol_records_one_process_per_call(tmp_path: Path, bench: Path) -> None:
    """``protocol: command``: the same subject run as one process per call (``serve`` makes
    one call from the environment), timed from spawn to exit; the audit re-derives it."""
    path = tmp_path / "ledger"
    _setup(path, bench)
    with Ledger.open(path) as ledger:
        result = measure_workload(ledger, _request(bench, protocol="command"))
        assert result.protocol == "command/v1" and result.pairs_recorded == 5
        raw = json.loads(ledger.artifact(result.event_id, "samples.json"))
        assert raw["settings"]["mode"] == "command"
    audit = _cli(path, tmp_path, "audit", "--json")
    assert json.loads(audit.stdout)["ok"] is True, audit.stdout


def test_r11_an_honest_candidates_reference_matches_its_measured_baseline(
    tmp_path: Path, bench: Path
) -> None:
    """The reference watched too (R11, ``SamplesRecorded`` schema 13): an honest candidate's
    reference in a target stage matches the original's baseline measured per case, so the
    samples carry no ``reference_slowed`` and the verdict no R11 note. The kernel's CPU
    accounting, and a minimum effect of 30 % (the bound's floor): this host is shared, and its
    load alone moved an honest reference's CPU time 22 %, and in a CI run 59 %, from an A/A
    measured seconds before (a wall-time reference more), and a second target stage to retry
    is refused (R14: one per experiment): in real processes this test checks what a flag
    carries and does, and that an unflagged run has no R11 note. The cheats are ``tests/workflow/test_reference_watch.py``
    on recorded pairs: in real processes, CPU burners a candidate leaves are refused earlier
    (its process tree's CPU between calls), and a reference slowed from outside the tree could
    not be told from this host's own load within a test."""
    path = tmp_path / "ledger"
    _setup(path, bench, primary="cpu_time", min_effect=0.3, measured_baseline=True)
    with Ledger.open(path) as ledger:
        measure_workload(ledger, _request(bench, (), ("--loops", "15000")))
        execute(ledger, "verdict.record", {"samples_id": "e1-screen-1"}, actor="agent")
        result = measure_workload(ledger, _request(bench, (), ("--loops", "15000"),
                                                   stage="target", monitor="host"))  # fmt: skip
        payload = ledger.payload(result.event_id)
        [verdict] = execute(ledger, "verdict.record", {"samples_id": result.samples_id},
                            actor="agent")  # fmt: skip
    noted = any(n.startswith("R11: the comparison") for n in verdict.payload["notes"])
    # a flag here is the shared host's load (docstring): its figures must show a reference
    # slower than the bound, and the verdict cannot pass on it; that an honest reference is
    # not flagged is decided on recorded pairs (test_reference_watch)
    for case, f in (payload.reference_slowed or {}).items():
        slower, bound = f.get("aa_slower_by", f.get("slower_by")), f.get("aa_bound", f.get("bound"))
        assert slower is not None and bound is not None and slower > bound, (case, f)
    assert noted == bool(payload.reference_slowed), (payload.reference_slowed, result.cases)
    if payload.reference_slowed:
        assert verdict.payload["status"] != "pass"


# ----------------------------------------------- R4: the A/A's default is a stopping rule


def test_r4_aa_stopping_rule_adds_pairs_until_half_the_minimum_effect(
    tmp_path: Path, bench: Path
) -> None:
    """Without ``--runs``, a workload A/A keeps measuring while its resolution is above half
    the minimum effect (a trial's default 10 pairs gave 35.88 % against a 10 % minimum effect
    and was refused): a noisy start asks for more pairs, bounded by the cap; a quiet one for
    none."""
    from wf_scenario import aa_rows

    from perfledger.app.measure_workload import AA_MAX_PAIRS, AA_MIN_BLOCK, aa_more_pairs

    _setup(tmp_path / "ledger", bench)
    with Ledger.open(tmp_path / "ledger") as ledger:
        target = ledger.state().targets["t1"]
    more = aa_more_pairs(target, ["small"])
    noisy = aa_rows(("small",), pairs=10, spread=0.2, metric="wall_time")
    wanted = more(noisy)
    assert AA_MIN_BLOCK <= wanted <= AA_MAX_PAIRS - 10
    assert more(aa_rows(("small",), pairs=10, spread=0.001, metric="wall_time")) == 0
    assert more(aa_rows(("small",), pairs=AA_MAX_PAIRS, spread=0.2, metric="wall_time")) == 0


def test_r4_aa_without_runs_records_what_its_stopping_rule_ran(tmp_path: Path, bench: Path) -> None:
    """End to end on a real worker: the A/A without ``--runs`` keeps every pair it ran in its
    table and records the rule and the pairs per case in its settings; its resolution is at
    most half the minimum effect unless the cap stopped it. A minimum effect of 50 %: this
    shared host's A/A of 1 ms calls then usually stops at its first block (10 pairs; now and then
    one more block), where at 5 % it always ran to the cap (60 pairs, each call paying the
    protocol's overhead). How many pairs the rule asks for is decided on recorded rows
    (``test_r4_aa_stopping_rule_adds_pairs_until_half_the_minimum_effect``)."""
    from perfledger.app.measure_workload import (
        AA_MAX_PAIRS,
        AA_START_PAIRS,
        AA_TARGET_SHARE,
        aa_figures,
        observed_aa,
    )

    _setup(tmp_path / "ledger", bench, min_effect=0.5)
    with Ledger.open(tmp_path / "ledger") as ledger:
        target = ledger.state().targets["t1"]
    valid, _notes, run = observed_aa(_cmd(bench, "--loops", "3000"), target=target,
                                     cases=["small"], runs=None, timeout_s=60)  # fmt: skip
    ran = run.settings["pairs_per_case"]
    assert run.settings["stopping_rule"]["pairs_per_case"] == ran
    assert AA_START_PAIRS <= ran <= AA_MAX_PAIRS and len(valid) == ran
    resolution, _ = aa_figures(target, valid)
    assert resolution <= AA_TARGET_SHARE * 0.5 or ran == AA_MAX_PAIRS
    # an explicit --runs is run as asked (no rule)
    _, _, fixed = observed_aa(_cmd(bench, "--loops", "3000"), target=target, cases=["small"],
                              runs=4, timeout_s=60)  # fmt: skip
    assert fixed.settings["pairs_per_case"] == 4 and "stopping_rule" not in fixed.settings
