"""Measure a serving load and report it, or record it as samples or evidence (SPEC.md section 5
"Serving workloads"; R2, R5, R6, R7, R11, R12, R14, R17; docs/serving.md).

:func:`measure_serving` is the use case behind ``perfledger measure serving``: a paired,
monitored load against OpenAI-compatible HTTP endpoints
(:mod:`perfledger.kernels.serving.serving`) in interleaved ABBA windows, analysed
(:mod:`perfledger.derive.serving_stats`: per-request TTFT, time per output token, end-to-end
latency and throughput, drift between steady windows, interference). With ``experiment_id`` and
``stage`` the window pairs are recorded through ``samples.record`` (one pair per window pair and
case; drifting or unequal pairs left out, and at a formal stage refused, R12); with
``evidence_id`` the report is recorded as evidence (layer service). Every check that can fail
runs before any request is sent (the step helpers of :mod:`perfledger.app.measure_serving`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from perfledger.app.context import (
    SAMPLES_ARTIFACT,
    check_environment,
    default_samples_id,
    environment_payload,
    experiment_context,
    foreign_activity_warnings,
    measured_provenance,
    refuse_formal_dry_run,
    start_formal_run,
    start_monitor,
)
from perfledger.app.identity import refuse_unsnapshotted
from perfledger.app.measure_baseline import Progress, no_progress
from perfledger.app.measure_serving import (
    load_warnings,
    refuse_voided_pairs,
    serving_artifact,
    serving_cases,
    serving_metrics,
    serving_result,
    test_set_warnings,
)
from perfledger.app.preconditions import refuse_formal_unmonitored
from perfledger.app.recording import Warn, append_measured, no_warnings
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.serving_record import (
    PER_REQUEST_KINDS,
    SERVING_PROTOCOL,
    evidence_request,
    serving_request,
    serving_settings,
)
from perfledger.errors import BadRequest, MeasurementError

#: The hint of every refusal of the options' shape.
_OPTIONS_HINT = (
    "`perfledger measure serving --help` gives the options; docs/serving.md the request set and "
    "the protocol"
)


class MeasureServing(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to load OpenAI-compatible endpoints and report (or record) what they served.

    Attributes:
        ref_url, cand_url: base URLs (``http://HOST:PORT/v1``); no ``cand_url``: the reference
            alone, or (with ``before_cand``) the candidate's configuration behind ``ref_url``.
        model, cand_model: the ``model`` field sent (``cand_model`` None: ``model``).
        before_ref, before_cand: commands (shell words) run before each window of that subject.
        ready_timeout_s: after a ``before_*`` command, the longest wait for GET BASE/models.
        requests_path: the test set, JSONL of requests.
        api: ``chat`` or ``completions``.
        rate: open loop, Poisson arrivals per second; concurrency: closed loop, requests in
            flight (exactly one of them).
        pairs, steady, warmup, cooldown: window pairs (ABBA) and requests per window.
        seed: seeds the request order and the arrivals.
        ignore_eos: send ``"ignore_eos": true``.
        timeout_s: per request, seconds.
        drift_metric, drift_alpha, drift_threshold: the drift test between steady windows.
        min_effect: the ratio distance from 1 reported as a difference (None: the Target's,
            else 0.05).
        resamples: bootstrap resamples.
        experiment_id, stage, samples_id: record samples of this experiment and stage.
        evidence_id, evidence_target, applicability, description: record evidence instead.
        case: the test case (None: the readiness's one).
        metrics: ``NAME=KIND`` of Target metrics (ttft, tpot, e2e, output_tokens_per_s,
            requests_per_s).
        monitor: ``auto`` (NVML where it opens, else the host), ``gpu``, ``host`` or ``none``.
        raw_path: also write the raw table and report (JSON) to this file.
        dry_run: measure and decide, append nothing.
        actor: who records (required to record).
        idempotency_key: a retry-safe key for the append.
    """

    ref_url: str
    requests_path: str
    cand_url: str | None = None
    model: str = "default"
    cand_model: str | None = None
    before_ref: str | None = None
    before_cand: str | None = None
    ready_timeout_s: Annotated[float, msgspec.Meta(ge=0.1)] = 300.0
    api: Literal["chat", "completions"] = "chat"
    rate: Annotated[float, msgspec.Meta(gt=0)] | None = None
    concurrency: Annotated[int, msgspec.Meta(ge=1)] | None = None
    pairs: Annotated[int, msgspec.Meta(ge=1)] = 5
    steady: Annotated[int, msgspec.Meta(ge=2)] = 40
    warmup: Annotated[int, msgspec.Meta(ge=0)] | None = None
    cooldown: Annotated[int, msgspec.Meta(ge=0)] | None = None
    seed: int = 0
    ignore_eos: bool = False
    timeout_s: Annotated[float, msgspec.Meta(ge=0.001)] = 120.0
    drift_metric: Literal["ttft", "tpot", "e2e"] = "ttft"
    drift_alpha: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.01
    drift_threshold: Annotated[float, msgspec.Meta(ge=0)] = 0.10
    min_effect: Annotated[float, msgspec.Meta(ge=0)] | None = None
    resamples: Annotated[int, msgspec.Meta(ge=100)] = 2000
    experiment_id: str | None = None
    stage: Literal["screen", "target", "final_audit"] | None = None
    samples_id: str | None = None
    evidence_id: str | None = None
    evidence_target: str | None = None
    applicability: Literal["same_boundary", "conservative_upper_bound", "diagnostic"] = "diagnostic"
    description: str = ""
    case: str | None = None
    metrics: tuple[str, ...] = ()
    monitor: Literal["auto", "gpu", "host", "none"] = "auto"
    raw_path: str | None = None
    dry_run: bool = False
    actor: str | None = None
    idempotency_key: str | None = None

    @property
    def records(self) -> bool:
        """Whether the load records anything (samples or evidence): it needs a ledger."""
        return self.experiment_id is not None or self.evidence_id is not None


class MeasuredServing(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_serving` measured (and recorded).

    Attributes:
        answer: the ``--json`` answer: the request set's hash, requests sent and failed,
            interference, drift, the per-metric summary, the pairs and the windows
            (:func:`perfledger.app.measure_serving.serving_result`), with ``warnings`` and what
            was recorded (``samples_id``, ``pairs_recorded``, ``pairs_left_out``,
            ``evidence_id``, ``event_id``, ``kind``) or, on a dry run, ``request``.
        samples: whether samples were measured for an experiment (recorded unless a dry run).
        left_out: the window pairs left out of the samples, with their reasons.
        event_id, kind: the appended event (None when nothing was appended).
        request: the decision's body on a dry run.
    """

    answer: dict[str, Any]
    samples: bool = False
    left_out: list[dict[str, Any]] = []
    event_id: str | None = None
    kind: str | None = None
    request: dict[str, Any] | None = None


def _words(command: str | None) -> tuple[str, ...] | None:
    """A ``before_*`` command split into argv. Raises: BadRequest when it cannot be parsed."""
    if command is None:
        return None
    try:
        words = tuple(shlex.split(command))
    except ValueError as exc:
        raise BadRequest(
            f"cannot parse the command {command!r}: {exc}", hint=_OPTIONS_HINT
        ) from None
    if not words:
        raise BadRequest("an empty --before-* command", hint=_OPTIONS_HINT)
    return words


def _monitor(source: str) -> tuple[Any, str | None, str | None]:
    """Start the monitor (R17): ``gpu`` (NVML), ``host`` (CPU counters), ``auto`` (NVML where it
    opens, else the host) or ``none``. Returns ``(monitor or None, note, source used)``; the note
    says why there is none, or why ``auto`` fell back to the host."""
    if source == "none":
        return None, "disabled by --no-monitor", None
    if source != "auto":
        monitor, note = start_monitor(True, source)
        return monitor, note, source if monitor is not None else None
    monitor, why = start_monitor(True, "gpu")
    if monitor is not None:
        return monitor, None, "gpu"
    monitor, note = start_monitor(True, "host")
    if monitor is None:
        return None, f"NVML: {why}; {note}", None
    return monitor, f"NVML unavailable ({why}): the host monitor watches instead", "host"


def _check_shape(request: MeasureServing) -> None:
    """The options that go together, or not. Raises: BadRequest."""
    recording = request.experiment_id is not None
    if recording != (request.stage is not None):
        raise BadRequest(
            "--experiment and --stage go together (record samples of that stage)",
            hint=_OPTIONS_HINT,
        )
    if (request.rate is None) == (request.concurrency is None):
        raise BadRequest(
            "pass exactly one of --rate (open loop) or --concurrency (closed loop)",
            hint=_OPTIONS_HINT,
        )
    if recording and request.evidence_id is not None:
        raise BadRequest(
            "record either samples (--experiment) or evidence (--evidence), not both",
            hint=_OPTIONS_HINT,
        )
    if request.evidence_id is None and request.evidence_target is not None:
        raise BadRequest("--target goes with --evidence", hint=_OPTIONS_HINT)
    if request.before_cand is not None and request.before_ref is None and request.cand_url is None:
        raise BadRequest(
            "--before-cand without --cand-url switches one server's configuration: give "
            "--before-ref too (the command that brings the reference's back)",
            hint=_OPTIONS_HINT,
        )
    if recording and request.cand_url is None and request.before_cand is None:
        raise BadRequest(
            "recording samples needs a candidate: pass --cand-url (or --before-cand)",
            hint=_OPTIONS_HINT,
        )
    if request.records and request.actor is None:
        raise BadRequest("recording needs an actor", hint="name who records (--actor)")


def measure_serving(
    request: MeasureServing,
    *,
    ledger: Any = None,
    open_ledger: Callable[[], Any] | None = None,
    progress: Progress = no_progress,
    warn: Warn = no_warnings,
) -> MeasuredServing:
    """Load the endpoints, analyse the load and, as asked, record it (module docstring).

    Args:
        request: the :class:`MeasureServing`.
        ledger: the open ledger (needed only where ``request.records``).
        open_ledger: instead of ``ledger``, opens it once the options are checked, and only
            where ``request.records`` (it is closed before returning): a report needs none.
        progress: ``(total, label) -> context manager yielding advance()`` (one per window).
        warn: handed the warnings before anything is appended.
    Returns: the :class:`MeasuredServing`.
    Raises: BadRequest (exit 2: options, the request set, no ledger to record in);
        RuleRefused (exit 3: R2, R11, R12, R14, R15, R17), before any request is sent where
        it can be known then; MeasurementError (exit 1: no window pair can be recorded).
    """
    _check_shape(request)
    if not request.records or ledger is not None:
        return _measure(request, ledger, progress, warn)
    if open_ledger is None:
        raise BadRequest("recording needs a ledger", hint="pass the open ledger")
    opened = open_ledger()
    try:
        return _measure(request, opened, progress, warn)
    finally:
        opened.close()


def _measure(
    request: MeasureServing, ledger: Any, progress: Progress, warn: Warn
) -> MeasuredServing:
    """:func:`measure_serving` once its options are checked and its ledger (if any) open."""
    from perfledger.derive import serving_stats as st  # noqa: PLC0415 (numpy via perfledger.derive.serving_stats)
    from perfledger.kernels.serving import serving as sv  # noqa: PLC0415 (numpy via perfledger.kernels.serving.serving)

    recording = request.experiment_id is not None
    config = sv.LoadConfig(
        mode="poisson" if request.rate is not None else "closed",
        rate_rps=request.rate,
        concurrency=request.concurrency,
        steady_requests=request.steady,
        warmup_requests=request.warmup,
        cooldown_requests=request.cooldown,
        pairs=request.pairs,
        seed=request.seed,
        timeout_s=request.timeout_s,
        api=request.api,
        ignore_eos=request.ignore_eos,
    )
    config.check()
    requests, set_hash = sv.load_request_set(request.requests_path, request.api)
    ref = sv.Endpoint(
        request.ref_url, request.model, _words(request.before_ref), request.ready_timeout_s
    )
    cand_url = request.cand_url or (request.ref_url if request.before_cand else None)
    cand = (
        sv.Endpoint(
            cand_url,
            request.cand_model or request.model,
            _words(request.before_cand),
            request.ready_timeout_s,
        )
        if cand_url
        else None
    )
    warnings: list[str] = []
    info: dict[str, Any] | None = None
    metrics: dict[str, tuple[str, float]] = {}
    units: dict[str, str] = {}
    tail: str | None = None
    min_effect = request.min_effect
    case = request.case
    cases: list[str] | None = None
    stage = request.stage
    actor = request.actor or ""
    if recording:
        assert stage is not None and request.experiment_id is not None
        refuse_formal_dry_run(stage, request.dry_run)
        info = experiment_context(ledger, request.experiment_id, stage)
        refuse_unsnapshotted(info["target"], "measure serving")
        metrics, units, tail = serving_metrics(
            info["target"], info["primary"], request.metrics, config.steady_requests,
            sv.TAIL_MIN_REQUESTS,
        )  # fmt: skip
        case, cases = serving_cases(requests, case, info, metrics)
        warnings += test_set_warnings(set_hash, info, stage)
        if min_effect is None:
            min_effect = info["target"].definition.min_effect
    if request.evidence_id is not None:  # checked before any request is sent
        state = ledger.state()
        if request.evidence_id in state.evidence:
            raise BadRequest(
                f"evidence {request.evidence_id!r} is already recorded", hint=_OPTIONS_HINT
            )
        if request.evidence_target is not None:
            rules.r1_target_frozen(state, request.evidence_target)
    sv.check_request_set(requests, config)
    env = environment_payload(tools=False)
    if info is not None:
        check_environment(env, info)
    monitor, monitor_note, source = _monitor(request.monitor)
    if recording and monitor is None:
        refuse_formal_unmonitored(stage or "", monitor_note or "", windows=True)
    if monitor is None and request.monitor != "none":
        warnings.append(f"no monitor: {monitor_note}")
    elif monitor is not None and monitor_note:
        warnings.append(monitor_note)
    sid = ""
    if info is not None:
        assert stage is not None and request.experiment_id is not None
        sid = request.samples_id or default_samples_id(request.experiment_id, stage, info["state"])
        try:  # R14: a formal stage's start is recorded before anything is measured
            # what recording would refuse of this experiment and stage, before anything is sent
            rules.r15_not_rejected(info["state"], request.experiment_id)
            if stage == "target":
                rules.r11_screen_before_target(info["state"], request.experiment_id)
            start_formal_run(ledger, request.experiment_id, stage, sid, SERVING_PROTOCOL, actor)
        except BaseException:
            if monitor is not None:
                monitor.stop()
            raise
    n_windows = config.pairs * (2 if cand else 1)
    try:
        with progress(n_windows, "serving windows") as advance:
            run = sv.run_serving(
                ref, cand, requests, set_hash, config, on_window=lambda _w: advance()
            )
    finally:
        if monitor is not None:
            monitor.stop()
    interference = sv.mark_interference(run, monitor) if monitor is not None else []
    report = st.analyze(
        run,
        monitor=monitor,
        drift_metric=PER_REQUEST_KINDS[request.drift_metric],
        drift_alpha=request.drift_alpha,
        drift_threshold=request.drift_threshold,
        min_effect=0.05 if min_effect is None else min_effect,
        resamples=request.resamples,
        tail=tail,
    )
    warnings += load_warnings(report)
    artifact = serving_artifact(run, report, interference, env, monitor, monitor_note, source)
    settings: dict[str, Any] = {}
    if info is not None:  # R5: what the pairs are re-derived with from this artifact
        settings = serving_settings(
            run, primary=info["primary"].name, cases=cases, case=case or "", metrics=metrics,
            tail=tail,
        )  # fmt: skip
        artifact["settings"] = settings
    if request.raw_path:
        Path(request.raw_path).write_text(json.dumps(artifact, indent=1, default=str))
    result = serving_result(run, report, set_hash, interference, env, monitor_note, source)
    if not recording:
        result["warnings"] = warnings
        warn(warnings)
        if request.evidence_id is None:
            return MeasuredServing(answer=result)
        body = evidence_request(
            report,
            evidence_id=request.evidence_id,
            target_id=request.evidence_target,
            applicability=request.applicability,
            description=request.description,
            interference_windows=interference,
            monitor_note=monitor_note or source,
        )
        if request.dry_run:
            result["request"] = body
            return MeasuredServing(answer=result, request=body)
        event = append_measured(
            ledger, "evidence.add", body, "serving.json", artifact, actor=actor,
            idempotency_key=request.idempotency_key,
        )  # fmt: skip
        result.update(evidence_id=request.evidence_id, event_id=event.id, kind=event.kind)
        return MeasuredServing(answer=result, event_id=event.id, kind=event.kind)
    assert info is not None and stage is not None and request.experiment_id is not None
    body, left_out = serving_request(
        run,
        report,
        info,
        cases=cases,
        case=case or "",
        metrics=metrics,
        tail=tail,
        samples_id=sid,
        experiment_id=request.experiment_id,
        stage=stage,
        environment_id=env["environment_id"],
        units=units,
    )
    body["provenance"] = measured_provenance(SERVING_PROTOCOL, settings)
    result.update(samples_id=sid, pairs_recorded=len(body["pairs"]), pairs_left_out=left_out)
    refuse_voided_pairs(left_out, stage)
    if not body["pairs"]:
        raise MeasurementError(
            f"no window pair can be recorded: {left_out}",
            hint="every pair had a drifting window or no values: measure again on a steadier "
            "server (see the report's windows with --raw FILE)",
        )
    warnings += foreign_activity_warnings(body["pairs"], stage)
    result["warnings"] = warnings
    warn(warnings)
    if request.dry_run:
        result["request"] = body
        return MeasuredServing(answer=result, samples=True, left_out=left_out, request=body)
    event = append_measured(
        ledger, "samples.record", body, SAMPLES_ARTIFACT, artifact, actor=actor,
        idempotency_key=request.idempotency_key,
    )  # fmt: skip
    result.update(event_id=event.id, kind=event.kind)
    return MeasuredServing(
        answer=result, samples=True, left_out=left_out, event_id=event.id, kind=event.kind
    )


__all__ = ["MeasureServing", "MeasuredServing", "measure_serving"]
