"""`perfledger evidence add --kind`, `evidence ncu`, `evidence list|show` through the real CLI
against real git ledgers: every parsed report becomes one EvidenceRecorded event with the raw
report as its artifact; every refusal exits 2 and leaves the ledger unchanged."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import blake3
import pytest

import perfledger
from perfledger.events.kinds import validate_payload
from subprocess_env import isolated_env, perfledger_command

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profilers"
NCU_VERSION = (FIXTURES / "ncu_version.txt").read_text()
SHA = "sha256:" + (FIXTURES / "app.sha256").read_text().split()[0]

KINDS = [
    ("ncu-d", "ncu", "ncu_details_rules.csv", ["--tool-version", NCU_VERSION]),
    ("ncu-r", "ncu", "ncu_raw.csv", ["--tool-version", NCU_VERSION]),
    ("ncu-s", "ncu", "ncu_summary.csv", ["--tool-version", NCU_VERSION]),
    ("nsys-q", "nsys", "nsys_synthetic.sqlite", []),
    ("nsys-c", "nsys-stats", "nsys_stats_cuda_gpu_kern_sum.csv", ["--tool-version", "2025.3.1.90"]),
    ("torch", "torch", "torch_trace.json", ["--tool-version", "2.11.0"]),
    ("ptxas", "ptxas", "ptxas_v.txt", ["--tool-version", "13.0.88"]),
    ("sass", "sass", "cuobjdump_sass.txt", ["--tool-version", "13.0.88", "--binary-hash", SHA]),
]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**isolated_env(tmp_path / "home"), "PERFLEDGER_ACTOR": "tester"}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*perfledger_command(), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


@pytest.fixture
def ledger(tmp_path: Path, env: dict[str, str]) -> Path:
    path = tmp_path / "ledger"
    assert run(env, "init", str(path)).returncode == 0
    return path


@pytest.mark.slow
def test_every_kind_becomes_one_event_with_its_raw_report(
    ledger: Path, env: dict[str, str]
) -> None:
    for evidence_id, kind, name, extra in KINDS:
        proc = run(
            env,
            "--ledger",
            str(ledger),
            "--json",
            "evidence",
            "add",
            "--kind",
            kind,
            str(FIXTURES / name),
            "--evidence-id",
            evidence_id,
            *extra,
        )
        assert proc.returncode == 0, proc.stderr
        answer = json.loads(proc.stdout)
        assert answer["kind"] == "EvidenceRecorded"
        payload = answer["payload"]
        raw = (FIXTURES / name).read_bytes()
        digest = "blake3:" + blake3.blake3(raw).hexdigest()
        assert payload["report_hash"] == digest == payload["capture"]["source_hash"]
        assert payload["capture"]["source_file"] == name
        assert payload["applicability"] == "diagnostic"
        assert payload["facts"] and all(f["unit"] for f in payload["facts"])
    listing = json.loads(run(env, "--ledger", str(ledger), "--json", "evidence", "list").stdout)
    assert [r["evidence_id"] for r in listing["evidence"]] == [k[0] for k in KINDS]
    shown = json.loads(
        run(env, "--ledger", str(ledger), "--json", "evidence", "show", "torch").stdout
    )
    assert shown["evidence"]["layer"] == "workload"
    assert shown["evidence"]["boundary"]["kernels"][0]["grids"] == ["(8, 8, 4)"]
    opened = perfledger.open(str(ledger))
    try:
        assert (
            opened.artifact(shown["event_id"], "report")
            == (FIXTURES / "torch_trace.json").read_bytes()
        )
        assert opened.verify().ok
    finally:
        opened.close()
    fsck = subprocess.run(
        ["git", "--git-dir", str(ledger), "fsck", "--strict", "--full"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert fsck.returncode == 0, fsck.stderr


def test_r6_refused_report_changes_nothing(ledger: Path, env: dict[str, str]) -> None:
    head = subprocess.run(
        ["git", "--git-dir", str(ledger), "rev-parse", "ledger"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    bad = ledger.parent / "bad.csv"
    bad.write_text(
        (FIXTURES / "ncu_details_norules.csv")
        .read_text()
        .replace('"Elapsed Cycles","cycle"', '"Elapsed Cycles","parsec"')
    )
    proc = run(
        env,
        "--ledger",
        str(ledger),
        "--json",
        "evidence",
        "add",
        "--kind",
        "ncu",
        str(bad),
        "--evidence-id",
        "x",
        "--tool-version",
        NCU_VERSION,
    )
    assert proc.returncode == 2
    error = json.loads(proc.stdout or proc.stderr)["error"]
    assert error["code"] == "bad_evidence" and "parsec" in error["message"]
    proc = run(
        env,
        "--ledger",
        str(ledger),
        "evidence",
        "add",
        "--kind",
        "ncu",
        str(FIXTURES / "ncu_raw.csv"),
        "--evidence-id",
        "x",
    )
    assert proc.returncode == 2 and "--tool-version" in proc.stderr
    after = subprocess.run(
        ["git", "--git-dir", str(ledger), "rev-parse", "ledger"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert after == head


def test_r16_counter_permission_recorded_as_limitation(ledger: Path, env: dict[str, str]) -> None:
    report = ledger.parent / "perm.txt"
    report.write_text(
        "==PROF== Connected to process 1 (/tmp/app)\n==ERROR== ERR_NVGPUCTRPERM - The user does "
        "not have permission to access NVIDIA GPU Performance Counters on the target device 0.\n"
    )
    proc = run(
        env,
        "--ledger",
        str(ledger),
        "--json",
        "evidence",
        "add",
        "--kind",
        "ncu",
        str(report),
        "--evidence-id",
        "perm",
        "--tool-version",
        NCU_VERSION,
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)["payload"]
    assert payload["facts"] == [] and "ERR_NVGPUCTRPERM" in payload["limitations"][0]


def _replay_ncu(tmp_path: Path) -> Path:
    """A stand-in `ncu` that replays the real H200 capture (ncu itself is not installed on this
    machine): it checks the options perfledger must pass and LC_ALL=C, then prints the captured
    output, so the capture path (argv, version, exit status) runs for real as subprocesses."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ncu"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then cat "{FIXTURES / "ncu_version.txt"}"; exit 0; fi\n'
        '[ "$LC_ALL" = C ] || { echo "LC_ALL is not C" >&2; exit 9; }\n'
        'case "$*" in *"--csv --print-units base --page details --clock-control none"*) ;; '
        '*) echo "bad options: $*" >&2; exit 8;; esac\n'
        f'cat "{FIXTURES / "ncu_details_rules.csv"}"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


@pytest.mark.slow
def test_evidence_ncu_records_command_version_and_status(
    ledger: Path, env: dict[str, str], tmp_path: Path
) -> None:
    bindir = _replay_ncu(tmp_path)
    env = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}"}
    proc = run(
        env,
        "--ledger",
        str(ledger),
        "--json",
        "evidence",
        "ncu",
        "--evidence-id",
        "cap",
        "--applicability",
        "same_boundary",
        "--shapes",
        "n=4194304",
        "--ncu-option=-c",
        "--ncu-option=4",
        "--",
        "./app",
        "-x",
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)["payload"]
    assert payload["tool"] == {"name": "ncu", "version": "2025.3.1.0"}
    assert payload["capture"]["command"][-4:] == ["-c", "4", "./app", "-x"]
    assert "--clock-control" in payload["capture"]["command"]
    assert payload["capture"]["exit_status"] == 0
    assert payload["applicability"] == "same_boundary"
    assert payload["boundary"]["shapes"] == "n=4194304"


@pytest.mark.gpu
def test_evidence_ncu_on_a_real_gpu(ledger: Path, env: dict[str, str], tmp_path: Path) -> None:
    """Runs the real ncu on app.cu where ncu, nvcc and a GPU exist (the device machine)."""
    if shutil.which("ncu") is None or shutil.which("nvcc") is None:
        pytest.skip("ncu and nvcc are not installed here")
    binary = tmp_path / "app"
    subprocess.run(["nvcc", "-O3", "-o", str(binary), str(FIXTURES / "app.cu")], check=True)
    proc = run(
        env,
        "--ledger",
        str(ledger),
        "--json",
        "evidence",
        "ncu",
        "--evidence-id",
        "real",
        "--",
        str(binary),
    )
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)["payload"]
    assert payload["facts"] or payload["limitations"]


@pytest.mark.slow
def test_plain_request_path_still_works(ledger: Path, env: dict[str, str]) -> None:
    request = ledger.parent / "req.json"
    request.write_text(
        json.dumps(
            {
                "evidence_id": "hand",
                "layer": "kernel",
                "tool": {"name": "ncu", "version": "2025.3.1"},
                "facts": [{"name": "dram_pct", "value": 49.6, "unit": "%"}],
            }
        )
    )
    proc = run(env, "--ledger", str(ledger), "evidence", "add", "--request", str(request))
    assert proc.returncode == 0, proc.stderr


def test_old_payload_without_new_fields_still_decodes() -> None:
    struct, _ = validate_payload(
        "EvidenceRecorded",
        {
            "kind": "EvidenceRecorded",
            "evidence_id": "old",
            "layer": "kernel",
            "tool": {"name": "ncu", "version": "2024.1"},
            "facts": [],
            "limitations": [],
            "target_id": None,
            "description": "",
            "report_hash": None,
        },
    )
    assert struct.applicability is None and struct.boundary is None and struct.capture is None


@pytest.mark.slow
def test_ncu_rep_without_ncu_is_refused_with_the_export_command(
    ledger: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`evidence add --kind ncu X.ncu-rep` where ncu is not installed: exit 2, nothing appended,
    and the message gives the `ncu --import ... --csv` command to run where it is."""
    env = {**env, "PERFLEDGER_NCU": str(tmp_path / "no-ncu-here")}
    report = FIXTURES / "rep.ncu-rep"
    proc = run(env, "--ledger", str(ledger), "evidence", "add", "--kind", "ncu", str(report),
               "--evidence-id", "rep", "--tool-version", NCU_VERSION)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "needs Nsight Compute" in proc.stderr
    assert f"ncu --import {report} --csv --print-units base --page details" in proc.stderr
    listed = run(env, "--ledger", str(ledger), "--json", "evidence", "list")
    assert json.loads(listed.stdout)["evidence"] == [], listed.stdout
