"""What a new user stumbled on: flags for the common fields of a champion selection, and a
handoff whose resume steps are perfledger's own commands (which then work as written)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from wf_scenario import CAND1, Session

from perfledger.app.handoff import resume_context
from perfledger.projections.handoff import derive_handoff
from subprocess_env import isolated_env, perfledger_command


def _cli(ledger: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", str(ledger), *args],
        capture_output=True, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_champion_select_takes_every_required_field_as_a_flag(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    path = ready.ledger.path
    args = ("champion", "select", "--target", "t1", "--samples", "e1-target")
    stale = _cli(path, *args, "--expected-current", "e9", "--json")
    assert stale.returncode == 3 and json.loads(stale.stdout)["error"]["rule"] == "R13"
    done = _cli(path, *args, "--expected-current", "original", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["payload"]["experiment_id"] == "e1"


@pytest.mark.slow
def test_handoff_resume_steps_use_perfledger_clone_and_it_works(
    ready: Session, tmp_path: Path
) -> None:
    ledger = ready.ledger
    state = ledger.state()
    handoff = derive_handoff(state, "t1", resume_context(ledger, state, "t1"))
    steps = " ".join(handoff.resume_needs)
    assert "git clone" not in steps
    command = re.search(r"`(perfledger clone [^`]+)`", steps)
    assert command is not None, steps
    words = shlex.split(command.group(1).replace("COPY", str(tmp_path / "copy")))
    done = subprocess.run([sys.executable, "-m", *words], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert _cli(tmp_path / "copy", "verify").returncode == 0


def test_reject_takes_its_common_fields_as_flags(ready: Session) -> None:
    ready.screened("e1", CAND1)
    done = _cli(
        ready.ledger.path, "reject", "--experiment", "e1", "--closes", "implementation",
        "--reason", "slower than the original on the large case", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)["payload"]
    assert payload["closes"] == "implementation" and payload["reason"].startswith("slower")


@pytest.mark.slow
def test_init_says_how_to_reach_the_new_ledger_and_a_command_beside_it_names_it(
    tmp_path: Path,
) -> None:
    env = isolated_env(tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*perfledger_command(), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True)  # fmt: skip

    made = run("init", "ledger")
    assert made.returncode == 0, made.stderr
    use = f"use it: export PERFLEDGER_DIR={tmp_path / 'ledger'}"
    assert use in made.stdout and "next: `perfledger status`" in made.stdout
    lost = run("status")  # beside the ledger, not inside it
    assert lost.returncode == 2
    assert "found a ledger in ./ledger: pass --ledger ledger" in lost.stderr
    assert run("--ledger", "ledger", "status").returncode == 0
    (tmp_path / "work").mkdir()
    subprocess.run(["git", "init", "-q"], cwd=tmp_path / "work", env=env, check=True)
    inside = subprocess.run([*perfledger_command(), "init"], cwd=tmp_path / "work", env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert inside.returncode == 0, inside.stderr
    assert "use it:" not in inside.stdout  # a command run here finds it already
    assert "next: `perfledger status`" in inside.stdout


def test_handoff_record_of_a_target_without_gpu_budget_needs_no_gpu_used(bare: Session) -> None:
    from wf_scenario import target_freeze

    bare.run("target.freeze", target_freeze(budget={"wall_s": 600.0, "gpu_s": 0.0}))
    args = ("handoff", "record", "--target", "t1", "--stop-reason", "done", "--feedback", "none")
    done = _cli(bare.ledger.path, *args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    payload = json.loads(done.stdout)["payload"]
    assert payload["budget_used"]["gpu_s"] == 0.0 and payload["budget_left"]["gpu_s"] == 0.0


@pytest.mark.slow
def test_champion_select_without_expected_current_names_the_flag_then_says_what_is_next(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    args = ("champion", "select", "--target", "t1", "--samples", "e1-target")
    missing = _cli(ready.ledger.path, *args)
    assert missing.returncode == 2
    assert "hint: pass --expected-current: The champion you saw" in missing.stderr
    done = _cli(ready.ledger.path, *args, "--expected-current", "original")
    assert done.returncode == 0, done.stderr
    assert "champion of t1: e1 (was original)" in done.stdout
    assert "--experiment e1 --stage final_audit" in done.stdout


def test_experiment_create_answers_with_the_bound_it_computed(ready: Session) -> None:
    from wf_scenario import experiment

    body = experiment("e1", candidate=CAND1)
    done = subprocess.run(
        [*perfledger_command(), "--ledger", ready.ledger.path, "experiment", "create",
         "--request", "-"],
        input=json.dumps(body), capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Amdahl bound 1.429x" in done.stdout
    # the 5 % minimum effect is 5 % of the time saved: the region's time is cut by 0.05/0.6
    assert "to cross the minimum effect: local speedup 1.091x" in done.stdout
    assert "predicted end-to-end improvement [0.00 %, 30.00 %] as the verdict measures it" in (
        done.stdout
    )


def test_a_driver_without_subject_gets_a_suggestion_that_puts_its_script_in_the_code_dir() -> None:
    from perfledger.app.identity import driver_with_subject

    assert driver_with_subject(["python3", "sumsq.py", "--case", "{case}"]) == [
        "python3", "{subject}/sumsq.py", "--case", "{case}"]  # fmt: skip
    assert driver_with_subject(["python", "bench/run.py"]) == ["python", "{subject}/run.py"]
    assert driver_with_subject(["./bench", "--fast"]) == ["./bench", "--fast", "{subject}"]


def test_top_help_names_where_to_start_and_those_commands_work(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    shown = subprocess.run([*perfledger_command(), "--help"], capture_output=True, text=True,
                           env=env, check=True).stdout  # fmt: skip
    flat = " ".join(shown.split())
    for words in ("skill --print", "init DIR", "status", "schema OP --example"):
        assert f"`perfledger {words}`" in flat, words
    skill = subprocess.run([*perfledger_command(), "skill", "--print"], capture_output=True,
                           text=True, env=env)  # fmt: skip
    assert skill.returncode == 0 and skill.stdout.startswith("---\nname: perfledger")


@pytest.mark.slow
def test_unknown_ids_and_a_measured_request_without_request_say_what_to_run(
    ready: Session,
) -> None:
    path = ready.ledger.path
    unknown = _cli(path, "verdict", "record", "--samples", "nope")
    assert unknown.returncode == 2 and "measure workload --samples ID" in unknown.stderr
    ready.screened("e1", CAND1)
    known = _cli(path, "verdict", "record", "--samples", "nope")
    assert "recorded samples include e1-screen" in known.stderr
    no_experiment = _cli(path, "measure", "workload", "--experiment", "e9", "--stage", "screen",
                         "--ref", "true", "--cand", "true")  # fmt: skip
    assert no_experiment.returncode == 2 and "`perfledger experiment list`" in no_experiment.stderr
    bare = _cli(path, "baseline", "record", "--target", "t1")
    assert bare.returncode == 2
    assert "`perfledger measure baseline --target T --cmd CMD` measures" in bare.stderr
