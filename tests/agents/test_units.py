"""Every ``*_s`` field holds seconds and every ``*_ms`` field milliseconds, in everything a CPU
session shows or records: the CLI's JSON answers, the read models, every event and every JSON
artifact (the samples' raw tables and monitor windows, the A/A table).

The session runs, through the real CLI as a user does, a stand-in workload under the worker
protocol whose per-call times are known: each call sleeps ``REPEATS`` times ``SLEEP_MS``
milliseconds (40 ms for the original, 20 ms for the candidate); perfledger's clock of the call
is the Target's primary ``wall_time`` (ms), and the worker reports its longest sleep as
``wall_ms`` (kept labelled reported, deciding nothing). A figure in the wrong unit is off by a
factor of 1,000 from what the sleeps make it, which the bounds below tell apart. A field that
no check knows fails the test, so a new ``*_s`` or ``*_ms`` field gets its check when it is
added. (The self-timed driver's wall-clock check, whose fields only reported times have, is not
in this session.)

A second test reads the recorded H200 session (``examples/recorded``): a CUDA-event time per
call (``ref_s``, ``cand_s``) never exceeds the host's wall time of the same call (a value in
milliseconds would, by a factor of ~1,000), and each comparison's median is one call's or one
ABBA block's (two calls') time, as its ``medians_per`` says.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from perfledger.api import Ledger
from perfledger.app.event_lookup import artifact_of, artifacts_of, show_event
from subprocess_env import isolated_env, perfledger_command, quiet_monitor_command

#: One session of real processes (calls that sleep, measured end to end) for every test.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: What one call of each subject sleeps per repeat (ms), and how many repeats a call makes.
SLEEP_MS = {"orig": 40.0, "fast": 20.0}
REPEATS = 2
#: The per-call timeout given to `measure` (seconds).
TIMEOUT_S = 30.0
BUDGET = {"wall_s": 3600.0, "gpu_s": 0.0}
#: A call's wall time: its sleeps plus a Python start-up, far below this on any host (seconds).
CALL_MAX_S = 10.0
BENCH = f"""\
import json, os, time
from perfledger.subject import serve
here = os.path.dirname(os.path.abspath(__file__))
sleep_ms = float(open(os.path.join(here, "work.txt")).read())
def call(state, case, seed, output):
    times = []
    for _ in range({REPEATS}):
        t0 = time.perf_counter()
        time.sleep(sleep_ms / 1e3)
        times.append((time.perf_counter() - t0) * 1e3)
    with open(output, "w") as out:
        json.dump({{"case": case, "seed": seed}}, out)
    return {{"wall_ms": max(times)}}
serve(lambda: None, call)
"""
#: The interpreter that runs the workload (the readiness driver names it).
PY = sys.executable
EXPLAIN = "the workload sleeps; other processes cannot shorten a sleep"


class Session:
    """A ledger driven through the real CLI in ``root`` (JSON answers kept by step)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = {**isolated_env(root), "PERFLEDGER_ACTOR": "units-agent",
                    "PERFLEDGER_DIR": str(root / "ledger")}  # fmt: skip
        self.answers: dict[str, Any] = {}
        self.timed: dict[str, float] = {}

    def cli(self, name: str, *args: str, request: dict[str, Any] | None = None) -> Any:
        # the original's baseline and A/A under a quiet stand-in monitor: this test is about
        # units, and the host's other load (a parallel test) must not refuse them (R17)
        quiet = tuple(args[:2]) in (("measure", "baseline"), ("measure", "aa"))
        argv = [*(quiet_monitor_command() if quiet else perfledger_command()), *args, "--json"]
        if request is not None:
            argv += ["--request", "-"]
        t0 = time.monotonic()
        done = subprocess.run(
            argv, input=json.dumps(request) if request is not None else None, cwd=self.root,
            env=self.env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        self.timed[name] = time.monotonic() - t0
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        self.answers[name] = json.loads(done.stdout)
        return self.answers[name]

    def explain_by_review(self, answer: dict[str, Any]) -> None:
        """R17: windows with foreign activity are explained by another actor's review, cited by
        ``activity explain`` (a typed explanation decides nothing); nothing when none."""
        event_id, samples_id = answer["event_id"], answer["samples_id"]
        pairs = self.cli(f"show {samples_id}", "show", event_id)["event"]["payload"]["pairs"]
        foreign = [
            i for i, p in enumerate(pairs) if (p.get("monitor") or {}).get("foreign_activity")
        ]
        if not foreign:
            return
        self.cli(f"review {samples_id}", "review", "record", "--actor", "reviewer", request={
            "review_id": f"rv-{samples_id}", "reviewer": "reviewer", "model_family": "human",
            "subject": "other", "subject_event": event_id, "challenge": "foreign activity",
            "response": EXPLAIN, "dissent_remains": False})  # fmt: skip
        self.cli(f"explain {samples_id}", "activity", "explain", request={
            "samples_id": samples_id, "pairs": foreign, "explanation": EXPLAIN,
            "review_id": f"rv-{samples_id}"})  # fmt: skip

    def measure(self, stage: str, *extra: str) -> Any:
        return self.cli(
            f"measure {stage}", "measure", "workload", "--experiment", "e1", "--stage", stage,
            "--samples", f"e1-{stage}", "--pairs", "5", "--warmup", "1", "--timeout-s",
            str(TIMEOUT_S), "--ref", _cmd("orig"), "--cand", _cmd("fast"), "--quiet", *extra,
        )  # fmt: skip


def _cmd(subject: str) -> str:
    """The readiness driver with ``subject``'s code directory in its place."""
    return f"{PY} work/{subject}/bench.py {{output}}"


def _run_session(root: Path) -> tuple[Session, float]:
    """The whole session, Target to handoff; returns it and its wall seconds."""
    for name, sleep in SLEEP_MS.items():
        (root / "work" / name).mkdir(parents=True)
        (root / "work" / name / "bench.py").write_text(BENCH)
        (root / "work" / name / "work.txt").write_text(f"{sleep}\n")
    s = Session(root)
    t0 = time.monotonic()
    subprocess.run([*perfledger_command(), "init", "ledger"], cwd=root, env=s.env, check=True,
                   capture_output=True)  # fmt: skip
    s.cli("target freeze", "target", "freeze", request={
        "target_id": "t1", "title": "a sleep", "min_effect": 0.1, "scope": ["work.txt"],
        "primary": {"name": "wall_time", "unit": "ms", "direction": "lower_is_better",
                    "statistic": "mean"},
        "risk_boundary": "none", "budget": BUDGET})  # fmt: skip
    env = s.cli("env", "env")
    s.cli("readiness record", "readiness", "record", request={
        "target_id": "t1", "original": {"content_hash": "sha256:orig", "subject": "work/orig"},
        "test_set": {"hash": "sha256:one-case", "case_count": 1, "cases": ["one"]},
        "accuracy_rule": "the same case and seed back: the workload only sleeps",
        "driver": {"argv": [PY, "{subject}/bench.py", "{output}"]},
        "accuracy": {"compare": "exact"},
        "environment": env["readiness_environment"],
        "statistics": {"min_pairs_per_case": 5}})  # fmt: skip
    s.cli("metric-audit record", "metric-audit", "record", request={
        "target_id": "t1", "metric": "wall_time", "unit": "ms",
        "numerator": "one call (ms, perfledger's clock)", "denominator": "one call",
        "source": "perfledger's worker protocol", "reconstructed": False,
        "matches_target": True})  # fmt: skip
    s.cli("measure baseline", "measure", "baseline", "--target", "t1", "--cmd", _cmd("orig"),
          "--timeout-s", str(TIMEOUT_S), "--quiet")  # fmt: skip
    s.cli("measure aa", "measure", "aa", "--target", "t1", "--cmd", _cmd("orig"),
          "--runs", "5", "--record", "--accept-resolution", "--timeout-s", str(TIMEOUT_S),
          "--quiet")  # fmt: skip
    s.cli("evidence add", "evidence", "add", request={
        "evidence_id": "ev", "layer": "workload", "target_id": "t1",
        "tool": {"name": "reading bench.py", "version": "1"},
        "facts": [{"name": "sleep_share", "value": 1.0, "unit": "ratio"}]})  # fmt: skip
    s.cli("experiment create", "experiment", "create", request={
        "experiment_id": "e1", "target_id": "t1", "title": "sleep half as long",
        "candidate": {"subject": "work/fast", "label": "work/fast"},
        "claim": {"evidence": [
            {"evidence_id": "ev", "applicability": "same_boundary", "used_for": "coverage"},
            {"evidence_id": "ev", "applicability": "conservative_upper_bound",
             "used_for": "local_speedup"}],
            "scope": {"replaced_region": "the sleep", "shapes": ["one"],
                      "execution_form": "time.sleep"},
            "replacement_boundary": "one call", "coverage": 1.0, "local_speedup": 2.0,
            "expected_improvement": {"low": 1 / 3, "high": 0.5}},
        "preregistration": {"rejects": "implementation"}})  # fmt: skip
    s.measure("screen", "--no-monitor")
    s.cli("verdict screen", "verdict", "record", "--samples", "e1-screen")
    s.explain_by_review(s.measure("target", "--monitor", "host"))
    s.cli("verdict target", "verdict", "record", "--samples", "e1-target")
    s.cli("champion select", "champion", "select", "--target", "t1", "--samples", "e1-target",
          "--expected-current", "original")  # fmt: skip
    s.explain_by_review(s.measure("final_audit", "--monitor", "host"))
    s.cli("final-audit record", "final-audit", "record", "--target", "t1", "--samples",
          "e1-final_audit")  # fmt: skip
    s.cli("handoff record", "handoff", "record", "--target", "t1", "--stop-reason", "done",
          "--gpu-used", "0", "--feedback", "none")  # fmt: skip
    for name, args in {
        "status": ("status",), "state": ("state",), "target show": ("target", "show"),
        "experiment show": ("experiment", "show", "e1"), "champion show": ("champion", "show",
        "t1"), "claims": ("claims",), "handoff": ("handoff",), "resume": ("resume",),
        "verdict explain": ("verdict", "explain", "e1-target"), "log": ("log",),
        "audit": ("audit",),
    }.items():  # fmt: skip
        s.cli(name, *args)
    # every event and its JSON artifacts, read in-process through the same application functions
    # that `show`, `artifact list` and `artifact get` call (JSON round-tripped as the CLI emits
    # it); the CLI answers the last of each, which must be the same (three process starts, not
    # three per event)
    last: tuple[str, str] | None = None
    with Ledger.open(s.root / "ledger") as ledger:
        for event in s.answers["log"]["events"]:
            eid = event["event_id"]
            s.answers[f"event {eid[:12]}"] = _json_of(show_event(ledger, eid).to_json())
            listed = _json_of(msgspec.to_builtins(artifacts_of(ledger, eid).artifacts))
            s.answers[f"artifacts {eid[:12]}"] = {"event_id": eid, "artifacts": listed}
            for artifact in listed:
                if artifact["media_type"] == "application/json":
                    data = artifact_of(ledger, eid, artifact["name"])[1]
                    s.answers[f"artifact {eid[:12]} {artifact['name']}"] = json.loads(data)
                    last = (eid, artifact["name"])
    assert last is not None, "the session records JSON artifacts"
    eid, name = last
    assert s.cli("cli show", "show", eid) == s.answers[f"event {eid[:12]}"]
    assert s.cli("cli artifacts", "artifact", "list", eid) == s.answers[f"artifacts {eid[:12]}"]
    out = s.root / f"{eid[:12]}-{name}"
    s.cli("cli get", "artifact", "get", eid, name, "-o", str(out))
    assert json.loads(out.read_text()) == s.answers[f"artifact {eid[:12]} {name}"]
    return s, time.monotonic() - t0


def _json_of(data: Any) -> Any:
    """``data`` as the CLI's ``--json`` answer carries it (JSON text decoded)."""
    return json.loads(msgspec.json.encode(data))


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Session, float]:
    return _run_session(tmp_path_factory.mktemp("units"))


def _numbers(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """Every number under ``node`` whose nearest key ends in ``_s`` or ``_ms``: (path of keys,
    the dict that holds it, the number)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, bool):
                continue
            if isinstance(value, int | float) and key.endswith(("_s", "_ms")):
                yield (*path, key), node, value
            elif isinstance(value, list) and key.endswith(("_s", "_ms")):
                for item in value:
                    if isinstance(item, int | float) and not isinstance(item, bool):
                        yield (*path, key), node, item
            else:
                yield from _numbers(value, (*path, key))
    elif isinstance(node, list):
        for item in node:
            yield from _numbers(item, path)


def _checks(s: Session, elapsed_s: float) -> dict[str, Callable[[tuple[str, ...], Any, Any], bool]]:
    """What each field must hold, by its key (see the module docstring)."""
    sleeps = sorted(SLEEP_MS.values())
    call_min_s = REPEATS * sleeps[0] / 1e3
    calls = [r["wall_s"] for k, a in s.answers.items() if k.startswith("artifact")
             for r in a.get("table", ())]  # fmt: skip

    def budget(path: tuple[str, ...], holder: Any, v: float) -> bool:
        key = path[-1]
        if "budget_used" in path or key.endswith("_used_s"):
            if key.startswith("gpu"):
                return v == 0.0
            # events span the Target's freezing to the handoff: every measured call and more
            return sum(calls) - 2.0 <= v <= elapsed_s
        if "budget_left" in path or key.endswith("_left_s"):
            return v == 0.0 if key.startswith("gpu") else BUDGET["wall_s"] - elapsed_s <= v
        return key in BUDGET and v == BUDGET[key]

    def span(path: tuple[str, ...], holder: Any, v: float) -> bool:
        length = holder["end_s"] - holder["start_s"]
        if not 0.0 <= length <= elapsed_s:
            return False
        if "wall_s" in holder:  # a raw-table row: the call's own span
            return abs(length - holder["wall_s"]) <= 0.1 + 0.1 * holder["wall_s"]
        return True

    def call_wall(path: tuple[str, ...], holder: Any, v: float) -> bool:
        return call_min_s <= v <= CALL_MAX_S

    def call_cpu(path: tuple[str, ...], holder: Any, v: float) -> bool:
        # a call that sleeps spends far less CPU time than its sleeps (a value in milliseconds
        # would be above them)
        return 0.0 <= v < call_min_s

    return {
        # the worker's own report of its longest sleep (labelled reported, deciding nothing)
        "wall_ms": lambda p, h, v: 0.9 * sleeps[0] <= v <= 10 * sleeps[1],
        "wall_s": lambda p, h, v: budget(p, h, v) if "budget" in "".join(p) else call_wall(p, h, v),
        "ref_wall_s": call_wall,
        "cand_wall_s": call_wall,
        "cpu_s": call_cpu,
        "ref_cpu_s": call_cpu,
        "cand_cpu_s": call_cpu,
        # the CPU time below which a window counts as idle (seconds: in milliseconds, >= 1)
        "floor_s": lambda p, h, v: 0.0 < v < 1.0,
        "start_s": span,
        "end_s": span,
        "timeout_s": lambda p, h, v: v == TIMEOUT_S,
        "gpu_s": budget,
        "gpu_used_s": budget,
        "wall_used_s": budget,
        "gpu_left_s": budget,
        "wall_left_s": budget,
        "elapsed_s": lambda p, h, v: 0.0 < v <= s.timed["audit"],
    }


def test_every_seconds_and_milliseconds_field_holds_its_unit(
    session: tuple[Session, float],
) -> None:
    s, elapsed_s = session
    checks = _checks(s, elapsed_s)
    unknown: set[str] = set()
    wrong: list[str] = []
    seen: set[str] = set()
    for source, answer in s.answers.items():
        for path, holder, value in _numbers(answer):
            check = checks.get(path[-1])
            if check is None:
                unknown.add(f"{source}: {'.'.join(path)}")
                continue
            seen.add(path[-1])
            if not check(path, holder, value):
                wrong.append(f"{source}: {'.'.join(path)} = {value!r}")
    assert not unknown, f"fields with no unit check (add one): {sorted(unknown)}"
    assert not wrong, f"fields whose value is not in their unit: {wrong[:20]}"
    # the session reached every kind of field the checks know (else a check tests nothing)
    assert seen == set(checks), f"never seen: {sorted(set(checks) - seen)}"


def test_recorded_gpu_sessions_event_times_are_seconds_and_medians_say_what_of(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    env = isolated_env(tmp_path)
    subprocess.run(["git", "clone", "-q", "-b", "ledger",
                    str(ROOT / "examples" / "recorded" / "session.bundle"), str(ledger)],
                   env=env, check=True, capture_output=True)  # fmt: skip
    comparisons = 0
    # the figures are the recorded session's (read in-process: what is tested is the data, not
    # the CLI that shows it)
    with Ledger.open(ledger) as opened:
        for event in opened.log():
            if event.kind not in ("SamplesRecorded", "ResolutionEstimated"):
                continue
            for artifact in artifacts_of(opened, event.event_id).artifacts:
                data = json.loads(artifact_of(opened, event.event_id, artifact.name)[1])
                for group in data.get("cases") or data.get("comparisons") or ():
                    rows, stats = group["rows"], group["stats"]
                    for row in rows:
                        assert 0 < row["ref_s"] <= row["ref_wall_s"] < 1.0, row
                        assert 0 < row["cand_s"] <= row["cand_wall_s"] < 1.0, row
                    calls = 1 if stats.get("medians_per") == "call" else 2  # else an ABBA block
                    for side in ("ref", "cand"):
                        per_call = statistics.median(r[f"{side}_s"] for r in rows)
                        assert stats[f"{side}_median_s"] == pytest.approx(calls * per_call, rel=0.1)
                    comparisons += 1
    assert comparisons >= 10
