"""Kernel subjects bound to code snapshots (R11, ``docs/code-identity.md`` "Kernel subjects"):
``measure kernel --ref DIR --cand DIR`` and ``measure aa --dir DIR`` on a Target whose readiness
driver is the spec's path in the subject directory. The refusals come before any worker starts
(so they are tested here through the real CLI on a real ledger, without a GPU); the workers'
directories through stand-in workers (tests/kernels/stand_in_worker.py); the whole recorded
path on a GPU (marked ``gpu``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import record_measured_aa, record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.app.identity import readiness_edge
from perfledger.app.snapshots import candidate_edge
from perfledger.commands.registry.operations import execute
from perfledger.errors import BadRequest
from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec
from subprocess_env import isolated_env, perfledger_command

ORIGINAL = "sha256:" + "0" * 16
#: A kernel spec living in its subject directory: the scale kernel, whose extra work share is
#: read (relative to the worker's cwd, the subject directory) from kernels/share.txt.
SPEC = """
from pathlib import Path

from perfledger.kernels.harness.examples import scale_problem, scale_subject
from perfledger.kernels.harness.harness import HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule

N = 1 << 24
SHARE = float(Path("kernels/share.txt").read_text())
PROBLEMS = {"n16M": scale_problem(N)}
SUBJECT = scale_subject(N, extra_share=SHARE, name=f"scale+{SHARE}")
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.3, max_gpu_s=3.0))
"""


def _subject(root: Path, name: str, share: str, spec: str = SPEC) -> Path:
    d = root / name
    (d / "kernels").mkdir(parents=True)
    (d / "spec.py").write_text(spec)
    (d / "kernels" / "share.txt").write_text(share)
    return d


class Bound:
    """A ledger whose kernel Target's readiness snapshotted ``code/orig``, experiment e1, and a
    CLI runner working in ``code``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = isolated_env(tmp)
        self.ledger = tmp / "ledger"
        self.code = tmp / "code"
        self.orig = _subject(self.code, "orig", "0.0")
        self.cand = _subject(self.code, "cand", "0.03")
        env = machine_environment(tools=True)
        with Ledger.init(self.ledger, name="kid", actor="agent") as ledger:
            run = lambda op, body, **kw: execute(ledger, op, body, actor="agent", **kw)  # noqa: E731
            run("target.freeze", {
                "target_id": "t1", "title": "scale kernel", "min_effect": 0.01,
                "primary": {"name": "kernel_time_us", "unit": "us",
                            "direction": "lower_is_better", "statistic": "median"},
                "scope": ["kernels/*"], "risk_boundary": "none",
                "budget": {"wall_s": 3600.0, "gpu_s": 600.0},
            })  # fmt: skip
            body, files = readiness_edge(ledger, {
                "target_id": "t1",
                "original": {"content_hash": ORIGINAL, "subject": str(self.orig)},
                "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["n16M"]},
                "accuracy_rule": "the harness's tolerances",
                "driver": {"argv": ["{subject}/spec.py"]},
                "environment": env["readiness_environment"],
            })  # fmt: skip
            run("readiness.record", body, artifacts=files)
            run("metric-audit.record", {
                "target_id": "t1", "metric": "kernel_time_us", "numerator": "GPU time",
                "denominator": "call", "unit": "us", "source": "harness", "reconstructed": False,
                "matches_target": True,
            })  # fmt: skip
            record_measured_baseline(ledger, {
                "target_id": "t1", "original_hash": ORIGINAL, "metric": "kernel_time_us",
                "unit": "us", "values": [100.0, 101.0, 99.0],
                "environment_id": env["environment_id"],
            })  # fmt: skip
            record_measured_aa(ledger, "t1")  # R4: as `measure aa --record`
            run("evidence.add", {
                "evidence_id": "ev1", "layer": "kernel", "tool": {"name": "manual", "version": "1"},
                "facts": [{"name": "share", "value": 0.9, "unit": "ratio"}],
            })  # fmt: skip
            body, files = candidate_edge(ledger, {
                "experiment_id": "e1", "target_id": "t1", "title": "scale with less work",
                "candidate": {"subject": str(self.cand)},
                "claim": {
                    "evidence": [
                        {"evidence_id": "ev1", "applicability": "same_boundary",
                         "used_for": "coverage"},
                        {"evidence_id": "ev1", "applicability": "conservative_upper_bound",
                         "used_for": "local_speedup"},
                    ],
                    "scope": {"replaced_region": "scale", "execution_form": "cuda"},
                    "replacement_boundary": "the scale kernel", "coverage": 0.9,
                    "local_speedup": 2.0, "stated_bound": 1.0 / (0.1 + 0.45),
                    "expected_improvement": {"low": 0.0, "high": 1.0 - (0.1 + 0.45)},
                },
                "preregistration": {"rejects": "implementation"},
            })  # fmt: skip
            run("experiment.create", body, artifacts=files)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*perfledger_command(), "--ledger", str(self.ledger), *args, "--json"],
            capture_output=True, text=True, env=self.env, cwd=self.code, timeout=600,
        )  # fmt: skip

    def kernel(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli("measure", "kernel", "--experiment", "e1", "--stage", "screen",
                        "--quiet", *args)  # fmt: skip

    def head(self) -> str:
        """The ledger's head commit, read in-process (what the CLI does is not under test)."""
        with Ledger.open(self.ledger) as ledger:
            return str(ledger.head())


@pytest.fixture
def bound(tmp_path: Path) -> Bound:
    return Bound(tmp_path)


def _refused(done: subprocess.CompletedProcess[str], *names: str) -> dict[str, Any]:
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["rule"] == "R11" and all(n in error["message"] for n in names), error
    return dict(error)


def test_r11_kernel_reference_directory_that_is_not_the_originals_is_refused(
    bound: Bound,
) -> None:
    other = _subject(bound.code, "other", "0.01")
    head = bound.head()
    error = _refused(bound.kernel("--ref", str(other), "--cand", str(bound.cand)),
                     "not the code of the original", "kernels/share.txt")  # fmt: skip
    assert "perfledger checkout" in error["hint"]
    assert bound.head() == head  # nothing recorded, no worker started


def test_r11_kernel_candidate_changing_a_path_outside_the_scope_is_refused(bound: Bound) -> None:
    edited = _subject(bound.code, "edited", "0.03", SPEC.replace("3.0))", "1.0))"))
    _refused(bound.kernel("--ref", str(bound.orig), "--cand", str(edited)),
             "outside the Target's modification scope", "spec.py")  # fmt: skip


def test_r11_kernel_candidate_identical_to_the_original_is_refused(bound: Bound) -> None:
    copy = bound.code / "copy"
    shutil.copytree(bound.orig, copy)
    _refused(bound.kernel("--ref", str(bound.orig), "--cand", str(copy)), "must differ")


def test_r11_kernel_target_bound_to_code_needs_directories_not_one_spec(bound: Bound) -> None:
    none = bound.kernel()
    error = _refused(none, "binds samples to code snapshots")
    assert "--ref DIR" in error["hint"] and "'spec.py'" in error["hint"]
    spec = bound.kernel("--spec", str(bound.cand / "spec.py"), "--ref", str(bound.orig),
                        "--cand", str(bound.cand))  # fmt: skip
    assert (
        spec.returncode == 2 and "leave --spec out" in json.loads(spec.stdout)["error"]["message"]
    )


def test_r11_kernel_aa_of_a_directory_that_is_not_the_originals_is_refused(bound: Bound) -> None:
    done = bound.cli("measure", "aa", "--target", "t1", "--dir", str(bound.cand), "--quiet")
    _refused(done, "not the original's code", "kernels/share.txt")
    spec = bound.cli("measure", "aa", "--target", "t1", "--spec", str(bound.orig / "spec.py"))
    assert spec.returncode == 2 and "--dir DIR" in json.loads(spec.stdout)["error"]["message"]


def test_r11_kernel_candidate_changed_paths_are_computed_from_the_directories(
    bound: Bound,
) -> None:
    """The identity ``measure kernel`` takes of two directories is what ``samples.record``
    accepts; the recorded changed paths are derived from the snapshots (the experiment typed
    none), and the snapshots' files travel with the event."""
    from perfledger.app.kernel_identity import bound_kernel_subjects
    from perfledger.commands.cli.measure import _context
    from perfledger.commands.workflow.samples_body import samples_body

    env = machine_environment(tools=True)  # as readiness recorded it
    with Ledger.open(bound.ledger) as ledger:
        info = _context(ledger, "e1", "screen")
        subjects = bound_kernel_subjects(
            ledger, info, None, str(bound.orig), str(bound.cand), "screen", "e1"
        )
        assert subjects is not None and subjects.spec == "spec.py"
        assert subjects.directories == (str(bound.orig), str(bound.cand))
        side = {"correct": True, "environment_id": env["environment_id"]}
        pairs = [
            {"case": "n16M", "same_process": True,
             "ref": {**side, "call_id": f"b{i}", "values": {"kernel_time_us": [100.0 + i]}},
             "cand": {**side, "call_id": f"b{i}", "values": {"kernel_time_us": [103.0 + i]}}}
            for i in range(5)
        ]  # fmt: skip
        body = samples_body(info, samples_id="s1", experiment_id="e1", stage="screen",
                            environment_id=env["environment_id"],
                            units={"kernel_time_us": "us"}, pairs=pairs)  # fmt: skip
        body["identity"] = subjects.identity
        (event,) = execute(ledger, "samples.record", body, actor="agent",
                           artifacts=subjects.artifacts)  # fmt: skip
        identity = ledger.payload(event.id).identity
        assert identity.changed_paths == ("kernels/share.txt",)
        assert identity.candidate.argv == (f"{bound.cand}/spec.py",)
    out = bound.code / "checked-out"
    done = bound.cli("checkout", "s1:candidate", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "kernels" / "share.txt").read_text() == "0.03"
    audit = bound.cli("audit")  # re-decided from a fresh process: the snapshots check again
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_r11_kernel_driver_that_is_not_a_spec_path_is_a_clear_error() -> None:
    from perfledger.app.kernel_identity import kernel_spec

    def target(argv: list[str]) -> Any:
        driver = type("Dr", (), {"argv": argv, "cwd": None})()
        return type("T", (), {"readiness": type("R", (), {"driver": driver})(),
                              "definition": type("D", (), {"target_id": "t1"})()})()  # fmt: skip

    assert kernel_spec(target(["{subject}/specs/scale.py"])) == "specs/scale.py"
    assert kernel_spec(target(["{subject}/spec.json"])) == "spec.json"  # solve subjects
    for argv in (["python", "{subject}/bench.py"], ["{subject}/bench.sh"], ["spec.py"]):
        with pytest.raises(BadRequest, match="not a kernel spec's path"):
            kernel_spec(target(argv))


STAND_IN = Path(__file__).with_name("stand_in_worker.py")


@pytest.mark.slow
def test_kernel_workers_run_each_subject_in_its_own_directory(tmp_path: Path) -> None:
    """Each worker starts in its subject's directory and loads the spec there: the candidate's
    directory holds less work, and each worker writes its windows to a file named relative to
    its working directory."""
    from test_isolated import CONFIG, HARNESS

    def directory(name: str, work_k: int) -> Path:
        d = tmp_path / name
        d.mkdir()
        spec = {"cases": ["small"], "harness": HARNESS,
                "subject": {"work_k": work_k, "window_file": "windows.txt"}}  # fmt: skip
        (d / "spec.json").write_text(json.dumps(spec))
        return d

    ref, cand = directory("ref", 120), directory("cand", 60)
    c = compare_spec("spec.json", "small", config=CONFIG, directories=(str(ref), str(cand)))
    assert c.valid and c.stats is not None and c.stats.direction() == "faster", c.flags
    assert (ref / "windows.txt").read_text() and (cand / "windows.txt").read_text()
    assert not (tmp_path / "windows.txt").exists()


@pytest.mark.slow
def test_kernel_worker_without_the_spec_in_its_directory_is_a_bad_request(tmp_path: Path) -> None:
    from perfledger.kernels.isolation.isolated import spec_facts

    (tmp_path / "ref").mkdir()
    config = IsolationConfig(timeout_s=20.0)  # the real worker
    with pytest.raises(BadRequest, match="no spec file"):
        spec_facts("spec.py", config, directory=str(tmp_path / "ref"))


@pytest.mark.gpu
def test_measure_kernel_records_both_directories_snapshots_on_gpu(bound: Bound) -> None:
    """The whole path on a GPU: an A/A of the original's directory, then the candidate's
    directory against it, recorded with both snapshots and the computed changed paths."""
    pytest.importorskip("cupy", reason="the kernel harness needs CuPy")
    aa = bound.cli("measure", "aa", "--target", "t1", "--dir", str(bound.orig), "--runs", "3",
                   "--quiet")  # fmt: skip
    assert aa.returncode == 0, aa.stdout + aa.stderr
    done = bound.kernel("--ref", str(bound.orig), "--cand", str(bound.cand))
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    print("measure kernel:", json.dumps(data["stats"]), data["snapshots"])
    assert data["kind"] == "SamplesRecorded" and data["stats"]["n16M"]["direction"] == "slower"
    with Ledger.open(bound.ledger) as ledger:
        samples = ledger.payload(ledger.state().samples[data["samples_id"]].event_id)
    assert samples.identity.changed_paths == ("kernels/share.txt",)
    assert samples.identity.reference.digest == data["snapshots"]["reference"]
    # a candidate whose directory changed while measured would have been refused: unchanged
    assert (bound.cand / "kernels" / "share.txt").read_text() == "0.03"


def _plant_bytecode(directory: Path, module: str, text: str) -> None:
    """Write a bytecode cache for ``directory/module.py`` compiled from ``text``, stamped with the
    source's modification time and size, where Python looks for it (``__pycache__``): without a
    private cache directory, an import loads it instead of the source."""
    import importlib.util
    import os
    from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore[attr-defined]

    src = directory / f"{module}.py"
    st = os.stat(src)
    pyc = Path(importlib.util.cache_from_source(str(src)))
    pyc.parent.mkdir(parents=True, exist_ok=True)
    code = compile(text, str(src), "exec")
    pyc.write_bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))


@pytest.mark.slow
def test_cheat_bytecode_planted_in_a_kernel_subjects_directory_is_not_loaded(
    tmp_path: Path,
) -> None:
    """The real worker, started in a subject directory, imports the directory's modules from
    their sources (its cwd is on ``sys.path``) and keeps its caches elsewhere: a ``.pyc`` that
    another process planted in the directory's ``__pycache__`` is never loaded, and the worker
    writes none there."""
    from perfledger.kernels.isolation.isolated import spec_facts

    d = tmp_path / "ref"
    d.mkdir()
    (d / "helper.py").write_text('CASES = ["real"]\n')
    (d / "spec.py").write_text(
        "from helper import CASES\nPROBLEMS = {c: object() for c in CASES}\nSUBJECT = object()\n"
    )
    _plant_bytecode(d, "helper", 'CASES = ["planted"]\n')
    planted = sorted((d / "__pycache__").iterdir())
    facts = spec_facts("spec.py", IsolationConfig(timeout_s=20.0), directory=str(d))
    assert facts["cases"] == ["real"] and facts["has_subject"] is True
    assert sorted((d / "__pycache__").iterdir()) == planted  # nothing written there


@pytest.mark.slow
def test_cheat_candidate_writing_into_the_references_directory_is_caught_before_the_next_batch(
    tmp_path: Path,
) -> None:
    """``before_batch`` runs before every batch with both workers quiet: a check of the
    reference's directory there (what ``measure kernel`` does with both snapshots) sees a file
    the candidate's worker wrote into it during its batch, and what it raises ends the
    comparison (the workers are ended)."""
    from test_isolated import CONFIG, HARNESS

    from perfledger.errors import RuleRefused
    from perfledger.kernels.workload.snapshot import take_snapshot

    def directory(name: str, **opts: Any) -> Path:
        d = tmp_path / name
        d.mkdir()
        spec = {"cases": ["small"], "harness": HARNESS, "subject": opts}
        (d / "spec.json").write_text(json.dumps(spec))
        return d

    ref = directory("ref")
    cand = directory("cand", window_file="../ref/planted.txt")
    digest = take_snapshot("ref", [], lambda _: True, tmp_path).snapshot.digest
    roles: list[str] = []

    def before_batch(role: str) -> None:
        roles.append(role)
        if take_snapshot("ref", [], lambda _: True, tmp_path).snapshot.digest != digest:
            raise RuleRefused("R11: the reference's files changed", rule="R11", hint="restore them")

    with pytest.raises(RuleRefused, match="reference's files changed"):
        compare_spec("spec.json", "small", config=CONFIG, directories=(str(ref), str(cand)),
                     before_batch=before_batch)  # fmt: skip
    assert roles[:2] == ["reference", "candidate"] and len(roles) >= 3
    assert (ref / "planted.txt").exists()


@pytest.mark.slow
def test_measure_kernel_says_that_a_spec_on_a_target_without_a_subject_place_is_unbound(
    tmp_path: Path,
) -> None:
    from test_measure_cli import _cli, _experiment, _record_resolution, _setup

    ledger = tmp_path / "ledger"
    _setup(ledger)
    _record_resolution(ledger)
    _experiment(ledger)
    spec = tmp_path / "spec.py"
    spec.write_text("PROBLEMS = {'small': object()}\nREFERENCE = object()\nCANDIDATE = object()\n")
    out = _cli(ledger, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage", "screen",
               "--spec", str(spec), "--json", "--quiet", check=False)  # fmt: skip
    assert "warning: R11 (code identity) is not enforced for Target 't1'" in out.stderr
    assert '["{subject}/spec.py"]' in out.stderr and "--ref DIR --cand DIR" in out.stderr
    dirs = _cli(ledger, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage", "screen",
                "--ref", str(tmp_path), "--cand", str(tmp_path), "--json", check=False)  # fmt: skip
    assert dirs.returncode == 2 and "declares no {subject} place" in dirs.stdout
    aa = _cli(ledger, tmp_path, "measure", "aa", "--target", "t1", "--dir", str(tmp_path),
              "--json", check=False)  # fmt: skip
    assert aa.returncode == 2 and "--dir names a code directory" in aa.stdout


@pytest.mark.gpu
def test_a_solve_json_spec_in_a_subject_directory_names_that_directorys_kernel(
    tmp_path: Path,
) -> None:
    """A ``.json`` spec of host-launched ``solve`` subjects can be the driver too: in a subject
    directory its ``reference`` source is that directory's kernel (loaded by the real worker,
    nothing built; loading it needs CuPy)."""
    pytest.importorskip("cupy", reason="a solve spec loads with CuPy")
    from perfledger.kernels.isolation.isolated import spec_facts

    solve = Path(__file__).resolve().parents[2] / "examples" / "subjects" / "solve"
    d = tmp_path / "orig"
    d.mkdir()
    for name in ("ref.py", "scale_v0.cu"):
        shutil.copy(solve / name, d / name)
    spec = {"ref": "ref.py", "reference": "scale_v0.cu", "dims": {"n": 1024}, "case": "n1k"}
    (d / "spec.json").write_text(json.dumps(spec))
    facts = spec_facts("spec.json", IsolationConfig(timeout_s=20.0), directory=str(d))
    assert facts["cases"] == ["n1k"] and facts["has_subject"] is True


def test_cheat_candidate_that_changes_the_references_file_and_restores_it_is_refused(
    bound: Bound,
) -> None:
    """The kernel path's watch is strict: the reference's worker may have loaded (or compiled)
    a file while the candidate's had changed it, so a file written during the run is refused
    even when its content is back as snapshotted (its change time cannot be set back)."""
    import os
    import time

    from perfledger.app.identity import SubjectsWatch
    from perfledger.app.kernel_identity import bound_kernel_subjects
    from perfledger.commands.cli.measure import _context
    from perfledger.errors import RuleRefused

    with Ledger.open(bound.ledger) as ledger:
        info = _context(ledger, "e1", "screen")
        subjects = bound_kernel_subjects(
            ledger, info, None, str(bound.orig), str(bound.cand), "screen", "e1"
        )
    assert subjects is not None
    share = bound.orig / "kernels" / "share.txt"
    before = os.stat(share)
    lenient = SubjectsWatch(info, subjects.identity)
    watch = SubjectsWatch(info, subjects.identity, strict=True)
    watch()  # nothing written yet
    time.sleep(0.01)
    share.write_text("0.5")  # what the reference would load
    share.write_text("0.0")  # and back, with its modification time too
    os.utime(share, ns=(before.st_atime_ns, before.st_mtime_ns))
    lenient()  # content as snapshotted: the workload path's watch lets it pass
    with pytest.raises(RuleRefused, match="written while they were measured") as caught:
        watch()
    assert caught.value.rule == "R11" and "share.txt" in caught.value.message


@pytest.mark.slow
@pytest.mark.serial  # plants a .pth in this interpreter's site-packages: a parallel measurement is refused (R11)
def test_cheat_candidate_adding_a_python_startup_file_is_refused_before_the_next_batch(
    tmp_path: Path,
) -> None:
    """A worker that adds a ``.pth`` to its interpreter's site-packages runs code at the start
    of every later worker (the next case's reference worker included) and no snapshot holds
    it: the checks ``measure kernel`` runs before every batch refuse the run (R11) and move
    the file aside."""
    import os
    import site

    from test_isolated import CONFIG, _spec

    from perfledger.app.kernel_identity import kernel_batch_checks
    from perfledger.errors import RuleRefused

    planted = Path(site.getsitepackages()[0]) / f"zz-perfledger-cheat-{os.getpid()}.pth"
    spec = _spec(tmp_path, None, plant_file=str(planted))
    checks = kernel_batch_checks(lambda: None, CONFIG.worker)
    try:
        with pytest.raises(RuleRefused, match="start-up files") as refused:
            compare_spec(spec, "small", config=CONFIG, before_batch=checks)
        assert refused.value.rule == "R11"
        assert not planted.exists()  # moved aside: later Pythons do not run it
    finally:
        for path in planted.parent.glob(planted.name + "*"):
            path.unlink()


@pytest.mark.slow
def test_cheat_bytecode_planted_in_the_workers_own_cache_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers keep no bytecode cache another process can write: a process of the same user
    (the other subject's worker) that finds where a worker caches bytecode and plants a
    ``.pyc`` there for a module the worker imports later (lazily: the subject's, or a library's)
    would run its code in that worker. Here the reference's spec imports ``helper`` only after
    the planting process is done."""
    import importlib.util
    import os
    import tempfile
    import threading
    import time
    from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore[attr-defined]

    from perfledger.kernels.isolation.isolated import spec_facts

    temp = tmp_path / "temp"  # the measuring process's temporary files: none of others' here
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    d = tmp_path / "ref"
    d.mkdir()
    (d / "helper.py").write_text('CASES = ["real"]\n')
    (d / "spec.py").write_text(
        "import pathlib, time\n"
        "while not pathlib.Path('go').exists():\n    time.sleep(0.01)\n"
        "from helper import CASES\nPROBLEMS = {c: object() for c in CASES}\nSUBJECT = object()\n"
    )
    src = d / "helper.py"
    st = os.stat(src)
    pyc = _code_to_timestamp_pyc(
        compile('CASES = ["planted"]\n', str(src), "exec"), int(st.st_mtime), st.st_size
    )
    name = Path(importlib.util.cache_from_source(str(src))).name
    planted: list[str] = []

    def plant() -> None:  # the other worker's code: every place a worker might read bytecode
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not planted:
            for work in temp.iterdir():
                for cache in ("pycache", "ref.pycache", "cand.pycache"):
                    target = Path(str(work / cache) + str(d)) / name  # PYTHONPYCACHEPREFIX's
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(pyc)
                    planted.append(str(target))
            time.sleep(0.02)
        (d / "go").write_text("")

    thread = threading.Thread(target=plant)
    thread.start()
    try:
        facts = spec_facts("spec.py", IsolationConfig(timeout_s=30.0), directory=str(d))
    finally:
        thread.join()
    assert planted  # the attack found the worker's temporary directory
    assert facts["cases"] == ["real"], planted


@pytest.mark.slow
def test_kernel_workers_in_subject_directories_build_kernels_in_fresh_directories(
    tmp_path: Path,
) -> None:
    """solve()'s library cache, Triton's and TorchInductor's are keyed by the sources, which the
    other subject (same user) can read: a worker in a subject directory builds in directories of
    its own, empty when it starts, different for every worker, removed when the worker ends."""
    from perfledger.kernels.isolation.isolated import spec_facts
    from perfledger.kernels.subjects import solve

    names = [solve.CACHE_ENV, "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"]
    d = tmp_path / "ref"
    d.mkdir()
    (d / "spec.py").write_text(
        "import os\n"
        f"ps = [os.environ.get(k, 'unset') for k in {names!r}]\n"
        "PROBLEMS = {p + '|' + str(os.path.isdir(p) and not os.listdir(p)): object()\n"
        "            for p in ps}\n"
        "SUBJECT = object()\n"
    )
    seen: list[str] = []
    for _ in range(2):
        facts = spec_facts("spec.py", IsolationConfig(timeout_s=30.0), directory=str(d))
        assert len(facts["cases"]) == len(names), facts["cases"]  # three directories
        for case in facts["cases"]:
            path, empty = case.rsplit("|", 1)
            assert empty == "True", facts["cases"]  # a directory, fresh
            assert not os.path.exists(path)  # removed with the worker
            seen.append(path)
    assert len(set(seen)) == len(seen) and str(solve._cache_dir()) not in seen, seen


@pytest.mark.slow
def test_kernel_workers_in_subject_directories_keep_compiled_kernels_in_memory(
    tmp_path: Path,
) -> None:
    """CuPy's kernel cache and the CUDA driver's JIT cache are files the other subject (same
    user) could write under the key of this subject's kernel: a worker in a subject directory
    keeps CuPy's in memory and the driver's off (the spec sees its worker's environment)."""
    from perfledger.kernels.isolation.isolated import spec_facts

    d = tmp_path / "ref"
    d.mkdir()
    (d / "spec.py").write_text(
        "import os\n"
        "PROBLEMS = {os.environ.get(k, 'unset'): object()\n"
        "            for k in ('CUPY_CACHE_IN_MEMORY', 'CUDA_CACHE_DISABLE')}\n"
        "SUBJECT = object()\n"
    )
    facts = spec_facts("spec.py", IsolationConfig(timeout_s=30.0), directory=str(d))
    assert facts["cases"] == ["1"], facts["cases"]  # both set to 1
