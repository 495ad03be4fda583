"""``perfledger schema OP --example``: a request every operation's model accepts (the packaged
curated ones equal the repository's ``examples/requests/``; the rest are built from the
schema)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from perfledger.commands.registry.operations import OPERATIONS, json_schema, validate
from perfledger.commands.registry.placeholders import filled, placeholder_in
from perfledger.commands.registry.request_examples import (
    EXAMPLE_HASH,
    EXAMPLE_ID,
    curated,
    example,
)
from subprocess_env import isolated_env

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_operation_has_an_example_its_model_accepts(op: str) -> None:
    validate(op, example(op))


def test_packaged_examples_are_the_repository_examples_of_a_session() -> None:
    first: dict[str, Path] = {}
    for path in sorted(EXAMPLES.glob("[0-9]*.json")):
        first.setdefault(path.stem.split("-", 1)[1], path)
    assert len(first) >= 12
    for op, path in first.items():
        assert curated(op) == json.loads(path.read_text()), op


def test_schema_example_cli_prints_json_and_needs_an_operation() -> None:
    base = [sys.executable, "-m", "perfledger", "schema"]
    done = subprocess.run([*base, "reject", "--example"], capture_output=True, text=True)
    assert done.returncode == 0
    validate("reject", json.loads(done.stdout))
    bare = subprocess.run([*base, "--example"], capture_output=True, text=True)
    assert bare.returncode == 2 and "needs an OPERATION" in bare.stderr


#: The operations whose requests `perfledger loop ...` builds from a measurement: their
#: examples are built from the schema (an agent never writes them by hand).
BUILT = {op for op in OPERATIONS if op.startswith("loop.")}


def _strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize("op", sorted(set(OPERATIONS) - BUILT))
def test_every_workflow_example_is_a_curated_request_not_placeholders(op: str) -> None:
    shown = example(op)
    assert curated(op) == shown, f"ship perfledger/skill/examples/{op}.json"
    assert not {"example", EXAMPLE_ID, EXAMPLE_HASH} & set(_strings(shown)), shown


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_example_is_valid_against_the_json_schema_an_agent_reads(op: str) -> None:
    jsonschema.Draft202012Validator(json_schema(op)).validate(example(op))


def test_schema_of_a_bare_verb_names_the_operation_it_means() -> None:
    done = subprocess.run([sys.executable, "-m", "perfledger", "schema", "supersede"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "did you mean target.supersede?" in done.stderr


# ----------------------------------------------------- examples that fit the ledger (issue 38)


def _session_until_experiment(tmp: Path, bound: bool) -> Any:
    """A ledger holding examples/requests up to (not including) ``experiment.create``; with
    ``bound``, its readiness binds the original's directory (a ``{subject}`` place, R11)."""
    from perfledger.api import Ledger
    from perfledger.app.identity import readiness_edge
    from perfledger.commands.registry.operations import execute

    ledger = Ledger.init(tmp / ("bound" if bound else "unbound"), name="ex", actor="agent")
    for path in sorted(EXAMPLES.glob("[0-9][0-9]-*.json"))[:6]:
        op = path.stem.split("-", 1)[1]
        body = json.loads(path.read_text())
        artifacts: dict[str, Any] = {}
        if op == "readiness.record" and bound:
            subject = tmp / "orig"
            (subject / "src" / "kernels").mkdir(parents=True)
            (subject / "bench.py").write_text("print('the original')\n")
            (subject / "src" / "kernels" / "attn.cu").write_text("// the original kernel\n")
            body["original"]["subject"] = str(subject)
            body["driver"]["argv"] = ["python", "{subject}/bench.py", "--out", "{output}",
                                      "--seed", "{seed}"]  # fmt: skip
            body, artifacts = readiness_edge(ledger, body)
        execute(ledger, op, body, actor="agent", artifacts=artifacts or None)
        if op == "baseline.record":  # R4: typed, it is declared; a session measures it
            from wf_scenario import record_measured_baseline

            record_measured_baseline(ledger, body)
    return ledger


@pytest.mark.parametrize("bound", [False, True], ids=["unbound", "subject-bound"])
def test_experiment_example_fits_the_ledgers_target_and_is_accepted(
    tmp_path: Path, bound: bool
) -> None:
    """``schema experiment.create --example --ledger L``: typed ``changed_paths`` only where
    the Target binds no subject directory (R11 refuses them where it does); either way the
    decider accepts the example on the state it is shown for. The unfitted example is the
    control: refused (R11) on the bound Target."""
    from perfledger.app.next_steps import dry_decide
    from perfledger.app.snapshots import candidate_edge
    from perfledger.commands.registry.request_examples import CANDIDATE_SUBJECT, example_for

    ledger = _session_until_experiment(tmp_path, bound)
    try:
        state = ledger.state()
        body = example_for("experiment.create", state)
        assert ("changed_paths" in body["candidate"]) is not bound
        assert (body["candidate"].get("subject") == CANDIDATE_SUBJECT) is bound
        if bound:  # the directory the example names, holding a change: snapshotted at the edge
            candidate = tmp_path / CANDIDATE_SUBJECT
            shutil.copytree(tmp_path / "orig", candidate)
            (candidate / "src" / "kernels" / "attn.cu").write_text("// the fused kernel\n")
            body["candidate"]["subject"] = str(candidate)
            body, _ = candidate_edge(ledger, body)
        assert dry_decide(state, "experiment.create", body, ledger.payload) is None
        unfitted = dry_decide(state, "experiment.create", example("experiment.create"),
                              ledger.payload)  # fmt: skip
        assert (unfitted is not None and unfitted.rule == "R11") is bound
    finally:
        ledger.close()


def test_schema_example_without_a_ledger_shows_both_variants(tmp_path: Path) -> None:
    from perfledger.commands.registry.request_examples import CANDIDATE_SUBJECT

    env = {**isolated_env(tmp_path)}
    base = [sys.executable, "-m", "perfledger", "schema", "experiment.create", "--example"]
    human = subprocess.run(base, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert human.returncode == 0, human.stderr
    validate("experiment.create", json.loads(human.stdout))  # stdout: one request as is
    assert "changed_paths" in human.stdout and "with subject directories" in human.stderr
    machine = subprocess.run([*base, "--json"], capture_output=True, text=True, env=env,
                             cwd=tmp_path)  # fmt: skip
    variants = json.loads(machine.stdout)["variants"]
    assert "changed_paths" in variants["without subject directories"]["candidate"]
    assert "changed_paths" not in variants["with subject directories"]["candidate"]
    bound = variants["with subject directories"]
    # candidate.subject names a directory: `experiment create` replaces it by its snapshot
    # before the request is validated (the edge), so validate what the edge leaves
    assert bound["candidate"].pop("subject") == CANDIDATE_SUBJECT
    for body in variants.values():
        validate("experiment.create", body)


# ------------------------------------- examples fitted to every state of a CPU session (issue 38)

#: The packaged examples' metric names that the walked session renames: an example that shows
#: one of them on that ledger kept a foreign metric.
FOREIGN_METRICS = {"p99_ms": "tail_ms"}
#: The observed metrics (R5: a primary is one of them), swapped in the walked session: its
#: primary is the packaged examples' guardrail, and the other way round.
SWAPPED = {"wall_time": "cpu_time", "cpu_time": "wall_time"}
#: Operations that apply to any ledger with a current Target: their fitted example is accepted
#: in every state of the walk.
ALWAYS = {"target.freeze", "target.supersede", "evidence.add", "review.record", "handoff.record",
          "host-advice.record", "upstream-check.record"}  # fmt: skip


def _renamed(body: Any) -> Any:
    text = json.dumps(body)
    for old, new in FOREIGN_METRICS.items():
        text = text.replace(old, new)
    for n, old in enumerate(SWAPPED):  # a swap: through placeholders
        text = text.replace(f'"{old}"', f'"@{n}@"')
    for n, new in enumerate(SWAPPED.values()):
        text = text.replace(f'"@{n}@"', f'"{new}"')
    return json.loads(text)


def _check_examples(ledger: Any, after: str) -> list[str]:
    """The problems of every operation's fitted example on ``ledger``'s head: one that keeps a
    foreign metric; one refused without a hint; an offered step's, or an always-applicable
    operation's, that is refused; one shown as accepted that its decider refuses."""
    from perfledger.app.examples import fitted_example
    from perfledger.app.next_steps import allowed_decisions, dry_decide

    state = ledger.state()
    actor_of = lambda event_id: ledger.get(event_id).actor  # noqa: E731
    offered = {d.op for t in state.targets for d in allowed_decisions(state, t, ledger.payload)}
    problems = []
    for op in sorted(set(OPERATIONS) - BUILT):
        fitted = fitted_example(op, state, ledger.payload, actor_of)
        where = f"after {after}: {op}"
        foreign = [m for m in FOREIGN_METRICS if m in json.dumps(fitted.body)]
        if foreign and op not in ("target.freeze",) and fitted.refusal is None:
            problems.append(f"{where}: foreign metric(s) {foreign}")
        if fitted.refusal is not None:
            if not fitted.refusal.hint:
                problems.append(f"{where}: refused without a hint: {fitted.refusal.message}")
            current = any(t.status == "current" for t in state.targets.values())
            always = op in ALWAYS and (current or op in ("target.freeze", "evidence.add"))
            if always or (op in offered and op not in ("samples.record", "activity.explain")):
                problems.append(f"{where}: offered or always applicable, but its example is "
                                f"refused: {fitted.refusal.message}")  # fmt: skip
        elif "subject" not in fitted.body.get("candidate", {}):
            again = dry_decide(state, op, filled(fitted.body), ledger.payload, actor_of=actor_of)
            if again is not None:
                problems.append(f"{where}: shown as accepted, refused: {again.message}")
    return problems


def test_every_example_fits_every_state_of_a_cpu_session(tmp_path: Path) -> None:
    """A CPU session whose metrics are not the packaged examples' (a champion chain, a flagged
    target stage explained through another actor's review, a rejection, a final audit, a
    handoff): after each event, every operation's example fitted to the ledger uses the
    Target's own metrics and ids and is accepted by its decider, or says why the operation
    cannot apply now (a refusal with a hint). Before, six examples were refused as written."""
    from wf_scenario import CAND1, CAND2, CAND3, Session, experiment, samples

    from perfledger.api import Ledger

    problems: list[str] = []

    class Walked(Session):
        def run(self, op: str, body: dict[str, Any], key: str | None = None,
                artifacts: dict[str, Any] | None = None, start_run: bool = True) -> Any:  # fmt: skip
            # a measured body (its raw table attached) was renamed before it was measured
            renamed = body if artifacts is not None else _renamed(body)
            payload = super().run(op, renamed, key, artifacts, start_run)
            problems.extend(_check_examples(self.ledger, op))
            return payload

    s = Walked(Ledger.init(tmp_path / "ledger", name="walk", actor="agent"))
    try:
        s.ready()
        s.screened("e1", CAND1)
        flagged = samples("e1-target", "target")
        for index in (1, 3):
            flagged["pairs"][index]["monitor"] = {
                "observed": True, "foreign_activity": True, "flags": ["foreign_pid:4242"]}  # fmt: skip
        s.record_measured(_renamed(flagged))  # R5: a champion comes only from measured samples
        from perfledger.app.examples import fitted_example
        from perfledger.commands.registry.operations import execute

        state = s.state()
        review = fitted_example("review.record", state, s.ledger.payload).body
        assert review["subject_event"] == state.samples["e1-target"].event_id
        execute(s.ledger, "review.record", filled(review), actor="reviewer")  # another actor
        problems.extend(_check_examples(s.ledger, "review.record"))
        explain = fitted_example("activity.explain", s.state(), s.ledger.payload,
                                 lambda e: s.ledger.get(e).actor)  # fmt: skip
        assert explain.refusal is None and explain.body["pairs"] == [1, 3]
        s.run("activity.explain", filled(explain.body))
        s.run("verdict.record", {"samples_id": "e1-target"})
        s.champion("e1")
        s.run("experiment.create", experiment("e2", candidate=CAND2))
        s.run("samples.record", samples("e2-screen", "screen", experiment_id="e2", candidate=CAND2,
                                        gain=-0.3, reference={"kind": "champion",
                                        "experiment_id": "e1", "content_hash": CAND1}))  # fmt: skip
        s.run("verdict.record", {"samples_id": "e2-screen"})
        s.run("reject", {"experiment_id": "e2", "closes": "implementation",
                         "reason": "the screen regressed"})  # fmt: skip
        s.run("experiment.create", experiment("e3", candidate=CAND3))
        s.record_measured(_renamed(samples("e1-audit", "final_audit")))  # R5: measured
        s.run("final-audit.record", {"target_id": "t1", "samples_id": "e1-audit"})
        handoff = fitted_example("handoff.record", s.state(), s.ledger.payload)
        assert handoff.refusal is None
        s.run("handoff.record", filled(handoff.body))
    finally:
        s.ledger.close()
    assert problems == [], "\n".join(problems)


def test_schema_example_with_a_ledger_prints_an_accepted_example_or_the_refusal(
    tmp_path: Path,
) -> None:
    """Through the CLI, on a ledger holding only a Target whose primary is not the packaged
    examples': the metric audit's example names the Target's metric (accepted, so printed);
    a verdict has nothing to judge, so the example is not printed and the answer says why,
    with a hint (exit 2)."""
    from wf_scenario import target_freeze

    from perfledger.api import Ledger
    from perfledger.commands.registry.operations import execute

    path = tmp_path / "ledger"
    body = _renamed(target_freeze())
    with Ledger.init(path, name="ex", actor="agent") as ledger:
        execute(ledger, "target.freeze", body, actor="agent")
    env = isolated_env(tmp_path)
    base = [sys.executable, "-m", "perfledger", "--ledger", str(path), "schema"]
    audit = subprocess.run([*base, "metric-audit.record", "--example"], capture_output=True,
                           text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["metric"] == "cpu_time"  # the Target's primary
    verdict = subprocess.run([*base, "verdict.record", "--example", "--json"], capture_output=True,
                             text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert verdict.returncode == 2, verdict.stderr
    error = json.loads(verdict.stdout)["error"]  # no example: the reason, with its hint
    assert "cannot apply to this ledger now" in error["message"]
    assert "measure samples first" in error["hint"]


@pytest.mark.slow
def test_every_example_fits_every_state_of_the_recorded_gpu_session(tmp_path: Path) -> None:
    """The recorded H200 session (a kernel Target), folded up to each of its commits: every
    operation's fitted example is accepted where it applies, or says why not with a hint."""
    from perfledger.api import Ledger

    recorded = Path(__file__).resolve().parents[2] / "examples" / "recorded" / "session.bundle"
    clone = tmp_path / "ledger.git"
    subprocess.run(["git", "clone", "--quiet", "--mirror", str(recorded), str(clone)], check=True)
    problems: list[str] = []

    class AtCommit:
        """The ledger's reads at one commit (what :func:`_check_examples` uses)."""

        def __init__(self, ledger: Any, commit: str) -> None:
            self.ledger, self.commit = ledger, commit
            self.payload, self.get = ledger.payload, ledger.get

        def state(self) -> Any:
            return self.ledger.state_at(self.commit)

    with Ledger.open(clone) as ledger:
        for entry in ledger.log():
            problems += _check_examples(AtCommit(ledger, entry.commit), entry.commit[:12])
    assert problems == [], "\n".join(problems)


# ------------------------------------------- example free text is a placeholder (issue 38)


def _with_free_text() -> list[str]:
    """The operations whose shown example has free text only the agent or a reviewer knows."""
    from perfledger.commands.registry.request_examples import shown

    return [op for op in sorted(set(OPERATIONS) - BUILT) if placeholder_in(shown(op))]


def test_every_example_shows_its_free_text_as_a_placeholder() -> None:
    """An explanation, a reason, a review's challenge and response, a handoff's stop reason:
    shown as ``<...>``, never as plausible prose an agent could record unedited."""
    from perfledger.commands.registry.placeholders import PLACEHOLDERS, PLACEHOLDERS_OF
    from perfledger.commands.registry.request_examples import shown

    ops = _with_free_text()
    for needed in ("activity.explain", "reject", "review.record", "handoff.record", "reconcile",
                   "conflict.resolve", "host-advice.record", "local-result.record",
                   "experiment.create", "metric-audit.record"):  # fmt: skip
        assert needed in ops, needed
    for op in sorted(set(OPERATIONS) - BUILT):
        free = {*PLACEHOLDERS, *PLACEHOLDERS_OF.get(op, {})}
        prose = [s for k, s in _fields(shown(op)) if k in free and not s.startswith("<")]
        assert prose == [], (op, prose)


def _fields(node: object, key: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [f for k, v in node.items() for f in _fields(v, k)]
    if isinstance(node, list):
        return [f for v in node for f in _fields(v, key)]
    return [(key, node)] if isinstance(node, str) else []


def test_unedited_example_free_text_is_refused_with_a_placeholder_hint(tmp_path: Path) -> None:
    """A request sent as the example shows it is a bad request (exit 2) before any rule, with a
    hint naming the placeholder to replace; the same request with the placeholders replaced is
    not refused for them (honest control: the rules may still refuse it on an empty ledger)."""
    from perfledger.api import Ledger
    from perfledger.commands.registry.operations import preview
    from perfledger.commands.registry.request_examples import shown
    from perfledger.errors import BadRequest

    with Ledger.init(tmp_path / "ledger", name="ph", actor="agent") as ledger:
        for op in _with_free_text():
            with pytest.raises(BadRequest) as refused:
                preview(ledger, op, shown(op), actor="agent")
            assert "replace the placeholder <" in (refused.value.hint or ""), op
            try:
                preview(ledger, op, filled(shown(op)), actor="agent")
            except Exception as exc:  # any refusal but the placeholder's
                assert "placeholder" not in str(exc), (op, exc)
        # prose that merely holds angle brackets is not a placeholder
        assert placeholder_in({"reason": "a < b, and <b> is bold"}) is None
        assert placeholder_in({"reason": " <todo> "}) == ("reason", " <todo> ")


def test_cli_refuses_the_activity_explanation_example_as_shown(tmp_path: Path) -> None:
    """The trial's path: ``schema activity.explain --example`` piped to ``activity explain``
    unedited; the explanation's placeholder is refused (exit 2), nothing is appended."""
    env = isolated_env(tmp_path)
    ledger = tmp_path / "ledger"
    base = [sys.executable, "-m", "perfledger"]
    subprocess.run([*base, "init", str(ledger)], check=True, env=env, capture_output=True)
    shown = subprocess.run([*base, "schema", "activity.explain", "--example"], env=env,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert json.loads(shown)["explanation"].startswith("<what you observed")
    sent = subprocess.run([*base, "--ledger", str(ledger), "activity", "explain", "--request",
                           "-"], input=shown, env=env, capture_output=True, text=True)  # fmt: skip
    assert sent.returncode == 2, sent.stderr
    assert "explanation is still the example's placeholder" in sent.stderr
    assert "hint: replace the placeholder <what you observed" in sent.stderr


# ------------------------------------------ examples that fit a CPU workload Target (issue 38)

#: Words of the packaged GPU examples that a CPU workload's fitted example must not show.
GPU_WORDS = ("CUDA", "H200", "ncu", "attention", "decode", "kernel", "fp32")
#: The trial's Target: a CSV parse timed by the worker's CPU time, no GPU budget.
CPU_TARGET = {
    "target_id": "t1", "title": "CSV parse+aggregate, CPU time per call",
    "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                "statistic": "median"},
    "min_effect": 0.2, "scope": ["work.py"], "risk_boundary": "the same aggregated JSON",
    "budget": {"wall_s": 3600, "gpu_s": 0},
}  # fmt: skip


def test_examples_fitted_to_a_cpu_workload_target_name_no_gpu_and_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial's path on a CPU workload Target: readiness names the original's directory
    and a driver with ``{subject}`` (R11) and no GPU environment; the metric audit says how
    perfledger's worker observes ``cpu_time`` (not a driver's JSON); the evidence is a
    workload profile of this Target; the experiment's claim has no CUDA scope and the
    readiness's cases as shapes. Each is recorded as shown, its placeholders filled. Before,
    all four were the GPU session's."""
    from perfledger.api import Ledger
    from perfledger.app.examples import fitted_example
    from perfledger.app.identity import readiness_edge
    from perfledger.commands.registry.operations import execute

    monkeypatch.chdir(tmp_path)
    original = tmp_path / "work" / "original"
    original.mkdir(parents=True)
    (original / "work.py").write_text("def aggregate(text):\n    return text\n")
    (original / "bench.py").write_text("import sys\n")
    with Ledger.init(tmp_path / "ledger", name="cpu", actor="agent") as ledger:
        execute(ledger, "target.freeze", CPU_TARGET, actor="agent")

        def shown(op: str) -> dict[str, Any]:
            fitted = fitted_example(op, ledger.state(), ledger.payload)
            assert fitted.refusal is None, (op, fitted.refusal)
            text = json.dumps(fitted.body)
            assert not [w for w in GPU_WORDS if w in text], (op, fitted.body)
            return filled(fitted.body)

        readiness = shown("readiness.record")
        assert "{subject}" in readiness["driver"]["argv"][1]
        assert readiness["original"]["subject"] == "work/original"
        assert readiness["environment"]["gpu"] is None and "env" not in readiness["driver"]
        body, artifacts = readiness_edge(ledger, readiness)
        execute(ledger, "readiness.record", body, actor="agent", artifacts=artifacts)
        audit = shown("metric-audit.record")
        assert "worker" in audit["source"] and "driver JSON" not in audit["source"]
        assert audit["numerator"].startswith("CPU time")
        execute(ledger, "metric-audit.record", audit, actor="agent")
        evidence = shown("evidence.add")
        assert (evidence["target_id"], evidence["layer"]) == ("t1", "workload")
        execute(ledger, "evidence.add", evidence, actor="agent")
        from wf_scenario import record_measured_aa, record_measured_baseline

        record_measured_baseline(ledger, shown("baseline.record"))

        record_measured_aa(ledger, "t1")
        fitted = fitted_example("experiment.create", ledger.state(), ledger.payload)
        assert fitted.refusal is None, fitted.refusal
        claim = fitted.body["claim"]
        assert claim["scope"]["shapes"] == ["small", "large"]
        assert not [w for w in GPU_WORDS if w in json.dumps(fitted.body)], fitted.body
        assert fitted.body["title"].startswith("<")  # what only the agent knows


@pytest.mark.parametrize("op", ["readiness.record", "metric-audit.record", "evidence.add"])
def test_schema_example_without_a_ledger_shows_the_cpu_workload_variant(
    tmp_path: Path, op: str
) -> None:
    """Without a ledger, an example whose GPU and CPU workload forms differ prints the GPU one
    on stdout (one request as is) and the CPU workload one on stderr; ``--json`` gives both.
    Each validates (readiness's ``original.subject`` is the edge's, turned into a snapshot)."""
    env = isolated_env(tmp_path)
    base = [sys.executable, "-m", "perfledger", "schema", op, "--example"]
    human = subprocess.run(base, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert human.returncode == 0, human.stderr
    validate(op, json.loads(human.stdout))
    assert "for a CPU workload Target" in human.stderr
    machine = subprocess.run([*base, "--json"], capture_output=True, text=True, env=env,
                             cwd=tmp_path)  # fmt: skip
    cpu = json.loads(machine.stdout)["variants"]["CPU workload Target"]
    assert not [w for w in GPU_WORDS if w in json.dumps(cpu)], cpu
    if op == "readiness.record":
        assert cpu["original"].pop("subject") and "{subject}" in cpu["driver"]["argv"][1]
    validate(op, cpu)
