"""Through the real CLI: a selection that breaks a rule is refused before anything is measured,
with exit 3, the rule in the JSON error, and the ledger's branch where it was (checked with the
real git CLI)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from loop_paths import CPU_EXAMPLE, answer


def _head(ledger: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(ledger), "rev-parse", "refs/heads/ledger"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@pytest.mark.slow
def test_refused_selection_changes_nothing_and_names_its_rule(loop_cli, tmp_path: Path) -> None:
    driver = f"python3 {CPU_EXAMPLE / 'subject.py'} {{kernel}} {{ref}} {{dims}} {{entry}}"
    answer(
        loop_cli(
            "loop", "setup", "--json", "--run", "cpu", "--baseline", CPU_EXAMPLE / "kernel_v0.py",
            "--ref", CPU_EXAMPLE / "ref.py", "--dims", '{"M": 16, "N": 32}', "--driver", driver,
            "--catalog", CPU_EXAMPLE / "catalog.toml", "--sm-arch", "sm_90",
        )
    )  # fmt: skip
    head = _head(loop_cli.ledger)
    cases = {
        # nothing was selected yet: "already_selected" is false
        "R24": {"compute": {"chosen": "compute.fuse_passes", "skipped": [
                    {"method": "compute.vectorize", "reason": "already_selected"}]},
                "memory": {"chosen": "memory.in_place"},
                "latency": {"chosen": "latency.threads", "skipped": [
                    {"method": "latency.batching", "reason": "skip_condition"},
                    {"method": "latency.preallocate", "reason": "coupled_group"}]}},
        # memory.in_place and latency.preallocate share the group "buffers"
        "R22": {"compute": {"chosen": "compute.vectorize"},
                "memory": {"chosen": "memory.in_place"},
                "latency": {"chosen": "latency.preallocate", "skipped": [
                    {"method": "latency.batching", "reason": "skip_condition"}]}},
        "R19": {"compute": {"chosen": "compute.vectorize"}, "memory": {"chosen": "memory.in_place"}},
    }  # fmt: skip
    analysis = tmp_path / "analysis.md"
    analysis.write_text("compute.vectorize latency.batching latency.preallocate\n")
    for rule, methods in cases.items():
        path = tmp_path / f"{rule}.json"
        path.write_text(json.dumps(methods))
        proc = loop_cli("loop", "close-iter", "--json", "--run", "cpu", "--iter", "1", "--kernel",
                        CPU_EXAMPLE / "kernel_v1.py", "--methods", path, "--analysis", analysis)  # fmt: skip
        assert proc.returncode == 3, (rule, proc.stdout, proc.stderr)
        error = json.loads(proc.stdout)["error"]
        assert error["rule"] == rule and error["code"] == "refused", error
        assert _head(loop_cli.ledger) == head
