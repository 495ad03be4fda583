"""Start-up code of the subjects' Python (R11): readiness records what Python runs before any
subject code (each ``.pth`` file's ``import`` lines, ``sitecustomize``, ``usercustomize``), and a
measurement whose subjects' Python runs start-up code the readiness did not record is refused
before anything runs, naming the file.

A throwaway virtual environment (``python -m venv --system-site-packages``) is the subjects'
interpreter, named by the readiness driver; its ``.pth`` plays an agent that slows only the
processes running the original's code (so that the candidate measures faster), installed after
readiness, where StartupWatch (which compares the files during a run) takes it as found.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_code_identity import FASTER, LOOP, _create, _subject
from wf_scenario import record_measured_aa, record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.app.decisions import record_decision
from perfledger.app.identity import check_startup_code
from perfledger.commands.registry.operations import execute
from perfledger.errors import RuleRefused
from perfledger.kernels.workload.startup_surface import STARTUP_CODE_ARTIFACT, startup_code
from subprocess_env import isolated_env, perfledger_command

#: The saboteur: at every Python start, a process whose script sits beside ``src/kern.py``
#: holding the original's loop sleeps (and says so in ``MARK``); the candidate's runs at speed.
SLOW_PTH = (
    "import os, sys, time; _k = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0] or "
    "'.')), 'src', 'kern.py'); _slow = os.path.exists(_k) and 'total = 0' in open(_k)."
    "read(); _slow and open(MARK, 'a').write(sys.argv[0] + '\\n'); _slow and time.sleep(0.2)\n"
)


def _venv(root: Path) -> tuple[Path, Path]:
    """A throwaway venv seeing the system's site-packages and, through a ``.pth`` of path
    lines, perfledger and its dependencies (so the subjects' workers run there): (its python,
    its site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(root)], check=True, capture_output=True)  # fmt: skip
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    import msgspec

    import perfledger

    paths = {str(Path(perfledger.__file__).parents[1]), str(Path(msgspec.__file__).parents[1])}
    (Path(site) / "zz-perfledger.pth").write_text("".join(f"{p}\n" for p in sorted(paths)))
    return python, Path(site)


def _session(tmp_path: Path, python: Path) -> tuple[Ledger, Path, Path]:
    """A ledger whose Target's readiness driver runs ``python`` (the edge snapshots the original
    and records its start-up code), with baseline, A/A and experiment e1 (candidate ``fast``)."""
    code = tmp_path / "code"
    orig, fast = _subject(code, "orig", LOOP), _subject(code, "fast", FASTER, util=True)
    env = machine_environment(tools=True)
    ledger = Ledger.init(tmp_path / "ledger", name="startup", actor="agent")
    execute(ledger, "target.freeze", {
        "target_id": "t1", "title": "sum of squares", "min_effect": 0.05,
        "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                    "statistic": "median"},
        "scope": ["src/*"], "risk_boundary": "none", "budget": {"wall_s": 3600.0, "gpu_s": 0.0},
    }, actor="agent")  # fmt: skip
    record_decision(ledger, "readiness.record", {
        "target_id": "t1", "original": {"content_hash": "sha256:" + "0" * 16,
                                        "subject": str(orig)},
        "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 2, "cases": ["small", "large"]},
        "accuracy_rule": "exact sum", "accuracy": {"compare": "exact"},
        "driver": {"argv": [str(python), "{subject}/bench.py", "{output}"]},
        "environment": env["readiness_environment"],
    }, actor="agent")  # fmt: skip
    execute(ledger, "metric-audit.record", {
        "target_id": "t1", "metric": "cpu_time", "numerator": "cpu time", "denominator": "call",
        "unit": "ms", "source": "perfledger's worker protocol", "reconstructed": False,
        "matches_target": True,
    }, actor="agent")  # fmt: skip
    record_measured_baseline(ledger, {
        "target_id": "t1", "original_hash": "sha256:" + "0" * 16, "metric": "cpu_time",
        "unit": "ms", "values": [5.0, 5.1, 4.9], "environment_id": env["environment_id"],
    }, actor="agent")  # fmt: skip
    record_measured_aa(ledger, "t1")
    execute(ledger, "evidence.add", {
        "evidence_id": "ev1", "layer": "workload", "tool": {"name": "manual", "version": "1"},
        "facts": [{"name": "share", "value": 0.95, "unit": "ratio"}],
    }, actor="agent")  # fmt: skip
    _create(ledger, "e1", fast)
    return ledger, orig, fast


def _measure(
    tmp_path: Path, python: Path, orig: Path, fast: Path, stage: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``perfledger measure workload`` of e1 at ``stage`` (the CLI, a process of its own)."""
    return subprocess.run(
        [*perfledger_command(), "--ledger", str(tmp_path / "ledger"), "measure", "workload",
         "--experiment", "e1", "--stage", stage, "--pairs", "5", "--warmup", "0", "--quiet",
         "--ref", f"{python} {orig}/bench.py {{output}}",
         "--cand", f"{python} {fast}/bench.py {{output}}", "--json", *extra],
        capture_output=True, text=True, env=isolated_env(tmp_path / "home"), timeout=300,
    )  # fmt: skip


def _recorded(ledger: Ledger) -> dict[str, Any]:
    (event,) = [e for e in ledger.events() if e.kind == "ReadinessRecorded"]
    return json.loads(ledger.artifact(event.id, STARTUP_CODE_ARTIFACT))


def test_cheat_a_pth_slowing_only_the_reference_installed_after_readiness_is_refused(
    tmp_path: Path,
) -> None:
    python, site = _venv(tmp_path / "venv")
    ledger, orig, fast = _session(tmp_path, python)
    recorded = _recorded(ledger)
    assert recorded["code"] == startup_code([str(python)])  # what this Python runs now
    ledger.close()  # the screen, measured before the saboteur is installed
    done = _measure(tmp_path, python, orig, fast, "screen", "--no-monitor")
    assert done.returncode == 0, done.stdout + done.stderr
    ledger = Ledger.open(tmp_path / "ledger")
    pth = site / "zz-slow-reference.pth"
    mark = tmp_path / "slowed"
    pth.write_text(SLOW_PTH.replace("MARK", repr(str(mark))))
    # it acts: a process running the original's code is slowed, the candidate's is not
    for subject in (orig, fast):
        subprocess.run([str(python), str(subject / "NOTES.md")], capture_output=True)
    assert set(mark.read_text().splitlines()) == {str(orig / "NOTES.md")}
    head = ledger.head()
    ledger.close()
    done = _measure(tmp_path, python, orig, fast, "target", "--monitor", "host")
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["rule"] == "R11" and str(pth) in error["message"], error
    assert "did not record" in error["message"]
    with Ledger.open(tmp_path / "ledger") as ledger:
        assert ledger.head() == head  # nothing recorded
        target = ledger.state().targets["t1"]
        pth.unlink()  # removed: what readiness recorded runs again
        check_startup_code(ledger, target)
        pth.write_text("import os\n")  # any import line not recorded is named
        with pytest.raises(RuleRefused, match=r"zz-slow-reference\.pth"):
            check_startup_code(ledger, target)


def test_readiness_records_the_start_up_code_installed_before_it(tmp_path: Path) -> None:
    """A ``.pth`` with an import line installed before readiness is in the readiness's record
    (the ledger shows the code that runs before every call), and measuring is not refused for
    it; a ``.pth`` of path lines only runs nothing and is not listed."""
    python, site = _venv(tmp_path / "venv")
    (site / "zz-early.pth").write_text("/nowhere\nimport os; os.environ.get('X')\n")
    (site / "zz-paths.pth").write_text("/nowhere\n")
    ledger, _orig, _fast = _session(tmp_path, python)
    with ledger:
        code = _recorded(ledger)["code"]
        assert code[str(site / "zz-early.pth")] == "import os; os.environ.get('X')"
        assert str(site / "zz-paths.pth") not in code
        check_startup_code(ledger, ledger.state().targets["t1"])
