"""R5: samples that claim to be measured by perfledger must be what their attached raw table
(``samples.json``, written by ``perfledger measure workload|kernel|serving``) holds.

The raw table is re-read and the recorded pairs are re-derived from it, the way
:mod:`perfledger.commands.cli.measure` built them:

- ``kind: workload`` (the driver's per-call table, :meth:`perfledger.kernels.workload.driver.DriverRun.table`):
  every recorded pair is one paired (non warm-up) round of the table, in run order; each side's
  case, correctness, ``wall_s`` and values equal its call's row; a round whose calls both
  produced a result may be left out only when it lacks a metric that every recorded pair has
  (the primary), so no slow round can be dropped.
- ``kind: kernel`` (per case, the harness's per-pair rows): the recorded pairs are every batch
  of every case, in order; each side's values are the batch's per-pair times in the unit of the
  samples.
- ``kind: worker`` (the worker or command protocol's per-call table,
  :mod:`perfledger.kernels.workload.worker`): as ``workload``, and every call's metrics are the
  observed ones only (``wall_time``, ``cpu_time``), each its row's ``wall_s`` or ``cpu_s`` in the
  samples' unit, and every paired call's output was judged.
- ``kind: serving`` (``measure serving``'s artifact, every request, protocol ``serving/v1``):
  the recorded pairs are re-derived from the requests with the provenance's settings, which
  equal the artifact's (:func:`perfledger.commands.workflow.serving_record.serving_mismatch`):
  each pair's case, both sides' call ids, correctness and values (per-window rates from the
  requests' own times), and its monitor account. Serving samples recorded before they carried
  provenance are outside samples, checked for nothing here.

Where the driver judged the calls' outputs (``{output}``, :mod:`perfledger.kernels.workload.outputs`),
each side's ``output`` check equals its row's, and the row's ``correct`` is its own check
(``self_correct``) and the output check together; given the event's artifacts, the comparison
of every pair whose two outputs were kept (small ones) is made again by the table's accuracy
rule (``settings.outputs.accuracy``) and must agree with the recorded result.

From :data:`BOUND_SCHEMA` of ``SamplesRecorded`` on, the raw table also carries a ``binding``
(:func:`binding_of`: samples id, Target, experiment, stage, hashes and both snapshots' digests)
that must equal the samples', so a table cannot be re-used for another stage or experiment.
Events of an older schema are checked on their values only (their tables carry no binding).

From :data:`CHECKS_SCHEMA` on (``checks=True``), what the table's settings declare holds too:
the table's ``kind`` is the one its provenance's protocol writes (:data:`PROTOCOL_KINDS`; a
table of no known kind re-derives nothing, so it is refused); the provenance's ``settings`` are
the table's (workload: equal; kernel: its cases and harness config); every workload call carries
its row's ``wall_s`` (a side without it would skip the wall-clock check, R12); each row's
``wall_s`` is its ``end_s - start_s``; and each pair's monitor verdict (observed, foreign
activity, flags) is the one the table's monitor window of its two calls holds (R17).

What this proves, and what it does not: a table written by ``perfledger measure`` and samples
edited afterwards disagree, and an auditor finds it. A library caller controls its own process:
it can write a table and samples that agree with each other and were never measured. Provenance
says which process claimed to measure; it is not a signature (docs/verdicts.md).

Imports: the standard library and events (a commands helper; no ledger access).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import blake3

from perfledger.commands.workflow.serving_record import serving_mismatch
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.events.workflow import OBSERVED_METRICS, R5_BOUND_RAW_TABLE, R5_DECLARED_CHECKS

#: Units of a time metric per second (the kernel harness's rows are in seconds: value_s * this).
_TIME_UNITS = UNITS_PER_SECOND
#: The ``SamplesRecorded`` schema version from which the raw table must carry a binding.
BOUND_SCHEMA = R5_BOUND_RAW_TABLE
#: The format of the binding written into the raw table.
BINDING_FORMAT = 1
#: The ``SamplesRecorded`` schema version from which the settings' declared checks hold.
CHECKS_SCHEMA = R5_DECLARED_CHECKS
#: The raw table's kind that each measuring protocol writes.
PROTOCOL_KINDS = {
    "workload_abba": "workload",
    "kernel_harness_abba": "kernel",
    "worker/v1": "worker",
    "command/v1": "worker",
    "serving/v1": "serving",
}
#: Tolerance on a row's ``wall_s`` against its ``end_s - start_s`` (seconds; float rounding).
_WALL_TOLERANCE_S = 1e-6


def binding_of(samples: dict[str, Any]) -> dict[str, Any]:
    """What binds a raw table to the samples it was measured for (R5): from ``samples`` (a
    ``samples.record`` request body or a SamplesRecorded payload, as JSON builtins) the samples
    id, Target, experiment, stage, candidate and test-set hashes, environment id and, where the
    samples carry a code identity, both snapshots' tree digests."""
    identity = samples.get("identity") or {}
    return {
        "format": BINDING_FORMAT,
        "samples_id": samples.get("samples_id"),
        "target_id": samples.get("target_id"),
        "experiment_id": samples.get("experiment_id"),
        "stage": samples.get("stage"),
        "candidate_hash": samples.get("candidate_hash"),
        "test_set_hash": samples.get("test_set_hash"),
        "environment_id": samples.get("environment_id"),
        "snapshots": {
            role: (identity.get(role) or {}).get("digest") for role in ("reference", "candidate")
        }
        if identity
        else None,
    }


def raw_table_mismatch(
    samples: dict[str, Any],
    raw: bytes,
    *,
    bound: bool,
    read_artifact: Callable[[str], bytes | None] | None = None,
    checks: bool = False,
) -> str | None:
    """R5: how ``samples`` (JSON builtins of a request body or payload) differ from their raw
    table ``raw`` (the artifact's bytes), or None when the pairs are what the table holds.

    Args:
        samples: the samples, as builtins (``pairs``, ``units``, ids).
        raw: the attached raw table (JSON).
        bound: True for samples recorded under :data:`BOUND_SCHEMA` or later, whose table must
            carry a binding equal to :func:`binding_of` the samples.
        read_artifact: artifact name -> its bytes (None when not attached), to re-make the
            comparison of kept outputs; None skips it.
        checks: True for samples recorded under :data:`CHECKS_SCHEMA` or later: what the
            table's settings declare holds too (module docstring).
    Returns: the first difference found, as a sentence; None when none.
    """
    try:
        table = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"its raw table is not JSON ({exc})"
    if not isinstance(table, dict):
        return "its raw table is not a JSON object"
    if bound or "binding" in table:
        found = table.get("binding")
        expected = binding_of(samples)
        if not isinstance(found, dict):
            return "its raw table carries no binding to these samples (samples id, stage, ...)"
        wrong = sorted(k for k in expected if found.get(k) != expected[k])
        if wrong:
            shown = ", ".join(
                f"{k}: table {found.get(k)!r}, samples {expected[k]!r}" for k in wrong
            )
            return f"its raw table was measured for other samples ({shown})"
    kind = table.get("kind")
    try:
        if checks:
            found = _declared_mismatch(samples, table)
            if found is not None:
                return found
        if kind == "workload":
            found = _workload_mismatch(samples, table.get("table"), strict_wall=checks)
            if found is None and read_artifact is not None:
                return _outputs_mismatch(table, read_artifact)
            return found
        if kind == "worker":
            found = _workload_mismatch(samples, table.get("table"), strict_wall=True)
            found = found or _observed_mismatch(samples, table.get("table"))
            if found is None and read_artifact is not None:
                return _outputs_mismatch(table, read_artifact)
            return found
        if kind == "kernel":
            return _kernel_mismatch(samples, table.get("cases"))
        if kind == "serving" and checks:  # every request kept: the pairs are re-derived
            # (before CHECKS_SCHEMA no measured serving samples existed: audited as before)
            return serving_mismatch(samples, table)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        return f"its raw table ({kind}) is malformed: {type(exc).__name__}: {exc}"
    return None


def _declared_mismatch(samples: dict[str, Any], table: dict[str, Any]) -> str | None:
    """What the table's settings declare, against the samples (module docstring,
    ``checks``); None when it all holds."""
    provenance = samples.get("provenance") or {}
    protocol = provenance.get("protocol")
    kind = PROTOCOL_KINDS.get(str(protocol))
    if kind is None:
        return f"its protocol {protocol!r} is not one perfledger measures by ({sorted(PROTOCOL_KINDS)})"
    if table.get("kind") != kind:
        return f"its raw table is of kind {table.get('kind')!r}, the {protocol} protocol writes {kind!r}"
    settings = provenance.get("settings") or {}
    if kind in ("workload", "worker"):
        # the provenance holds the settings as canonical JSON (keys sorted, no tuples)
        if json.dumps(settings, sort_keys=True) != json.dumps(
            table.get("settings"), sort_keys=True, default=str
        ):
            return "its provenance's settings differ from its raw table's"
        return _monitor_mismatch(samples, table)
    if kind == "serving":  # its settings and monitor are checked with its pairs
        return None
    cases = table.get("cases") or []
    if settings.get("cases") != sorted(str(c.get("case")) for c in cases):
        return "its provenance's cases differ from its raw table's"
    # `measure kernel` records the first case's harness config (cases may have their own)
    first = ((cases[0].get("settings") or {}).get("harness")) if cases else None
    if json.dumps(first, sort_keys=True) != json.dumps(settings.get("config"), sort_keys=True):
        return "its provenance's harness config differs from its raw table's"
    return None


def _monitor_mismatch(samples: dict[str, Any], table: dict[str, Any]) -> str | None:
    """R17: each workload pair's monitor verdict is its window's in the table (none without)."""
    windows = {
        tuple(w.get("call_ids") or ()): w
        for w in ((table.get("monitor") or {}).get("windows") or [])
    }
    for i, pair in enumerate(samples.get("pairs") or []):
        window = windows.get((pair["ref"]["call_id"], pair["cand"]["call_id"]))
        monitor = pair.get("monitor")
        if window is None and monitor is None:
            continue
        if window is None or monitor is None:
            return f"pair {i}: a monitor verdict {'the table does not hold' if window is None else 'left out'}"
        want = (
            window.get("observed"),
            window.get("foreign_activity"),
            list(window.get("reasons") or ()),
        )
        got = (
            monitor.get("observed"),
            monitor.get("foreign_activity"),
            list(monitor.get("flags") or ()),
        )
        if got != want:
            return f"pair {i}: its monitor verdict differs from its window's in the raw table"
    return None


def _side_mismatch(
    where: str, side: dict[str, Any], row: dict[str, Any], metrics: Any, strict_wall: bool = False
) -> str | None:
    """Compare one recorded side with its call's row of the driver table."""
    if side.get("correct") != row.get("correct"):
        return f"{where}: correct {side.get('correct')!r}, the table's call {row.get('correct')!r}"
    values = side.get("values") or {}
    row_metrics = row.get("metrics") or {}
    for name, got in values.items():
        if [float(v) for v in got] != [float(v) for v in row_metrics.get(name, [])]:
            return f"{where}: values of {name!r} differ from the table's call"
    missing = sorted(n for n in row_metrics if n in metrics and n not in values)
    if missing:
        return f"{where}: the table's call has {missing}, which the pair leaves out"
    if (strict_wall or side.get("wall_s") is not None) and side.get("wall_s") != row.get("wall_s"):
        # strict: a side without the driver's wall time would skip the wall-clock check (R12)
        return f"{where}: wall_s {side.get('wall_s')!r}, the table's call {row.get('wall_s')!r}"
    if strict_wall and not wall_consistent(row):
        return f"{where}: the table's call has wall_s unlike its end_s - start_s"
    output = row.get("output")
    if output is not None or side.get("output") is not None:
        if output is None:
            return f"{where}: an output check the table's call does not have"
        if row.get("correct") != (row.get("self_correct") is True and output.get("ok") is True):
            return f"{where}: the table's call is correct only when its own check and its output check hold"
        want = {key: output.get(key) for key in _OUTPUT_KEYS}
        want["self_correct"] = row.get("self_correct")
        if side.get("output") != want:
            return f"{where}: its output check differs from the table's call"
    return None


#: The keys of a recorded output check (:class:`perfledger.events.workflow.OutputCheck`).
_OUTPUT_KEYS = ("method", "compare", "blake3", "size", "ok", "reason")


def _outputs_mismatch(table: dict[str, Any], read: Callable[[str], bytes | None]) -> str | None:
    """Re-make the comparison of every paired round whose two outputs were kept."""
    rule = ((table.get("settings") or {}).get("outputs") or {}).get("accuracy")
    rows: dict[int, dict[str, dict[str, Any]]] = {}
    for row in table.get("table") or []:
        if not row.get("warmup") and row.get("pair") is not None and row.get("output"):
            rows.setdefault(int(row["pair"]), {})[str(row["subject"])] = row
    if not rows:
        return None
    if not isinstance(rule, dict):
        return "its raw table judged outputs but names no accuracy rule"

    from perfledger.derive.outputs import METHOD_V1, rejudge  # noqa: PLC0415 (off `perfledger audit`'s start-up path)

    for n, pair in sorted(rows.items()):
        if set(pair) != {"ref", "cand"}:
            continue
        kept = [pair[label]["output"] for label in ("ref", "cand")]
        if not all(k.get("stored") for k in kept):
            continue
        data = []
        for k in kept:
            blob = read(k["stored"])
            if blob is None:
                return f"round {n}: its kept output {k['stored']!r} is not attached"
            if blake3.blake3(blob).hexdigest() != k.get("blake3"):
                return f"round {n}: its kept output {k['stored']!r} is not the output recorded"
            data.append(blob)
        # re-made by the rule the table was judged under (outputs_v1 tables keep theirs)
        method = ((table.get("settings") or {}).get("outputs") or {}).get("method", METHOD_V1)
        try:
            ok = rejudge(
                data[0], data[1], rule["compare"], rule.get("rtol", 0.0), rule.get("atol", 0.0),
                method,
            )  # fmt: skip
        except ValueError as exc:
            return f"its raw table's outputs cannot be compared again: {exc}"
        if ok != bool(kept[1].get("ok")):
            return (
                f"round {n}: the candidate's output, compared again with the reference's by "
                f"{rule['compare']}, {'matches' if ok else 'does not match'}, but the table "
                f"records ok={kept[1].get('ok')}"
            )
    return None


def wall_consistent(row: dict[str, Any]) -> bool:
    """A driver row's ``wall_s`` is its ``end_s - start_s`` (seconds), all three numbers."""
    try:
        wall, start, end = (float(row[k]) for k in ("wall_s", "start_s", "end_s"))
    except (KeyError, TypeError, ValueError):
        return False
    return abs(wall - (end - start)) <= _WALL_TOLERANCE_S


def _workload_mismatch(samples: dict[str, Any], rows: Any, strict_wall: bool = False) -> str | None:
    """Re-derive the pairs of a workload driver table (see the module docstring)."""
    if not isinstance(rows, list):
        return "its raw table (workload) has no per-call table"
    rounds: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row.get("warmup") or row.get("pair") is None:
            continue
        rounds.setdefault(int(row["pair"]), {})[str(row["subject"])] = row
    pairs = samples.get("pairs") or []
    metrics = set(samples.get("units") or {})
    common = set.intersection(
        *(set(p["ref"].get("values") or {}) & set(p["cand"].get("values") or {}) for p in pairs)
    ) if pairs else set()  # fmt: skip
    by_call = {
        (label, r[label]["call_id"]): n for n, r in rounds.items() for label in r
    }  # call id -> round
    used: list[int] = []
    for i, pair in enumerate(pairs):
        n = by_call.get(("ref", pair["ref"]["call_id"]))
        if n is None or by_call.get(("cand", pair["cand"]["call_id"])) != n:
            return (
                f"pair {i}: calls {pair['ref']['call_id']!r}/{pair['cand']['call_id']!r} are not "
                "one paired round of its raw table"
            )
        if used and n <= used[-1]:
            return f"pair {i}: out of the table's run order (round {n} after round {used[-1]})"
        used.append(n)
        for label in ("ref", "cand"):
            row = rounds[n][label]
            if pair.get("case") != row.get("case"):
                return f"pair {i}: case {pair.get('case')!r}, the table's {row.get('case')!r}"
            if not row.get("ok"):
                return f"pair {i}: the table's {label} call failed ({row.get('reason')})"
            found = _side_mismatch(f"pair {i} {label}", pair[label], row, metrics, strict_wall)
            if found:
                return found
    for n in sorted(set(rounds) - set(used)):
        r = rounds[n]
        if {"ref", "cand"} <= set(r) and r["ref"].get("ok") and r["cand"].get("ok"):
            has = set(r["ref"].get("metrics") or {}) & set(r["cand"].get("metrics") or {})
            if common <= has:
                return (
                    f"its raw table's round {n} ({r['ref'].get('case')!r}) produced results in "
                    "both calls but is not among the pairs"
                )
    return None


def _observed_mismatch(samples: dict[str, Any], rows: Any) -> str | None:
    """A worker table's rows (:mod:`perfledger.kernels.workload.worker`): every call's metrics
    are the observed ones only, each derived from the row's own ``wall_s`` or ``cpu_s`` in the
    samples' unit; every call's output was judged (R5)."""
    return observed_rows_mismatch(samples.get("units") or {}, rows)


def observed_rows_mismatch(units: dict[str, str], rows: Any) -> str | None:
    """Rows of the worker protocol (R5, R4's A/A too): every call's metrics are the observed
    ones only, each derived from the row's own ``wall_s`` or ``cpu_s`` in ``units`` (metric ->
    unit); every paired call's output was judged. Returns the first mismatch, or None."""
    for row in rows:
        metrics = row.get("metrics") or {}
        extra = sorted(set(metrics) - set(OBSERVED_METRICS))
        if extra:
            return f"call {row.get('call_id')!r}: metrics {extra} that perfledger did not observe"
        for name, source in OBSERVED_METRICS.items():
            if name not in units:
                continue
            scale = _TIME_UNITS.get(units[name])
            figure = row.get(source)
            if scale is None or not isinstance(figure, int | float) or isinstance(figure, bool):
                return f"call {row.get('call_id')!r}: no {source} to derive {name!r} from"
            want = [float(figure) * scale]
            if [float(v) for v in metrics.get(name, [])] != want:
                return (
                    f"call {row.get('call_id')!r}: {name} {metrics.get(name)!r} is not its "
                    f"{source} {figure!r} in {units[name]}"
                )
        if not row.get("warmup") and row.get("output") is None:
            return f"call {row.get('call_id')!r}: its output was not judged"
    return None


def _kernel_mismatch(samples: dict[str, Any], cases: Any) -> str | None:
    """Re-derive the pairs of a kernel harness table (see the module docstring)."""
    if not isinstance(cases, list):
        return "its raw table (kernel) has no per-case table"
    units = samples.get("units") or {}
    if len(units) != 1:
        return f"kernel samples carry one time metric, not {sorted(units)}"
    ((metric, unit),) = units.items()
    scale = _TIME_UNITS.get(unit)
    if scale is None:
        return f"kernel samples are times; unit {unit!r} is not one"
    expected: list[tuple[str, str, list[float], list[float]]] = []
    for entry in cases:
        case, rows = entry["case"], entry["rows"]
        batch = int(entry["settings"]["harness"]["batch"])
        for b, start in enumerate(range(0, len(rows), batch)):
            chunk = rows[start : start + batch]
            expected.append(
                (
                    case,
                    f"{case}-b{b}",
                    [float(r["ref_s"]) * scale for r in chunk],
                    [float(r["cand_s"]) * scale for r in chunk],
                )
            )
    pairs = samples.get("pairs") or []
    if len(pairs) != len(expected):
        return f"{len(pairs)} pairs, but its raw table holds {len(expected)} batches"
    for i, (pair, (case, call_id, ref, cand)) in enumerate(zip(pairs, expected, strict=True)):
        if pair.get("case") != case or pair["ref"].get("call_id") != call_id:
            return f"pair {i}: {pair.get('case')!r}/{pair['ref'].get('call_id')!r}, the table's {case!r}/{call_id!r}"
        for label, want in (("ref", ref), ("cand", cand)):
            values = pair[label].get("values") or {}
            if set(values) != {metric} or [float(v) for v in values[metric]] != want:
                return f"pair {i} {label}: values differ from the table's batch {call_id!r}"
    return None


__all__ = [
    "BINDING_FORMAT",
    "BOUND_SCHEMA",
    "CHECKS_SCHEMA",
    "PROTOCOL_KINDS",
    "binding_of",
    "raw_table_mismatch",
]
