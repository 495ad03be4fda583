"""``perfledger status``: one screen of where a session stands (Target, readiness chain,
champion and its final audit, open experiments, obligations, next decisions), as a library
call on real ledgers and through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import CAND1, CAND2, Session

from perfledger.api import Ledger
from perfledger.app.status import session_status_with_commands as session_status


def _ops(target: dict[str, Any]) -> list[str]:
    return [d["op"] for d in target["next"]]


def test_status_of_a_ledger_without_target_says_to_freeze_one(tmp_path: Path) -> None:
    ledger = Ledger.init(tmp_path / "l", name="l", actor="a")
    try:
        status = session_status(ledger)
    finally:
        ledger.close()
    assert status["targets"] == []
    assert [d["op"] for d in status["next"]] == ["evidence.add", "target.freeze"]
    assert status["next"][1]["command"] == "perfledger target freeze --request FILE"
    assert status["ledger"].endswith("l")


def test_status_names_the_missing_readiness_step_as_the_next_decision(bare: Session) -> None:
    from wf_scenario import metric_audit, readiness, target_freeze

    bare.run("target.freeze", target_freeze())
    (target,) = session_status(bare.ledger)["targets"]
    assert target["ready"] == {
        "readiness": False, "metric_audit": False, "baseline": False, "resolution": False,
    }  # fmt: skip
    assert _ops(target)[0] == "readiness.record"
    commands = {d["op"]: d["command"] for d in target["next"]}
    assert commands["readiness.record"] == "perfledger readiness record --target t1 --request FILE"
    # a step a measurement records names the measurement, not the bare write
    bare.run("readiness.record", readiness())
    bare.run("metric-audit.record", metric_audit())
    (target,) = session_status(bare.ledger)["targets"]
    assert [d["command"] for d in target["next"]] == [
        "perfledger measure baseline --target t1 --cmd CMD"
    ]
    # what CMD is: a command line as typed, {subject} written as the directory (issue 38)
    assert "CMD is a command line as you type it" in target["cmd"]
    assert "{subject} written as the code's directory" in target["cmd"]
    assert target["champion"] == "original" and target["final_audit"]["status"] == "none"


def test_status_shows_an_owed_reconciliation_and_offers_reconcile_not_experiments(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1, gain=-0.1)  # outside its claim's interval: R14 owed
    (target,) = session_status(ready.ledger)["targets"]
    owed = [o for o in target["obligations"] if o["kind"] == "reconciliation"]
    assert owed and owed[0]["about"] == "e1" and owed[0]["rule"] == "R14"
    assert "reconcile" in _ops(target) and "experiment.create" not in _ops(target)
    (e1,) = target["experiments"]
    assert e1["stage"] == "target" and e1["verdicts"]["e1-target"] in ("fail", "inconclusive")


def test_status_flags_a_passed_result_made_stale_by_a_newer_champion(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.passed("e2", CAND2, gain=0.2)
    ready.champion("e1")
    (target,) = session_status(ready.ledger)["targets"]
    assert target["champion"] == "e1"
    stale = [o for o in target["obligations"] if o["kind"] == "stale"]
    assert [o["about"] for o in stale] == ["e2-target"]
    assert [e["experiment_id"] for e in target["experiments"]] == ["e2"]  # e1 is champion
    assert "samples.record" in _ops(target)  # final-audit samples of the champion


@pytest.mark.slow
def test_status_cli_prints_one_screen_and_json(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    base = [sys.executable, "-m", "perfledger", "--ledger", ready.ledger.path, "status"]
    text = subprocess.run(base, capture_output=True, text=True, check=True).stdout
    assert "Target t1" in text and "champion e1; final audit none" in text
    assert (
        "perfledger measure workload --experiment e1 --stage final_audit" in text and "[e1]" in text
    )
    assert "perfledger handoff record --target t1 --gpu-used S --stop-reason TEXT" in text
    assert "perfledger experiment create --target t1 --request FILE" in text
    data = json.loads(subprocess.run([*base, "--json"], capture_output=True, text=True,
                                     check=True).stdout)  # fmt: skip
    assert data["targets"][0]["champion"] == "e1"
    unknown = subprocess.run([*base, "--target", "nope"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "no Target 'nope'" in unknown.stderr


def test_status_piped_keeps_each_experiment_row_on_one_line(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    base = [sys.executable, "-m", "perfledger", "--ledger", ready.ledger.path, "status"]
    text = subprocess.run(base, capture_output=True, text=True, check=True).stdout
    (row,) = [line for line in text.splitlines() if line.split()[:1] == ["e1"]]
    assert "e1-screen inconclusive, e1-target pass" in row


def test_status_needs_neither_dulwich_nor_rich(bare: Session) -> None:
    """``perfledger status`` answers from the state cache and the repository's config file:
    importing dulwich (for the remotes) or rich (for the table) cost it about as much as its
    answer (issue 33, "Fast answers")."""
    from wf_scenario import target_freeze

    bare.run("target.freeze", target_freeze())
    path = bare.ledger.path
    subprocess.run(["git", "--git-dir", path, "remote", "add", "up", "/srv/up.git"], check=True)
    code = (
        "import sys\n"
        "from perfledger.commands.cli.app import main\n"
        "try:\n"
        f"    main(['--ledger', {path!r}, 'status'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('LOADED', sorted(m for m in sys.modules if m.startswith(('dulwich', 'rich'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Target t1" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "LOADED []", out.stdout[-500:]


def test_cmd_help_and_status_say_a_literal_command_line_is_cmd(tmp_path: Path) -> None:
    """The measuring commands' CMD (``measure baseline --cmd``, ``measure aa --cmd``,
    ``measure workload --ref/--cand``): their help says a command line as typed, with
    ``{subject}`` written as the code's directory, as status's line under the offered command
    does (it names the original's own command line once readiness bound it). Before, the help
    said "the readiness driver with the original's code directory in its {subject} place" and
    status only "CMD"."""
    from perfledger.app.status import cmd_legend

    for args in (["measure", "baseline"], ["measure", "aa"], ["measure", "workload"]):
        shown = subprocess.run([sys.executable, "-m", "perfledger", *args, "--help"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        flat = " ".join(shown.split())
        assert "command line as typed" in flat and "{subject} written as" in flat, args

    from wf_scenario import readiness, target_freeze

    from perfledger.app.identity import readiness_edge
    from perfledger.commands.registry.operations import execute

    original = tmp_path / "work" / "original"
    original.mkdir(parents=True)
    (original / "bench.py").write_text("import sys\n")
    driver = {"argv": ["python3", "{subject}/bench.py", "{case}", "{output}"]}
    body = readiness(original={"content_hash": "sha256:0000000000000000", "subject": str(original)},
                     driver=driver, accuracy={"compare": "exact"})  # fmt: skip
    with Ledger.init(tmp_path / "ledger", name="cmd", actor="agent") as ledger:
        execute(ledger, "target.freeze", target_freeze(scope=["bench.py"]), actor="agent")
        body, artifacts = readiness_edge(ledger, body)
        execute(ledger, "readiness.record", body, actor="agent", artifacts=artifacts)
        legend = cmd_legend(ledger.state().targets["t1"])
    assert legend is not None
    assert f"'python3 {original}/bench.py {{case}} {{output}}'" in legend
