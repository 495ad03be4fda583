"""The kernel-iteration loop on the seed playbook's standalone contract: a ``.cu`` exporting the
host function ``extern "C" void solve(...)`` (any number of kernels launched on the stream it is
given), ``ref.py`` with ``reference(**kwargs)`` and the argument spec (``ARGS``, or ``SHAPES``
with the signature), and the dims JSON (:mod:`perfledger.kernels.subjects.solve`).

A Python baseline defining ``def solve(...)`` on torch tensors (a torch operator, a Triton
kernel's launcher) follows the same contract (the stream parameter left out: torch's current
stream is the harness's) and is measured as a torch subject.

A run on this contract is a ``cuda`` run with no launch directive (``launch`` empty, ``entry``
``solve``): :func:`is_solve_run` tells the loop's commands which backend measures it.
:class:`SolveBackend` is :class:`~perfledger.kernels.loop.measure.CudaBackend` with the problem
from ``ref.py`` and subjects built by nvcc; its profile runs Nsight Compute on
:mod:`perfledger.kernels.loop.solve_target` (one ``solve`` call in the profiler range) and keeps
the metrics of every kernel that call launched. Times are milliseconds.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfledger.events.loop import Catalog
from perfledger.kernels.harness import harness as h
from perfledger.kernels.harness.stopping import StoppingRule
from perfledger.kernels.loop.measure import CudaBackend, profile_from_ncu_csv
from perfledger.kernels.loop.preflight import EntryPoint
from perfledger.kernels.profilers.ncu import parse_ncu_csv
from perfledger.kernels.subjects import solve as sv
from perfledger.kernels.subjects.torch_subject import check_python_solve, python_solve_subject


def is_solve_source(source: str, entry: str | None) -> bool:
    """True when a ``.cu`` baseline follows the ``solve`` contract: it exports the host function
    ``extern "C" void solve(...)`` and no other entry was asked for."""
    return entry in (None, sv.ENTRY) and sv.has_solve_entry(source)


def is_python_solve_source(source: str) -> bool:
    """True when a Python baseline defines a top-level ``def solve(...)`` (a torch or Triton
    subject on the same contract) rather than being a workload stand-in."""

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.FunctionDef) and n.name == sv.ENTRY for n in tree.body)


def is_solve_run(setup: Any) -> bool:
    """True for a run set up on the ``solve`` contract (a ``cuda`` run without a launch
    directive)."""
    return setup.subject_kind == "cuda" and not setup.launch and setup.entry == sv.ENTRY


def preflight(
    source: str, ref_path: Path, dims: dict[str, Any], *, python: bool = False
) -> tuple[EntryPoint, sv.ArgSpec]:
    """Check the contract before anything runs: ``ref.py`` loads and declares its argument
    spec, the spec matches the signature (``python``: a Python ``def solve``, whose parameters
    are the spec's without the stream), the dims give every scalar and shape.

    Returns: the entry point as the loop records it (``(name, ctype, integer)`` per parameter)
    and the spec. Raises: BadRequest naming what is wrong.
    """
    ref = sv.load_ref(ref_path)
    if python:
        spec = sv.resolve_spec(ref, None)
        check_python_solve(source, spec)
    else:
        spec = sv.resolve_spec(ref, source)
    spec.check_dims(dims)
    params = []
    for arg in spec.args:
        if arg.is_buffer:
            params.append((arg.name, f"{arg.dtype}*", False))
        elif arg.kind == "stream":
            params.append((arg.name, "cudaStream_t", False))
        else:
            params.append((arg.name, arg.dtype, arg.dtype.startswith(("int", "uint"))))
    return EntryPoint(sv.ENTRY, tuple(params)), spec


@dataclass
class SolveBackend(CudaBackend):
    """:class:`CudaBackend` for ``solve`` subjects (module docstring). ``entry`` is ``solve``;
    ``arch`` the architecture to build for (default: the device's); ``source`` the run's
    baseline, whose signature gives the spec when ``ref.py`` declares ``SHAPES`` only."""

    entry: str = sv.ENTRY
    arch: str | None = None
    source: Path | None = None
    _ref: Any = field(default=None, init=False, repr=False)
    _spec: Any = field(default=None, init=False, repr=False)

    def _contract(self) -> tuple[Any, Any]:
        if self._ref is None:
            self._ref = sv.load_ref(self.reference)
            cuda = self.source is not None and self.source.suffix != ".py"
            text = self.source.read_text(encoding="utf-8") if cuda and self.source else None
            self._spec = sv.resolve_spec(self._ref, text)
        return self._ref, self._spec

    def sm_arch(self) -> str:
        """``sm_XY`` of the current device. Raises: MeasurementError without CuPy or a GPU."""
        return sv.device_arch()

    def harness(self) -> Any:
        """The harness of ``ref.py``'s problem (built once)."""
        if self._harness is None:
            ref, spec = self._contract()
            problem = sv.solve_problem(ref, self.dims, spec, name=f"{self.reference.stem}")
            config = h.HarnessConfig(stopping=StoppingRule(max_gpu_s=self.max_gpu_s))
            self._harness = h.Harness(problem, config)
        return self._harness

    def subject(self, kernel: Path) -> Any:
        """The ``solve`` of ``kernel``, checked against the spec: a ``.cu`` built by nvcc, a
        ``.py`` (torch or Triton) run as a torch subject."""
        _, spec = self._contract()
        if kernel.suffix == ".py":
            return python_solve_subject(kernel, spec, self.dims)
        return sv.solve_subject(kernel, spec, self.dims, arch=self.arch)

    def time_reference(self) -> dict[str, Any] | None:
        """The reference timed as a subject writing the outputs (None when it cannot run on the
        device, e.g. a NumPy reference)."""

        problem = self.harness().problem

        def run(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
            for name, value in problem.reference(inputs).items():
                outputs[name][...] = value

        try:
            measurement = self.harness().measure(h.CallableSubject("reference", run))
        except Exception:
            return None
        if measurement.timing is None:
            return None
        return {
            "samples_ms": [s * 1e3 for s in measurement.timing.samples_s],
            "stop_reason": measurement.stop_reason or "",
        }

    def profile(self, kernel: Path, catalog: Catalog) -> dict[str, Any]:
        """Nsight Compute on one ``solve`` call (:mod:`perfledger.kernels.loop.solve_target`):
        the catalog's metrics of the kernels it launched (with several kernels, the metrics of
        the last one seen, and a limitation saying so)."""

        def read(out_csv: Path, version: str) -> dict[str, Any]:
            # "" matches every kernel: solve's kernels have names of their own
            profile = profile_from_ncu_csv(out_csv, version, catalog, "")

            try:
                names = list(parse_ncu_csv(out_csv, tool_version=version).kernels)
            except Exception:
                names = []
            if len(names) > 1:
                profile["limitations"].append(
                    f"solve launched {len(names)} kernels ({', '.join(names)[:300]}): the "
                    f"metrics are those of {names[-1]}"
                )
            return profile

        target = ["perfledger.kernels.loop.solve_target", str(kernel), str(self.reference),
                  json.dumps(self.dims)]  # fmt: skip
        # build outside ncu (and refuse a bad source before profiling)
        return self.ncu_profile(catalog, target, read, prepare=lambda: self.subject(kernel))


__all__ = [
    "SolveBackend",
    "is_python_solve_source",
    "is_solve_run",
    "is_solve_source",
    "preflight",
]
