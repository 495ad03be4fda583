"""The workload driver against commands that attack the *other* subject's calls or the driver's
parsing (SPEC.md section 5, "Workload driver"; R11: both subjects under the same conditions).
Real processes and a real ledger, no mocks; each cheat has an honest control beside it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_measure_cli import SELF, _cli, _experiment, _record_resolution, _setup
from wf_scenario import explain_stage_by_review

from perfledger.api import Ledger
from perfledger.errors import MeasurementError
from perfledger.kernels.workload import driver_guard
from perfledger.kernels.workload.driver import Subject, run_call, run_pairs

HOSTILE = [sys.executable, "-S", str(Path(__file__).resolve().parent / "hostile_workload.py")]


@pytest.fixture
def own_scheduling() -> Iterator[driver_guard.Scheduling]:
    """This test process's scheduling, put back after the test whatever a subject did to it
    (a failing test must not leave pytest pinned to one CPU at nice 10)."""
    before = driver_guard.Scheduling.now()
    yield before
    driver_guard._restore(before)


def _run(cand_mode: str, pairs: int = 4) -> list:
    work = [*HOSTILE, "--work-s", "0.05"]
    run = run_pairs(
        Subject("ref", work), Subject("cand", [*work, "--mode", cand_mode]), cases=["a"],
        pairs_per_case=pairs, warmup_calls=0, timeout_s=30,
    )  # fmt: skip
    return [c for p in run.pairs for c in (p.ref, p.cand)]


def test_cheat_candidate_lowering_the_drivers_scheduling_for_the_references_calls_is_refused(
    own_scheduling: driver_guard.Scheduling,
) -> None:
    # the candidate pins the driver to one CPU, raises its nice value, its timer slack and
    # lowers its file limit as it exits: every later reference call would inherit them
    if own_scheduling.nice >= 10:
        pytest.skip("this test runs at nice 10 or more: the subject's nice 10 changes nothing")
    with pytest.raises(MeasurementError) as caught:
        _run("tamper_driver")
    message = caught.value.message
    assert "after call cand-a-0" in message and f"nice {own_scheduling.nice} -> 10" in message
    assert "RLIMIT_NOFILE" in message and "(restored)" in message
    # the driver's own scheduling is put back: nothing it starts later inherits the change
    assert driver_guard.Scheduling.now() == own_scheduling


@pytest.mark.slow
def test_honest_subjects_run_under_the_drivers_own_scheduling(
    own_scheduling: driver_guard.Scheduling,
) -> None:
    calls = _run("honest")
    assert all(c.ok for c in calls)
    for c in calls:  # every call, either subject, saw the scheduling the driver started with
        assert c.detail["affinity"] == list(own_scheduling.affinity or ())
        assert c.detail["nice"] == own_scheduling.nice
        assert c.detail["nofile_soft"] == dict(own_scheduling.rlimits)["RLIMIT_NOFILE"][0]
    assert driver_guard.Scheduling.now() == own_scheduling


def _measure_cli(tmp: Path, cand_mode: str) -> tuple[object, Path]:
    ledger = tmp / "ledger"
    _setup(ledger, cases=("small",))
    _record_resolution(ledger)
    _experiment(ledger)
    ref, cand = (
        shlex.join([*HOSTILE, "--work-s", "0.05"]),
        shlex.join([*HOSTILE, "--work-s", "0.05", "--mode", cand_mode]),
    )
    proc = _cli(ledger, tmp, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
                "--ref", ref, "--cand", cand, "--case", "small", "--pairs", "5", "--warmup", "0",
                "--quiet", "--no-monitor", "--json", check=False)  # fmt: skip
    return proc, ledger


@pytest.mark.slow
def test_cheat_candidate_lowering_the_drivers_scheduling_records_nothing(tmp_path: Path) -> None:
    proc, ledger = _measure_cli(tmp_path, "tamper_driver")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in proc.stderr  # type: ignore[attr-defined]
    error = json.loads(proc.stdout)["error"]  # type: ignore[attr-defined]
    assert error["code"] == "measurement_error" and "scheduling changed" in error["message"]
    with Ledger.open(ledger) as opened:
        assert opened.state().samples == {}


# ---------------------------------------------------------------- calls a candidate chooses to drop


def _session(tmp: Path) -> Path:
    ledger = tmp / "ledger"
    # about the failed-call rule: a loaded host's foreign activity is explained by another
    # actor's review of each formal stage (R17, _stage), which also lifts its 20 % limit
    _setup(ledger, cases=("small",))
    _record_resolution(ledger)
    _experiment(ledger)
    return ledger


def _stage(
    ledger: Path, tmp: Path, stage: str, cand: list[str], ref: tuple[str, ...] | list[str] = ()
) -> object:
    work = [*HOSTILE, "--work-s", "0.1", "--mode", "jitter", *ref]
    monitor = ["--no-monitor"] if stage == "screen" else ["--monitor", "host"]
    done = _cli(ledger, tmp, "measure", "workload", *SELF, "--experiment", "e1", "--stage", stage,
                "--ref", shlex.join(work), "--cand", shlex.join([*HOSTILE, "--work-s", "0.1", *cand]),
                "--case", "small", "--pairs", "5", "--warmup", "0", "--quiet", *monitor,
                check=False)  # fmt: skip
    if stage != "screen" and done.returncode == 0:  # R17: another actor's review explains
        explain_stage_by_review(
            ledger, "e1", stage, explanation="other tenants of a shared CI host"
        )
    return done


def _honest_screen(ledger: Path, tmp: Path) -> None:
    """A screen of honest calls (the target stage's formal run needs one first, R11/R14)."""
    done = _stage(ledger, tmp, "screen", ["--mode", "jitter"])
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["exit", "omit", "partial"])
def test_cheat_candidate_failing_its_slow_calls_cannot_record_a_target_stage(
    tmp_path: Path, how: str
) -> None:
    # the candidate does the reference's jittered work and gives no result (exit 1, another
    # metric, half a JSON object) whenever its own call was slow: only its fast calls would count
    ledger = _session(tmp_path)
    cand = ["--mode", "censor_slow", "--how", how, "--censor-above", "0.6"]  # ~90 % of calls
    screen = _stage(ledger, tmp_path, "screen", cand)
    assert screen.returncode in (0, 1), screen.stderr  # type: ignore[attr-defined]
    if screen.returncode == 0:  # a screen keeps what it can and says what it dropped
        assert "note failed calls" in screen.stderr  # type: ignore[attr-defined]
    else:  # R14: a formal run starts only after a screen (recorded here by honest calls)
        _honest_screen(ledger, tmp_path)
    with Ledger.open(ledger) as opened:
        before = set(opened.state().samples)
    target = _stage(ledger, tmp_path, "target", cand)
    assert target.returncode == 1, target.stdout + target.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in target.stderr  # type: ignore[attr-defined]
    assert "gave no 'time_ms'" in target.stderr  # type: ignore[attr-defined]
    assert "cand-small-" in target.stderr  # type: ignore[attr-defined]
    with Ledger.open(ledger) as opened:
        assert set(opened.state().samples) == before  # nothing recorded


@pytest.mark.slow
def test_cheat_candidate_making_the_references_next_call_fail_cannot_record_a_target_stage(
    tmp_path: Path,
) -> None:
    # after a slow call of its own, the candidate hides the input file the reference reads
    # (and puts it back when its next call starts): the reference's next call fails, and the
    # round with the candidate's slow call was dropped as "the reference's failure"
    ledger = _session(tmp_path)
    data = tmp_path / "input.txt"
    data.write_text("the workload's input")
    # every call counts as slow (its drawn time is at least half the work): the sabotage then
    # fails the reference in every (cand, ref) pair, not by chance (at 0.6 about one run in a
    # hundred drew both such candidate calls fast and recorded five honest pairs)
    cand = ["--mode", "censor_slow", "--how", "sabotage", "--censor-above", "0.0",
            "--input", str(data)]  # fmt: skip
    _honest_screen(ledger, tmp_path)  # R14: a formal run starts only after a screen
    target = _stage(ledger, tmp_path, "target", cand, ["--input", str(data)])
    assert target.returncode == 1, target.stdout + target.stderr  # type: ignore[attr-defined]
    # the reference's own traceback (its input was hidden) is shown as its stderr; none of ours
    assert "its stderr (last lines):" in target.stderr  # type: ignore[attr-defined]
    assert "perfledger/" not in target.stderr  # type: ignore[attr-defined]
    assert "gave no 'time_ms'" in target.stderr and "ref-small-" in target.stderr  # type: ignore[attr-defined]
    assert "(the reference's: " in target.stderr  # type: ignore[attr-defined]  # whose to fix
    with Ledger.open(ledger) as opened:
        assert "e1-target-1" not in opened.state().samples


@pytest.mark.slow
def test_candidate_whose_every_call_gives_a_result_records_its_target_stage(
    tmp_path: Path,
) -> None:
    ledger = _session(tmp_path)
    honest = ["--mode", "jitter"]
    assert _stage(ledger, tmp_path, "screen", honest).returncode == 0  # type: ignore[attr-defined]
    target = _stage(ledger, tmp_path, "target", honest)
    assert target.returncode == 0, target.stdout + target.stderr  # type: ignore[attr-defined]
    assert "note failed calls" not in target.stderr  # type: ignore[attr-defined]
    with Ledger.open(ledger) as opened:
        assert "e1-target-1" in opened.state().samples


# ---------------------------------------------------------------- what a call prints


def test_cheat_metric_beyond_float_range_is_a_failed_call_not_a_crash() -> None:
    # json reads a 401-digit integer as an int; float() of it raised OverflowError out of the
    # driver, losing the whole run ("unexpected OverflowError")
    calls = _run("bigint", pairs=2)
    cand = [c for c in calls if c.subject == "cand"]
    assert all(not c.ok and c.reason == "non_finite" for c in cand)
    assert "beyond float range" in cand[0].message
    assert all(c.ok for c in calls if c.subject == "ref")  # the honest control beside it


# ---------------------------------------------------------------- a process outside the run


def _with_watcher(tag: str, shell: bool = False, parent: bool = False) -> list:
    """5 pairs of honest CPU-bound work while a process started before the run (so in no
    call's tree) stops, for 0.1 s each, the calls whose command line holds ``tag`` (with
    ``parent``: the driver during them); with ``shell``, each command is a shell running the
    work as its child."""
    import subprocess

    watcher = subprocess.Popen([*HOSTILE, "--mode", "stop_watcher", "--tag", tag, "--work-s", "60",
                                *(["--stop-parent"] if parent else [])])  # fmt: skip
    try:
        busy = [*HOSTILE, "--mode", "busy", "--work-s", "0.2"]
        ref, cand = [*busy, "--tag", "ref-marker"], busy
        if shell:  # `; exit $?` keeps the shell as the parent: the work is its child
            ref, cand = (["sh", "-c", shlex.join(a) + "; exit $?"] for a in (ref, cand))
        run = run_pairs(
            Subject("ref", ref), Subject("cand", cand), cases=["a"],
            pairs_per_case=5, warmup_calls=0, timeout_s=30,
        )  # fmt: skip
    finally:
        watcher.kill()
        watcher.wait()
    return [c for p in run.pairs for c in (p.ref, p.cand)]


@pytest.mark.slow
def test_cheat_process_outside_the_run_stopping_the_references_calls_is_refused() -> None:
    # unchecked: the identical candidate measured 26 % faster, the wall clock consistent
    with pytest.raises(MeasurementError) as caught:
        _with_watcher("ref-marker")
    message = caught.value.message
    # the watcher stops a call 0.1 s after it first sees it: a call may end before that
    assert message.startswith("call ref-a-") and "another process stopped" in message
    assert "SIGSTOP" in message


@pytest.mark.slow
def test_calls_no_process_stops_are_not_taken_for_interference() -> None:
    calls = _with_watcher("a-tag-no-call-has")
    assert all(c.ok for c in calls), [(c.call_id, c.message) for c in calls]


# ---------------------------------------------------------------- processes that outlive a call


def _grows(path: Path, after_s: float = 0.3) -> bool:
    size = path.stat().st_size if path.exists() else 0
    time.sleep(after_s)
    return (path.stat().st_size if path.exists() else 0) > size


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_cheat_server_daemonized_by_tmux_is_ended_with_its_call(tmp_path: Path) -> None:
    # a long-lived server started by one call, which a later call could talk to over its socket
    beat = tmp_path / "beat"
    call = run_call(
        Subject("cand", [*HOSTILE, "--mode", "tmux_server", "--input", str(beat), "--tag",
                         f"perfledger-test-{os.getpid()}", "--work-s", "0.05"]),
        case="a", call_id="cand-a-0", timeout_s=30,
    )  # fmt: skip
    assert call.ok and call.ended_descendants >= 1
    assert not _grows(beat)


def test_timeout_ends_a_command_and_a_child_that_ignore_sigterm(tmp_path: Path) -> None:
    beat = tmp_path / "beat"
    call = run_call(
        Subject("cand", [*HOSTILE, "--mode", "ignore_term", "--input", str(beat)]),
        case="a", call_id="cand-a-0", timeout_s=1.0,
    )  # fmt: skip
    assert call.reason == "timeout" and call.wall_s < 2.5 and call.ended_descendants >= 1
    assert not _grows(beat)


@pytest.mark.slow
def test_cheat_process_outside_the_run_stopping_the_child_of_the_references_shell_is_refused() -> (
    None
):
    # unchecked before: only the command itself (the shell) was watched, not the work below it
    with pytest.raises(MeasurementError) as caught:
        _with_watcher("ref-marker", shell=True)
    message = caught.value.message
    assert message.startswith("call ref-a-") and "below it stopped" in message, message


@pytest.mark.slow
def test_cheat_process_outside_the_run_stopping_the_driver_during_a_reference_call_is_refused() -> (
    None
):
    # a driver stopped as a call ends sees the exit late: that call's wall time grows
    with pytest.raises(MeasurementError) as caught:
        _with_watcher("ref-marker", parent=True)
    message = caught.value.message
    assert message.startswith("call ref-a-") and "driver itself was stopped" in message, message


@pytest.mark.slow
def test_honest_shell_commands_no_process_stops_are_not_taken_for_interference() -> None:
    calls = _with_watcher("a-tag-no-call-has", shell=True)
    assert all(c.ok for c in calls), [(c.call_id, c.message) for c in calls]


# ---------------------------------------------------------------- honest commands, no false alarm

_REPORT = (
    "import json, time\n"
    "start = time.perf_counter(); time.sleep(0.05)\n"
    "print(json.dumps({'correct': True, 'metrics': "
    "{'time_ms': [1e3 * (time.perf_counter() - start)]}}))\n"
)
_OWN_SCHEDULING = (
    "import os, resource\n"
    "os.nice(5); os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
    "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))\n"
)
_POOL = (
    "import multiprocessing as mp\n"
    "if __name__ == '__main__':\n"
    "    with mp.get_context('fork').Pool(2) as pool: pool.map(abs, range(100))\n"
)
_SESSION = (  # the command leads a session already: a child leaves it, as a server's would
    "import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid(); os.setpgid(0, 0); time.sleep(0.02); os._exit(0)\n"
    "os.wait()\n"
)
_PY = [sys.executable, "-S", "-c"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([*_PY, _OWN_SCHEDULING + _REPORT], id="changes-its-own-scheduling"),
        pytest.param(["nice", "-n", "5", *_PY, _REPORT], id="under-nice"),
        pytest.param(["taskset", "-c", "0", *_PY, _REPORT], id="under-taskset"),
        pytest.param(["sh", "-c", shlex.join([*_PY, _REPORT]) + "; exit $?"], id="shell-child"),
        pytest.param([*_PY, _POOL + _REPORT], id="multiprocessing-pool"),
        pytest.param([*_PY, _SESSION + _REPORT], id="own-session"),
        pytest.param(
            ["strace", "-f", "-qq", "-o", os.devnull, *_PY, _REPORT], id="under-its-own-strace"
        ),
    ],
)
def test_honest_command_changing_only_itself_runs_without_a_driver_defence_firing(
    argv: list[str],
) -> None:
    """Only the driver's own scheduling and stops by processes outside the call matter: a
    command that renices, pins or limits itself, starts children, workers or a session of its
    own, or traces its own children, runs through every call."""
    if argv[0] in ("nice", "taskset", "strace") and shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    run = run_pairs(Subject("ref", argv), Subject("cand", argv), cases=["a"], pairs_per_case=2,
                    warmup_calls=0, timeout_s=30)  # fmt: skip
    calls = [c for p in run.pairs for c in (p.ref, p.cand)]
    assert len(calls) == 4 and all(c.ok for c in calls), [
        (c.call_id, c.reason, c.message, c.stderr_tail) for c in calls
    ]
