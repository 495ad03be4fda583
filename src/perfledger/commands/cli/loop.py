"""``perfledger loop ...``: the kernel-iteration loop's commands (SPEC.md R19-R25).

- ``loop setup``: preflight (entry point and parameters parsed, every integer parameter in dims,
  the reference's callables), the environment, baseline correctness and timing, the reference's
  timing where possible, then ``RunSetUp`` and the input profile of iteration 1.
- ``loop close-iter``: the selection (methods.json) and analysis are checked against R19-R24
  *before* anything is measured (a refusal costs nothing and changes nothing); then the
  candidate's correctness (a failure is an ``AttemptRecorded``, R25), its profile, paired
  interleaved timing against the current best, ``IterationClosed``, and the next iteration's
  input profile.
- ``loop finalize``: a final paired comparison baseline vs best, ``RunFinalized``, ``summary.md``.
- ``loop state`` / ``loop summary``: the run's projection (the ``state.json`` of the original
  tools, derived) and its Markdown summary, from the ledger alone.

Kernels are measured from the sources recorded in the ledger (written to a temporary directory),
so what was measured is what was recorded. Every write goes through
:func:`perfledger.commands.registry.operations.execute` (validate, decide, append).
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path
from typing import Any

import click
import msgspec

from perfledger.app.loop import loop_backend, materialize, precheck, propose, record_profile
from perfledger.app.preconditions import require_catalog_arch
from perfledger.commands.cli.common import actor_option, to_json_text
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.registry.operations import execute
from perfledger.errors import BadRequest
from perfledger.events import catalog as cat
from perfledger.events.catalog import content_hash
from perfledger.kernels.loop import preflight as pf
from perfledger.kernels.loop.measure import CudaBackend, WorkloadBackend
from perfledger.projections.loop import input_profile, next_attempt
from perfledger.projections.loop_summary import render_summary

_run_opt = click.option("--run", "run_id", required=True, help="The run id.")
#: Paired interleaved blocks per comparison for workload subjects (R12 needs at least 5).
DEFAULT_PAIRS = 8


def _emit(data: object) -> None:

    click.echo(to_json_text(data))


def _say(ctx: Any, text: str) -> None:
    if not ctx.json_mode:
        click.echo(text, err=True)


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(
            f"cannot read the {what} {path!r}: {exc}",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        ) from None


def _read_json(path: str, what: str) -> Any:
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadRequest(
            f"the {what} {path!r} is not valid JSON: {exc}",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        ) from None


def _execute(ledger: Any, op: str, body: dict[str, Any], actor: str) -> list[Any]:

    return execute(ledger, op, body, actor=actor)


def _run(state: Any, run_id: str) -> Any:
    run = state.loop.runs.get(run_id)
    if run is None:
        raise BadRequest(f"no loop run {run_id!r}", hint="start one with `perfledger loop setup`")
    return run


# ------------------------------------------------------------------------ sources, backends


# ------------------------------------------------------------------------------ setup


@click.command("setup")
@click.option("--run", "run_id", default=None, help="The run id (default: run-<baseline stem>).")
@click.option("--baseline", required=True, help="The baseline kernel (.cu, or a stand-in .py).")
@click.option("--ref", "ref_path", required=True, help="The reference (ref.py).")
@click.option("--dims", required=True, help='Dimensions as JSON, e.g. \'{"M":4096,"N":4096}\'.')
@click.option("--iterations", type=int, default=3, show_default=True)
@click.option("--ncu-num", type=int, default=5, show_default=True, help="Top metrics per axis.")
@click.option("--min-effect", type=float, default=0.02, show_default=True,
              help="The run's minimum effect (ratio): 'improved' needs the CI above it.")  # fmt: skip
@click.option("--entry", default=None, help="The entry point (default: the only extern \"C\" "
              "kernel; 'kernel' for a stand-in).")  # fmt: skip
@click.option("--driver", default=None, help="Workload driver command template for a stand-in "
              "kernel ({kernel}, {ref}, {dims}, {entry} placeholders).")  # fmt: skip
@click.option("--catalog", "catalog_path", default=None, help="A user method catalog (TOML).")
@click.option("--sm-arch", default=None, help="The architecture (default: the device's; "
              "required for a stand-in).")  # fmt: skip
@actor_option
@_json
def setup_cmd(
    run_id: str | None, baseline: str, ref_path: str, dims: str, iterations: int, ncu_num: int,
    min_effect: float, entry: str | None, driver: str | None, catalog_path: str | None,
    sm_arch: str | None, actor: str | None, json_flag: bool,
) -> None:  # fmt: skip
    """Set up a run: preflight, environment, baseline correctness and timing, RunSetUp, and the
    input profile of iteration 1 (R16, R23)."""

    ctx = _ctx(json_flag)
    who = _actor(actor)
    baseline_text = _read_text(baseline, "baseline")
    ref_text = _read_text(ref_path, "reference")
    try:
        dims_map = json.loads(dims)
    except ValueError as exc:
        raise BadRequest(
            f"--dims is not valid JSON: {exc}",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        ) from None
    if not isinstance(dims_map, dict):
        raise BadRequest(
            "--dims must be a JSON object of integers",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        )
    catalog_text = (
        _read_text(catalog_path, "catalog") if catalog_path else cat.default_catalog_text()
    )
    catalog, _ = cat.parse_catalog(catalog_text, source=catalog_path or cat.DEFAULT_CATALOG)
    is_cuda = baseline.endswith((".cu", ".cuh"))
    ref_names = pf.parse_reference_names(ref_text)
    launch: dict[str, str] = {}
    from perfledger.kernels.loop import solve as loop_solve  # noqa: PLC0415 (numpy via perfledger.kernels.loop.solve)

    is_python_solve = (
        not is_cuda and driver is None and loop_solve.is_python_solve_source(baseline_text)
    )
    is_solve = is_python_solve or (is_cuda and loop_solve.is_solve_source(baseline_text, entry))
    if is_solve:  # extern "C" void solve(...) or a Python solve, ref.py's reference and ARGS
        entry_point, _ = loop_solve.preflight(
            baseline_text, Path(ref_path), dims_map, python=is_python_solve
        )
        needed = {"reference"}
    elif is_cuda:
        entry_point = pf.parse_cuda_entry(baseline_text, entry)
        launch = pf.parse_launch(baseline_text)
        needed = {"make_inputs", "reference", "outputs"}
    else:
        if driver is None:
            raise BadRequest(
                "a non-.cu baseline is a workload stand-in: give --driver",
                hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
            )
        entry_point = pf.parse_python_entry(baseline_text, entry or "kernel")
        needed = {"reference"}
    missing = sorted(needed - ref_names)
    if missing:
        raise BadRequest(
            f"preflight: the reference defines no {', '.join(missing)}",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        )
    pf.check_dims(entry_point, dims_map)
    for expression in launch.values():
        pf.eval_launch(expression, dims_map)
    ledger = ctx.open()
    try:
        run_name = run_id or f"run-{Path(baseline).stem}"
        if run_name in ledger.state().loop.runs:
            raise BadRequest(f"loop run {run_name!r} already exists", hint="choose a new --run")
        with tempfile.TemporaryDirectory(prefix="perfledger-loop-") as tmp:
            work = Path(tmp)
            base_path = work / "baseline" / Path(baseline).name
            ref_file = work / "reference" / Path(ref_path).name
            for path, text in ((base_path, baseline_text), (ref_file, ref_text)):
                path.parent.mkdir(parents=True)
                path.write_text(text, encoding="utf-8")

            backend: Any
            if is_solve:
                backend = loop_solve.SolveBackend(
                    ref_file, dims_map, arch=sm_arch, source=base_path
                )
                arch = sm_arch or backend.sm_arch()
            elif is_cuda:
                backend = CudaBackend(ref_file, dims_map, entry_point.name)
                arch = sm_arch or backend.sm_arch()
            else:
                if sm_arch is None:
                    raise BadRequest(
                        "a stand-in has no device: give --sm-arch (e.g. sm_90)",
                        hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
                    )
                backend = WorkloadBackend(
                    shlex.split(driver or ""), ref_file, dims_map, entry_point.name
                )
                arch = sm_arch
            require_catalog_arch(catalog, arch)
            environment, limitations = backend.environment()
            _say(ctx, "checking the baseline's correctness ...")
            check = backend.check(base_path)
            if not check["correct"]:
                raise BadRequest(
                    f"the baseline fails its correctness check: {check['detail']}",
                    hint="fix the baseline/reference contract before iterating",
                )
            _say(ctx, "timing the baseline ...")
            timing = backend.time(base_path)
            reference_timing = backend.time_reference()
            body = {
                "run_id": run_name,
                "subject_kind": backend.kind,
                "baseline": {"name": Path(baseline).name, "text": baseline_text},
                "reference": {"name": Path(ref_path).name, "text": ref_text},
                "entry": entry_point.name,
                "params": [{"name": n, "ctype": t, "integer": i} for n, t, i in entry_point.params],
                "dims": dims_map,
                "launch": launch,
                "iterations": iterations,
                "ncu_num": ncu_num,
                "min_effect": min_effect,
                "sm_arch": arch,
                "environment": environment,
                "catalog_toml": catalog_text,
                "baseline_check": check,
                "baseline_timing": timing,
                "reference_timing": reference_timing,
                "driver": shlex.split(driver) if driver else [],
                "limitations": limitations,
            }
            envelopes = _execute(ledger, "loop.setup", body, who)
            run = _run(ledger.state(), run_name)
            _say(ctx, "profiling the baseline (input of iteration 1) ...")
            profile = record_profile(
                ledger, backend, run, base_path, run.best_hash, 1, 0, "input", who
            )
            run = _run(ledger.state(), run_name)
    finally:
        ledger.close()
    answer = {
        "run_id": run_name,
        "event_id": envelopes[0].id,
        "baseline_hash": run.best_hash,
        "baseline_median_ms": run.best_median_ms,
        "sm_arch": run.setup.sm_arch,
        "catalog_hash": run.setup.catalog_hash,
        "input_profile": profile,
    }
    if ctx.json_mode:
        _emit(answer)
    else:
        click.echo(
            f"RunSetUp {answer['event_id']}  run={run_name}  baseline "
            f"{answer['baseline_median_ms']:.4g} ms  ({run.setup.sm_arch})"
        )


# ------------------------------------------------------------------------------ close-iter


@click.command("close-iter")
@_run_opt
@click.option("--iter", "iteration", type=int, required=True, help="The iteration to close.")
@click.option("--kernel", required=True, help="The candidate kernel of this iteration.")
@click.option("--methods", "methods_path", required=True, help="methods.json: per axis the "
              "chosen method and each higher-priority one skipped with its reason.")  # fmt: skip
@click.option("--analysis", "analysis_path", required=True, help="analysis.md.")
@click.option("--pairs", type=int, default=DEFAULT_PAIRS, show_default=True,
              help="Paired blocks for a workload subject (the GPU harness stops by its rule).")  # fmt: skip
@actor_option
@_json
def close_iter_cmd(
    run_id: str, iteration: int, kernel: str, methods_path: str, analysis_path: str, pairs: int,
    actor: str | None, json_flag: bool,
) -> None:  # fmt: skip
    """Close an iteration: R19-R24 checked first, then correctness (R25 attempts), the
    candidate's profile, paired timing against the best, IterationClosed."""

    ctx = _ctx(json_flag)
    who = _actor(actor)
    kernel_text = _read_text(kernel, "kernel")
    methods = _read_json(methods_path, "methods")
    analysis = _read_text(analysis_path, "analysis")
    ledger = ctx.open()
    try:
        state = ledger.state()
        precheck(state, run_id, iteration, methods, analysis)
        run = _run(state, run_id)
        if content_hash(kernel_text) == run.best_hash:
            raise BadRequest(
                "the candidate is the current best kernel itself; change it first",
                hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
            )
        attempt = next_attempt(run, iteration)
        answer: dict[str, Any] = {"run_id": run_id, "iteration": iteration, "attempt": attempt}
        with tempfile.TemporaryDirectory(prefix="perfledger-loop-") as tmp:
            paths = materialize(ledger, run, Path(tmp))
            cand_path = Path(tmp) / "candidate" / Path(kernel).name
            cand_path.parent.mkdir()
            cand_path.write_text(kernel_text, encoding="utf-8")
            backend = loop_backend(run.setup, paths["reference"])
            common = {
                "run_id": run_id,
                "iteration": iteration,
                "attempt": attempt,
                "kernel": {"name": Path(kernel).name, "text": kernel_text},
                "selection": methods,
                "analysis": analysis,
            }
            _say(ctx, f"iteration {iteration} attempt {attempt}: checking correctness ...")
            check = backend.check(cand_path)
            if check["correct"]:
                _say(ctx, "profiling the candidate ...")
                record_profile(ledger, backend, run, cand_path, content_hash(kernel_text),
                                iteration, attempt, "candidate", who)  # fmt: skip
                _say(ctx, "paired interleaved timing against the current best ...")
                pair_bodies, still_correct, note = backend.compare(paths["best"], cand_path, pairs)
                answer["timing"] = note
                if not still_correct:
                    check = {**check, "correct": False,
                             "detail": f"incorrect output during timing ({note})"}  # fmt: skip
            if not check["correct"]:
                envelopes = _execute(ledger, "loop.attempt", {**common, "correctness": check}, who)
                answer["status"] = "correctness_failed"
                answer["detail"] = check["detail"]
                closed = [e for e in envelopes if e.kind == "IterationClosed"]
                if closed:
                    answer["status"] = "failed_correctness"
            else:
                envelopes = _execute(
                    ledger, "loop.close-iter",
                    {**common, "correctness": check, "pairs": pair_bodies}, who,
                )  # fmt: skip
                payload = envelopes[0].payload
                answer["status"] = payload["status"]
                answer["verdict"] = payload["verdict"]
                answer["ratio_to_best"] = payload["ratio_to_best"]
            answer["events"] = [{"event_id": e.id, "kind": e.kind} for e in envelopes]
            run = _run(ledger.state(), run_id)
            if (
                run.iterations[str(iteration)].closed is not None
                and iteration < run.setup.iterations
            ):
                _say(ctx, f"profiling the best kernel (input of iteration {iteration + 1}) ...")
                paths = materialize(ledger, run, Path(tmp) / "next")
                answer["next_input_profile"] = record_profile(
                    ledger, backend, run, paths["best"], run.best_hash, iteration + 1, 0,
                    "input", who,
                )  # fmt: skip
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit(answer)
    else:
        verdict = answer.get("verdict") or {}
        figures = [verdict.get(key) for key in ("estimate", "ci_low", "ci_high")]
        low_high = ", ".join("n/a" if v is None else f"{v:.4g}" for v in figures[1:])
        extra = (
            f"  improvement {'n/a' if figures[0] is None else f'{figures[0]:.4g}'} CI [{low_high}]"
            if verdict
            else f"  {answer.get('detail', '')}"
        )
        click.echo(f"iteration {iteration} attempt {attempt}: {answer['status']}{extra}")


# ------------------------------------------------------------------------------ finalize


@click.command("finalize")
@_run_opt
@click.option("--out", default="summary.md", show_default=True, help="Where to write summary.md.")
@click.option("--pairs", type=int, default=DEFAULT_PAIRS, show_default=True)
@click.option("--stop-reason", default="", help="Why the run stops (needed before its last "
              "planned iteration).")  # fmt: skip
@actor_option
@_json
def finalize_cmd(
    run_id: str, out: str, pairs: int, stop_reason: str, actor: str | None, json_flag: bool
) -> None:
    """Finalize a run: baseline vs best paired again, RunFinalized, summary.md."""

    ctx = _ctx(json_flag)
    who = _actor(actor)
    ledger = ctx.open()
    try:
        run = _run(ledger.state(), run_id)
        if run.finalized is not None:
            raise BadRequest(
                f"run {run_id!r} is already finalized",
                hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
            )
        body: dict[str, Any] = {"run_id": run_id, "stop_reason": stop_reason}
        if run.best_hash != run.setup.baseline.content_hash:
            with tempfile.TemporaryDirectory(prefix="perfledger-loop-") as tmp:
                paths = materialize(ledger, run, Path(tmp))
                backend = loop_backend(run.setup, paths["reference"])
                _say(ctx, "paired interleaved timing: baseline vs best ...")
                pair_bodies, _, _ = backend.compare(paths["baseline"], paths["best"], pairs)
                body["pairs"] = pair_bodies
        envelopes = _execute(ledger, "loop.finalize", body, who)
        run = _run(ledger.state(), run_id)
        text = render_summary(run)
    finally:
        ledger.close()
    Path(out).write_text(text, encoding="utf-8")
    payload = envelopes[0].payload
    if ctx.json_mode:
        _emit({"run_id": run_id, "event_id": envelopes[0].id, "summary": out,
               "headline": payload["headline"], "best_hash": payload["best_hash"]})  # fmt: skip
    else:
        click.echo(f"RunFinalized {envelopes[0].id}  summary: {out}")


# ------------------------------------------------------------------------------ reads


@click.command("state")
@_run_opt
@_json
def state_cmd(run_id: str, json_flag: bool) -> None:
    """Show a run's state: best kernel, next iteration, selected and ineffective methods,
    profiles, iterations (the derived replacement of state.json)."""

    ctx = _ctx(json_flag)
    ledger = ctx.open()
    try:
        run = _run(ledger.state(), run_id)
    finally:
        ledger.close()
    if ctx.json_mode:
        data = msgspec.to_builtins(run)
        data["setup"].pop("catalog", None)  # the catalog is in the RunSetUp event
        _emit(data)
        return
    setup = run.setup
    click.echo(f"run {run_id}: {setup.baseline.name} on {setup.sm_arch}")
    click.echo(
        f"best: {run.best_hash} (iteration {run.best_iteration}, {run.best_median_ms:.4g} ms)"
    )
    done = run.finalized is not None
    click.echo(
        f"next iteration: {run.current_iteration} of {setup.iterations}"
        + (" (finalized)" if done else "")
    )
    click.echo("selected: " + (", ".join(run.selected) or "none"))
    click.echo(
        "ineffective: " + (", ".join(f"{m} ({i})" for m, i in run.ineffective.items()) or "none")
    )
    profile = input_profile(run, run.current_iteration)
    if profile is not None:
        click.echo(f"input profile of iteration {run.current_iteration} ({profile.tool}):")
        for axis, names in profile.top.items():
            click.echo(f"  {axis}: " + ", ".join(names))


@click.command("summary")
@_run_opt
@click.option("--out", default=None, help="Write to this file instead of stdout.")
def summary_cmd(run_id: str, out: str | None) -> None:
    """Render a run's summary.md from the ledger (the same text finalize wrote)."""

    ctx = _ctx(False)
    ledger = ctx.open()
    try:
        text = render_summary(_run(ledger.state(), run_id))
    finally:
        ledger.close()
    if out:
        Path(out).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


@click.command("propose")
@_run_opt
@click.option("--iter", "iteration", type=int, required=True)
@click.option("--methods-out", default=None, help="Write methods.json here (default: stdout).")
@click.option("--analysis-out", default=None, help="Write the draft analysis here.")
def propose_cmd(
    run_id: str, iteration: int, methods_out: str | None, analysis_out: str | None
) -> None:
    """Propose methods.json for an iteration by strict priority from the recorded input profile
    (each skipped method with a reason R24 accepts), and a draft analysis."""

    ctx = _ctx(False)
    ledger = ctx.open()
    try:
        selection, analysis = propose(ledger.state(), run_id, iteration)
    finally:
        ledger.close()
    text = json.dumps(selection, indent=2) + "\n"
    if methods_out:
        Path(methods_out).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
    if analysis_out:
        Path(analysis_out).write_text(analysis, encoding="utf-8")


@click.group("loop")
def loop() -> None:
    """The NCU-guided kernel-iteration loop: setup, close-iter, finalize, state (R19-R25)."""


for _command in (setup_cmd, close_iter_cmd, finalize_cmd, state_cmd, summary_cmd, propose_cmd):
    loop.add_command(_command)
