"""The workload driver against commands that game it (SPEC.md section 5, "Workload driver"):
self-reported times checked against the driver's own wall clock, every process a call starts
ended with it, timeouts that hold whatever the command leaves behind. Real processes, no mocks;
the work is sleeping, so wall times hold on a loaded machine. Each cheat has an honest control
beside it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfledger.derive.units import rate_seconds, time_per_work_seconds, work_unit
from perfledger.derive.wall_check import check_driver_run, check_pairs, unchecked_rates
from perfledger.events.workflow import WallCheck
from perfledger.kernels.proc import CallTree, process_table, set_subreaper
from perfledger.kernels.workload.driver import Subject, run_call, run_pairs

# -S: no site-packages to import, so less start-up work for a loaded host to jitter
WORKLOAD = [sys.executable, "-S", str(Path(__file__).resolve().parent / "adversarial_workload.py")]
UNITS = {"time_ms": "ms"}


#: Seconds of work per call where a cheat's lie is its whole time (or a shape of it): a lie of
#: 0.25 s per call is still two to four times the tolerance the check allows on a loaded host (a
#: quarter of the saving plus a resolution of 5-70 ms), so the flag needs no longer sleep.
CHEAT_WORK_S = 0.25


def _compare(cand: list[str], ref: list[str] | None = None, work_s: float = 0.5) -> WallCheck:
    """Run the honest reference against ``cand`` (5 ABBA pairs, one case) and check the run."""
    ref_argv = [*WORKLOAD, "--work-s", str(work_s), *(ref or [])]
    cand_argv = [*WORKLOAD, "--work-s", str(work_s), *cand]
    run = run_pairs(
        Subject("ref", ref_argv), Subject("cand", cand_argv), cases=["a"], pairs_per_case=5,
        warmup_calls=0, timeout_s=60,
    )  # fmt: skip
    assert not run.failed_calls, [(c.call_id, c.message, c.stderr_tail) for c in run.failed_calls]
    check = check_driver_run(run, UNITS)
    assert check is not None
    return check


# ---------------------------------------------------------------- under-reporting its own time


@pytest.mark.slow
def test_cheat_same_work_reporting_a_hundredth_of_its_time_is_flagged() -> None:
    check = _compare(["--mode", "scaled", "--report-scale", "0.01"], work_s=CHEAT_WORK_S)
    assert check.flagged and check.cases[0].status == "flagged"
    assert check.cases[0].reported_saving_s > 0.2  # it claims ~0.25 s per call...
    assert abs(check.cases[0].wall_saving_s) < 0.1  # ...that the wall clock never saw
    assert "wall clock saw" in check.reasons[0]


@pytest.mark.slow
def test_cheat_reporting_only_the_fast_half_of_its_samples_is_flagged() -> None:
    check = _compare(["--mode", "fast_half"], work_s=CHEAT_WORK_S)
    assert check.flagged and check.cases[0].status == "flagged"


@pytest.mark.slow
def test_cheat_reporting_half_of_its_time_is_flagged() -> None:
    check = _compare(["--mode", "scaled", "--report-scale", "0.5"], work_s=0.5)
    assert check.flagged


@pytest.mark.slow
def test_median_moved_six_percent_within_a_call_is_within_the_stated_tolerance() -> None:
    """The limit, shown (docs/measurement.md): the median-against-mean rule allows a median to
    gain 0.05 + a quarter of its gain beyond the mean, so an identical candidate moving its
    time between its 3 repeats (the same total, the median 6 % lower) is not flagged. If the
    rule is tightened, this test fails: update the documented limit."""
    three = ["--steps", "3"]
    check = _compare(["--mode", "nudge", *three], ref=three, work_s=0.3)
    assert not check.flagged, check.reasons


@pytest.mark.slow
def test_really_faster_candidate_is_not_flagged() -> None:
    check = _compare(["--work-s", "0.25"])  # half the work: saves ~0.25 s of wall per call
    assert not check.flagged and check.cases[0].status == "consistent"
    assert check.cases[0].wall_saving_s > 0.1


@pytest.mark.slow
def test_aa_comparison_is_not_flagged() -> None:
    # the same 0.1 s on both sides: what the wall clock sees of an A/A is start-up and wake-up
    # noise, which does not grow with the length of a sleep (0.5 s a call showed nothing more)
    check = _compare([], work_s=0.1)
    assert not check.flagged and check.cases[0].status in {"unresolved", "consistent"}
    assert check.over_wall_calls == ()


# ---------------------------------------------------------------- rates (tokens/s)

RATE_UNITS = {"tokens_per_s": "tokens/s", "tokens": "tokens"}
RATE_DIRECTIONS = {"tokens_per_s": "higher_is_better"}


def _compare_rate(
    cand: list[str],
    work: dict[str, str] | None,
    work_s: float = 0.5,
    ref: tuple[str, ...] = (),
    directions: dict[str, str] = RATE_DIRECTIONS,
    ref_work_s: float = 0.5,
) -> WallCheck:
    """As :func:`_compare`, both subjects reporting ``tokens_per_s`` and ``tokens``; ``work``:
    the Target's rate -> work metric (None: the rate has none); ``ref``: the reference's extra
    arguments; ``ref_work_s``: the reference's seconds of work per call."""
    run = run_pairs(
        Subject("ref", [*WORKLOAD, "--work-s", str(ref_work_s), "--metric", "rate", *ref]),
        Subject("cand", [*WORKLOAD, "--work-s", str(work_s), "--metric", "rate", *cand]),
        cases=["a"], pairs_per_case=5, warmup_calls=0, timeout_s=60,
    )  # fmt: skip
    assert not run.failed_calls, [(c.call_id, c.message, c.stderr_tail) for c in run.failed_calls]
    check = check_driver_run(run, RATE_UNITS, directions, work)
    assert check is not None
    return check


@pytest.mark.slow
def test_cheat_same_work_reporting_a_hundred_times_its_rate_is_flagged() -> None:
    check = _compare_rate(["--mode", "scaled", "--report-scale", "0.01"],
                          {"tokens_per_s": "tokens"}, work_s=CHEAT_WORK_S,
                          ref_work_s=CHEAT_WORK_S)  # fmt: skip
    assert check.flagged
    (case,) = [c for c in check.cases if c.metric == "tokens_per_s"]
    assert case.status == "flagged" and case.reported_saving_s > 0.2
    assert abs(case.wall_saving_s) < 0.1  # the time its rate implies it saved, never seen


@pytest.mark.slow
def test_cheat_rate_over_more_work_than_it_did_is_flagged() -> None:
    """Twice the tokens and twice the rate: the time it implies is honest, the work is not the
    reference's."""
    check = _compare_rate(["--mode", "count_more"], {"tokens_per_s": "tokens"},
                          work_s=CHEAT_WORK_S, ref_work_s=CHEAT_WORK_S)  # fmt: skip
    assert check.flagged
    assert any("the same case is the same work" in r for r in check.reasons)


@pytest.mark.slow
def test_really_faster_candidate_reporting_a_rate_is_not_flagged() -> None:
    check = _compare_rate([], {"tokens_per_s": "tokens"}, work_s=0.25)
    assert not check.flagged
    (case,) = [c for c in check.cases if c.metric == "tokens_per_s"]
    assert case.status == "consistent" and case.wall_saving_s > 0.1


@pytest.mark.slow
def test_cheat_rate_with_work_moved_between_its_repeats_is_flagged() -> None:
    """The same total work and time, but most of the last repeat's tokens counted in the
    others: their rates (and the median the verdict takes) rise by a third; the time the rates
    imply and the total work stay honest."""
    check = _compare_rate(["--mode", "move_work"], {"tokens_per_s": "tokens"},
                          work_s=CHEAT_WORK_S, ref_work_s=CHEAT_WORK_S)  # fmt: skip
    assert check.flagged and any("median" in r for r in check.reasons), check


@pytest.mark.slow
def test_cheat_rate_with_time_moved_onto_its_smallest_repeat_is_flagged() -> None:
    """Repeats of 1, 10 and 100 units of work (both subjects): the candidate reports half the
    time of the two larger ones and the rest on the smallest, doubling the median rate; its
    time's median gets worse, so only the rates' median shows it."""
    uneven = ["--weights", "1,10,100"]
    check = _compare_rate(["--mode", "shift_time", *uneven], {"tokens_per_s": "tokens"},
                          ref=uneven, work_s=CHEAT_WORK_S, ref_work_s=CHEAT_WORK_S)  # fmt: skip
    assert check.flagged and any("median" in r for r in check.reasons), check


@pytest.mark.slow
def test_honest_faster_rate_with_uneven_work_per_repeat_is_not_flagged() -> None:
    uneven = ["--weights", "1,10,100"]
    check = _compare_rate(uneven, {"tokens_per_s": "tokens"}, work_s=0.25, ref=uneven)
    assert not check.flagged, check.reasons
    (case,) = [c for c in check.cases if c.metric == "tokens_per_s"]
    assert case.status == "consistent" and case.wall_saving_s > 0.1


@pytest.mark.slow
def test_cheat_rate_declared_lower_is_better_reporting_a_lower_rate_is_flagged() -> None:
    """A Target whose rate is lower-is-better: the candidate does the same work and reports a
    rate a third lower (half as much time again as it spent, within its wall time: both subjects
    spend 0.4 s untimed first). The lie, 0.25 s a call, is twice the tolerance a loaded host's
    wall clock gives it (a quarter of it plus up to ~70 ms); a lie of 0.1 s (a fifth more time)
    sat at that tolerance and was missed in one run of three there."""
    lower, setup = {"tokens_per_s": "lower_is_better"}, ("--setup-s", "0.4")
    # On a loaded host the wall clock's resolution can hide the lie (status "unresolved": not
    # verifiable, which never helps a self-timed candidate); the cheat must be flagged in one
    # of three runs, each a fresh pair of processes.
    for _ in range(3):
        cheat = _compare_rate(["--mode", "scaled", "--report-scale", "1.5", *setup],
                              {"tokens_per_s": "tokens"}, directions=lower, ref=setup)  # fmt: skip
        if cheat.flagged:
            break
        assert all(c.status == "unresolved" for c in cheat.cases), cheat
    assert cheat.flagged and cheat.over_wall_calls == (), cheat
    # honest control: really more work per call (a lower rate, its favour) is consistent
    honest = _compare_rate([*setup], {"tokens_per_s": "tokens"}, work_s=0.75, directions=lower,
                           ref=setup)  # fmt: skip
    assert not honest.flagged, honest.reasons


def _compare_per_token(cand: list[str], work_s: float = 0.5, ref_work_s: float = 0.5) -> WallCheck:
    """The reference and ``cand`` reporting ``ms_per_token`` (a time per unit of work) and
    ``tokens``, the Target naming ``tokens`` as its work; ``work_s``, ``ref_work_s``: their
    seconds of work per call."""
    run = run_pairs(
        Subject("ref", [*WORKLOAD, "--work-s", str(ref_work_s), "--metric", "per_token"]),
        Subject("cand", [*WORKLOAD, "--work-s", str(work_s), "--metric", "per_token", *cand]),
        cases=["a"], pairs_per_case=5, warmup_calls=0, timeout_s=60,
    )  # fmt: skip
    assert not run.failed_calls, [(c.call_id, c.message, c.stderr_tail) for c in run.failed_calls]
    units = {"ms_per_token": "ms/tokens", "tokens": "tokens"}
    check = check_driver_run(run, units, {"ms_per_token": "lower_is_better"},
                             {"ms_per_token": "tokens"})  # fmt: skip
    assert check is not None
    return check


@pytest.mark.slow
def test_cheat_time_per_token_reporting_a_hundredth_of_its_time_is_flagged() -> None:
    """``ms/token`` (the inverse of a rate) was neither checked nor noted as unchecked."""
    check = _compare_per_token(["--mode", "scaled", "--report-scale", "0.01"],
                               work_s=CHEAT_WORK_S, ref_work_s=CHEAT_WORK_S)  # fmt: skip
    assert check.flagged, check
    (case,) = [c for c in check.cases if c.metric == "ms_per_token"]
    assert case.status == "flagged" and case.reported_saving_s > 0.2


@pytest.mark.slow
def test_honest_faster_time_per_token_is_consistent() -> None:
    check = _compare_per_token([], work_s=0.25)
    assert not check.flagged, check.reasons
    (case,) = [c for c in check.cases if c.metric == "ms_per_token"]
    assert case.status == "consistent" and case.wall_saving_s > 0.1


def test_time_per_work_units_name_their_time_numerator_and_are_noted_when_unchecked() -> None:
    assert time_per_work_seconds("ms/token") == 1e-3 and time_per_work_seconds("s/GB") == 1.0
    for unit in ("tokens/s", "ms", "ms/s", "ms/", "min/token"):
        assert time_per_work_seconds(unit) is None, unit
    assert work_unit("ms/token") == "token" and work_unit("tokens/s") == "tokens"
    assert unchecked_rates({"lat": "ms/token", "t": "ms"}, {}) == ["lat"]
    assert unchecked_rates({"lat": "ms/token"}, {"lat": "tokens"}) == []


@pytest.mark.slow
def test_rate_without_a_work_metric_is_not_checked_and_named_as_such() -> None:
    """The limit, shown: with no work metric an inflated rate has no time to check."""
    check = _compare_rate(["--mode", "scaled", "--report-scale", "0.01"], None,
                          work_s=CHEAT_WORK_S, ref_work_s=CHEAT_WORK_S)  # fmt: skip
    assert not check.flagged and not any(c.metric == "tokens_per_s" for c in check.cases)
    assert unchecked_rates(RATE_UNITS, {}) == ["tokens_per_s"]
    assert unchecked_rates(RATE_UNITS, {"tokens_per_s": "tokens"}) == []


def test_rate_units_name_their_time_denominator() -> None:
    assert rate_seconds("tokens/s") == 1.0 and rate_seconds("items/ms") == 1e-3
    assert rate_seconds("GB/us") == 1e-6
    for unit in ("ms", "tokens", "/s", "tokens/min", "ratio"):
        assert rate_seconds(unit) is None, unit


def _rate_pairs(cand_rate: float, cand_work: list[float], n: int = 5) -> list[SimpleNamespace]:
    """Recorded pairs: the reference does 100 tokens at 100 tokens/s in 1 s of wall; the
    candidate reports ``cand_rate`` over ``cand_work`` in 0.5 s of wall."""

    def side(call: str, rate: float, work: list[float], wall: float) -> SimpleNamespace:
        values = {"tps": [rate], **({"tok": work} if work else {})}
        return SimpleNamespace(call_id=call, correct=True, values=values, wall_s=wall)

    return [
        SimpleNamespace(
            case="a",
            ref=side(f"r{i}", 100.0, [100.0], 1.0 + 0.001 * i),
            cand=side(f"c{i}", cand_rate, cand_work, 0.5 + 0.001 * i),
        )
        for i in range(n)
    ]


def test_rate_reported_without_its_work_in_a_call_flags_the_case() -> None:
    units = {"tps": "tokens/s", "tok": "tokens"}
    honest = check_pairs(_rate_pairs(200.0, [100.0]), units, {"tps": "higher_is_better"},
                         work_metrics={"tps": "tok"})  # fmt: skip
    assert honest is not None and not honest.flagged
    missing = check_pairs(_rate_pairs(200.0, []), units, {"tps": "higher_is_better"},
                          work_metrics={"tps": "tok"})  # fmt: skip
    assert missing is not None and missing.flagged
    assert any("cannot be turned into" in r for r in missing.reasons)


# ---------------------------------------------------------------- work outside the timed region


@pytest.mark.slow
def test_cheat_work_in_a_detached_grandchild_outside_the_timer_is_flagged() -> None:
    check = _compare(["--mode", "untimed_grandchild"], work_s=CHEAT_WORK_S)
    assert check.flagged and check.cases[0].status == "flagged"


@pytest.mark.slow
def test_cheat_plausible_time_reported_while_a_detached_grandchild_works_is_flagged() -> None:
    check = _compare(["--mode", "detached_worker"], work_s=CHEAT_WORK_S)
    assert check.flagged
    assert check.over_wall_calls and all(c.startswith("cand-") for c in check.over_wall_calls)


@pytest.mark.slow
def test_cheat_work_done_before_the_timer_starts_is_flagged() -> None:
    check = _compare(["--mode", "precompute"], work_s=CHEAT_WORK_S)
    assert check.flagged and check.cases[0].status == "flagged"


@pytest.mark.slow
def test_cheat_reporting_more_time_than_the_call_took_is_flagged() -> None:
    check = _compare(["--mode", "over_wall"], work_s=0.1)
    assert check.flagged
    assert check.over_wall_calls and all(c.startswith("cand-") for c in check.over_wall_calls)
    assert "cannot have spent" in check.reasons[0]


# ---------------------------------------------------------------- the rule on recorded numbers


def _pairs(ref_rep: float, cand_rep: float, ref_wall: list[float], cand_wall: list[float]) -> list:
    def side(call: str, rep: float, wall: float) -> SimpleNamespace:
        return SimpleNamespace(call_id=call, correct=True, values={"t": [rep]}, wall_s=wall)

    return [
        SimpleNamespace(case="a", ref=side(f"r{i}", ref_rep, rw), cand=side(f"c{i}", cand_rep, cw))
        for i, (rw, cw) in enumerate(zip(ref_wall, cand_wall, strict=True))
    ]


def test_saving_below_the_wall_clocks_resolution_is_unresolved_not_passed_off() -> None:
    noisy = [1.00, 1.05, 0.95, 1.10, 0.90]  # the wall clock's spread here is ~50 ms
    check = check_pairs(_pairs(0.500, 0.499, noisy, list(reversed(noisy))), {"t": "s"})
    assert check is not None and not check.flagged
    assert check.cases[0].status == "unresolved" and check.cases[0].resolution_s > 0.001


def test_higher_is_better_time_metric_is_checked_in_the_candidates_favour() -> None:
    walls = [1.0, 1.001, 0.999, 1.0, 1.002]
    # the candidate reports 0.3 s more of a higher-is-better time than it spent
    pairs = _pairs(0.5, 0.8, walls, walls)
    assert check_pairs(pairs, {"t": "s"}, {"t": "higher_is_better"}).flagged
    assert not check_pairs(
        _pairs(0.8, 0.5, walls, walls), {"t": "s"}, {"t": "higher_is_better"}
    ).flagged


def test_calls_timed_by_the_driver_and_calls_not_timed_cannot_be_mixed() -> None:
    pairs = _pairs(0.5, 0.5, [1.0] * 3, [1.0] * 3)
    pairs[0].cand.wall_s = None
    with pytest.raises(ValueError, match="record all or none"):
        check_pairs(pairs, {"t": "s"})
    for p in pairs:
        p.ref.wall_s = p.cand.wall_s = None
    assert check_pairs(pairs, {"t": "s"}) is None  # not measured by the driver: nothing to check


# ---------------------------------------------------------------- processes left behind


def _alive_with(marker: str) -> list[int]:
    found = []
    for pid in process_table():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def _stops_growing(path: Path) -> bool:
    before = path.stat().st_size if path.exists() else 0
    time.sleep(0.3)
    return (path.stat().st_size if path.exists() else 0) == before


@pytest.mark.parametrize("mode", ["linger", "daemon"])
def test_cheat_process_left_behind_is_ended_with_its_call(tmp_path: Path, mode: str) -> None:
    beat = tmp_path / f"{mode}.beat"
    argv = [*WORKLOAD, "--mode", mode, "--work-s", "0.05", "--heartbeat", str(beat)]
    out = run_call(Subject("cand", argv), case="a", call_id="c", timeout_s=30)
    assert out.ok and out.ended_descendants >= 1
    # whatever session it moved to, it can no longer work during the other subject's call
    assert _stops_growing(beat) and not _alive_with(str(beat))


def test_command_whose_children_finish_first_leaves_nothing_to_end(tmp_path: Path) -> None:
    script = f"{sys.executable} -c pass; " + " ".join([*WORKLOAD, "--work-s", "0.02"])
    out = run_call(Subject("ref", ["sh", "-c", script]), case="a", call_id="c", timeout_s=30)
    assert out.ok and out.ended_descendants == 0


@pytest.mark.slow
def test_timeout_ends_a_grandchild_in_its_own_session_holding_stdout() -> None:
    argv = [*WORKLOAD, "--mode", "hang_holding_stdout"]
    for k in range(2):
        start = time.monotonic()
        out = run_call(Subject("cand", argv), case="a", call_id=f"c{k}", timeout_s=2.0)
        elapsed = time.monotonic() - start
        assert out.reason == "timeout" and out.ended_descendants >= 1
        assert elapsed < 2.5, f"a 2 s timeout cost {elapsed:.2f} s"
    assert not _alive_with("time.sleep(30)")


def test_driver_is_a_subreaper_only_during_a_call() -> None:
    argv = [*WORKLOAD, "--work-s", "0.01"]
    assert run_call(Subject("ref", argv), case="a", call_id="c", timeout_s=30).ok
    # after the call, orphans of this process go to init again: nothing else is affected
    assert set_subreaper(False) is False


def test_a_process_this_program_starts_during_a_call_is_not_ended_with_it() -> None:
    """A library user's other thread starts a process while a call runs: it is a child of this
    process in this process's own session, so the call's end leaves it alone; the command and
    the grandchild that left the command's session (setsid) are ended."""
    with CallTree() as tree:
        command = subprocess.Popen(
            [sys.executable, "-c", "import os, time\n"
             "if os.fork() == 0:\n    os.setsid(); time.sleep(30)\ntime.sleep(30)"],
            start_new_session=True,
        )  # fmt: skip
        tree.watch(command.pid)
        ours = subprocess.Popen(["sleep", "30"])  # same session as this test process
        try:
            deadline = time.monotonic() + 5
            while not tree.descendants() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert tree.descendants(), "the setsid grandchild was not seen"
            assert ours.pid not in tree.descendants()
            tree.end(include_root=True)
            command.wait(timeout=5)
            assert ours.poll() is None  # still running
            assert not tree.descendants()
        finally:
            ours.kill()
            ours.wait()


def test_cheat_noise_added_outside_the_timer_cannot_widen_the_resolution() -> None:
    """A candidate doing the reference's work (0.050 s) reports 0.030 s and sleeps 0-40 ms after
    its timer, a different time each call: under ``wall_v1`` the excess's own spread set the
    resolution, so the 20 ms lie was only "unresolved"; ``wall_v2`` takes the smaller of that
    spread and the reference's, which the candidate cannot widen, and flags it."""
    ref_wall = [0.100, 0.101, 0.099, 0.1005, 0.0995, 0.1002]
    sleeps = [0.0, 0.008, 0.016, 0.024, 0.032, 0.040]
    pairs = _pairs(0.050, 0.030, ref_wall, [w + s for w, s in zip(ref_wall, sleeps, strict=True)])
    old = check_pairs(pairs, {"t": "s"}, method="wall_v1")
    assert old is not None and not old.flagged and old.cases[0].status == "unresolved"
    new = check_pairs(pairs, {"t": "s"})
    assert new is not None and new.flagged and new.cases[0].status == "flagged"
    # an honest candidate with a true 20 ms saving and 0-5 ms of start-up noise: its wall clock
    # shows the saving, and it is not flagged
    honest = _pairs(
        0.050, 0.030, ref_wall, [w - 0.020 + s / 8 for w, s in zip(ref_wall, sleeps, strict=True)]
    )
    assert not check_pairs(honest, {"t": "s"}).flagged


def test_cheat_command_cannot_open_the_drivers_memory() -> None:
    # the driver's clock and samples live in its memory: a command of the same user (or root:
    # it runs without CAP_SYS_PTRACE) must not be able to open it (without a Yama ptrace
    # policy, only the driver's being non-dumpable during the calls stands in the way)
    argv = [*WORKLOAD, "--mode", "reach_driver", "--work-s", "0.02"]
    run = run_pairs(Subject("ref", argv), Subject("cand", argv), cases=["a"], pairs_per_case=1,
                    warmup_calls=0, timeout_s=30)  # fmt: skip
    details = [c.detail for p in run.pairs for c in (p.ref, p.cand)]
    assert len(details) == 2 and all("PermissionError" in str(d) for d in details), details


def test_work_counted_once_for_all_repeats_or_per_repeat_compares_equal() -> None:
    """The reference reports one work value for its 4 repeats, the candidate one per repeat:
    the same work either way, no flag; the candidate counting each repeat as the whole is
    four times the work, flagged."""

    def side(call: str, rate: float, work: list[float], wall: float) -> SimpleNamespace:
        return SimpleNamespace(
            call_id=call, correct=True, values={"tps": [rate] * 4, "tok": work}, wall_s=wall
        )

    def pairs(cand_work: list[float]) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(case="a", ref=side(f"r{i}", 100.0, [25.0], 1.0 + 0.001 * i),
                            cand=side(f"c{i}", 200.0, cand_work, 0.5 + 0.001 * i))
            for i in range(5)
        ]  # fmt: skip

    units, directions = {"tps": "tokens/s", "tok": "tokens"}, {"tps": "higher_is_better"}
    same = check_pairs(pairs([25.0] * 4), units, directions, work_metrics={"tps": "tok"})
    assert same is not None and not same.flagged, same
    more = check_pairs(pairs([100.0] * 4), units, directions, work_metrics={"tps": "tok"})
    assert more is not None and more.flagged
