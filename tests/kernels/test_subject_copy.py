"""Each call runs from a read-only copy of its subject's snapshot (R11,
:mod:`perfledger.kernels.workload.subject_copy`): the copy holds the recorded bytes, checked;
the bootstrap reports files read from outside, which the guard refuses naming them; a copy or a
private cache changed outside its own calls is refused; and the two subjects' calls get the
same environment, recorded as hashes (:func:`perfledger.kernels.workload.driver.run_pairs`)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from perfledger.errors import IntegrityError, RuleRefused
from perfledger.kernels.workload.driver import Subject, run_pairs
from perfledger.kernels.workload.snapshot import take_snapshot
from perfledger.kernels.workload.subject_copy import CopyGuard, SubjectCopy, prepare_subject
from perfledger.kernels.workload.subject_env import SUBJECT_ROOT_TOKEN, call_environment
from perfledger.kernels.workload.worker import WorkerSubject
from perfledger.kernels.workload.worker import run_pairs as run_workers

#: A subject printing one result; it imports its helper module from its own directory.
BENCH = """\
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helper
EXTRA
print(json.dumps({"correct": helper.VALUE == 3, "metrics": {"t": 1.0}}))
"""


def _subject(root: Path, extra: str = "") -> Path:
    root.mkdir()
    (root / "bench.py").write_text(BENCH.replace("EXTRA", extra))
    (root / "helper.py").write_text("VALUE = 3\n")
    (root / "data").mkdir()
    (root / "data" / "link.py").symlink_to("../helper.py")
    return root


def _copy(tmp_path: Path, name: str, extra: str = "", label: str = "ref") -> SubjectCopy:
    _subject(tmp_path / name, extra)
    taken = take_snapshot(name, [sys.executable, f"{name}/bench.py"], lambda _r: True, tmp_path)
    return prepare_subject(taken.snapshot, taken.blobs, label=label)


def _call(copy: SubjectCopy, *flags: str) -> subprocess.CompletedProcess[str]:
    """One call as the driver makes it (bytecode written, whatever this process's setting)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.run(
        [sys.executable, *flags, os.path.join(copy.path, "bench.py")],
        env={**env, **copy.env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_r11_the_copy_holds_the_snapshots_bytes_read_only(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "s")
    try:
        path = Path(copy.path)
        assert (path / "helper.py").read_text() == "VALUE = 3\n"
        assert os.readlink(path / "data" / "link.py") == "../helper.py"
        for entry in (path, path / "bench.py", path / "data"):
            assert not stat.S_IMODE(entry.stat().st_mode) & 0o222, entry  # no write bit
        assert copy.env["PYTHONPYCACHEPREFIX"] == copy.pycache
        assert copy.env["PYTHONPATH"].split(os.pathsep)[0] == copy.boot
        done = _call(copy)
        assert done.returncode == 0 and '"correct": true' in done.stdout, done.stderr
        # compiled into its private cache, never beside the copy's sources
        assert list(Path(copy.pycache).rglob("helper*.pyc"))
        assert not list(path.rglob("__pycache__"))
    finally:
        copy.close()
    assert not os.path.exists(copy.root)


def test_r11_bytes_that_are_not_the_snapshots_make_no_copy(tmp_path: Path) -> None:
    _subject(tmp_path / "s")
    taken = take_snapshot("s", [sys.executable, "s/bench.py"], lambda _r: True, tmp_path)
    forged = {k: (b"VALUE = 4\n" if v == b"VALUE = 3\n" else v) for k, v in taken.blobs.items()}
    copies = set(Path(tempfile.gettempdir()).glob("perfledger-subject-*"))
    with pytest.raises(IntegrityError) as caught:
        prepare_subject(taken.snapshot, forged)
    assert "helper.py" in caught.value.message
    assert set(Path(tempfile.gettempdir()).glob("perfledger-subject-*")) == copies  # none left


def test_r11_an_honest_call_passes_the_guard(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "s")
    try:
        guard = CopyGuard({"ref": copy}, {"ref": [sys.executable, "bench.py"]})
        guard("ref")
        assert _call(copy).returncode == 0
        guard("ref")  # its own compiled modules are kept: they changed during its own call
        assert _call(copy).returncode == 0
        guard(None)
    finally:
        copy.close()


def test_cheat_a_call_that_reads_code_from_outside_its_copy_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "elsewhere" / "fast.py"
    outside.parent.mkdir()
    outside.write_text("SPEED = 1\n")
    extra = f"exec(open({str(outside)!r}).read())"
    copy = _copy(tmp_path, "s", extra)
    try:
        guard = CopyGuard({"ref": copy}, {"ref": [sys.executable, "bench.py"]})
        guard("ref")
        assert _call(copy).returncode == 0
        with pytest.raises(RuleRefused) as caught:
            guard(None)
        assert caught.value.rule == "R11" and str(outside) in caught.value.message
        # a driver file of the snapshot (named on the command line) is allowed
        _call(copy)
        CopyGuard({"ref": copy}, {"ref": [sys.executable]}, [str(outside)])("ref")
    finally:
        copy.close()


def test_cheat_code_planted_under_the_interpreters_prefix_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    """Only what the environment identity hashes is the interpreter's (its standard library,
    site-packages, editable sources): a file planted elsewhere under its prefix (``share/``,
    the venv's root), which no identity covers, is read from outside the copy."""
    planted_dir = Path(sys.prefix) / "share" / f"perfledger-test-{os.getpid()}"
    try:
        planted_dir.mkdir(parents=True)
    except OSError:
        pytest.skip(f"cannot write under the interpreter's prefix {sys.prefix}")
    planted = planted_dir / "fast.py"
    try:
        planted.write_text("SPEED = 1\n")
        copy = _copy(tmp_path, "s", f"exec(open({str(planted)!r}).read())")
        try:
            guard = CopyGuard({"ref": copy}, {"ref": [sys.executable, "bench.py"]})
            guard("ref")
            assert _call(copy).returncode == 0
            with pytest.raises(RuleRefused) as caught:
                guard(None)
            assert caught.value.rule == "R11" and str(planted) in caught.value.message
        finally:
            copy.close()
    finally:
        planted.unlink(missing_ok=True)
        planted_dir.rmdir()


def test_cheat_a_python_call_that_skips_the_bootstrap_is_refused(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "s")
    try:
        guard = CopyGuard({"ref": copy}, {"ref": [sys.executable, "bench.py"]})
        guard("ref")
        assert _call(copy, "-S").returncode == 0
        with pytest.raises(RuleRefused) as caught:
            guard(None)
        assert "bootstrap did not run" in caught.value.message
    finally:
        copy.close()


@pytest.mark.slow
def test_cheat_a_pyc_planted_in_the_other_subjects_cache_is_refused(tmp_path: Path) -> None:
    ref = _copy(tmp_path, "r", label="ref")
    cand = _copy(tmp_path, "c", label="cand")
    try:
        argv = [sys.executable, "bench.py"]
        guard = CopyGuard({"ref": ref, "cand": cand}, {"ref": argv, "cand": argv})
        guard("ref")
        assert _call(ref).returncode == 0
        guard("cand")
        assert _call(cand).returncode == 0
        # during the candidate's call, something writes into the reference's cache
        (Path(ref.pycache) / "planted.pyc").write_bytes(b"not the reference's")
        with pytest.raises(RuleRefused) as caught:
            guard("ref")
        assert "reference's private bytecode cache" in caught.value.message
        assert "planted.pyc" in caught.value.message
    finally:
        ref.close()
        cand.close()


def test_r11_the_subjects_calls_get_the_same_environment_recorded_as_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVICE_TOKEN", "a secret")
    argv = [sys.executable, "-c", 'print(\'{"correct": true, "metrics": {"t": 1}}\')']
    ref = Subject("ref", argv, env={"PYTHONPYCACHEPREFIX": str(tmp_path / "r" / "cache")})
    cand = Subject("cand", argv, env={"PYTHONPYCACHEPREFIX": str(tmp_path / "c" / "cache")})
    run = run_pairs(ref, cand, cases=["a"], pairs_per_case=1, warmup_calls=0,
                    subject_roots={"ref": str(tmp_path / "r"), "cand": str(tmp_path / "c")})  # fmt: skip
    recorded = run.settings["call_environment"]
    assert recorded["ref"] == recorded["cand"] and "HOME" in recorded["ref"]
    assert recorded["ref"]["SERVICE_TOKEN"].startswith("keyed:")  # never a plain hash
    assert "a secret" not in str(run.settings["call_environment"])
    assert "PERFLEDGER_CASE" in recorded["per_call"]
    assert call_environment({"X": f"{tmp_path}/r/cache"}, str(tmp_path / "r")) == call_environment(
        {"X": f"{SUBJECT_ROOT_TOKEN}/cache"}
    )


def test_cheat_a_variable_set_for_one_subject_alone_is_refused_before_any_call(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w'); print('{{}}')"]
    with pytest.raises(RuleRefused) as caught:
        run_pairs(Subject("ref", argv), Subject("cand", argv, env={"FAST_PATH": "1"}),
                  cases=["a"], pairs_per_case=1, warmup_calls=0)  # fmt: skip
    assert caught.value.rule == "R11" and "FAST_PATH" in caught.value.message
    assert not marker.exists()  # nothing ran


#: A worker (perfledger.subject protocol) whose call reads a file outside its copy
#: (``READS``: a path, or empty for an honest worker).
WORKER = """\
import json, os, random
from perfledger.subject import serve
READS = {reads!r}
def call(state, case, seed, output):
    if READS:
        exec(open(READS).read())
    rng = random.Random(f"{{case}}:{{seed}}")
    json.dump(sum(rng.random() for _ in range(1000)), open(output, "w"))
serve(lambda: None, call)
"""


def _worker_copy(tmp_path: Path, name: str, reads: str, label: str) -> SubjectCopy:
    root = tmp_path / name
    root.mkdir()
    (root / "work.py").write_text(WORKER.format(reads=reads))
    taken = take_snapshot(name, [sys.executable, f"{name}/work.py"], lambda _r: True, tmp_path)
    return prepare_subject(taken.snapshot, taken.blobs, label=label)


@pytest.mark.slow
@pytest.mark.parametrize("honest", [True, False])
def test_cheat_a_worker_reading_code_from_outside_its_copy_is_refused(
    tmp_path: Path, honest: bool
) -> None:
    """Under the worker protocol each subject serves many calls from its read-only copy, under
    the bootstrap (its boot counted once per worker): a candidate whose calls read code from
    /dev/shm, which no snapshot holds, is refused naming the file; the honest control runs."""
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    hidden = shm / f"perfledger-test-hidden-{os.getpid()}.py"
    hidden.write_text("FAST = True\n")
    ref = _worker_copy(tmp_path, "r", "", "ref")
    cand = _worker_copy(tmp_path, "c", "" if honest else str(hidden), "cand")
    try:
        argvs = {
            "ref": [sys.executable, os.path.join(ref.path, "work.py")],
            "cand": [sys.executable, os.path.join(cand.path, "work.py")],
        }
        guard = CopyGuard({"ref": ref, "cand": cand}, argvs, boot_per_call=False)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subjects = {
            label: WorkerSubject(label, argvs[label], env={**env, **c.env})
            for label, c in (("ref", ref), ("cand", cand))
        }

        def run() -> Any:
            done = run_workers(
                subjects["ref"], subjects["cand"], cases=["a"], pairs_per_case=3,
                accuracy={"compare": "allclose", "rtol": 1e-9}, units={"wall_time": "ms"},
                warmup_calls=0, before_call=guard,
                subject_roots={"ref": ref.root, "cand": cand.root},
            )  # fmt: skip
            guard(None)
            return done

        if honest:
            done = run()
            environments = done.settings["call_environment"]
            assert environments["ref"] == environments["cand"]
            return
        with pytest.raises(RuleRefused) as caught:
            run()
        assert caught.value.rule == "R11" and str(hidden) in caught.value.message
    finally:
        ref.close()
        cand.close()
        hidden.unlink(missing_ok=True)
