"""The original measured against itself runs from its read-only copies, as a formal stage runs
its subjects (issue 34; R4, R11, R17): ``measure aa`` (worker protocol and self-timed driver),
``measure baseline`` (self-timed and kernel, the worker protocol's being
tests/app/test_measure_baseline_protocol.py), each call from one of two copies of the snapshot
readiness recorded, each with its own bytecode cache, under the copies' guard; and the monitor's
windows of the baseline and the A/A judged (R17: too much foreign activity refuses them).

Each ``test_cheat_*`` is a subject written to get around one of these, refused with the reason
and the ledger unchanged. Real processes only where the guard must see a real call (one case,
the fewest calls the commands take); the monitor is a stand-in where the test is not about it,
so that no assertion depends on the shared host's load."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from wf_legacy import before_reported
from wf_scenario import record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.app import measure_aa as aa_module
from perfledger.app import measure_baseline as baseline_module
from perfledger.app import measure_workload
from perfledger.app.baseline import MeasureBaseline, measure_baseline
from perfledger.app.identity import readiness_edge
from perfledger.app.measure_aa import RESOLUTION_ARTIFACT, MeasureAA, measure_aa
from perfledger.app.measure_workload import foreign_windows_refusal, held
from perfledger.commands.registry.operations import execute
from perfledger.errors import RuleRefused
from perfledger.kernels.isolation import isolated
from subprocess_env import perfledger_command

#: An original under the worker protocol: inputs from the seed, its output where perfledger
#: says; ``cheat()`` runs in every call, and where each call ran is appended to $BENCH_WHERE.
WORKER = """
import json, os, random, sys
from perfledger.subject import serve
HERE = os.path.dirname(os.path.abspath(__file__))
{cheat}
def call(state, case, seed, output):
    cheat()
    rng = random.Random(f"{{case}}:{{seed}}")
    json.dump(round(sum(x * x for x in (rng.random() for _ in range(500))), 9), open(output, "w"))
    open(os.environ["BENCH_WHERE"], "a").write(HERE + "\\n")
serve(lambda: None, call)
"""
#: The same original under the self-timed driver: it prints its own figure (time_ms).
SELF_TIMED = """
import json, os
HERE = os.path.dirname(os.path.abspath(__file__))
{cheat}
cheat()
open(os.environ["BENCH_WHERE"], "a").write(HERE + "\\n")
print(json.dumps({{"correct": True, "metrics": {{"time_ms": [5.0]}}}}))
"""
HONEST = "def cheat():\n    pass"
#: Subjects written to get around the copies (R11), each run by every call.
CHEATS = {
    # chmod back what perfledger made read-only, then edit its own source
    "edits_its_own_source": """
def cheat():
    me = os.path.abspath(__file__)
    os.chmod(os.path.dirname(me), 0o755)
    os.chmod(me, 0o644)
    open(me, "a").write("# faster now\\n")
""",
    # data (or code) the snapshot does not hold
    "reads_a_file_outside_its_snapshot": """
def cheat():
    open(os.environ["OUTSIDE_FILE"]).read()
""",
    # a .pyc planted in the other worker's private cache, for its next import (the copies lie
    # in this test's own directory: the fixture private_tmp)
    "writes_into_the_other_workers_bytecode_cache": """
def cheat():
    root = os.environ["PERFLEDGER_SUBJECT_ROOT"]
    parent = os.path.dirname(root)
    for name in os.listdir(parent):
        other = os.path.join(parent, name)
        if other != root and os.path.isfile(os.path.join(other, "subject", "bench.py")):
            open(os.path.join(other, "pycache", "bench.cpython.pyc"), "wb").write(b"planted")
""",
}


class _Verdict:
    def __init__(self, foreign: bool) -> None:
        self.foreign = foreign

    def to_json(self) -> dict[str, Any]:
        reasons = ["host_monitor", "foreign_cpu:1.50"] if self.foreign else ["host_monitor"]
        return {"observed": True, "foreign_activity": self.foreign, "reasons": reasons,
                "foreign_cores": 1.5 if self.foreign else 0.0}  # fmt: skip


class StandInMonitor:
    """A monitor whose every window is foreign (``foreign``) or quiet: what the test is about
    is then the rule, not the shared host's load."""

    def __init__(self, foreign: bool) -> None:
        self.foreign = foreign
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1

    def settings(self) -> dict[str, Any]:
        return {"source": "stand-in"}

    def verdict(self, start_s: float, end_s: float) -> _Verdict:
        return _Verdict(self.foreign)


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The copies are made under this test's own directory (a cheat that looks for the other
    copy finds no other test's), and each call's whereabouts go to ``where.txt``."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("BENCH_WHERE", str(tmp_path / "where.txt"))
    outside = tmp_path / "outside.txt"
    outside.write_text("not in any snapshot")
    monkeypatch.setenv("OUTSIDE_FILE", str(outside))
    return tmp_path


def _monitor(monkeypatch: pytest.MonkeyPatch, foreign: bool) -> StandInMonitor:
    monitor = StandInMonitor(foreign)
    monkeypatch.setattr(measure_workload, "start_monitor", lambda *_a, **_k: (monitor, None))
    return monitor


#: The variables of :func:`private_tmp` that the subjects read.
SUBJECT_VARS = ("BENCH_WHERE", "OUTSIDE_FILE")


def _ready(root: Path, source: str, *, primary: str) -> tuple[Path, str]:
    """A ledger whose Target's readiness snapshotted ``original/bench.py`` (``source``), its
    baseline of ``primary`` measured (a stand-in table) where ``primary`` is reported. Returns
    (ledger path, the original's command)."""
    original = root / "original"
    original.mkdir()
    (original / "bench.py").write_text(source)
    observed = primary in ("wall_time", "cpu_time")
    env = machine_environment(tools=True)
    argv = [sys.executable, "{subject}/bench.py"] + (["--out", "{output}"] if observed else [])
    path = root / "ledger"
    with Ledger.init(path, name="c", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "sum of squares", "min_effect": 0.05,
            "primary": {"name": primary, "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["bench.py"], "risk_boundary": "none",
            "budget": {"wall_s": 600.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
        body, files = readiness_edge(ledger, {
            "target_id": "t1",
            "original": {"content_hash": "sha256:" + "0" * 16, "subject": str(original)},
            "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["small"]},
            "accuracy_rule": "exact",
            **({"accuracy": {"compare": "exact"}} if observed else {}),
            # the variables the subjects read, declared (a subject gets no other of the
            # caller's: R11's closed environment)
            "driver": {"argv": argv, "env": {name: os.environ[name] for name in SUBJECT_VARS}},
            "environment": env["readiness_environment"],
        })  # fmt: skip
        # a primary the subject reports is made ready as an older perfledger did (R5 refuses
        # such a readiness since ReadinessRecorded 6): the self-timed driver's Targets
        with contextlib.nullcontext() if observed else before_reported("ReadinessRecorded"):
            execute(ledger, "readiness.record", body, actor="agent", artifacts=files)
    words = [w.replace("{subject}", str(original)) for w in argv]
    return path, " ".join(words)


def _head(path: Path) -> str:
    with Ledger.open(path) as ledger:
        return str(ledger.head())


def _record_baseline(path: Path) -> None:
    """A measured baseline (the A/A's precondition, R4), from a stand-in table."""
    with Ledger.open(path) as ledger:
        target = ledger.state().targets["t1"]
        assert target.readiness is not None
        record_measured_baseline(ledger, {
            "target_id": "t1", "original_hash": target.readiness.original.content_hash,
            "metric": target.definition.primary.name, "unit": "ms", "values": [5.0, 5.1, 4.9],
            "environment_id": target.readiness.environment_id,
        })  # fmt: skip


def _aa(path: Path, cmd: str, **over: Any) -> Any:
    with Ledger.open(path) as ledger:
        request = MeasureAA(target_id="t1", cmd=cmd, runs=2, accept_resolution=True,
                            actor="agent", **over)  # fmt: skip
        return measure_aa(ledger, request)


# ----------------------------------------------------------------------------- the A/A


@pytest.mark.slow
def test_r11_workload_aa_runs_both_workers_from_copies_with_environments_recorded(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cmd = _ready(private_tmp, WORKER.format(cheat=HONEST), primary="wall_time")
    _record_baseline(path)
    monitor = _monitor(monkeypatch, foreign=False)
    done = _aa(path, cmd, record=True)
    assert done.recorded and monitor.stopped
    ran_from = set((private_tmp / "where.txt").read_text().split())
    assert len(ran_from) == 2 and str(private_tmp / "original") not in ran_from  # two copies
    with Ledger.open(path) as ledger:
        table = json.loads(ledger.artifact(done.event_id, RESOLUTION_ARTIFACT))
        digest = ledger.state().targets["t1"].readiness.original.snapshot.digest
    settings = table["settings"]
    assert settings["subject_copies"] == {"ref": digest, "cand": digest}
    assert set(settings["call_environment"]) >= {"ref", "cand"}
    assert len(table["monitor"]["windows"]) == len([r for r in table["table"]
                                                    if not r["warmup"]]) // 2  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_cheat_workload_aa_subject_that_gets_around_its_copy_is_refused(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch, cheat: str
) -> None:
    path, cmd = _ready(private_tmp, WORKER.format(cheat=CHEATS[cheat]), primary="wall_time")
    _record_baseline(path)
    _monitor(monkeypatch, foreign=False)
    head = _head(path)
    with pytest.raises(RuleRefused) as refused:
        _aa(path, cmd, record=True)
    assert refused.value.rule == "R11", refused.value.message
    expected = {
        "edits_its_own_source": "read-only copy the",
        "reads_a_file_outside_its_snapshot": "outside.txt",
        "writes_into_the_other_workers_bytecode_cache": "private bytecode cache",
    }[cheat]
    assert expected in refused.value.message
    source = WORKER.format(cheat=CHEATS[cheat])
    assert (private_tmp / "original" / "bench.py").read_text() == source  # never in place
    assert _head(path) == head


@pytest.mark.slow
def test_cheat_self_timed_aa_that_reads_outside_its_snapshot_is_refused(
    private_tmp: Path,
) -> None:
    """The self-timed driver's A/A runs each call from a copy too (a process per call: each
    call's bootstrap reports what it read); before, it ran the original in place."""
    source = SELF_TIMED.format(cheat=CHEATS["reads_a_file_outside_its_snapshot"])
    path, cmd = _ready(private_tmp, source, primary="time_ms")
    _record_baseline(path)
    head = _head(path)
    with pytest.raises(RuleRefused) as refused:
        _aa(path, cmd, record=True)
    assert refused.value.rule == "R11" and "outside.txt" in refused.value.message
    assert str(private_tmp / "original") not in (private_tmp / "where.txt").read_text()
    assert _head(path) == head


def test_r11_aa_of_other_code_than_the_original_is_refused_before_anything_runs(
    private_tmp: Path,
) -> None:
    path, _cmd = _ready(private_tmp, WORKER.format(cheat=HONEST), primary="wall_time")
    _record_baseline(path)
    other = private_tmp / "other"
    other.mkdir()
    (other / "bench.py").write_text(WORKER.format(cheat=HONEST) + "# faster, somehow\n")
    head = _head(path)
    with pytest.raises(RuleRefused) as refused:
        _aa(path, f"{sys.executable} {other}/bench.py --out {{output}}", record=True)
    assert refused.value.rule == "R11" and "bench.py" in refused.value.message
    assert not (private_tmp / "where.txt").exists() and _head(path) == head


@pytest.mark.slow
def test_cheat_aa_measured_while_another_process_loads_the_host_is_not_recorded(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An A/A measured under load reads slow, and its medians are the reference watch's
    yardstick (R11): a later reference slowed on purpose stays under it. The monitor saw the
    load in every window (a stand-in: the rule, not the host's load, is under test), so
    recording is refused with the figures (R17) and measuring alone says so."""
    path, cmd = _ready(private_tmp, WORKER.format(cheat=HONEST), primary="wall_time")
    _record_baseline(path)
    _monitor(monkeypatch, foreign=True)
    head = _head(path)
    with pytest.raises(RuleRefused) as refused:
        _aa(path, cmd, record=True)
    message = refused.value.message
    assert refused.value.rule == "R17" and "foreign activity in 2 of 2 A/A pair windows" in message
    assert "foreign cores 1.50 to 1.50" in message and "nothing was recorded" in message
    assert _head(path) == head
    measured = _aa(path, cmd)  # not recorded: measured, and the warning says what --record does
    assert not measured.recorded
    assert any("R17" in w and "with --record" in w for w in measured.warnings)


# ----------------------------------------------------------------------------- the baseline


@pytest.mark.slow
def test_cheat_self_timed_baseline_that_reads_outside_its_snapshot_is_refused(
    private_tmp: Path,
) -> None:
    source = SELF_TIMED.format(cheat=CHEATS["reads_a_file_outside_its_snapshot"])
    path, cmd = _ready(private_tmp, source, primary="time_ms")
    head = _head(path)
    with pytest.raises(RuleRefused) as refused, Ledger.open(path) as ledger:
        measure_baseline(ledger, MeasureBaseline(target_id="t1", cmd=cmd, calls=1, actor="agent"))
    assert refused.value.rule == "R11" and "outside.txt" in refused.value.message
    assert str(private_tmp / "original") not in (private_tmp / "where.txt").read_text()
    assert _head(path) == head


@pytest.mark.slow
def test_self_timed_baseline_records_its_copy_and_its_calls_environment(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cmd = _ready(private_tmp, SELF_TIMED.format(cheat=HONEST), primary="time_ms")
    _monitor(monkeypatch, foreign=False)  # R17's windows: tests/app/test_self_timed_monitor.py
    with Ledger.open(path) as ledger:
        done = measure_baseline(
            ledger, MeasureBaseline(target_id="t1", cmd=cmd, calls=2, actor="agent")
        )
        table = json.loads(ledger.artifact(done.event_id, "baseline.json"))
        digest = ledger.state().targets["t1"].readiness.original.snapshot.digest
    assert done.values == 2
    assert table["settings"]["subject_copies"] == {"original": digest}
    recorded = table["settings"]["call_environment"]["original"]
    assert recorded["PYTHONPYCACHEPREFIX"].startswith("blake3:")  # its private cache
    ran_from = (private_tmp / "where.txt").read_text().split()
    assert len(ran_from) == 2 and str(private_tmp / "original") not in ran_from


@pytest.mark.slow
def test_cheat_baseline_measured_while_a_cpu_burner_runs_is_refused(
    private_tmp: Path,
) -> None:
    """A baseline measured while a process of the agent's keeps a core busy: the real host
    monitor sees it in every window (one core and more, the threshold a quarter of one), and
    the baseline is refused with the figures (R17), nothing recorded. The measurement runs as a
    user runs it, in its own ``perfledger`` process: the burner is not one of its descendants
    (a child of the measuring process is the measurement's own, or an orphan it ends)."""
    path, cmd = _ready(private_tmp, WORKER.format(cheat=HONEST), primary="cpu_time")
    head = _head(path)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        done = subprocess.run(
            [*perfledger_command(), "--ledger", str(path), "measure", "baseline", "--target",
             "t1", "--cmd", cmd, "--calls", "2", "--actor", "agent", "--json"],
            capture_output=True, text=True, cwd=private_tmp,
        )  # fmt: skip
    finally:
        burner.kill()
        burner.wait()
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    message = error["message"]
    assert error["rule"] == "R17" and "of 1 baseline pair windows" in message
    assert "foreign_cpu:" in message and "nothing was recorded" in message
    assert _head(path) == head


@pytest.mark.parametrize("measurement", ["baseline", "aa"])
def test_cheat_kernel_original_whose_worker_edits_its_directory_is_refused(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch, measurement: str
) -> None:
    """A kernel Target bound to code: the baseline's (and the A/A's) harness workers each run
    in a copy of their own (two copies, neither the original's directory), and a worker that
    edits the directory it runs in is refused before the next comparison (R11), nothing
    recorded. The harness is a stand-in (no GPU here): what is under test is where it runs and
    the guard."""
    original = private_tmp / "orig"
    original.mkdir()
    (original / "spec.py").write_text("PROBLEMS = {}\n")
    env = machine_environment(tools=True)
    path = private_tmp / "ledger"
    with Ledger.init(path, name="k", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "kernel", "min_effect": 0.01,
            "primary": {"name": "kernel_time_us", "unit": "us",
                        "direction": "lower_is_better", "statistic": "median"},
            "scope": ["spec.py"], "risk_boundary": "none",
            "budget": {"wall_s": 600.0, "gpu_s": 60.0},
        }, actor="agent")  # fmt: skip
        body, files = readiness_edge(ledger, {
            "target_id": "t1",
            "original": {"content_hash": "sha256:" + "0" * 16, "subject": str(original)},
            "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["n"]},
            "accuracy_rule": "the harness's tolerances",
            "driver": {"argv": ["{subject}/spec.py"]},
            "environment": env["readiness_environment"],
        })  # fmt: skip
        execute(ledger, "readiness.record", body, actor="agent", artifacts=files)
    ran_in: list[tuple[str, str]] = []

    def harness(spec: str, case: str, *, directories: Any, **_: Any) -> Any:
        ran_in.append(directories)
        spec_file = Path(directories[1]) / spec
        spec_file.parent.chmod(0o755)
        spec_file.chmod(0o644)
        spec_file.write_text("PROBLEMS = {}  # faster now\n")  # the candidate worker's edit
        ok = SimpleNamespace(ok=True)
        return SimpleNamespace(ref=SimpleNamespace(recheck_failures=0), ref_correctness=ok,
                               flags=[], table=lambda: [{"ref_s": 1e-4}])  # fmt: skip

    monkeypatch.setattr(isolated, "compare_spec", harness)
    monkeypatch.setattr(isolated, "spec_facts", lambda *_a, **_k: {"cases": ["n"]})
    monkeypatch.setattr(baseline_module, "ceilings", lambda: None)
    monkeypatch.setattr(aa_module, "ceilings", lambda: None)
    head = _head(path)
    with pytest.raises(RuleRefused) as refused, Ledger.open(path) as ledger:
        if measurement == "baseline":
            measure_baseline(ledger, MeasureBaseline(target_id="t1", directory=str(original),
                                                     calls=2, actor="agent"))  # fmt: skip
        else:
            measure_aa(ledger, MeasureAA(target_id="t1", directory=str(original), runs=2,
                                         record=True, actor="agent"))  # fmt: skip
    assert refused.value.rule == "R11" and "read-only copy the" in refused.value.message
    [(ref_dir, cand_dir)] = ran_in  # refused before the second comparison
    assert ref_dir != cand_dir and str(original) not in (ref_dir, cand_dir)
    assert (original / "spec.py").read_text() == "PROBLEMS = {}\n"
    assert _head(path) == head


# ----------------------------------------------------------------------------- the rules


def _windows(foreign: int, total: int) -> list[dict[str, Any]]:
    return [{"foreign_activity": i < foreign, "foreign_cores": 0.9 if i < foreign else 0.0,
             "reasons": ["host_monitor"] + (["foreign_cpu:0.90"] if i < foreign else [])}
            for i in range(total)]  # fmt: skip


def test_r17_original_windows_refused_beyond_the_formal_share_whatever_the_readiness() -> None:
    assert foreign_windows_refusal(_windows(2, 10), "baseline") is None  # 20 %
    refusal = foreign_windows_refusal(_windows(3, 10), "baseline")
    assert refusal is not None and refusal.rule == "R17"
    assert "3 of 10 baseline pair windows (30 % > 20 %; foreign cores 0.90 to 0.90" in (
        refusal.message
    )
    assert "quieter host" in refusal.hint and "no readiness setting waives" in refusal.hint
    assert "allow_explained_foreign_activity" not in refusal.hint
    assert foreign_windows_refusal(_windows(10, 10), "A/A") is not None  # no waiver any more
    assert foreign_windows_refusal([], "A/A") is None  # no monitor, no windows


def test_held_releases_the_monitor_and_the_copies_however_the_block_ends() -> None:
    monitor = StandInMonitor(foreign=False)
    copies = SimpleNamespace(closed=0)
    copies.close = lambda: setattr(copies, "closed", copies.closed + 1)
    with pytest.raises(RuntimeError), held(monitor, copies):
        raise RuntimeError("a call failed")
    assert monitor.stopped == 1 and copies.closed == 1
    with held(None, None):  # nothing held: nothing to release
        pass
