"""Measurement backends of the kernel-iteration loop: correctness, timing, paired interleaved
comparison and profiles of one kernel file, producing the numbers that the loop's requests carry.

Two backends, one interface (:class:`Backend`):

- :class:`WorkloadBackend` (the CPU stand-in, no GPU): the kernel is measured through the
  workload driver (:mod:`perfledger.kernels.workload.driver`): a command template (``{kernel}``,
  ``{ref}``, ``{dims}``, ``{entry}`` placeholders) that prints one JSON object per call, with the
  mode in ``$PERFLEDGER_LOOP_MODE`` (``check``, ``time`` or ``profile``). Paired timing is the
  driver's ABBA interleaving. A profile call puts ``{"tool", "version", "metrics", "units",
  "limitations"}`` under ``detail.profile``.
- :class:`CudaBackend`: a ``.cu`` kernel through the CuPy harness (:mod:`perfledger.kernels.
  harness`: hidden-seed correctness trials, L2-flushed CUDA-event timing, paired ABBA comparison)
  and Nsight Compute (:mod:`perfledger.kernels.profilers.ncu`) run on
  :mod:`perfledger.kernels.loop.ncu_target`, which launches the kernel once between
  ``cudaProfilerStart``/``Stop`` so that exactly the subject's launches are profiled (never a
  filter on a host function's name).

Times in the results are milliseconds. Nothing here appends to a ledger.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from perfledger.errors import BadRequest, EvidenceError
from perfledger.events import catalog as cat
from perfledger.events.loop import Catalog
from perfledger.kernels.env import VOLATILE_FIELDS, collect
from perfledger.kernels.loop.preflight import eval_launch, parse_cuda_entry, parse_launch
from perfledger.kernels.profilers.ncu import parse_ncu_csv, parse_version
from perfledger.kernels.workload.driver import Subject, run_call, run_pairs

#: Environment variable telling a workload stand-in what to do.
MODE_ENV = "PERFLEDGER_LOOP_MODE"
#: Metric a workload stand-in reports its per-call times under (ms).
TIME_METRIC = "time_ms"
#: Launches of the subject in one profiled call (recorded by the backends, not by ncu).
LAUNCHES_METRIC = "perfledger__kernel_launches"


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/loop.md describes what the loop measures and what a workload call prints"


class Backend(Protocol):
    """What the loop needs from a measurement backend (all times in ms)."""

    kind: str

    def environment(self) -> tuple[dict[str, str | None], list[str]]:
        """(environment identity with ``None`` for missing items, limitations)."""
        ...

    def check(self, kernel: Path) -> dict[str, Any]:
        """Correctness of ``kernel``: a ``CorrectnessModel`` body."""
        ...

    def time(self, kernel: Path) -> dict[str, Any]:
        """Timing of ``kernel`` alone: a ``TimingModel`` body."""
        ...

    def time_reference(self) -> dict[str, Any] | None:
        """Timing of the reference, or None when it cannot be timed."""
        ...

    def compare(self, best: Path, cand: Path, pairs: int) -> tuple[list[dict[str, Any]], bool, str]:
        """Paired interleaved timing: (``PairModel`` bodies of valid pairs, the candidate stayed
        correct during timing, a note)."""
        ...

    def profile(self, kernel: Path, catalog: Catalog) -> dict[str, Any]:
        """A profile: ``tool``, ``tool_version``, ``metrics``, ``units``, ``limitations``."""
        ...


# ---------------------------------------------------------------------------- workload


@dataclass
class WorkloadBackend:
    """The workload-driver backend (see the module docstring).

    Attributes:
        argv: the driver's command template.
        reference: the reference file; dims: the dims; entry: the kernel's entry point.
        cwd: working directory of the calls; timeout_s: per-call limit (s).
    """

    argv: Sequence[str]
    reference: Path
    dims: dict[str, int]
    entry: str
    cwd: str | None = None
    timeout_s: float = 300.0
    kind: str = field(default="workload", init=False)

    def _subject(self, label: str, kernel: Path, mode: str) -> Any:

        values = {
            "{kernel}": str(kernel),
            "{ref}": str(self.reference),
            "{dims}": json.dumps(self.dims, sort_keys=True),
            "{entry}": self.entry,
        }
        argv = []
        for arg in self.argv:
            for key, value in values.items():
                arg = arg.replace(key, value)
            argv.append(arg)
        return Subject(label, argv, env={MODE_ENV: mode}, cwd=self.cwd)

    def _call(self, kernel: Path, mode: str) -> Any:
        result = run_call(
            self._subject("cand", kernel, mode), case="dims", call_id=f"{mode}-1",
            timeout_s=self.timeout_s,
        )  # fmt: skip
        if not result.ok:
            raise BadRequest(
                f"the workload call ({mode}) of {kernel.name} failed: {result.reason}: "
                f"{result.message}",
                hint=result.stderr_tail[-500:] or None or "",
            )
        return result

    def environment(self) -> tuple[dict[str, str | None], list[str]]:
        """Host identity; the stand-in has no GPU, which is recorded as missing."""
        env: dict[str, str | None] = {
            "host_os": platform.platform(),
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "gpu": None,
            "driver": None,
            "cuda": None,
        }
        return env, ["workload stand-in: no GPU; profiles come from the stand-in's own counters"]

    def check(self, kernel: Path) -> dict[str, Any]:
        """Run one ``check`` call; its ``correct`` and ``detail`` (trials, max_error,
        tolerance, detail) become the correctness body."""
        result = self._call(kernel, "check")
        detail = result.detail if isinstance(result.detail, dict) else {}
        return {
            "correct": bool(result.correct),
            "trials": int(detail.get("trials", 1)),
            "max_error": _float_or_none(detail.get("max_error")),
            "tolerance": _float_or_none(detail.get("tolerance")),
            "detail": str(detail.get("detail", "")),
        }

    def time(self, kernel: Path) -> dict[str, Any]:
        """One ``time`` call's samples of :data:`TIME_METRIC`."""
        result = self._call(kernel, "time")
        if not result.correct:
            raise BadRequest(f"{kernel.name} was incorrect while timed", hint=_HINT)
        samples = result.metrics.get(TIME_METRIC)
        if not samples:
            raise BadRequest(f"the workload call printed no {TIME_METRIC!r} metric", hint=_HINT)
        return {"samples_ms": list(samples), "stop_reason": "one driver call"}

    def time_reference(self) -> dict[str, Any] | None:
        """The stand-in's reference is timed like a kernel (mode ``time`` with the reference as
        the kernel, entry ``reference``) when the template supports it; None otherwise."""
        return None

    def compare(self, best: Path, cand: Path, pairs: int) -> tuple[list[dict[str, Any]], bool, str]:
        """ABBA pairs through :func:`perfledger.kernels.workload.driver.run_pairs`; a pair whose calls
        failed or were incorrect is left out (R5); any incorrect candidate call is reported."""

        run = run_pairs(
            self._subject("ref", best, "time"), self._subject("cand", cand, "time"),
            cases=["dims"], pairs_per_case=pairs, timeout_s=self.timeout_s,
        )  # fmt: skip
        out = []
        cand_ok = True
        for pair in run.pairs:
            if pair.cand.ok and not pair.cand.correct:
                cand_ok = False
            if pair.usable and pair.ref.correct and pair.cand.correct:
                out.append(
                    {
                        "ref_ms": pair.ref.metrics[TIME_METRIC],
                        "cand_ms": pair.cand.metrics[TIME_METRIC],
                    }
                )
        failed = len(run.failed_calls)
        note = f"{len(out)} valid ABBA pairs of {len(run.pairs)}; {failed} failed call(s)"
        return out, cand_ok, note

    def profile(self, kernel: Path, catalog: Catalog) -> dict[str, Any]:
        """One ``profile`` call's ``detail.profile``."""
        result = self._call(kernel, "profile")
        detail = result.detail if isinstance(result.detail, dict) else {}
        profile = detail.get("profile")
        if not isinstance(profile, dict):
            return {
                "tool": "workload",
                "tool_version": "none",
                "metrics": {},
                "units": {},
                "limitations": ["the workload printed no detail.profile"],
            }
        return {
            "tool": str(profile.get("tool", "workload")),
            "tool_version": str(profile.get("version", "unknown")),
            "metrics": {k: float(v) for k, v in dict(profile.get("metrics", {})).items()},
            "units": {k: str(v) for k, v in dict(profile.get("units", {})).items()},
            "limitations": [str(x) for x in profile.get("limitations", [])],
        }


def _float_or_none(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


# ---------------------------------------------------------------------------- CUDA


@dataclass
class CudaBackend:
    """The CuPy-harness + ncu backend for ``.cu`` kernels (see the module docstring).

    Attributes:
        reference: ``ref.py`` defining ``make_inputs(rng, dims)``, ``reference(inputs, dims)``
            and ``outputs(dims)`` (and optionally ``bytes_per_call(dims)``).
        dims: the dims; entry: the kernel's ``extern "C"`` entry point.
        ncu: the ncu executable (None: looked up on PATH).
        ncu_timeout_s: limit of one ncu run (s).
        max_gpu_s: the stopping rule's hard cap of GPU seconds per subject (s); lower than the
            harness's default (15 s) because a loop compares many candidates; the harness's
            recorded stop reason says when the cap, not the noise, stopped a comparison.
    """

    reference: Path
    dims: dict[str, int]
    entry: str
    ncu: str | None = None
    ncu_timeout_s: float = 300.0
    max_gpu_s: float = 3.0
    kind: str = field(default="cuda", init=False)
    _harness: Any = field(default=None, init=False, repr=False)

    def _module(self) -> Any:

        spec = importlib.util.spec_from_file_location("perfledger_loop_ref", self.reference)
        if spec is None or spec.loader is None:
            raise BadRequest(f"cannot load the reference {self.reference}", hint=_HINT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def harness(self) -> Any:
        """The harness for this problem (built once)."""
        if self._harness is None:
            import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

            from perfledger.kernels.harness import harness as h  # noqa: PLC0415 (numpy via perfledger.kernels.harness.harness)

            ref = self._module()
            dims = dict(self.dims)
            problem = h.Problem(
                name=self.entry,
                make_inputs=lambda seed: ref.make_inputs(np.random.default_rng(seed), dims),
                reference=lambda inputs: ref.reference(inputs, dims),
                outputs=ref.outputs(dims),
                bytes_per_call=ref.bytes_per_call(dims) if hasattr(ref, "bytes_per_call") else None,
            )
            from perfledger.kernels.harness.stopping import StoppingRule  # noqa: PLC0415 (numpy via perfledger.kernels.harness.stopping)

            config = h.HarnessConfig(stopping=StoppingRule(max_gpu_s=self.max_gpu_s))
            self._harness = h.Harness(problem, config)
        return self._harness

    def subject(self, kernel: Path) -> Any:
        """A harness subject for ``kernel``: parameters bound by name (arrays from inputs and
        outputs, integers from dims as int32), launch from its directive."""
        import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

        from perfledger.kernels.harness import harness as h  # noqa: PLC0415 (numpy via perfledger.kernels.harness.harness)

        source = kernel.read_text()
        entry = parse_cuda_entry(source, self.entry)
        launch = parse_launch(source)
        grid = eval_launch(launch["grid"], self.dims)
        block = eval_launch(launch["block"], self.dims)
        dims = self.dims

        def args(inputs: dict[str, Any], outputs: dict[str, Any]) -> tuple[Any, ...]:
            values = []
            for name, _ctype, integer in entry.params:
                if integer:
                    values.append(np.int32(dims[name]))
                elif name in inputs:
                    values.append(inputs[name])
                elif name in outputs:
                    values.append(outputs[name])
                else:
                    raise BadRequest(
                        f"parameter {name} of {entry.name} is no input, output or dim", hint=_HINT
                    )
            return tuple(values)

        return h.RawKernelSubject(
            name=kernel.name, source=source, entry=entry.name, grid=grid, block=block, args=args
        )

    def environment(self) -> tuple[dict[str, str | None], list[str]]:
        """The environment identity of :func:`perfledger.kernels.env.collect` (GPU, UUID,
        compute capability, driver, CUDA, CuPy, nvcc, ncu, host), flattened to strings; missing
        items are None and listed as a limitation."""

        found = collect()
        env: dict[str, str | None] = {
            name: None if value is None else str(value)
            for name, value in found.identity_fields().items()
            if name not in VOLATILE_FIELDS
        }
        limitations = (
            [f"missing from the environment: {', '.join(found.missing)}"] if found.missing else []
        )
        if self._ncu_version() is None:
            limitations.append("ncu not found: no input or candidate profiles (R16)")
        return env, limitations

    def sm_arch(self) -> str:
        """``sm_XY`` of the current device."""
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
        return f"sm_{props['major']}{props['minor']}"

    def check(self, kernel: Path) -> dict[str, Any]:
        """The harness's correctness trials (hidden seed, poisoned outputs, input hashes)."""
        report = self.harness().check(self.subject(kernel))
        errors = [e for t in report.trials for e in t.errors.values() if e is not None]
        return {
            "correct": bool(report.ok),
            "trials": len(report.trials),
            "max_error": max(errors) if errors else None,
            "detail": "; ".join(report.reasons) if not report.ok else "all trials passed",
        }

    def time(self, kernel: Path) -> dict[str, Any]:
        """The harness's cold-L2 timing with its stopping rule."""
        measurement = self.harness().measure(self.subject(kernel))
        if measurement.timing is None or not measurement.correctness.ok:
            raise BadRequest(
                f"{kernel.name} could not be timed: {measurement.correctness.reasons} "
                f"{measurement.flags}",
                hint=_HINT,
            )
        flags = f"; flags: {', '.join(measurement.flags)}" if measurement.flags else ""
        return {
            "samples_ms": [s * 1e3 for s in measurement.timing.samples_s],
            "stop_reason": (measurement.stop_reason or "") + flags,
        }

    def time_reference(self) -> dict[str, Any] | None:
        """The reference (a CuPy function) timed as a callable subject writing the outputs."""
        from perfledger.kernels.harness import harness as h  # noqa: PLC0415 (numpy via perfledger.kernels.harness.harness)

        ref = self._module()
        dims = self.dims

        def run(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
            for name, value in ref.reference(inputs, dims).items():
                outputs[name][...] = value

        try:
            measurement = self.harness().measure(h.CallableSubject("reference", run))
        except Exception:  # a NumPy-only reference cannot be timed on the GPU
            return None
        if measurement.timing is None:
            return None
        return {
            "samples_ms": [s * 1e3 for s in measurement.timing.samples_s],
            "stop_reason": measurement.stop_reason or "",
        }

    def compare(self, best: Path, cand: Path, pairs: int) -> tuple[list[dict[str, Any]], bool, str]:
        """The harness's paired ABBA comparison (each pair one cold sample per subject)."""
        from perfledger.kernels.harness.harness import abba_blocks  # noqa: PLC0415 (numpy via perfledger.kernels.harness.harness)

        comparison = self.harness().compare(self.subject(best), self.subject(cand))
        if comparison.ref is None or comparison.cand is None:
            return [], comparison.cand_correctness.ok, f"not timed: {comparison.flags}"
        # one pair per ABBA block (its AB and BA samples of each subject), as the harness pairs
        a_blocks, _ = abba_blocks(comparison.ref.samples_s, comparison.cand.samples_s)
        ref_s, cand_s = comparison.ref.samples_s, comparison.cand.samples_s
        out = [
            {"ref_ms": [ref_s[2 * j] * 1e3, ref_s[2 * j + 1] * 1e3],
             "cand_ms": [cand_s[2 * j] * 1e3, cand_s[2 * j + 1] * 1e3]}
            for j in range(len(a_blocks))
        ]  # fmt: skip
        cand_ok = comparison.cand_correctness.ok and not comparison.cand.recheck_failures
        note = (
            f"{len(out)} ABBA blocks ({len(comparison.pair_orders)} pairs), stop: "
            f"{comparison.stop_reason}; flags: {comparison.flags}"
        )
        return out, cand_ok, note

    def _ncu_version(self) -> str | None:
        exe = self.ncu or shutil.which("ncu")
        if exe is None:
            return None
        try:
            out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None

        try:
            return parse_version(out.stdout)
        except Exception:
            return None

    def profile(self, kernel: Path, catalog: Catalog) -> dict[str, Any]:
        """Run ncu on one launch of ``kernel`` (``--profile-from-start off``, raw page, base
        units, exactly the catalog's metrics: ``--set full`` also collects metrics in units the
        strict parser refuses, e.g. ``byte/cycle``) and keep them via
        :func:`profile_from_ncu_csv`. ``ERR_NVGPUCTRPERM`` is a limitation with no metrics
        (R16)."""
        target = ["perfledger.kernels.loop.ncu_target", str(kernel), str(self.reference),
                  json.dumps(self.dims), self.entry]  # fmt: skip
        return self.ncu_profile(
            catalog,
            target,
            lambda csv, version: profile_from_ncu_csv(csv, version, catalog, self.entry),
        )

    def ncu_profile(
        self,
        catalog: Catalog,
        target: list[str],
        read: Callable[[Path, str], dict[str, Any]],
        prepare: Callable[[], object] | None = None,
    ) -> dict[str, Any]:
        """Run ncu (raw page, base units, the catalog's metrics, ``--profile-from-start off``)
        on ``python -m`` ``target`` (a module and its arguments) and return ``read(csv_path,
        ncu_version)`` while the CSV exists; ``prepare()`` runs first, once ncu is found (a
        build that must not happen inside ncu). No ncu: a profile with that limitation and no
        metrics; ``ERR_NVGPUCTRPERM``: likewise (R16). Raises: BadRequest when ncu fails."""
        exe = self.ncu or shutil.which("ncu")
        version = self._ncu_version()
        if exe is None or version is None:
            return {"tool": "ncu", "tool_version": "unavailable", "metrics": {}, "units": {},
                    "limitations": ["ncu not found on PATH"]}  # fmt: skip
        if prepare is not None:
            prepare()
        with tempfile.TemporaryDirectory(prefix="perfledger-ncu-") as tmp:
            out_csv = Path(tmp) / "raw.csv"
            cmd = [
                exe, "--csv", "--page", "raw", "--print-units", "base",
                "--metrics", ",".join(cat.catalog_metric_names(catalog)),
                "--profile-from-start", "off", "--clock-control", "none",
                sys.executable, "-m", *target,
            ]  # fmt: skip
            env = {**os.environ, "LC_ALL": "C"}
            with out_csv.open("wb") as handle:
                proc = subprocess.run(
                    cmd, stdout=handle, stderr=subprocess.PIPE, env=env, timeout=self.ncu_timeout_s
                )
            text = out_csv.read_text(errors="replace")
            if "ERR_NVGPUCTRPERM" in text or b"ERR_NVGPUCTRPERM" in proc.stderr:
                return {"tool": "ncu", "tool_version": version, "metrics": {}, "units": {},
                        "limitations": ["ERR_NVGPUCTRPERM: no access to GPU performance counters"]}  # fmt: skip
            if proc.returncode != 0:
                raise BadRequest(
                    f"ncu exited with {proc.returncode}",
                    hint=(proc.stderr.decode(errors="replace") + text)[-800:],
                )
            return read(out_csv, version)


def profile_from_ncu_csv(
    path: Path, version: str, catalog: Catalog, entry: str, *, grouping: str = "none"
) -> dict[str, Any]:
    """The loop's profile from an ncu ``--page raw`` CSV (base units, no digit grouping): the
    catalog's metrics of the ``entry`` kernel (means over its launches, in ncu's base units;
    ``"1"`` for a dimensionless one), the launches of every kernel in the profiled range as
    :data:`LAUNCHES_METRIC`, and the parser's limitations. A report the strict parser refuses
    is a limitation with no metrics (R16: never guessed). ``grouping``: the digit grouping of
    ncu's locale (``none`` under ``LC_ALL=C``, as :meth:`CudaBackend.profile` runs it).

    Returns: ``{"tool", "tool_version", "metrics", "units", "limitations"}``.
    """

    try:
        report = parse_ncu_csv(path, tool_version=version, grouping=grouping, name="ncu raw page")
    except EvidenceError as exc:
        return {"tool": "ncu", "tool_version": version, "metrics": {}, "units": {},
                "limitations": [f"the ncu report could not be parsed: {exc.message}"]}  # fmt: skip
    wanted = set(cat.catalog_metric_names(catalog))
    metrics: dict[str, float] = {}
    units: dict[str, str] = {}
    launches = 0
    for name, summary in report.kernels.items():
        launches += summary.launches
        if name != entry and not name.startswith(entry):
            continue
        for metric, stat in summary.metrics.items():
            if metric in wanted and stat.mean is not None:
                metrics[metric] = float(stat.mean)
                units[metric] = stat.unit or "1"  # "1": dimensionless (ratios, counts)
    metrics[LAUNCHES_METRIC] = float(launches)
    units[LAUNCHES_METRIC] = "launches"
    limitations = list(report.limitations)
    if not any(n == entry or n.startswith(entry) for n in report.kernels):
        limitations.append(f"ncu profiled no launch of {entry}: {sorted(report.kernels)}")
    return {"tool": "ncu", "tool_version": version, "metrics": metrics, "units": units,
            "limitations": limitations}  # fmt: skip
