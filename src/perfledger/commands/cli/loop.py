"""``perfledger loop ...``: the kernel-iteration loop's commands (SPEC.md R19-R25).

Each command parses its options, calls one use case of :mod:`perfledger.app.loop`
(:func:`~perfledger.app.loop.loop_setup`, :func:`~perfledger.app.loop.close_iteration`,
:func:`~perfledger.app.loop.finalize_run`, :func:`~perfledger.app.loop.propose`; the reads
``loop state`` and ``loop summary`` fold the run's projection) and renders the answer: one line
for people (each step's progress on stderr), one JSON object with ``--json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from perfledger.app.loop import (
    DEFAULT_PAIRS,
    CloseIteration,
    FinalizeRun,
    LoopSetup,
    close_iteration,
    dims_of,
    finalize_run,
    finalized_json,
    loop_run,
    loop_setup,
    propose,
    run_state_json,
)
from perfledger.commands.cli.common import actor_option
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.projections.loop import input_profile
from perfledger.projections.loop_summary import render_summary

_run_opt = click.option("--run", "run_id", required=True, help="The run id.")


def _say(ctx: Any) -> Any:
    """The use case's progress: stderr for people, nothing under ``--json``."""
    return (lambda text: None) if ctx.json_mode else (lambda text: click.echo(text, err=True))


def _run(ctx: Any, run_id: str) -> Any:
    return ctx.read(lambda ledger: loop_run(ledger.state(), run_id))


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
    request = LoopSetup(
        baseline=baseline, ref=ref_path, dims=dims_of(dims), run_id=run_id, iterations=iterations,
        ncu_num=ncu_num, min_effect=min_effect, entry=entry, driver=driver,
        catalog=catalog_path, sm_arch=sm_arch, actor=who,
    )  # fmt: skip
    done = loop_setup(request, open_ledger=ctx.open, say=_say(ctx))
    if ctx.json_mode:
        _emit(done)
    else:
        click.echo(
            f"RunSetUp {done.event_id}  run={done.run_id}  baseline "
            f"{done.baseline_median_ms:.4g} ms  ({done.sm_arch})"
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
    request = CloseIteration(
        run_id=run_id, iteration=iteration, kernel=kernel, methods=methods_path,
        analysis=analysis_path, pairs=pairs, actor=_actor(actor),
    )  # fmt: skip
    done = close_iteration(request, open_ledger=ctx.open, say=_say(ctx))
    if ctx.json_mode:
        _emit(done)
        return
    verdict = done.verdict or {}
    figures = [verdict.get(key) for key in ("estimate", "ci_low", "ci_high")]
    low_high = ", ".join("n/a" if v is None else f"{v:.4g}" for v in figures[1:])
    extra = (
        f"  improvement {'n/a' if figures[0] is None else f'{figures[0]:.4g}'} CI [{low_high}]"
        if verdict
        else f"  {done.detail or ''}"
    )
    click.echo(f"iteration {iteration} attempt {done.attempt}: {done.status}{extra}")


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
    request = FinalizeRun(run_id=run_id, pairs=pairs, stop_reason=stop_reason, actor=_actor(actor))
    done = ctx.read(finalize_run, request, say=_say(ctx))
    data = finalized_json(run_id, done, out)
    if ctx.json_mode:
        _emit(data)
    else:
        click.echo(f"RunFinalized {done.event_id}  summary: {out}")


# ------------------------------------------------------------------------------ reads


@click.command("state")
@_run_opt
@_json
def state_cmd(run_id: str, json_flag: bool) -> None:
    """Show a run's state: best kernel, next iteration, selected and ineffective methods,
    profiles, iterations (the derived replacement of state.json)."""

    ctx = _ctx(json_flag)
    run = _run(ctx, run_id)
    if ctx.json_mode:
        _emit(run_state_json(run))
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

    text = render_summary(_run(_ctx(False), run_id))
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
    selection, analysis = ctx.read(lambda ledger: propose(ledger.state(), run_id, iteration))
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
