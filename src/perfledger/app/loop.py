"""The kernel-iteration loop's use cases (SPEC.md R19-R25), behind ``perfledger loop ...``.

- :func:`loop_setup` (``loop setup``): preflight (entry point and parameters parsed, every
  integer parameter in dims, the reference's callables), the environment, baseline correctness
  and timing, the reference's timing where possible, then ``RunSetUp`` and the input profile of
  iteration 1.
- :func:`close_iteration` (``loop close-iter``): the selection (methods.json) and analysis are
  checked against R19-R24 *before* anything is measured (a refusal costs nothing and changes
  nothing); then the candidate's correctness (a failure is an ``AttemptRecorded``, R25), its
  profile, paired interleaved timing against the current best, ``IterationClosed``, and the
  next iteration's input profile.
- :func:`finalize_run` (``loop finalize``): a final paired comparison baseline vs best,
  ``RunFinalized`` and the summary's Markdown.
- :func:`loop_run` and :func:`propose`: the reads (``loop state``, ``summary``, ``propose``).

Kernels are measured from the sources recorded in the ledger (written to a temporary
directory), so what was measured is what was recorded. Every write goes through
:func:`perfledger.commands.registry.operations.execute` (validate, decide, append).
"""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from perfledger.app.preconditions import require_catalog_arch
from perfledger.commands.loop import deciders as loop_deciders
from perfledger.commands.loop import rules as loop_rules
from perfledger.commands.loop.requests import AxisSelectionModel
from perfledger.commands.registry.operations import condense, execute
from perfledger.errors import BadRequest
from perfledger.events import catalog as cat
from perfledger.events.catalog import content_hash
from perfledger.kernels.loop import preflight as pf
from perfledger.kernels.loop.measure import CudaBackend, WorkloadBackend
from perfledger.projections.loop import next_attempt
from perfledger.projections.loop_summary import render_summary

#: Paired interleaved blocks per comparison for workload subjects (R12 needs at least 5).
DEFAULT_PAIRS = 8
#: The hint of every malformed loop request.
LOOP_HINT = (
    "`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order"
)

#: Told each step as it starts (``checking the baseline's correctness ...``): the CLI's stderr.
Say = Callable[[str], None]


def silent(text: str) -> None:
    """A :data:`Say` that tells nothing (a Python caller's default)."""


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of the loop's file ``path`` (``what``: baseline, reference, kernel, ...).
    Raises: BadRequest (exit 2) naming the file."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read the {what} {path!r}: {exc}", hint=LOOP_HINT) from None


def read_json(path: str, what: str) -> Any:
    """The JSON of the loop's file ``path``. Raises: BadRequest (exit 2) naming the file."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"the {what} {path!r} is not valid JSON: {exc}", hint=LOOP_HINT) from None


def dims_of(text: str) -> dict[str, Any]:
    """``loop setup --dims``'s JSON text as the problem's dimensions (R16, R23).

    Raises: BadRequest (exit 2) for text that is not JSON or not a JSON object."""
    try:
        dims = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"--dims is not valid JSON: {exc}", hint=LOOP_HINT) from None
    if not isinstance(dims, dict):
        raise BadRequest("--dims must be a JSON object of integers", hint=LOOP_HINT)
    return dims


def loop_run(state: Any, run_id: str) -> Any:
    """The ``RunView`` of ``run_id`` in ``state``. Raises: BadRequest (exit 2) for no such run."""
    run = state.loop.runs.get(run_id)
    if run is None:
        raise BadRequest(f"no loop run {run_id!r}", hint="start one with `perfledger loop setup`")
    return run


def recorded_body(ledger: Any, event_id: str) -> dict[str, Any]:
    """The request body recorded with event ``event_id`` (``{}`` where none was recorded)."""
    request = ledger.get(event_id).request
    return request["body"] if isinstance(request, dict) else {}


def materialize(ledger: Any, run: Any, workdir: Path) -> dict[str, Path]:
    """Write the run's baseline, reference and current best kernel from the ledger into
    ``workdir``; returns ``{"baseline", "reference", "best"}`` -> path."""
    setup = recorded_body(ledger, run.setup_event)
    paths: dict[str, Path] = {}
    for role in ("baseline", "reference"):
        target = workdir / role / setup[role]["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(setup[role]["text"], encoding="utf-8")
        paths[role] = target
    if run.best_iteration == 0:
        paths["best"] = paths["baseline"]
    else:
        closed = run.iterations[str(run.best_iteration)].closed_event
        kernel = recorded_body(ledger, closed)["kernel"]
        target = workdir / "best" / kernel["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(kernel["text"], encoding="utf-8")
        paths["best"] = target
    return paths


def loop_backend(setup: Any, reference: Path, cwd: str | None = None) -> Any:
    """The measuring backend of a run's ``setup``: the standalone ``solve`` contract, a CUDA
    source, or a workload driver; ``reference`` the kernel it compares against."""
    from perfledger.kernels.loop.solve import SolveBackend, is_solve_run  # noqa: PLC0415 (numpy via perfledger.kernels.loop.solve)

    if is_solve_run(setup):  # the standalone contract: extern "C" void solve(...)
        baseline = reference.parent.parent / "baseline" / setup.baseline.name  # materialize's
        source = baseline if baseline.is_file() else None
        return SolveBackend(reference, dict(setup.dims), arch=setup.sm_arch, source=source)
    if setup.subject_kind == "cuda":
        return CudaBackend(reference, dict(setup.dims), setup.entry)
    return WorkloadBackend(list(setup.driver), reference, dict(setup.dims), setup.entry, cwd=cwd)


def record_profile(
    ledger: Any, backend: Any, run: Any, kernel: Path, kernel_hash: str, iteration: int,
    attempt: int, role: str, actor: str,
) -> dict[str, Any]:  # fmt: skip
    """Profile ``kernel`` with ``backend`` and record it (``loop.profile``) as ``actor``.
    Returns ``{"event_id", "limitations", "metrics": how many}``. Raises: RuleRefused (R16)."""
    profile = backend.profile(kernel, run.setup.catalog)
    body = {
        "run_id": run.setup.run_id,
        "iteration": iteration,
        "attempt": attempt,
        "role": role,
        "kernel_hash": kernel_hash,
        **profile,
    }
    envelopes = execute(ledger, "loop.profile", body, actor=actor)
    return {"event_id": envelopes[0].id, "limitations": profile["limitations"],
            "metrics": len(profile["metrics"])}  # fmt: skip


def precheck(state: Any, run_id: str, iteration: int, methods: Any, analysis: str) -> None:
    """Check a selection against R19-R25 and the run's state before anything is measured.

    Raises: BadRequest for a malformed methods.json or a wrong run/iteration; RuleRefused with
        the rule for a selection the deciders would refuse."""

    if not isinstance(methods, dict):
        raise BadRequest(
            "methods.json must be an object: axis -> {chosen, skipped}", hint=LOOP_HINT
        )
    unknown = sorted(set(methods) - {"compute", "memory", "latency"})
    if unknown:
        raise BadRequest(f"methods.json: unknown axis {', '.join(unknown)}", hint=LOOP_HINT)
    selection = {}
    for axis, value in methods.items():
        try:
            selection[axis] = msgspec.convert(value, AxisSelectionModel)
        except msgspec.ValidationError as exc:
            raise BadRequest(f"methods.json: {axis}.{condense(exc)}", hint=LOOP_HINT) from None
    run = loop_deciders._run(state, run_id)
    loop_deciders._open_iteration(run, iteration)
    loop_rules.r25_attempts_left(run, iteration)
    loop_rules.check_selection(run, iteration, selection, analysis)


def propose(state: Any, run_id: str, iteration: int) -> tuple[Any, str]:
    """The selection (methods.json) proposed for an open ``iteration`` of run ``run_id`` by
    strict priority from its recorded input profile, each skipped method with a reason R24
    accepts, and a draft analysis: ``(selection, analysis)``. Raises: BadRequest (an unknown
    run, an iteration not open)."""
    run = loop_deciders._run(state, run_id)
    loop_deciders._open_iteration(run, iteration)
    return loop_rules.propose_selection(run, iteration)


# ------------------------------------------------------------------------------ setup


class LoopSetup(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to set up a loop run (R16, R23).

    Attributes:
        baseline: the baseline kernel's file (``.cu``/``.cuh``, or a stand-in ``.py``).
        ref: the reference's file (``ref.py``).
        dims: the dimensions, name -> integer.
        run_id: the run id (None: ``run-<baseline stem>``).
        iterations: iterations planned.
        ncu_num: top metrics per axis of each profile.
        min_effect: the run's minimum effect (ratio): 'improved' needs the CI above it.
        entry: the entry point (None: the only ``extern "C"`` kernel; ``kernel`` for a stand-in).
        driver: a workload stand-in's driver command template (``{kernel}``, ``{ref}``,
            ``{dims}``, ``{entry}`` placeholders).
        catalog: a user method catalog's file (TOML; None: the default catalog).
        sm_arch: the architecture (None: the device's; required for a stand-in).
        actor: who records.
    """

    baseline: str
    ref: str
    dims: dict[str, Any]
    run_id: str | None = None
    iterations: int = 3
    ncu_num: int = 5
    min_effect: float = 0.02
    entry: str | None = None
    driver: str | None = None
    catalog: str | None = None
    sm_arch: str | None = None
    actor: str


class SetUp(msgspec.Struct, frozen=True, kw_only=True):
    """A run set up (``loop setup --json``'s answer): its id, the ``RunSetUp`` event, the
    baseline's content hash and median (``baseline_median_ms``, ms per call), the architecture,
    the catalog's hash and the recorded input profile of iteration 1."""

    run_id: str
    event_id: str
    baseline_hash: str
    baseline_median_ms: float
    sm_arch: str
    catalog_hash: str
    input_profile: dict[str, Any]


def _subject(
    loop_solve: Any, request: LoopSetup, baseline_text: str, ref_text: str
) -> tuple[str, Any, dict[str, str]]:
    """Preflight of the baseline against the reference (R16): ``(kind, entry point, launch
    expressions)``, kind ``solve``/``python-solve``/``cuda``/``workload``. Raises: BadRequest."""
    dims = request.dims
    is_cuda = request.baseline.endswith((".cu", ".cuh"))
    ref_names = pf.parse_reference_names(ref_text)
    launch: dict[str, str] = {}
    python_solve = (
        not is_cuda and request.driver is None and loop_solve.is_python_solve_source(baseline_text)
    )
    if python_solve or (is_cuda and loop_solve.is_solve_source(baseline_text, request.entry)):
        # extern "C" void solve(...) or a Python solve, ref.py's reference and ARGS
        entry_point, _ = loop_solve.preflight(
            baseline_text, Path(request.ref), dims, python=python_solve
        )
        kind, needed = ("python-solve" if python_solve else "solve"), {"reference"}
    elif is_cuda:
        entry_point = pf.parse_cuda_entry(baseline_text, request.entry)
        launch = pf.parse_launch(baseline_text)
        kind, needed = "cuda", {"make_inputs", "reference", "outputs"}
    else:
        if request.driver is None:
            raise BadRequest(
                "a non-.cu baseline is a workload stand-in: give --driver", hint=LOOP_HINT
            )
        entry_point = pf.parse_python_entry(baseline_text, request.entry or "kernel")
        kind, needed = "workload", {"reference"}
    missing = sorted(needed - ref_names)
    if missing:
        raise BadRequest(
            f"preflight: the reference defines no {', '.join(missing)}", hint=LOOP_HINT
        )
    pf.check_dims(entry_point, dims)
    for expression in launch.values():
        pf.eval_launch(expression, dims)
    return kind, entry_point, launch


def _setup_backend(
    loop_solve: Any, request: LoopSetup, kind: str, entry: str, base_path: Path, ref_file: Path
) -> tuple[Any, str]:
    """The measuring backend of a new run and its architecture. Raises: BadRequest (a stand-in
    without ``sm_arch``)."""
    backend: Any
    if kind in ("solve", "python-solve"):
        backend = loop_solve.SolveBackend(
            ref_file, request.dims, arch=request.sm_arch, source=base_path
        )
        return backend, request.sm_arch or backend.sm_arch()
    if kind == "cuda":
        backend = CudaBackend(ref_file, request.dims, entry)
        return backend, request.sm_arch or backend.sm_arch()
    if request.sm_arch is None:
        raise BadRequest("a stand-in has no device: give --sm-arch (e.g. sm_90)", hint=LOOP_HINT)
    driver = shlex.split(request.driver or "")
    return WorkloadBackend(driver, ref_file, request.dims, entry), request.sm_arch


def loop_setup(request: LoopSetup, *, open_ledger: Callable[[], Any], say: Say = silent) -> SetUp:
    """Set up a loop run (module docstring): preflight, environment, baseline correctness and
    timing (ms per call), ``RunSetUp``, the input profile of iteration 1.

    Args:
        request: the :class:`LoopSetup`.
        open_ledger: opens the ledger once the files are read and the preflight passed (it is
            closed before returning).
        say: told each step as it starts.
    Returns: the :class:`SetUp`.
    Raises: BadRequest (exit 2: an unreadable file, a preflight failure, a run id taken, a
        baseline that fails its correctness check); RuleRefused (exit 3: R16, R23, the
        catalog's architecture).
    """
    from perfledger.kernels.loop import solve as loop_solve  # noqa: PLC0415 (numpy via perfledger.kernels.loop.solve)

    baseline_text = read_text(request.baseline, "baseline")
    ref_text = read_text(request.ref, "reference")
    catalog_text = (
        read_text(request.catalog, "catalog") if request.catalog else cat.default_catalog_text()
    )
    catalog, _ = cat.parse_catalog(catalog_text, source=request.catalog or cat.DEFAULT_CATALOG)
    kind, entry_point, launch = _subject(loop_solve, request, baseline_text, ref_text)
    ledger = open_ledger()
    try:
        run_name = request.run_id or f"run-{Path(request.baseline).stem}"
        if run_name in ledger.state().loop.runs:
            raise BadRequest(f"loop run {run_name!r} already exists", hint="choose a new --run")
        with tempfile.TemporaryDirectory(prefix="perfledger-loop-") as tmp:
            base_path = Path(tmp) / "baseline" / Path(request.baseline).name
            ref_file = Path(tmp) / "reference" / Path(request.ref).name
            for path, text in ((base_path, baseline_text), (ref_file, ref_text)):
                path.parent.mkdir(parents=True)
                path.write_text(text, encoding="utf-8")
            backend, arch = _setup_backend(
                loop_solve, request, kind, entry_point.name, base_path, ref_file
            )
            require_catalog_arch(catalog, arch)
            environment, limitations = backend.environment()
            say("checking the baseline's correctness ...")
            check = backend.check(base_path)
            if not check["correct"]:
                raise BadRequest(
                    f"the baseline fails its correctness check: {check['detail']}",
                    hint="fix the baseline/reference contract before iterating",
                )
            say("timing the baseline ...")
            timing = backend.time(base_path)
            body = {
                "run_id": run_name,
                "subject_kind": backend.kind,
                "baseline": {"name": Path(request.baseline).name, "text": baseline_text},
                "reference": {"name": Path(request.ref).name, "text": ref_text},
                "entry": entry_point.name,
                "params": [{"name": n, "ctype": t, "integer": i} for n, t, i in entry_point.params],
                "dims": request.dims,
                "launch": launch,
                "iterations": request.iterations,
                "ncu_num": request.ncu_num,
                "min_effect": request.min_effect,
                "sm_arch": arch,
                "environment": environment,
                "catalog_toml": catalog_text,
                "baseline_check": check,
                "baseline_timing": timing,
                "reference_timing": backend.time_reference(),
                "driver": shlex.split(request.driver) if request.driver else [],
                "limitations": limitations,
            }
            envelopes = execute(ledger, "loop.setup", body, actor=request.actor)
            run = loop_run(ledger.state(), run_name)
            say("profiling the baseline (input of iteration 1) ...")
            profile = record_profile(
                ledger, backend, run, base_path, run.best_hash, 1, 0, "input", request.actor
            )
            run = loop_run(ledger.state(), run_name)
    finally:
        ledger.close()
    return SetUp(
        run_id=run_name, event_id=envelopes[0].id, baseline_hash=run.best_hash,
        baseline_median_ms=run.best_median_ms, sm_arch=run.setup.sm_arch,
        catalog_hash=run.setup.catalog_hash, input_profile=profile,
    )  # fmt: skip


# ------------------------------------------------------------------------------ close-iter


class CloseIteration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to close one iteration of a loop run (R19-R25).

    Attributes:
        run_id: the run.
        iteration: the iteration to close.
        kernel: the candidate kernel's file.
        methods: methods.json's file: per axis the chosen method and each higher-priority one
            skipped with its reason.
        analysis: analysis.md's file.
        pairs: paired blocks for a workload subject (the GPU harness stops by its rule).
        actor: who records.
    """

    run_id: str
    iteration: int
    kernel: str
    methods: str
    analysis: str
    pairs: int = DEFAULT_PAIRS
    actor: str


class IterationAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """An iteration's attempt (``loop close-iter --json``'s answer): its status
    (``improved``/..., ``correctness_failed``, or ``failed_correctness`` where the failure
    closed the iteration, R25), the events appended; where measured the timing note, the
    verdict and ``ratio_to_best`` (candidate over best, per call); where the check failed its
    ``detail``; the next iteration's input profile where one was recorded. A field left out of
    the answer is :data:`msgspec.UNSET`."""

    run_id: str
    iteration: int
    attempt: int
    status: str
    events: list[dict[str, str]]
    timing: Any = msgspec.UNSET
    detail: Any = msgspec.UNSET
    verdict: Any = msgspec.UNSET
    ratio_to_best: Any = msgspec.UNSET
    next_input_profile: Any = msgspec.UNSET


def close_iteration(
    request: CloseIteration, *, open_ledger: Callable[[], Any], say: Say = silent
) -> IterationAnswer:
    """Close an iteration (module docstring): R19-R25 checked before anything is measured, then
    correctness (an ``AttemptRecorded`` on failure, R25), the candidate's profile, paired
    timing against the current best, ``IterationClosed``, the next input profile.

    Args:
        request: the :class:`CloseIteration`.
        open_ledger: opens the ledger once the files are read (closed before returning).
        say: told each step as it starts.
    Returns: the :class:`IterationAnswer`.
    Raises: BadRequest (exit 2: an unreadable or malformed file, no such run or open
        iteration, the candidate is the best kernel); RuleRefused (exit 3: R19-R25).
    """
    iteration, run_id = request.iteration, request.run_id
    kernel_text = read_text(request.kernel, "kernel")
    methods = read_json(request.methods, "methods")
    analysis = read_text(request.analysis, "analysis")
    name = Path(request.kernel).name
    extra: dict[str, Any] = {}
    ledger = open_ledger()
    try:
        state = ledger.state()
        precheck(state, run_id, iteration, methods, analysis)
        run = loop_run(state, run_id)
        if content_hash(kernel_text) == run.best_hash:
            raise BadRequest(
                "the candidate is the current best kernel itself; change it first", hint=LOOP_HINT
            )
        attempt = next_attempt(run, iteration)
        with tempfile.TemporaryDirectory(prefix="perfledger-loop-") as tmp:
            paths = materialize(ledger, run, Path(tmp))
            cand_path = Path(tmp) / "candidate" / name
            cand_path.parent.mkdir()
            cand_path.write_text(kernel_text, encoding="utf-8")
            backend = loop_backend(run.setup, paths["reference"])
            common = {
                "run_id": run_id, "iteration": iteration, "attempt": attempt,
                "kernel": {"name": name, "text": kernel_text},
                "selection": methods, "analysis": analysis,
            }  # fmt: skip
            say(f"iteration {iteration} attempt {attempt}: checking correctness ...")
            check = backend.check(cand_path)
            if check["correct"]:
                say("profiling the candidate ...")
                record_profile(ledger, backend, run, cand_path, content_hash(kernel_text),
                               iteration, attempt, "candidate", request.actor)  # fmt: skip
                say("paired interleaved timing against the current best ...")
                pair_bodies, still_correct, note = backend.compare(
                    paths["best"], cand_path, request.pairs
                )
                extra["timing"] = note
                if not still_correct:
                    check = {**check, "correct": False,
                             "detail": f"incorrect output during timing ({note})"}  # fmt: skip
            if not check["correct"]:
                envelopes = execute(ledger, "loop.attempt", {**common, "correctness": check},
                                    actor=request.actor)  # fmt: skip
                closed = any(e.kind == "IterationClosed" for e in envelopes)
                status = "failed_correctness" if closed else "correctness_failed"
                extra["detail"] = check["detail"]
            else:
                envelopes = execute(
                    ledger, "loop.close-iter",
                    {**common, "correctness": check, "pairs": pair_bodies}, actor=request.actor,
                )  # fmt: skip
                payload = envelopes[0].payload
                status = payload["status"]
                extra["verdict"] = payload["verdict"]
                extra["ratio_to_best"] = payload["ratio_to_best"]
            run = loop_run(ledger.state(), run_id)
            if run.iterations[str(iteration)].closed is not None and (
                iteration < run.setup.iterations
            ):
                say(f"profiling the best kernel (input of iteration {iteration + 1}) ...")
                paths = materialize(ledger, run, Path(tmp) / "next")
                extra["next_input_profile"] = record_profile(
                    ledger, backend, run, paths["best"], run.best_hash, iteration + 1, 0,
                    "input", request.actor,
                )  # fmt: skip
    finally:
        ledger.close()
    events = [{"event_id": e.id, "kind": e.kind} for e in envelopes]
    return IterationAnswer(
        run_id=run_id, iteration=iteration, attempt=attempt, status=status, events=events, **extra
    )


# ------------------------------------------------------------------------------ finalize


class FinalizeRun(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to finalize a loop run: ``pairs`` paired blocks baseline vs best (where the
    best is not the baseline) and ``stop_reason`` (needed before the last planned iteration)."""

    run_id: str
    pairs: int = DEFAULT_PAIRS
    stop_reason: str = ""
    actor: str


class Finalized(msgspec.Struct, frozen=True, kw_only=True):
    """A run finalized: the ``RunFinalized`` event, its headline and best kernel's hash, and the
    summary's Markdown (``summary_md``, what ``loop summary`` renders)."""

    run_id: str
    event_id: str
    headline: Any
    best_hash: str
    summary_md: str


def finalize_run(ledger: Any, request: FinalizeRun, *, say: Say = silent) -> Finalized:
    """Finalize a run: baseline vs best paired again, ``RunFinalized``, the summary.

    Raises: BadRequest (exit 2: no such run, already finalized, a stop before the last planned
    iteration without a reason); RuleRefused (exit 3: the loop's rules, R19-R25)."""
    run = loop_run(ledger.state(), request.run_id)
    if run.finalized is not None:
        raise BadRequest(f"run {request.run_id!r} is already finalized", hint=LOOP_HINT)
    body: dict[str, Any] = {"run_id": request.run_id, "stop_reason": request.stop_reason}
    if run.best_hash != run.setup.baseline.content_hash:
        with tempfile.TemporaryDirectory(prefix="perfledger-loop-") as tmp:
            paths = materialize(ledger, run, Path(tmp))
            backend = loop_backend(run.setup, paths["reference"])
            say("paired interleaved timing: baseline vs best ...")
            pair_bodies, _, _ = backend.compare(paths["baseline"], paths["best"], request.pairs)
            body["pairs"] = pair_bodies
    envelopes = execute(ledger, "loop.finalize", body, actor=request.actor)
    payload = envelopes[0].payload
    return Finalized(
        run_id=request.run_id, event_id=envelopes[0].id, headline=payload["headline"],
        best_hash=payload["best_hash"],
        summary_md=render_summary(loop_run(ledger.state(), request.run_id)),
    )  # fmt: skip


def run_state_json(run: Any) -> dict[str, Any]:
    """The answer of ``loop state --json``: the run's derived state (``run``: what
    :func:`loop_run` returns) as JSON builtins, without the method catalog (it is in the
    RunSetUp event)."""
    data = msgspec.to_builtins(run)
    data["setup"].pop("catalog", None)
    return data


def finalized_json(run_id: str, done: Finalized, out: str) -> dict[str, Any]:
    """Write ``done``'s summary.md (what :func:`finalize_run` returns) to ``out``; returns the
    answer of ``loop finalize --json``: ``{"run_id", "event_id", "summary", "headline",
    "best_hash"}``. Raises: OSError when ``out`` cannot be written."""
    Path(out).write_text(done.summary_md, encoding="utf-8")
    return {"run_id": run_id, "event_id": done.event_id, "summary": out,
            "headline": done.headline, "best_hash": done.best_hash}  # fmt: skip


__all__ = [
    "DEFAULT_PAIRS",
    "LOOP_HINT",
    "CloseIteration",
    "FinalizeRun",
    "Finalized",
    "IterationAnswer",
    "LoopSetup",
    "SetUp",
    "close_iteration",
    "dims_of",
    "finalize_run",
    "finalized_json",
    "loop_backend",
    "loop_run",
    "loop_setup",
    "materialize",
    "precheck",
    "propose",
    "read_json",
    "read_text",
    "record_profile",
    "recorded_body",
    "run_state_json",
    "silent",
]  # fmt: skip
