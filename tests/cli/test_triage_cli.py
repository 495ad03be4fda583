"""``perfledger triage`` end to end: real subprocesses, real ledgers, the real H200 traces; the
recorded triage audits clean; bad input is refused with no ledger change; the docs' example runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import T1, target_freeze

ROOT = Path(__file__).resolve().parents[2]
F = ROOT / "tests" / "fixtures" / "triage"
PATHS = '[[path]]\npattern = "gemm|Kernel2<cutlass"\nroute = "cuBLASLt algorithm choice; TF32"\n'


@pytest.fixture
def ledger(tmp_path: Path, cli: Any) -> Path:
    """A ledger with Target T1 frozen."""
    path = tmp_path / "repo"
    assert cli("init", path).returncode == 0
    body = tmp_path / "target.json"
    body.write_text(json.dumps(target_freeze()))
    done = cli("--ledger", path, "target", "freeze", "--request", body)
    assert done.returncode == 0, done.stderr
    return path


def _events(cli: Any, ledger: Path) -> int:
    done = cli("--ledger", ledger, "audit", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["events"]


@pytest.mark.slow
def test_record_of_target_is_same_boundary_evidence_that_audits_clean(
    cli: Any, ledger: Path, tmp_path: Path
) -> None:
    paths = tmp_path / "paths.toml"
    paths.write_text(PATHS)
    done = cli("--ledger", ledger, "triage", F / "forward_graph_on.json", "--mapping",
               F / "forward_graph_off.json", "--known-paths", paths, "--top", "4", "--record",
               "tri-1", "--target", T1, "--of-target", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["recorded"]["applicability"] == "same_boundary"
    assert answer["graph"]["attributed"] == 16
    assert [a["known"] for a in answer["actions"]] == [True, True, True, False]
    shown = json.loads(cli("--ledger", ledger, "evidence", "show", "tri-1", "--json").stdout)
    evidence = shown["evidence"]
    assert evidence["target_id"] == T1 and evidence["tool"]["name"] == "perfledger-triage"
    assert set(shown["artifacts"]) == {"report", "mapping", "known-paths.toml", "triage.json"}
    facts = {f["name"]: f["value"] for f in evidence["facts"]}
    assert facts["k0.f"] == answer["actions"][0]["f"] and facts["graph_kernels_attributed"] == 16
    audit = json.loads(cli("--ledger", ledger, "audit", "--json").stdout)
    assert audit["ok"] is True and audit["evidence"]["rederived"] == 1


@pytest.mark.slow
def test_record_without_of_target_is_diagnostic(cli: Any, ledger: Path) -> None:
    done = cli("--ledger", ledger, "triage", F / "nsys_triage.sqlite", "--record", "tri-n",
               "--denominator", "span")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "recorded evidence tri-n (diagnostic)" in done.stdout
    assert "action table (f = share of span)" in done.stdout
    assert "2 kernel launches in 1 graph launch(es); 0 attributed" in done.stdout
    again = cli("--ledger", ledger, "triage", F / "nsys_triage.sqlite", "--record", "tri-n")
    assert again.returncode == 2 and "already recorded" in again.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "known_paths", "message"),
    [
        ("not a trace\n", None, "not a trace perfledger triages"),
        (None, "[[path]]\npattern = 'gemm'\n", "missing required field `route`"),
        (None, "[[path]]\npattern = '(gemm'\nroute = 'r'\n", "path[0].pattern '(gemm'"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    cli: Any, ledger: Path, tmp_path: Path, content: str | None, known_paths: str | None,
    message: str,
) -> None:  # fmt: skip
    report = F / "forward_graph_off.json"
    if content is not None:
        report = tmp_path / "report.json"
        report.write_text(content)
    args = ["--ledger", ledger, "triage", report, "--record", "bad", "--target", T1,
            "--of-target"]  # fmt: skip
    if known_paths is not None:
        (tmp_path / "paths.toml").write_text(known_paths)
        args += ["--known-paths", tmp_path / "paths.toml"]
    before = _events(cli, ledger)
    done = cli(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert _events(cli, ledger) == before


@pytest.mark.slow
def test_of_target_without_target_and_unknown_target_are_refused(cli: Any, ledger: Path) -> None:
    before = _events(cli, ledger)
    no_target = cli("--ledger", ledger, "triage", F / "forward_graph_off.json", "--record", "x",
                    "--of-target")  # fmt: skip
    assert no_target.returncode == 2 and "--of-target needs --target" in no_target.stderr
    unknown = cli("--ledger", ledger, "triage", F / "forward_graph_off.json", "--record", "x",
                  "--target", "nope", "--of-target", "--json")  # fmt: skip
    assert unknown.returncode == 3 and json.loads(unknown.stdout)["error"]["rule"] == "R1"
    assert _events(cli, ledger) == before


@pytest.mark.slow
def test_the_docs_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "triage.md").read_text(), flags=re.S)
    script = next(b for b in blocks if "perfledger triage" in b).replace("/tmp/", f"{tmp_path}/")
    script = script.replace("F=tests/fixtures/triage", f"F={F}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFLEDGER_", "GIT_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", HOME=str(tmp_path),
               PERFLEDGER_ACTOR="docs", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")  # fmt: skip
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16 attributed through forward_graph_off.json" in done.stdout
    assert "state_hash" in done.stdout and "1 re-derived" in done.stdout
    answer = json.loads((tmp_path / "triage.json").read_text())
    assert [round(a["f"], 4) for a in answer["actions"]] == [0.5152, 0.2910, 0.0961, 0.0316]
    assert [a["action"] for a in answer["actions"]][3] == "new opportunity"
