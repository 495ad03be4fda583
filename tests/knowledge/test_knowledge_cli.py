"""``perfledger knowledge`` end to end: real subprocesses, a real ledger, the environment JSON
that ``perfledger env --json`` prints, user card directories and ``--record``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from subprocess_env import isolated_env, perfledger_command

USER_CARD = """
id = "team.split_softmax"
title = "Our split softmax needs Hopper"
kind = "mechanism"
statement = "Team finding: the split softmax kernel uses clusters."
mechanisms = ["split_softmax", "clusters"]
phenomena = ["reduction"]

[conditions]
sm_min = "sm_90"

[[sources]]
title = "CUDA C++ Programming Guide"
url = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
"""


def _run(
    env: dict[str, str], *args: str, ledger: Path | None = None
) -> subprocess.CompletedProcess[str]:
    prefix = ["--ledger", str(ledger)] if ledger else []
    return subprocess.run([*perfledger_command(), *prefix, *args], capture_output=True,
                          text=True, env=env, check=False)  # fmt: skip


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return isolated_env(tmp_path)


@pytest.fixture
def env_files(tmp_path: Path, env: dict[str, str]) -> dict[str, Path]:
    """This machine's `perfledger env --json`, and the same object made an A100 and an H200."""
    done = _run(env, "env", "--json")
    assert done.returncode == 0, done.stderr
    here = json.loads(done.stdout)
    out = {"here": tmp_path / "here.json"}
    out["here"].write_text(done.stdout)
    for name, cc, cuda in (("a100", "8.0", "12.4"), ("h200", "9.0", "13.0")):
        out[name] = tmp_path / f"{name}.json"
        out[name].write_text(json.dumps({**here, "compute_capability": cc,
                                         "cuda_driver_version": cuda,
                                         "nvcc_version": f"release {cuda}, V{cuda}.1"}))  # fmt: skip
    return out


@pytest.mark.slow
def test_query_against_two_environments_names_the_differences(
    env: dict[str, str], env_files: dict[str, Path]
) -> None:
    a100 = _run(env, "knowledge", "query", "--env", str(env_files["a100"]), "--mechanism",
                "tma", "--json")  # fmt: skip
    assert a100.returncode == 0, a100.stderr
    data = json.loads(a100.stdout)
    tma = next(r for r in data["results"] if r["id"] == "hopper.tma")
    assert tma["status"] == "incompatible"
    assert tma["differences"] == ["needs sm_90 or later, environment sm_80"]
    assert data["environment"]["sm"] == 80
    assert "never decides" in data["note"]
    h200 = json.loads(_run(env, "knowledge", "query", "--env", str(env_files["h200"]),
                           "--mechanism", "tma", "--json").stdout)  # fmt: skip
    assert next(r for r in h200["results"] if r["id"] == "hopper.tma")["status"] == "compatible"


@pytest.mark.slow
def test_query_on_this_machine_leaves_unknown_fields_related(
    env: dict[str, str], env_files: dict[str, Path]
) -> None:
    here = json.loads(env_files["here"].read_text())
    done = _run(env, "knowledge", "query", "--env", str(env_files["here"]), "--mechanism",
                "wgmma")  # fmt: skip
    assert done.returncode == 0, done.stderr
    if here["compute_capability"] is None:  # a machine without a GPU (CI)
        assert "related      hopper.wgmma" in done.stdout
        assert "environment's SM architecture unknown" in done.stdout


def test_an_empty_result_says_it_blocks_nothing(env: dict[str, str]) -> None:
    done = _run(env, "knowledge", "query", "--mechanism", "no_such_mechanism")
    assert done.returncode == 0
    assert "no card matched" in done.stdout and "blocks nothing" in done.stdout


@pytest.mark.slow
def test_user_cards_join_the_shipped_ones_and_a_bad_one_is_exit_2(
    tmp_path: Path, env: dict[str, str], env_files: dict[str, Path]
) -> None:
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "split.toml").write_text(USER_CARD)
    done = _run(env, "knowledge", "query", "--cards", str(cards), "--env",
                str(env_files["a100"]), "--mechanism", "clusters", "--json")  # fmt: skip
    ids = {r["id"]: r for r in json.loads(done.stdout)["results"]}
    assert ids["team.split_softmax"]["status"] == "incompatible"
    assert ids["team.split_softmax"]["origin"] == str(cards / "split.toml")
    assert "hopper.thread_block_clusters" in ids
    (cards / "bad.toml").write_text(USER_CARD.replace('sm_min = "sm_90"', "sm_min = 90"))
    bad = _run(env, "knowledge", "query", "--cards", str(cards))
    assert bad.returncode == 2
    assert "bad.toml" in bad.stderr and "conditions.sm_min" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--env", "missing.json"], "cannot read --env"),
        (["--library", "triton"], "is not NAME=VERSION"),
        (["--cards", "nowhere"], "is not a directory"),
    ],
)
def test_bad_arguments_are_exit_2_without_traceback(
    env: dict[str, str], args: list[str], needle: str
) -> None:
    done = _run(env, "knowledge", "query", *args)
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr


def test_an_env_file_of_the_wrong_shape_is_exit_2(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "cc.json").write_text('{"compute_capability": 9}')
    for name, needle in (("list.json", "must be the JSON object"), ("cc.json", "must be a string")):
        done = _run(env, "knowledge", "query", "--env", str(tmp_path / name))
        assert done.returncode == 2 and needle in done.stderr, done.stderr


@pytest.mark.slow
def test_record_appends_diagnostic_evidence_with_the_answer_attached(
    tmp_path: Path, env: dict[str, str], env_files: dict[str, Path]
) -> None:
    ledger = tmp_path / "ledger.git"
    assert _run(env, "init", str(ledger)).returncode == 0
    done = _run(env, "knowledge", "query", "--env", str(env_files["h200"]), "--phenomenon",
                "launch_overhead", "--library", "torch=2.5.1", "--record", "kq-launch", "--json",
                ledger=ledger)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["recorded"]["evidence_id"] == "kq-launch"
    shown = json.loads(_run(env, "evidence", "show", "kq-launch", "--json", ledger=ledger).stdout)
    evidence = shown["evidence"]
    assert evidence["applicability"] == "diagnostic"
    assert evidence["tool"]["name"] == "perfledger-knowledge"
    assert evidence["tool"]["version"].endswith("+cards." + answer["cards_digest"])
    facts = {f["name"]: f["value"] for f in evidence["facts"]}
    assert facts["cards_matched"] == len(answer["results"]) > 0
    assert facts["cards_compatible"] == answer["counts"]["compatible"]
    assert "knowledge-query.json" in shown["artifacts"]
    assert "pytorch.compile_modes compatible" in evidence["description"]
    audit = _run(env, "audit", "--json", ledger=ledger)
    assert audit.returncode == 0 and json.loads(audit.stdout)["ok"] is True
    again = _run(env, "knowledge", "query", "--record", "kq-launch", ledger=ledger)
    assert again.returncode == 2 and "already recorded" in again.stderr


@pytest.mark.slow
def test_check_and_show(env: dict[str, str]) -> None:
    check = _run(env, "knowledge", "check", "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["cards"] >= 30
    show = _run(env, "knowledge", "show", "l2.persistence", "--json")
    assert json.loads(show.stdout)["card"]["conditions"]["sm_min"] == "sm_80"
    assert _run(env, "knowledge", "show", "nope").returncode == 2


def test_query_against_the_recorded_h200_environment(tmp_path: Path, env: dict[str, str]) -> None:
    """The environment an H200 session recorded (examples/loop/recorded), piped through stdin."""
    recorded = Path(__file__).resolve().parents[2] / "examples" / "loop" / "recorded"
    h200 = json.loads((recorded / "h200_transpose_state.json").read_text())["setup"]["environment"]
    assert h200["gpu_name"] == "NVIDIA H200"
    done = subprocess.run(
        [*perfledger_command(), "knowledge", "query", "--env", "-", "--json"],
        input=json.dumps(h200), capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["environment"] == {"sm": 90, "cuda": "13.0", "toolkit": "13.0",
                                   "driver": "580.159.04", "libraries": {"cupy": "14.2.0"},
                                   "gpu": "NVIDIA H200"}  # fmt: skip
    status = {r["id"]: r for r in data["results"]}
    for card_id in ("hopper.tma", "hopper.wgmma", "hopper.thread_block_clusters", "l2.persistence"):
        assert status[card_id]["status"] == "compatible", status[card_id]
    assert status["blackwell.tcgen05_tensor_memory"]["differences"] == [
        "needs sm_100..sm_103, environment sm_90"
    ]
    assert status["fp8.tensor_cores"]["status"] == "related"  # no --dtype given
