"""A triage as evidence (R6): the answer, the ``evidence.add`` request built from it, and its
re-derivation from the attached inputs.

A recorded triage attaches its inputs (the trace as ``report``, the graph-off trace as
``mapping``, the known-path file as ``known-paths.toml``) and its answer (``triage.json``); the
audit runs the triage again on the attached inputs with the recorded options and requires the
same answer and the same facts (:func:`recheck`). The tool is ``perfledger-triage`` at
:data:`TRIAGE_VERSION`; an event of another version cannot be vouched for and is a finding.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3

from perfledger.errors import BadRequest, EvidenceError
from perfledger.kernels.triage.launches import read_launches
from perfledger.kernels.triage.paths import load_known_paths
from perfledger.kernels.triage.tables import NEW, build_triage

TRIAGE_TOOL = "perfledger-triage"
#: Version of the triage's derivation (tables, facts); recorded as the tool version's prefix.
TRIAGE_VERSION = "1"
#: Artifact names of a recorded triage.
REPORT, MAPPING, PATHS, ANSWER = "report", "mapping", "known-paths.toml", "triage.json"
#: The most hotspots one recorded triage holds (the evidence boundary's kernel limit).
MAX_RECORDED_HOTSPOTS = 1000
_MEDIA = {"torch": "application/json", "nsys": "application/vnd.sqlite3"}


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/triage.md describes the options and the inputs a triage records (`perfledger triage --help`)"


def run_triage(
    report: str | Path,
    *,
    known_paths: str | Path | None = None,
    mapping: str | Path | None = None,
    top: int = 20,
    denominator: str = "busy",
) -> tuple[dict[str, Any], dict[str, tuple[bytes, str]]]:
    """Triage ``report`` (a PyTorch profiler trace or an nsys SQLite export).

    Args:
        report: the trace.
        known_paths: the user's known-path TOML file, if any.
        mapping: a graph-off trace of the same workload, to attribute CUDA-graph kernels.
        top: hotspots covered by the known-path and action tables.
        denominator: ``busy`` or ``span``, the action table's ``f``.
    Returns: ``(answer, inputs)``: the JSON-ready answer of
        :func:`~perfledger.kernels.triage.tables.build_triage` with ``options`` (file names,
        ``top``, ``denominator``), and the inputs as artifacts (name -> (bytes, media type)).
    Raises: EvidenceError for a trace that is not one (R6); BadRequest for a bad known-path
        file, option or mapping trace.
    """
    trace = read_launches(report)
    trace.path = Path(report).name
    inputs = {REPORT: (_read(report), _MEDIA[trace.kind])}
    paths = []
    if known_paths is not None:
        paths, data = load_known_paths(known_paths)
        inputs[PATHS] = (data, "application/toml")
    off = None
    if mapping is not None:
        off = read_launches(mapping)
        off.path = Path(mapping).name
        inputs[MAPPING] = (_read(mapping), _MEDIA[off.kind])
    answer = build_triage(trace, paths, mapping=off, top=top, denominator=denominator)
    answer["options"] = {
        "top": top, "denominator": denominator, "report": trace.path,
        "mapping": off.path if off is not None else None,
        "known_paths": Path(known_paths).name if known_paths is not None else None,
    }  # fmt: skip
    return answer, inputs


def _read(path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise EvidenceError(f"cannot read {str(path)!r}: {exc.strerror}", hint=_HINT) from None


def encode_answer(answer: dict[str, Any]) -> bytes:
    """The answer as the bytes attached as ``triage.json`` (sorted keys, indented)."""
    return (json.dumps(answer, sort_keys=True, indent=2) + "\n").encode()


def answer_facts(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The facts a recorded triage states: the denominators and counts, then per hotspot
    ``kN.f`` (the action table's coverage, its note the action), its two shares, total time
    and instances. Units: ``ns``, ``ratio``, ``count``."""
    den = answer["denominators"]
    graph = answer["graph"]
    known = sum(1 for row in answer["actions"] if row["known"])
    facts = [
        {"name": "gpu_busy", "value": float(den["gpu_busy_ns"]), "unit": "ns",
         "note": "union of kernel intervals, summed over devices"},
        {"name": "trace_span", "value": float(den["trace_span_ns"]), "unit": "ns",
         "note": den["trace_span_covers"]},
        {"name": "launches", "value": float(answer["source"]["launches"]), "unit": "count",
         "note": ""},
        {"name": "kernels", "value": float(answer["source"]["kernels"]), "unit": "count",
         "note": ""},
        {"name": "graph_kernels", "value": float(graph["graph_kernels"]), "unit": "count",
         "note": ""},
        {"name": "graph_kernels_attributed", "value": float(graph["attributed"]),
         "unit": "count", "note": graph["mapping"] or "no mapping trace"},
        {"name": "hotspots_on_known_paths", "value": float(known), "unit": "count", "note": ""},
        {"name": "hotspots_new", "value": float(len(answer["actions"]) - known),
         "unit": "count", "note": ""},
    ]  # fmt: skip
    kernels = {row["key"]: row for row in answer["kernels"]}
    for action in answer["actions"]:
        key, row = action["key"], kernels[action["key"]]
        facts += [
            {"name": f"{key}.f", "value": action["f"], "unit": "ratio",
             "note": f"share of {den['f_uses']}; {action['action']}"[:20_000]},
            {"name": f"{key}.share_of_gpu_busy", "value": action["f_gpu_busy"],
             "unit": "ratio", "note": ""},
            {"name": f"{key}.share_of_trace_span", "value": action["f_trace_span"],
             "unit": "ratio", "note": ""},
            {"name": f"{key}.total", "value": float(row["total_ns"]), "unit": "ns", "note": ""},
            {"name": f"{key}.instances", "value": float(row["instances"]), "unit": "count",
             "note": ""},
        ]  # fmt: skip
    return facts


def evidence_body(
    answer: dict[str, Any],
    report_bytes: bytes,
    *,
    evidence_id: str,
    of_target: bool,
    target_id: str | None,
) -> dict[str, Any]:
    """The ``evidence.add`` request of a triage (R6, R7).

    Args:
        answer: the triage answer.
        report_bytes: the triaged trace (attached as ``report``; its blake3 is ``report_hash``).
        evidence_id: the evidence id.
        of_target: the user states that the trace is of the Target's workload: applicability
            ``same_boundary``; otherwise ``diagnostic`` (it can then bound nothing).
        target_id: the Target, required with ``of_target``.
    Returns: the request body (builtins).
    Raises: BadRequest for ``of_target`` without a Target, or more than
        :data:`MAX_RECORDED_HOTSPOTS` hotspots.
    """

    if of_target and target_id is None:
        raise BadRequest(
            "--of-target needs --target T: the Target whose workload was traced", hint=_HINT
        )
    if len(answer["actions"]) > MAX_RECORDED_HOTSPOTS:
        raise BadRequest(
            f"at most {MAX_RECORDED_HOTSPOTS} hotspots can be recorded: lower --top", hint=_HINT
        )
    source = answer["source"]
    kernels = {row["key"]: row for row in answer["kernels"]}
    top = answer["actions"][0] if answer["actions"] else None
    known = sum(1 for row in answer["actions"] if row["known"])
    summary = (
        f"top hotspot {top['name'][:100]} f={top['f']:.3f} ({answer['denominators']['f_uses']})"
        if top is not None and top["f"] is not None
        else "no hotspot"
    )
    body: dict[str, Any] = {
        "evidence_id": evidence_id,
        "layer": "workload",
        "tool": {"name": TRIAGE_TOOL,
                 "version": f"{TRIAGE_VERSION} ({source['tool']} {source['tool_version']})"[:200]},
        "facts": answer_facts(answer),
        "limitations": [item[:200] for item in answer["limitations"]][:1000],
        "description": f"hotspot triage of {source['path']}: {source['kernels']} kernel(s), "
        f"{summary}; {known} of {len(answer['actions'])} hotspot(s) on a known path, the others "
        f"{NEW!r}",
        "report_hash": "blake3:" + blake3.blake3(report_bytes).hexdigest(),
        "applicability": "same_boundary" if of_target else "diagnostic",
        "boundary": {
            "kernels": [
                {"key": a["key"], "name": a["name"], "launches": kernels[a["key"]]["instances"],
                 "grids": kernels[a["key"]]["grids"][:1000],
                 "blocks": kernels[a["key"]]["blocks"][:1000]}
                for a in answer["actions"]
            ],
            "graph": answer["graph"]["graph_kernels"] > 0,
        },
    }  # fmt: skip
    if target_id is not None:
        body["target_id"] = target_id
    return body


def recheck(
    facts: list[tuple[str, float | None, str, str]],
    report_hash: str | None,
    names: set[str],
    read: Callable[[str], bytes],
) -> str | None:
    """Re-derive a recorded triage from its attached inputs (R6).

    Args:
        facts: the recorded facts ``(name, value, unit, note)``.
        report_hash: the recorded ``report_hash`` (the blake3 of the attached trace).
        names: the event's artifact names.
        read: artifact name -> bytes (verified against its blake3 by the caller).
    Returns: None when the attached inputs yield the recorded answer and facts, else what
        differs (a finding).
    """

    if ANSWER not in names or REPORT not in names:
        return f"it attaches no {ANSWER} or no {REPORT}: the triage cannot be re-derived"
    if report_hash != "blake3:" + blake3.blake3(read(REPORT)).hexdigest():
        return f"its report_hash is not the attached {REPORT}'s"
    recorded_bytes = read(ANSWER)
    try:
        recorded = json.loads(recorded_bytes)
        options = recorded["options"]
        with tempfile.TemporaryDirectory(prefix="perfledger-triage-") as tmp:
            root = Path(tmp)

            def put(artifact: str, name: str | None) -> Path | None:
                if name is None:
                    return None
                if artifact not in names or Path(name).name != name:
                    raise BadRequest(f"the recorded input {name!r} is not attached", hint=_HINT)
                target = root / artifact.replace(".", "_") / name
                target.parent.mkdir()
                target.write_bytes(read(artifact))
                return target

            report = put(REPORT, options["report"])
            assert report is not None
            answer, _inputs = run_triage(
                report, known_paths=put(PATHS, options["known_paths"]),
                mapping=put(MAPPING, options["mapping"]), top=int(options["top"]),
                denominator=str(options["denominator"]),
            )  # fmt: skip
    except (BadRequest, KeyError, TypeError, ValueError) as exc:
        message = exc.message if isinstance(exc, BadRequest) else repr(exc)
        return f"its attached inputs no longer triage: {message}"
    if answer != recorded:
        return f"its attached {ANSWER} is not what its attached inputs yield"
    derived = [(f["name"], f["value"], f["unit"], f["note"]) for f in answer_facts(answer)]
    if derived != list(facts):
        return "its recorded facts differ from those its attached inputs yield"
    return None
