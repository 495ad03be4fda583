"""Code identity (R11) end to end through the real CLI, on a real git ledger and real code
directories in a real git work tree: the readiness driver declares ``{subject}``, readiness
snapshots the original, ``measure workload`` snapshots both subjects and refuses a reference that
is not the original or the champion, a candidate identical to its reference, a changed path
outside the scope and a command that is not the driver; changed paths are computed; the champion's
snapshot is named by ``champion show`` and the handoff and ``checkout`` writes it back byte for
byte; ``audit`` re-decides it all.

The session (a module fixture) goes: readiness -> e1 screen, target, champion -> final audit ->
e2 created (open, against champion e1). The tests then try what the rules refuse; a refusal
appends nothing, so they share the ledger.

The driver is a worker (the worker protocol: perfledger's clock and the kernel's CPU
accounting of every call, the Target's primary ``cpu_time``, every output compared), and the
readiness, verdicts, champion and final audit are recorded through the CLI as a user records
them, at the current rules.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import blake3
import msgspec
import pytest
from wf_scenario import explain_stage_by_review, record_measured_aa, record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.app.snapshots import candidate_edge
from perfledger.commands.registry.operations import execute
from perfledger.errors import RuleRefused
from subprocess_env import isolated_env, perfledger_command

#: Every test reads one module session of real measurements (three stages of a workload).
# serial: its tests write into this interpreter's site-packages (a planted .pth, a module put
# back), which refuses a parallel test's measurement (R11: the installation was written), and
# its session measures real subjects that a parallel test's load can keep from a pass
pytestmark = [pytest.mark.slow, pytest.mark.serial]

ROOT = Path(__file__).resolve().parents[2]
EXPLAIN = "other tenants of a shared test host; the metric is this process's own CPU time"

#: The driver: a worker of one subject (``perfledger.subject.serve``), which loads the subject's
#: ``src/kern.py`` and answers each call with the sum of squares of its case's size. It lives in
#: each subject directory (``{subject}/bench.py``), outside the Target's scope ``src/*``.
BENCH = """\
import importlib.util, json, os, sys
from perfledger.subject import serve
here = os.path.dirname(os.path.abspath(__file__))
def setup():
    spec = importlib.util.spec_from_file_location("kern", os.path.join(here, "src", "kern.py"))
    kern = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kern)
    return kern
def call(kern, case, seed, output):
    n = {"small": 60000, "large": 120000}[case]
    with open(output, "w") as out:
        json.dump(kern.sumsq(n), out)
serve(setup, call)
"""
LOOP = """\
def sumsq(n):
    total = 0
    for i in range(n):
        total += i * i
    return total
"""
#: A quarter of the loop's work, then the closed form: about 4x faster, the same answer.
FASTER = """\
from util import closed_form


def sumsq(n):
    waste = 0
    for i in range(n // 4):
        waste += i * i
    return closed_form(n) if waste >= 0 else -1
"""
UTIL = """\
def closed_form(n):
    return (n - 1) * n * (2 * n - 1) // 6
"""
FASTER_BENCH_IMPORTS = BENCH.replace(
    "def setup():", 'sys.path.insert(0, os.path.join(here, "src"))\ndef setup():', 1
)


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def _subject(root: Path, name: str, kern: str, *, util: bool = False, bench: str = "") -> Path:
    d = root / name
    (d / "src").mkdir(parents=True)
    (d / "bench.py").write_text(bench or FASTER_BENCH_IMPORTS)
    (d / "src" / "kern.py").write_text(kern)
    if util:
        (d / "src" / "util.py").write_text(UTIL)
    (d / "NOTES.md").write_text("notes: outside the scope, the same in every subject\n")
    return d


class Session:
    """The ledger, the code directories and a CLI runner."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = isolated_env(tmp)
        self.ledger = tmp / "ledger"
        self.code = tmp / "code"
        self.code.mkdir()

    def cli(
        self, *args: str, request: dict[str, Any] | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [*perfledger_command(), "--ledger", str(self.ledger), *args]
        if request is not None:
            argv += ["--request", "-"]
        return subprocess.run(
            argv, input=json.dumps(request) if request is not None else None,
            capture_output=True, text=True, env=self.env, cwd=self.code, timeout=600,
        )  # fmt: skip

    def ok(self, *args: str, request: dict[str, Any] | None = None) -> Any:
        done = self.cli(*args, "--json", request=request)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def cmd(self, subject: Path) -> str:
        return f"{sys.executable} {subject}/bench.py {{output}}"

    def measure(self, exp: str, stage: str, ref: Path, cand: Path, *extra: str) -> Any:
        args = ["measure", "workload", "--experiment", exp, "--stage", stage,
                "--ref", self.cmd(ref), "--cand", self.cmd(cand), "--pairs", "5", "--warmup",
                "0", "--quiet", "--samples", f"{exp}-{stage}", *extra]  # fmt: skip
        if stage == "screen":
            args.append("--no-monitor")
        else:
            args += ["--monitor", "host"]
        done = self.cli(*args, "--json")
        if stage != "screen" and done.returncode == 0:  # R17: another actor's review explains
            explain_stage_by_review(self.ledger, exp, stage, explanation=EXPLAIN)
        return done


def _claim() -> dict[str, Any]:
    return {
        "evidence": [
            {"evidence_id": "ev1", "applicability": "same_boundary", "used_for": "coverage"},
            {"evidence_id": "ev1", "applicability": "conservative_upper_bound",
             "used_for": "local_speedup"},
        ],
        "scope": {"replaced_region": "sumsq", "execution_form": "python"},
        "replacement_boundary": "the sumsq call", "coverage": 0.95, "local_speedup": 4.0,
        "stated_bound": 1.0 / (0.05 + 0.95 / 4.0),
        "expected_improvement": {"low": 0.05, "high": 0.7},
    }  # fmt: skip


def _experiment(
    exp: str, typed_paths: list[str] | None = None, subject: Path | None = None
) -> dict[str, Any]:
    """An ``experiment.create`` body: the candidate's directory (``subject``, snapshotted at
    creation, R11) or, for the refusals and the old rule, a typed hash."""
    candidate: dict[str, Any] = {"content_hash": f"sha256:{exp}-{'0' * 16}", "label": exp}
    if subject is not None:
        candidate = {"subject": str(subject), "label": exp}
    if typed_paths is not None:
        candidate["changed_paths"] = typed_paths
    return {
        "experiment_id": exp, "target_id": "t1", "title": f"{exp}: closed form",
        "candidate": candidate, "claim": _claim(),
        "preregistration": {"rejects": "implementation"},
    }  # fmt: skip


def _create(ledger: Ledger, exp: str, subject: Path) -> None:
    """``experiment create`` as the CLI runs it: the candidate's directory snapshotted first."""
    body, files = candidate_edge(ledger, _experiment(exp, subject=subject))
    execute(ledger, "experiment.create", body, actor="agent", artifacts=files)


def _own_experiment(s: Session, cand: Path) -> str:
    """A new experiment whose candidate is ``cand`` (an experiment measures the code it was
    created for, R11); returns its id."""
    exp = f"e-{cand.name}"
    with Ledger.open(s.ledger) as ledger:
        _create(ledger, exp, cand)
    return exp


@pytest.fixture(scope="module")
def session(identity_session: Session) -> Session:
    """The champion e1 session (tests/workflow/conftest.py: built once per run, shared with
    test_attest.py, whose tests read it)."""
    return identity_session


def build_identity_session(root: Path) -> Session:
    """A Target ``t1`` whose champion e1 (real code directories, measured by real processes)
    passed its final audit, and an open experiment e2, in ``root``."""
    s = Session(root)
    orig = _subject(s.code, "orig", LOOP)
    _git(s.code, s.env, "init", "-q")
    _git(s.code, s.env, "add", "orig")
    _git(s.code, s.env, "commit", "-q", "-m", "the original")
    s.orig = orig  # type: ignore[attr-defined]
    s.fast = _subject(s.code, "fast", FASTER, util=True)  # type: ignore[attr-defined]
    env = machine_environment(tools=True)
    with Ledger.init(s.ledger, name="identity", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "sum of squares", "min_effect": 0.05,
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["src/*"], "risk_boundary": "none",
            "budget": {"wall_s": 3600.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
    readiness = {
        "target_id": "t1",
        "original": {"content_hash": "sha256:" + "0" * 16, "subject": "orig"},
        "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 2, "cases": ["small", "large"]},
        "accuracy_rule": "exact sum",
        "driver": {"argv": [sys.executable, "{subject}/bench.py", "{output}"]},
        "accuracy": {"compare": "exact"},
        "environment": env["readiness_environment"],
    }  # fmt: skip
    s.ok("readiness", "record", request=readiness)  # its edge snapshots the original (R11)
    with Ledger.open(s.ledger) as ledger:
        run = lambda op, body: execute(ledger, op, body, actor="agent")  # noqa: E731
        run("metric-audit.record", {
            "target_id": "t1", "metric": "cpu_time", "numerator": "cpu time",
            "denominator": "call", "unit": "ms", "source": "perfledger's worker protocol",
            "reconstructed": False, "matches_target": True,
        })  # fmt: skip
        record_measured_baseline(ledger, {  # R4: as `measure baseline` records it
            "target_id": "t1", "original_hash": "sha256:" + "0" * 16, "metric": "cpu_time",
            "unit": "ms", "values": [5.0, 5.1, 4.9], "environment_id": env["environment_id"],
        }, actor="agent")  # fmt: skip
        record_measured_aa(ledger, "t1")  # R4: as `measure aa --record`
        run("evidence.add", {
            "evidence_id": "ev1", "layer": "workload", "tool": {"name": "manual", "version": "1"},
            "facts": [{"name": "share", "value": 0.95, "unit": "ratio"}],
        })  # fmt: skip
        _create(ledger, "e1", s.fast)  # type: ignore[attr-defined]
    s.screen = s.measure("e1", "screen", orig, s.fast)  # type: ignore[attr-defined]
    assert s.screen.returncode == 0, s.screen.stdout + s.screen.stderr  # type: ignore[attr-defined]
    s.ok("verdict", "record", "--samples", "e1-screen")
    done = s.measure("e1", "target", orig, s.fast)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = s.ok("verdict", "record", "--samples", "e1-target")["payload"]
    assert verdict["status"] == "pass" and verdict["samples_provenance"] == "perfledger", verdict
    if verdict.get("contradicts_claim"):
        s.ok("reconcile", request={
            "experiment_id": "e1", "premise": "cost",
            "corrected_model": {"description": "the measured gain is the model's"},
            "explanation": "the test's claim was rough",
        })  # fmt: skip
    s.ok("champion", "select", "--target", "t1", "--samples", "e1-target",
         "--expected-current", "original")  # fmt: skip
    done = s.measure("e1", "final_audit", orig, s.fast)
    assert done.returncode == 0, done.stdout + done.stderr
    audited = s.ok("final-audit", "record", "--target", "t1",
                   "--samples", "e1-final_audit")["payload"]  # fmt: skip
    assert audited["status"] == "pass", audited
    if audited.get("contradicts_claim"):  # R14: outside the claim too
        s.ok("reconcile", request={
            "experiment_id": "e1", "premise": "cost",
            "corrected_model": {"description": "the measured gain is the model's"},
            "explanation": "the test's claim was rough",
        })  # fmt: skip
    # e2: open against champion e1, its own code (a kernel beside the champion's)
    s.e2 = _subject(s.code, "fast-e2", FASTER + "\n# e2\n", util=True)  # type: ignore[attr-defined]
    with Ledger.open(s.ledger) as ledger:
        _create(ledger, "e2", s.e2)  # type: ignore[attr-defined]
    return s


def _samples(s: Session, samples_id: str) -> Any:
    with Ledger.open(s.ledger) as ledger:
        return ledger.payload(ledger.state().samples[samples_id].event_id)


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["rule"] == "R11", error
    return str(error["message"])


def test_r11_readiness_records_the_originals_snapshot_with_its_git_commit(session: Session) -> None:
    with Ledger.open(session.ledger) as ledger:
        snap = ledger.state().targets["t1"].readiness.original.snapshot
    head = _git(session.code, session.env, "rev-parse", "HEAD")
    assert snap.git.commit == head and snap.git.dirty is False and snap.git.path == "orig"
    # every file under the subject, inside the scope or not
    assert sorted(snap.files) == ["NOTES.md", "bench.py", "src/kern.py"]
    assert snap.coverage == "subject"
    assert snap.files["src/kern.py"].blake3 == blake3.blake3(LOOP.encode()).hexdigest()
    assert snap.argv == (sys.executable, "orig/bench.py", "{output}")


def test_r11_changed_paths_are_computed_from_the_two_snapshots(session: Session) -> None:
    identity = _samples(session, "e1-screen").identity
    assert identity.changed_paths == ("src/kern.py", "src/util.py")
    assert identity.reference.digest != identity.candidate.digest
    # the candidate directory is untracked in the work tree: recorded as dirty
    assert identity.candidate.git is not None and identity.candidate.git.dirty is True
    assert identity.reference.git.dirty is False


def test_r11_typed_changed_paths_are_refused_under_snapshots(session: Session) -> None:
    with Ledger.open(session.ledger) as ledger, pytest.raises(RuleRefused) as caught:
        execute(ledger, "experiment.create", _experiment("e9", ["src/kern.py"]), actor="agent")
    assert caught.value.rule == "R11" and "computed by perfledger" in caught.value.message


def test_r11_final_audit_whose_reference_is_not_the_original_is_refused(session: Session) -> None:
    other = _subject(session.code, "other-original", LOOP.replace("i * i", "i ** 2"))
    message = _refused(session.measure("e1", "final_audit", other, session.fast, "--samples", "x1"))
    assert "src/kern.py" in message and "original" in message


def test_r11_reference_must_be_the_current_champions_code(session: Session) -> None:
    # e2 is compared with champion e1: the original's code as reference is refused
    message = _refused(session.measure("e2", "screen", session.orig, session.fast))
    assert "champion 'e1'" in message and "src/kern.py" in message and "src/util.py" in message


def test_r11_candidate_identical_to_its_reference_is_refused(session: Session) -> None:
    copy = session.code / "fast-copy"
    shutil.copytree(session.fast, copy)
    message = _refused(session.measure("e2", "screen", session.fast, copy))
    assert "must differ from its reference" in message


def test_r11_changed_path_outside_the_scope_is_refused(session: Session) -> None:
    # the candidate edits its driver script (named on the command line, outside src/*)
    edited = session.code / "fast-bench-edited"
    shutil.copytree(session.fast, edited)
    (edited / "bench.py").write_text(
        FASTER_BENCH_IMPORTS.replace("def call(", "# edited\ndef call(")
    )
    message = _refused(session.measure("e2", "screen", session.fast, edited))
    assert "outside the Target's modification scope" in message and "bench.py" in message


def _head(session: Session) -> str:
    with Ledger.open(session.ledger) as ledger:
        return str(ledger.head())


def test_r11_reference_with_an_extra_module_outside_the_scope_is_not_the_champion(
    session: Session,
) -> None:
    # the champion's files byte for byte, plus a statistics.py that shadows the stdlib module
    shadowed = session.code / "fast-shadowed"
    shutil.copytree(session.fast, shadowed)
    (shadowed / "statistics.py").write_text("def mean(x):\n    return 0\n")
    cand = _subject(session.code, "fast-e2-a", FASTER.replace("n // 4", "n // 7"), util=True)
    message = _refused(session.measure("e2", "screen", shadowed, cand))
    assert "champion 'e1'" in message and "statistics.py" in message


def test_r11_candidate_adding_a_file_outside_the_scope_is_refused(session: Session) -> None:
    # an in-scope edit that imports a new helper outside the scope src/*
    cand = _subject(session.code, "fast-outside", "from fast_impl import sumsq\n", util=True)
    (cand / "fast_impl.py").write_text(UTIL.replace("closed_form", "sumsq"))
    message = _refused(session.measure("e2", "screen", session.fast, cand))
    assert "outside the Target's modification scope" in message and "fast_impl.py" in message
    assert "src/kern.py" not in message.split("scope")[-1]


def test_r11_candidate_with_a_symbolic_link_out_of_the_subject_is_refused(
    session: Session,
) -> None:
    before = _head(session)
    outside = session.tmp / "ext_kern.py"
    outside.write_text(FASTER.replace("n // 4", "n // 8"))
    cand = session.code / "fast-linked"
    shutil.copytree(session.fast, cand)
    (cand / "src" / "kern.py").unlink()
    (cand / "src" / "kern.py").symlink_to(outside)
    message = _refused(session.measure("e2", "screen", session.fast, cand))
    assert "symbolic link" in message and "src/kern.py" in message
    assert "nothing was measured" in message and _head(session) == before


def test_r11_code_changed_while_measured_refuses_the_samples(session: Session) -> None:
    # the candidate's kernel writes a file under its own directory each time it is imported
    writer = (
        "import os\nopen(os.path.join(os.path.dirname(__file__), 'trace.txt'), 'a').write('x')\n"
    )
    cand = _subject(session.code, "fast-self-writing", writer + FASTER, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    done = session.measure(exp, "screen", session.fast, cand, "--samples", "e2-self")
    # it runs from perfledger's read-only copy: the write fails (its calls fail), or, as root
    # (whom file modes do not stop), is found in the copy before the next call
    if done.returncode != 3:
        assert "Permission denied" in done.stdout + done.stderr, done.stdout + done.stderr
    else:
        message = _refused(done)
        assert "while it was measured" in message and "src/trace.txt" in message
    assert _head(session) == before


def test_r11_command_that_is_not_the_readiness_driver_is_refused(session: Session) -> None:
    done = session.cli("measure", "workload", "--experiment", "e2", "--stage", "screen",
                       "--ref", session.cmd(session.fast),
                       "--cand", f"{sys.executable} {session.fast}/bench.py --fast",
                       "--no-monitor", "--quiet", "--json")  # fmt: skip
    message = _refused(done)
    assert "not the readiness driver" in message and "nothing was measured" in message


def test_checkout_reproduces_the_champions_files_byte_for_byte(session: Session) -> None:
    shown = session.ok("champion", "show", "t1")
    snapshot = shown["snapshot"]
    assert snapshot["of"] == "e1" and snapshot["checkout"].startswith("perfledger checkout ")
    out = session.tmp / "champion-files"
    done = session.ok("checkout", snapshot["digest"], str(out))
    assert done["files"] == 4 and done["digest"] == snapshot["digest"]
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    # every file of the candidate's directory (bytecode caches aside), byte for byte
    source = sorted(
        p.relative_to(session.fast).as_posix()
        for p in session.fast.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert written == source == ["NOTES.md", "bench.py", "src/kern.py", "src/util.py"]
    for rel in written:
        assert (
            blake3.blake3((out / rel).read_bytes()).digest()
            == blake3.blake3((session.fast / rel).read_bytes()).digest()
        )
    # the same snapshot by its samples id; a non-empty directory is refused
    again = session.ok("checkout", "e1-target", str(session.tmp / "by-samples"))
    assert again["digest"] == snapshot["digest"]
    assert session.cli("checkout", "e1-target", str(out), "--json").returncode == 2


def test_handoff_names_the_champions_snapshot_and_how_to_get_it(session: Session) -> None:
    digest = session.ok("champion", "show", "t1")["snapshot"]["digest"]
    md = session.cli("handoff", "--md")
    assert md.returncode == 0, md.stderr
    assert f"perfledger checkout {digest} DIR" in md.stdout
    handoff = session.ok("handoff")["handoff"]
    assert handoff["champion_snapshot"]["digest"] == digest
    assert any(f"perfledger checkout {digest} DIR" in need for need in handoff["resume_needs"])


def test_champion_show_for_people_names_the_snapshot_and_how_to_check_it_out(
    session: Session,
) -> None:
    digest = session.ok("champion", "show", "t1")["snapshot"]["digest"]
    done = session.cli("champion", "show", "t1")
    assert done.returncode == 0, done.stderr
    assert f"code: snapshot {digest[:16]} of e1, 4 file(s) from {session.fast}" in done.stdout
    assert f"get it: perfledger checkout {digest} DIR" in done.stdout
    assert "final audit pass" in done.stdout


def test_audit_re_decides_the_snapshots_from_a_fresh_process(session: Session) -> None:
    report = session.ok("audit")
    assert report["ok"] is True and report["findings"] == []


def test_r11_forged_snapshot_digest_is_refused(session: Session) -> None:
    with Ledger.open(session.ledger) as ledger:
        payload = _samples(session, "e1-screen")
        body = msgspec.to_builtins(payload)
        for key in ("kind", "ref_failures", "cand_failures", "unexplained_activity"):
            body.pop(key)
        body.pop("wall_check", None)  # derived by the decider, not requested
        # the provenance stays: an observed primary's samples come from the worker protocol (R5)
        body["samples_id"] = "forged"
        body["experiment_id"] = "e2"
        champion_hash = ledger.state().experiments["e1"].created.candidate.content_hash
        body["reference"] = {"kind": "champion", "content_hash": champion_hash,
                             "experiment_id": "e1"}  # fmt: skip
        ident = body["identity"]
        ident.pop("changed_paths")
        ident["reference"] = ident["candidate"]  # the champion's code as reference ...
        forged = dict(ident["candidate"])
        forged["files"] = {**forged["files"]}
        forged["files"]["src/kern.py"] = {**forged["files"]["src/kern.py"], "size": 1}
        ident["candidate"] = forged  # ... and a candidate whose digest no longer matches
        body["candidate_hash"] = ledger.state().experiments["e2"].created.candidate.content_hash
        from perfledger.commands.workflow.raw_table import binding_of
        from perfledger.errors import BadRequest
        from perfledger.ledger.base import Artifact

        # its raw table, as measured, bound to the forged samples (a forger with write access)
        screen = ledger.state().samples["e1-screen"].event_id
        raw = json.loads(ledger.artifact(screen, "samples.json"))
        raw["binding"] = binding_of(body)
        table = {name: Artifact(ledger.artifact(screen, name))  # its kept outputs
                 for name in ledger.get(screen).artifacts if name != "samples.json"}  # fmt: skip
        table["samples.json"] = Artifact(json.dumps(raw).encode(), "application/json")
        with pytest.raises(BadRequest) as caught:
            execute(ledger, "samples.record", body, actor="agent", artifacts=table)
    assert "not the tree digest" in caught.value.message


def test_r11_aa_of_code_other_than_the_original_is_refused(session: Session) -> None:
    done = session.cli("measure", "aa", "--target", "t1", "--cmd", session.cmd(session.fast),
                       "--runs", "2", "--quiet", "--json")  # fmt: skip
    message = _refused(done)
    assert "not the original's code" in message and "src/kern.py" in message


def test_r2_driver_with_a_subject_place_needs_the_originals_snapshot(tmp_path: Path) -> None:
    env = machine_environment(tools=False)
    with Ledger.init(tmp_path / "l", name="x", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "t", "min_effect": 0.05,
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["src/*"], "risk_boundary": "none", "budget": {"wall_s": 1.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
        with pytest.raises(RuleRefused) as caught:
            execute(ledger, "readiness.record", {
                "target_id": "t1", "original": {"content_hash": "sha256:" + "0" * 16},
                "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1},
                "accuracy_rule": "exact", "driver": {"argv": ["python", "{subject}/bench.py"]},
                "environment": env["readiness_environment"],
            }, actor="agent")  # fmt: skip
        assert caught.value.rule == "R2" and "original's snapshot" in caught.value.message
        assert ledger.state().targets["t1"].readiness is None


def test_r11_old_rule_target_still_needs_typed_changed_paths(tmp_path: Path) -> None:
    from perfledger.commands.workflow import identity
    from perfledger.commands.workflow import requests as rq
    from perfledger.projections.workflow import TargetView

    with Ledger.init(tmp_path / "l", name="x", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "t", "min_effect": 0.05,
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["src/*"], "risk_boundary": "none", "budget": {"wall_s": 1.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
        target: TargetView = ledger.state().targets["t1"]
    body = _experiment("e1")
    request = msgspec.convert(body, rq.ExperimentCreate)
    with pytest.raises(RuleRefused) as caught:
        identity.r11_experiment_changed_paths(target, request)
    assert caught.value.rule == "R11" and "changed_paths is needed" in caught.value.message
    assert 'scope ["src/*"]: "candidate": {"changed_paths": [' in caught.value.hint  # what to write
    typed = msgspec.convert(_experiment("e1", ["lib/other.py"]), rq.ExperimentCreate)
    with pytest.raises(RuleRefused, match="outside the Target's modification scope"):
        identity.r11_experiment_changed_paths(target, typed)
    identity.r11_experiment_changed_paths(
        target, msgspec.convert(_experiment("e1", ["src/kern.py"]), rq.ExperimentCreate)
    )


def test_r11_an_experiment_keeps_one_candidate_across_stages(session: Session) -> None:
    first = _subject(session.code, "fast-e3", FASTER.replace("n // 4", "n // 5"), util=True)
    with Ledger.open(session.ledger) as ledger:
        _create(ledger, "e3", first)
    done = session.measure("e3", "screen", session.fast, first)
    assert done.returncode == 0, done.stdout + done.stderr
    other = _subject(session.code, "fast-e3-other", FASTER.replace("n // 4", "n // 6"), util=True)
    message = _refused(session.measure("e3", "target", session.fast, other))
    assert "measured another candidate before" in message and "src/kern.py" in message


def test_r11_snapshot_files_must_travel_with_their_event(session: Session) -> None:
    from perfledger.commands.workflow.identity import unattached_files

    with Ledger.open(session.ledger) as ledger:
        event_id = ledger.state().samples["e1-screen"].event_id
        envelope = ledger.get(event_id)
        payload = ledger.payload(event_id)
    assert unattached_files(payload, envelope.artifacts) == []
    kern = payload.identity.candidate.files["src/kern.py"].blake3
    stripped = {k: v for k, v in envelope.artifacts.items() if k != f"file-{kern}"}
    assert unattached_files(payload, stripped) == ["src/kern.py"]


def test_snapshot_decisions_recorded_without_request_rebuild_a_valid_request(
    session: Session,
) -> None:
    from perfledger.commands.audit.replay import _request_from_payload
    from perfledger.commands.registry import operations

    with Ledger.open(session.ledger) as ledger:
        state = ledger.state()
        samples = ledger.payload(state.samples["e1-screen"].event_id)
        created = state.experiments["e1"].created
    for kind, payload in (("SamplesRecorded", samples), ("ExperimentCreated", created)):
        as_json = msgspec.json.decode(msgspec.json.encode(payload))
        op, body = _request_from_payload(kind, as_json)
        operations.validate(op, body)  # derived changed paths left out, as a request has them


def test_r11_readiness_snapshot_must_cover_the_whole_subject_from_schema_2(tmp_path: Path) -> None:
    from perfledger.commands.workflow import identity
    from perfledger.commands.workflow import requests as rq
    from perfledger.kernels.workload.snapshot import take_snapshot

    code = _subject(tmp_path, "orig", LOOP)
    scope_only = take_snapshot(
        "orig", [sys.executable, "orig/bench.py"], lambda rel: rel.startswith("src/"), tmp_path,
        whole=False,
    ).snapshot  # fmt: skip
    assert sorted(scope_only.files) == ["bench.py", "src/kern.py"] and code.is_dir()
    env = machine_environment(tools=False)
    body = {
        "target_id": "t1",
        "original": {"content_hash": "sha256:" + "0" * 16,
                     "snapshot": msgspec.to_builtins(scope_only)},
        "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1},
        "accuracy_rule": "exact", "driver": {"argv": [sys.executable, "{subject}/bench.py"]},
        "environment": env["readiness_environment"],
    }  # fmt: skip
    with Ledger.init(tmp_path / "l", name="x", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "t", "min_effect": 0.05,
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["src/*"], "risk_boundary": "none", "budget": {"wall_s": 1.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
        with pytest.raises(RuleRefused) as caught:
            execute(ledger, "readiness.record", body, actor="agent")
        assert caught.value.rule == "R11" and "every file under the subject" in caught.value.message
        target = ledger.state().targets["t1"]
        assert target.readiness is None
    # a readiness recorded under schema 1 (scope-only snapshots) is re-decided by its own rule
    req = msgspec.convert(body, rq.ReadinessRecord)
    identity.r11_readiness_snapshot(target, req, 1)


def test_r11_checkout_refuses_a_recorded_link_out_of_the_directory(tmp_path: Path) -> None:
    # a snapshot recorded before links out of a subject were refused: an absolute link
    from perfledger.events.identity import FileEntry, file_artifact_name, tree_digest
    from perfledger.ledger.base import Artifact

    bench, link = BENCH.encode(), str(tmp_path / "ext.py").encode()
    files = {
        "bench.py": FileEntry(blake3=blake3.blake3(bench).hexdigest(), size=len(bench),
                              mode="100644"),
        "src/kern.py": FileEntry(blake3=blake3.blake3(link).hexdigest(), size=len(link),
                                 mode="120000"),
    }  # fmt: skip
    snap = {
        "subject": "orig", "argv": [sys.executable, "orig/bench.py"],
        "files": msgspec.to_builtins(files), "digest": tree_digest(files, {}),
        "coverage": "subject",
    }  # fmt: skip
    blobs = {bench, link}
    artifacts = {file_artifact_name(blake3.blake3(b).hexdigest()): Artifact(b) for b in blobs}
    env = machine_environment(tools=False)
    with Ledger.init(tmp_path / "l", name="x", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "t", "min_effect": 0.05,
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["src/*"], "risk_boundary": "none", "budget": {"wall_s": 1.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
        execute(ledger, "readiness.record", {
            "target_id": "t1", "original": {"content_hash": "sha256:" + "0" * 16, "snapshot": snap},
            "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1},
            "accuracy_rule": "exact", "driver": {"argv": [sys.executable, "{subject}/bench.py"]},
            "environment": env["readiness_environment"],
        }, actor="agent", artifacts=artifacts)  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(
        [*perfledger_command(), "--ledger", str(tmp_path / "l"), "checkout", "t1:original",
         str(out), "--json"],
        capture_output=True, text=True, env=isolated_env(tmp_path), timeout=600,
    )  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    assert "leads out of the directory" in json.loads(done.stdout)["error"]["message"]
    assert not out.exists() or not any(out.iterdir())  # nothing written


#: A candidate whose in-scope kernel, when imported, sabotages the *reference*: it finds the
#: reference's directory on the measuring process's command line (``--ref``), drops a ``json.py``
#: there that shadows the standard library's and makes every later reference call burn 5 ms of
#: CPU time inside its timed window, and on its
#: own last call removes it again, so that the snapshot taken after the run sees nothing.
SABOTEUR = """\
import os, shlex, sys
_words = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
_ref = os.path.dirname(shlex.split(_words[_words.index(b"--ref") + 1].decode())[1])
_count = COUNT_FILE
_n = (int(open(_count).read()) if os.path.exists(_count) else 0) + 1
open(_count, "w").write(str(_n))
_shadow = os.path.join(_ref, "json.py")
if _n < 10:  # 5 pairs of 2 cases: its 10th call is the run's last
    open(_shadow, "w").write(
        "import sys, time\\n"
        "here = sys.path.pop(0)\\n"
        "del sys.modules['json']\\n"
        "import json as _real\\n"
        "sys.path.insert(0, here)\\n"
        "sys.modules['json'] = _real\\n"
        "_clock = time.process_time\\n"
        "def _burning():\\n"
        "    end = _clock() + 0.005\\n"
        "    while _clock() < end:\\n"
        "        pass\\n"
        "    return _clock()\\n"
        "time.process_time = _burning\\n"
    )
elif os.path.exists(_shadow):
    os.remove(_shadow)
"""


def test_cheat_candidate_that_edits_the_references_files_between_calls_is_refused(
    session: Session,
) -> None:
    """R11: a file a candidate adds to the reference's directory in one call and removes in its
    last one slows every reference call between (unchecked, the champion's own code measured
    88 % faster than the champion); the snapshots before and after the run are equal. Each
    subject's files are checked before every call, so the run is refused and nothing recorded."""
    count = session.tmp / "saboteur-count"
    kern = SABOTEUR.replace("COUNT_FILE", repr(str(count))) + FASTER  # the champion's own work
    cand = _subject(session.code, "saboteur", kern, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    done = session.measure(exp, "screen", session.fast, cand, "--samples", "e2-sabotage")
    message = _refused(done)
    assert "changed while it was measured" in message and "json.py" in message
    assert _head(session) == before
    (session.fast / "json.py").unlink(missing_ok=True)  # a failed defence must not leak on


#: A candidate whose in-scope kernel, when imported, writes a bytecode cache for the reference's
#: ``src/kern.py`` into the reference's ``__pycache__``: stamped with the source's modification
#: time and size, so Python would load it instead of the source, and compiled from the
#: champion's source (which the candidate knows without reading any file) plus a wrapper that
#: burns 5 ms of CPU time inside every reference call's timed window. The snapshot skips
#: ``__pycache__`` (the run writes it itself): no snapshot sees the change.
#: The champion's source plus a wrapper that burns 5 ms of CPU time inside every call's timed
#: window: what a planted ``.pyc`` of the reference's ``src/kern.py`` holds.
SLOWED_CHAMPION = FASTER + (
    "\nimport time as _t\n_honest = sumsq\n"
    "def sumsq(n):\n"
    "    end = _t.process_time() + 0.005\n"
    "    while _t.process_time() < end:\n"
    "        pass\n"
    "    return _honest(n)\n"
)
#: Writes the compiled ``SLOWED_CHAMPION`` as the cache of ``_src`` at ``_pyc``, stamped with
#: the source's modification time and size (so Python would load it instead of the source).
PLANT_PYC = """\
os.makedirs(os.path.dirname(_pyc), exist_ok=True)
with open(_pyc, "wb") as _out:
    _out.write(_code_to_timestamp_pyc(compile(_text, _src, "exec"), int(_stat.st_mtime),
                                      _stat.st_size))
"""
PYC_SABOTEUR = (
    """\
import importlib.util, os
from importlib._bootstrap_external import _code_to_timestamp_pyc
_ref = REF_DIR  # known to the agent (another process's /proc entry is refused, R11)
_src = os.path.join(_ref, "src", "kern.py")
_text = SLOWED
_stat = os.stat(_src)
_pyc = importlib.util.cache_from_source(_src)
""".replace("SLOWED", repr(SLOWED_CHAMPION))
    + PLANT_PYC
)


def test_cheat_candidate_that_plants_bytecode_for_the_reference_gains_nothing(
    session: Session,
) -> None:
    """R11: the reference's bytecode caches are not in its snapshot, so a candidate that plants
    a ``.pyc`` there would make the reference run code that no snapshot holds (unchecked, the
    champion's own code measured about 85 % faster than the champion). Every call runs from
    perfledger's copy of its snapshot with a bytecode cache of its own: the planted cache is
    never loaded, the candidate doing the champion's work gains nothing, and the caches of the
    subject's directory are removed after the run."""
    kern = PYC_SABOTEUR.replace("REF_DIR", repr(str(session.fast))) + FASTER
    cand = _subject(session.code, "pyc-saboteur", kern, util=True)
    with Ledger.open(session.ledger) as ledger:  # its own experiment: these samples are kept
        _create(ledger, "e-pyc", cand)
    try:
        done = session.measure("e-pyc", "screen", session.fast, cand, "--samples", "e-pyc-1")
        assert done.returncode == 0, done.stdout + done.stderr
        verdict = session.ok("verdict", "record", "--samples", "e-pyc-1", "--dry-run")
        primary = verdict["events"][0]["payload"]["primary"]
        assert primary["estimate"] < 0.5, primary  # the same work: no 85 % "gain"
        assert not list(session.fast.rglob("*.pyc"))
    finally:  # a failed defence must not leak into the other tests of the session
        for cache in session.fast.rglob("__pycache__"):
            shutil.rmtree(cache)


#: The same, aimed at the copy the reference runs from: the candidate finds the other
#: ``perfledger-subject-*`` directory beside its own (listing a directory opens no file) and
#: plants the ``.pyc`` in that copy's private bytecode cache, where the reference's Python
#: would look for it.
PRIVATE_PYC_SABOTEUR = (
    """\
import glob, importlib.util, os, sys
from importlib._bootstrap_external import _code_to_timestamp_pyc
_mine = os.environ["PERFLEDGER_SUBJECT_ROOT"]
for _root in glob.glob(os.path.join(os.path.dirname(_mine), "perfledger-subject-*")):
    _src = os.path.join(_root, "subject", "src", "kern.py")
    if _root == _mine or not os.path.exists(_src):
        continue
    _text = SLOWED
    _stat = os.stat(_src)
    _saved, sys.pycache_prefix = sys.pycache_prefix, os.path.join(_root, "pycache")
    try:
        _pyc = importlib.util.cache_from_source(_src)
    finally:
        sys.pycache_prefix = _saved
""".replace("SLOWED", repr(SLOWED_CHAMPION))
    + "".join("    " + line + "\n" for line in PLANT_PYC.splitlines())
)


def test_cheat_candidate_that_plants_bytecode_in_the_references_private_cache_is_refused(
    session: Session,
) -> None:
    """R11: each subject's bytecode cache is its own; one that changed outside its own calls
    (here: a ``.pyc`` the candidate planted in the reference's) refuses the run before the
    reference's next call, and nothing is recorded."""
    cand = _subject(session.code, "private-pyc", PRIVATE_PYC_SABOTEUR + FASTER, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    done = session.measure(exp, "screen", session.fast, cand, "--samples", "e2-private-pyc")
    message = _refused(done)
    assert "private bytecode cache" in message and "kern.cpython" in message, message
    assert "reference" in message and _head(session) == before


#: A candidate that rewrites a file of the reference's read-only copy (making it writable
#: first, which the same user may) and puts the content and modes back on its next call.
COPY_EDITOR = """\
import glob, os
_mine = os.environ["PERFLEDGER_SUBJECT_ROOT"]
for _root in glob.glob(os.path.join(os.path.dirname(_mine), "perfledger-subject-*")):
    _notes = os.path.join(_root, "subject", "NOTES.md")
    if _root == _mine or not os.path.exists(_notes):
        continue
    _dir = os.path.dirname(_notes)
    os.chmod(_dir, 0o755)
    os.chmod(_notes, 0o644)
    with open(_notes, "a") as _out:
        _out.write(" ")
    os.chmod(_notes, 0o444)
    os.chmod(_dir, 0o555)
"""


def test_cheat_candidate_that_edits_the_references_copy_is_refused(session: Session) -> None:
    """R11: perfledger's copies are read-only, and the same user can make them writable again;
    the change time of what it touched tells (no process can set it back), so the run is
    refused before the reference's next call, naming the file."""
    cand = _subject(session.code, "copy-editor", COPY_EDITOR + FASTER, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    message = _refused(
        session.measure(
            exp,
            "screen",
            session.fast,
            cand,
            "--samples",
            "e2-copy-editor",
        )
    )
    assert "read-only copy the reference runs from" in message and "NOTES.md" in message
    assert _head(session) == before


#: A candidate that imports a helper module from outside every subject (beside the measuring
#: directory), so the code that runs is in no snapshot.
OUTSIDE_HELPER = """\
import sys
sys.path.insert(0, HELPERS)
from fast_helper import sumsq
"""


def test_cheat_candidate_that_imports_a_module_from_outside_its_subject_is_refused(
    session: Session,
) -> None:
    """R11: a call that reads a file outside its copy, the interpreter and its site-packages
    (perfledger's bootstrap reports every file a Python process opens) is refused naming it:
    the code in it is in no snapshot. Its honest control is every run of this session."""
    helpers = session.tmp / "helpers"
    helpers.mkdir(exist_ok=True)
    (helpers / "fast_helper.py").write_text(UTIL.replace("closed_form", "sumsq"))
    kern = OUTSIDE_HELPER.replace("HELPERS", repr(str(helpers)))
    cand = _subject(session.code, "outside-helper", kern, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    message = _refused(
        session.measure(
            exp,
            "screen",
            session.fast,
            cand,
            "--samples",
            "e2-outside-helper",
        )
    )
    assert "read files outside its snapshot" in message and "fast_helper.py" in message
    assert "candidate" in message and _head(session) == before


#: A candidate whose in-scope kernel writes a ``.pth`` file into its interpreter's
#: site-packages: Python runs its ``import`` line at the start of every later process, and it
#: makes those whose command line names the reference's directory burn 5 ms of CPU time inside
#: their timed window. Outside both subjects, so no snapshot sees it; the candidate removes it
#: on its own last call.
PTH_SABOTEUR = """\
import os, shlex, site
_words = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
_ref = os.path.dirname(shlex.split(_words[_words.index(b"--ref") + 1].decode())[1])
_count = COUNT_FILE
_n = (int(open(_count).read()) if os.path.exists(_count) else 0) + 1
open(_count, "w").write(str(_n))
_pth = os.path.join(site.getsitepackages()[0], PTH_NAME)
_payload = _count + ".py"
open(_payload, "w").write(
    "import time\\n"
    f"if {_ref!r}.encode() in open('/proc/self/cmdline', 'rb').read():\\n"
    "    _clock = time.process_time\\n"
    "    def _burning(_clock=_clock):\\n"
    "        end = _clock() + 0.005\\n"
    "        while _clock() < end:\\n"
    "            pass\\n"
    "        return _clock()\\n"
    "    time.process_time = _burning\\n"
)
if _n < 10:  # 5 pairs of 2 cases: its 10th call is the run's last
    open(_pth, "w").write(f"import builtins; exec(open({_payload!r}).read())\\n")
elif os.path.exists(_pth):
    os.remove(_pth)
"""


def test_cheat_candidate_that_plants_startup_code_in_site_packages_is_refused(
    session: Session,
) -> None:
    """R11: a ``.pth`` file the candidate adds to its interpreter's site-packages in one call
    runs in every later process, the reference's included (unchecked, the champion's own code
    measured faster than the champion); it lies outside both subjects. The start-up files of
    each subject's Python are checked before every call: the run is refused, nothing recorded."""
    import os
    import site

    name = f"zz-perfledger-test-{os.getpid()}.pth"
    pth = Path(site.getsitepackages()[0]) / name
    kern = (
        PTH_SABOTEUR.replace("COUNT_FILE", repr(str(session.tmp / "pth-count"))).replace(
            "PTH_NAME", repr(name)
        )
        + FASTER
    )
    cand = _subject(session.code, "pth-saboteur", kern, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    try:
        done = session.measure(exp, "screen", session.fast, cand, "--samples", "e2-pth")
        message = _refused(done)
        assert "start-up" in message and name in message
        assert _head(session) == before
        # added during the refused run: moved aside, so it cannot act in the next run
        assert "moved aside" in message and not pth.exists()
    finally:  # never leave it in the test environment's interpreter
        pth.unlink(missing_ok=True)
        Path(str(pth) + ".perfledger-quarantine").unlink(missing_ok=True)


#: A candidate that rewrites a file of the reference in place with as many bytes and sets its
#: modification time back (a cheap per-call check by size and time alone would miss it).
IN_PLACE_EDITOR = """\
import os, shlex
_words = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
_ref = os.path.dirname(shlex.split(_words[_words.index(b"--ref") + 1].decode())[1])
_notes = os.path.join(_ref, "NOTES.md")
_st = os.stat(_notes)
_text = open(_notes).read()
open(_notes, "w").write(_text.upper())
os.utime(_notes, ns=(_st.st_atime_ns, _st.st_mtime_ns))
"""


def test_cheat_candidate_that_edits_a_reference_file_and_restores_its_time_is_refused(
    session: Session,
) -> None:
    notes = session.fast / "NOTES.md"
    original = notes.read_text()
    cand = _subject(session.code, "in-place-editor", IN_PLACE_EDITOR + FASTER, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    try:
        message = _refused(
            session.measure(
                exp,
                "screen",
                session.fast,
                cand,
                "--samples",
                "e2-in-place",
            )
        )
        assert "changed while it was measured" in message and "NOTES.md" in message
        assert _head(session) == before
    finally:
        notes.write_text(original)


def test_bytecode_caches_survive_their_own_calls_and_not_the_other_subjects(
    tmp_path: Path,
) -> None:
    """R11: caches are removed when the run begins; a subject's own compiled modules are kept
    from one of its calls to the next (one compile per run), and a cache that changed during the
    other subject's call (a planted ``.pyc``) is removed before the next call."""
    from perfledger.app.identity import SubjectsWatch

    ref, cand = tmp_path / "ref", tmp_path / "cand"
    for d in (ref, cand):
        (d / "src" / "__pycache__").mkdir(parents=True)
        (d / "src" / "kern.py").write_text("x = 1\n")
    stale = ref / "src" / "__pycache__" / "kern.cpython-311.pyc"
    stale.write_bytes(b"from before the run")
    body = {"reference": {"subject": str(ref)}, "candidate": {"subject": str(cand)}}
    watch = SubjectsWatch({}, body)  # info is read only when a snapshot file changes
    assert not stale.exists()
    watch("ref")
    compiled = ref / "src" / "__pycache__" / "kern.cpython-311.pyc"
    compiled.parent.mkdir(exist_ok=True)
    compiled.write_bytes(b"the reference compiled this itself")
    watch("cand")  # after the reference's own call: kept
    assert compiled.read_bytes() == b"the reference compiled this itself"
    compiled.write_bytes(b"planted during the candidate's call")
    watch("ref")  # before the reference's next call: removed, it compiles its source again
    assert not compiled.exists()


def test_r11_samples_record_the_copies_they_ran_from_and_equal_call_environments(
    session: Session,
) -> None:
    """R11 (SamplesRecorded schema 7; the worker's samples from schema 15): the honest samples
    name the copies their calls ran from (their own snapshots) and both subjects' full call
    environments, equal; requests whose environments differ, or that name other copies, are
    refused by the rule an auditor re-runs. Before schema 15 the rule read the self-timed
    driver's provenance only: the same forged worker samples pass it there."""
    from perfledger.commands.workflow import identity
    from perfledger.commands.workflow import requests as rq
    from perfledger.events.workflow import R11_CALLS_FROM_COPIES

    payload = _samples(session, "e1-screen")
    settings = payload.provenance.settings
    code = payload.identity
    assert settings["subject_copies"] == {
        "ref": code.reference.digest, "cand": code.candidate.digest
    }  # fmt: skip
    env = settings["call_environment"]
    assert (
        env["ref"] == env["cand"] and "PATH" in env["ref"] and "PYTHONPYCACHEPREFIX" in env["ref"]
    )
    with Ledger.open(session.ledger) as ledger:
        event = ledger.state().samples["e1-screen"].event_id
        assert ledger.get(event).schema >= R11_CALLS_FROM_COPIES
    body = msgspec.to_builtins(payload)
    for key in ("kind", "ref_failures", "cand_failures", "unexplained_activity", "wall_check"):
        body.pop(key, None)
    body["identity"].pop("changed_paths")
    assert body["provenance"]["protocol"] == "worker/v1"
    identity.r11_calls_from_copies(msgspec.convert(body, rq.SamplesRecord), code, observed=True)
    forged = json.loads(json.dumps(body))
    forged["provenance"]["settings"]["call_environment"]["cand"]["FAST_PATH"] = "blake3:00"
    with pytest.raises(RuleRefused) as caught:
        identity.r11_calls_from_copies(
            msgspec.convert(forged, rq.SamplesRecord), code, observed=True
        )
    assert caught.value.rule == "R11" and "FAST_PATH" in caught.value.message
    # before SamplesRecorded 15, worker samples were not read by this rule
    identity.r11_calls_from_copies(msgspec.convert(forged, rq.SamplesRecord), code)
    elsewhere = json.loads(json.dumps(body))
    elsewhere["provenance"]["settings"].pop("subject_copies")
    with pytest.raises(RuleRefused) as caught:
        identity.r11_calls_from_copies(
            msgspec.convert(elsewhere, rq.SamplesRecord), code, observed=True
        )
    assert "did not run from copies" in caught.value.message


#: A candidate that rewrites a module of its interpreter's site-packages for a while and puts
#: its content and modification time back (as one that patches an installed package the
#: reference imports would): site-packages is no subject's, and reads from there are allowed.
SITE_EDITOR = """\
import os
_path = MODULE_PATH
_st = os.stat(_path)
_text = open(_path).read()
open(_path, "w").write(_text.replace("1", "2"))
open(_path, "w").write(_text)
os.utime(_path, ns=(_st.st_atime_ns, _st.st_mtime_ns))
"""


def test_cheat_candidate_that_edits_site_packages_and_puts_it_back_is_refused(
    session: Session,
) -> None:
    """R11: the Python installation (interpreter, standard library, site-packages, editable
    installs) is covered by the environment identity's digest; a file of it written during the
    run, even put back with its old time, refuses the run (its change time tells)."""
    import os
    import site

    module = Path(site.getsitepackages()[0]) / f"zz_perfledger_test_{os.getpid()}.py"
    module.write_text("VALUE = 1\n")  # installed before the run
    kern = SITE_EDITOR.replace("MODULE_PATH", repr(str(module))) + FASTER
    cand = _subject(session.code, "site-editor", kern, util=True)
    exp = _own_experiment(session, cand)  # appended before the head is taken
    before = _head(session)
    try:
        message = _refused(
            session.measure(
                exp,
                "screen",
                session.fast,
                cand,
                "--samples",
                "e2-site-editor",
            )
        )
        assert "Python installation" in message and "not recorded" in message
        assert _head(session) == before
    finally:
        module.unlink(missing_ok=True)
