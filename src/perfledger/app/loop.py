"""The kernel-iteration loop's steps at the application edge (SPEC.md R19-R25): the run's
kernels written back from the ledger, the backend that measures them, a recorded profile, and
the selection checked against the rules before anything is measured. Used by
``perfledger loop ...``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from perfledger.commands.loop import deciders as loop_deciders
from perfledger.commands.loop import rules as loop_rules
from perfledger.commands.loop.requests import AxisSelectionModel
from perfledger.commands.registry.operations import condense, execute
from perfledger.errors import BadRequest
from perfledger.kernels.loop.measure import CudaBackend, WorkloadBackend


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
            "methods.json must be an object: axis -> {chosen, skipped}",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        )
    unknown = sorted(set(methods) - {"compute", "memory", "latency"})
    if unknown:
        raise BadRequest(
            f"methods.json: unknown axis {', '.join(unknown)}",
            hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
        )
    selection = {}
    for axis, value in methods.items():
        try:
            selection[axis] = msgspec.convert(value, AxisSelectionModel)
        except msgspec.ValidationError as exc:
            raise BadRequest(
                f"methods.json: {axis}.{condense(exc)}",
                hint="`perfledger loop --help` gives each step's options; docs/loop.md the loop's files and order",
            ) from None
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


__all__ = ["loop_backend", "materialize", "precheck", "propose", "record_profile", "recorded_body"]
