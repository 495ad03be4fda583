"""Channels that carry code into a subject from outside its snapshot (R11; red36 E1, E2), on real
worker-protocol runs of read-only copies through :func:`perfledger.app.measure_workload.run_subjects`
(one case, two pairs): the caller's environment does not reach the subjects (only PATH, HOME,
the locale, the readiness driver's declared variables and the copy's own places, every value
recorded in full); another process's ``/proc/<pid>/...`` and any socket are refused naming
what was reached; an honest control of each runs and is recorded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from perfledger.app.identity import SubjectCopies
from perfledger.app.measure_workload import run_subjects
from perfledger.errors import RuleRefused
from perfledger.kernels.workload.snapshot import take_snapshot
from perfledger.kernels.workload.subject_copy import CopyGuard, prepare_subject
from perfledger.kernels.workload.subject_env import SUBJECT_ROOT_TOKEN

#: A worker whose output is the seed's sum plus what it saw of two variables; ``EXTRA`` runs
#: first in every call (the cheat under test, or nothing).
WORKER = """\
import json, os, random
from perfledger.subject import serve
def call(state, case, seed, output):
    EXTRA
    rng = random.Random(f"{case}:{seed}")
    seen = {"tuning": os.environ.get("SOFTMAX_TUNING"), "knob": os.environ.get("KNOB")}
    json.dump({"sum": sum(rng.random() for _ in range(200)), "seen": seen}, open(output, "w"))
serve(lambda: None, call)
"""
#: The code E1 carried in a variable: it would make the candidate's output differ if it ran.
TUNING = "seen = None  # code from the agent's environment"


def _copies(tmp_path: Path, cand_extra: str, declared: dict[str, str]) -> SubjectCopies:
    copies: dict[str, Any] = {}
    for label, extra in (("ref", "pass"), ("cand", cand_extra)):
        root = tmp_path / label
        root.mkdir()
        (root / "work.py").write_text(WORKER.replace("EXTRA", extra))
        taken = take_snapshot(
            label, [sys.executable, f"{label}/work.py"], lambda _r: True, tmp_path
        )
        copies[label] = prepare_subject(taken.snapshot, taken.blobs, label=label, base_env=declared)
    argvs = {
        label: [sys.executable, os.path.join(c.path, "work.py")] for label, c in copies.items()
    }
    guard = CopyGuard(copies, argvs, boot_per_call=False)
    return SubjectCopies(copies, argvs, guard, declared)


def _run(copies: SubjectCopies) -> Any:
    try:
        return run_subjects(
            copies.argvs, copies, cases=["a"], pairs_per_case=2, warmup_calls=0,
            accuracy={"compare": "exact"}, units={"cpu_time": "ms"}, timeout_s=60.0,
        )  # fmt: skip
    finally:
        copies.close()


@pytest.fixture(autouse=True)
def _bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    # the copies' private caches are written as a driver writes them (the guard expects it)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


def test_cheat_code_in_the_agents_environment_does_not_reach_the_subjects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """red36 E1: a variable of the agent's environment carrying code (``SOFTMAX_TUNING``) is
    not passed to either subject: the candidate reading it gets nothing, and the run records
    it as dropped, absent from both call environments; the readiness driver's declared
    variable (``KNOB``) reaches both and is recorded in full, as PATH is."""
    monkeypatch.setenv("SOFTMAX_TUNING", TUNING)
    extra = 'exec(os.environ.get("SOFTMAX_TUNING") or "pass")'
    run = _run(_copies(tmp_path, extra, {"KNOB": "declared"}))
    outputs = [json.loads(data) for data in run.outputs.values()]
    assert outputs and all(o["seen"] == {"tuning": None, "knob": "declared"} for o in outputs)
    assert all(row["correct"] for row in run.table())
    settings = run.settings
    assert "SOFTMAX_TUNING" in settings["environment_dropped"]
    for label in ("ref", "cand"):
        assert "SOFTMAX_TUNING" not in settings["call_environment"][label]
    recorded = settings["subject_environment"]
    assert recorded["KNOB"] == "declared" and recorded["PATH"] == os.environ["PATH"]
    assert recorded["TMPDIR"] == f"{SUBJECT_ROOT_TOKEN}/tmp"
    assert set(recorded) == set(settings["call_environment"]["ref"])


def test_cheat_a_subject_reading_another_processs_proc_entry_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    """red36 E2: another process's ``/proc/<pid>/cmdline`` (here the measuring process's, which
    names the reference's copy and could hold any text) is refused naming the file (R11)."""
    extra = 'open(f"/proc/{os.getppid()}/cmdline", "rb").read()'
    with pytest.raises(RuleRefused) as caught:
        _run(_copies(tmp_path, extra, {}))
    assert caught.value.rule == "R11"
    assert f"/proc/{os.getpid()}/cmdline" in caught.value.message
    assert "other process's /proc entry" in str(caught.value.hint)
    assert "candidate" in caught.value.message


def test_cheat_a_subject_using_a_socket_is_refused_naming_the_address(tmp_path: Path) -> None:
    """A socket to a process the agent started carries code as a variable does: a subject's
    connect is refused (R11) naming the address. (An AF_UNIX stream socket: the only kind the
    seccomp filter of perfledger.kernels.confine lets a subject make, for the CUDA driver; a
    UDP or TCP socket is refused there at its creation, before any address; its connect is
    refused too, which ``connect_ex`` returns instead of raising.)"""
    extra = (
        "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); "
        's.connect_ex("/tmp/perfledger-agent-answers.sock"); s.close()'
    )
    with pytest.raises(RuleRefused) as caught:
        _run(_copies(tmp_path, extra, {}))
    assert caught.value.rule == "R11"
    assert "/tmp/perfledger-agent-answers.sock" in caught.value.message


def test_an_honest_subject_reading_its_own_proc_entry_and_system_files_runs(
    tmp_path: Path,
) -> None:
    """The control: a subject reading its own ``/proc/self/...``, ``/proc/<own pid>/...``
    and the system-wide ``/proc/meminfo``, ``/proc/cpuinfo`` and ``/proc/sys/...`` files (as
    Python and NumPy do) is measured and recorded."""
    extra = (
        'open("/proc/self/status").read(); open(f"/proc/{os.getpid()}/stat").read(); '
        'open("/proc/meminfo").read(); open("/proc/cpuinfo").read(); '
        'open("/proc/sys/kernel/pid_max").read(); open("/proc/thread-self/stat").read()'
    )
    run = _run(_copies(tmp_path, extra, {}))
    assert all(row["correct"] for row in run.table()) and len(run.pairs()) == 2


#: A self-timed driver's subject: correct only where the agent's variable did not reach it.
DRIVER_BENCH = """\
import json, os
seen = os.environ.get("SOFTMAX_TUNING")
print(json.dumps({"correct": seen is None, "metrics": {"t": 1.0}}))
"""


def test_cheat_code_in_the_agents_environment_does_not_reach_a_self_timed_drivers_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """red36 E1 under the self-timed driver protocol: subjects that run from copies get the
    same closed environment as workers; the agent's variable is dropped and said so."""
    from perfledger.kernels.workload.driver import Subject
    from perfledger.kernels.workload.driver import run_pairs as run_driver

    monkeypatch.setenv("SOFTMAX_TUNING", TUNING)
    copies = {}
    for label in ("ref", "cand"):
        root = tmp_path / label
        root.mkdir()
        (root / "bench.py").write_text(DRIVER_BENCH)
        argv = [sys.executable, f"{label}/bench.py"]
        taken = take_snapshot(label, argv, lambda _r: True, tmp_path)
        copies[label] = prepare_subject(taken.snapshot, taken.blobs, label=label)
    try:
        subjects = [
            Subject(label, [sys.executable, os.path.join(c.path, "bench.py")], env=c.env)
            for label, c in copies.items()
        ]
        run = run_driver(
            *subjects, cases=["a"], pairs_per_case=2, warmup_calls=0,
            subject_roots={label: c.root for label, c in copies.items()},
        )  # fmt: skip
    finally:
        for copy in copies.values():
            copy.close()
    assert all(p.ref.correct and p.cand.correct for p in run.pairs), run.pairs[0]
    assert "SOFTMAX_TUNING" in run.settings["environment_dropped"]
    assert "SOFTMAX_TUNING" not in run.settings["call_environment"]["cand"]
    assert run.settings["subject_environment"]["PATH"] == os.environ["PATH"]
