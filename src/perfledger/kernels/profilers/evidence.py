"""From a parsed report to an ``evidence.add`` request body (builtins); the entry point that
reads a report of a given kind is :mod:`perfledger.kernels.profilers.parse` (it imports every
parser, which ``perfledger audit`` loads only for a ledger holding parsed evidence).

The body matches :class:`perfledger.commands.workflow.requests.EvidenceAdd`: facts in base units, named
``k<i>.<metric>`` where ``k<i>`` is the kernel's key in ``boundary.kernels``; the layer; the tool
and its version; the capture (command and exit status, or source file) and the raw report's
blake3 (the raw report itself is attached as the event's artifact ``report`` by the caller). This
module builds data only; it never appends (SPEC.md section 1: kernels produce payloads).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import blake3

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import ProfileReport

#: Report kinds ``evidence add --kind`` accepts.
KINDS = ("ncu", "nsys", "nsys-stats", "torch", "ptxas", "sass")
#: The version of the parsers and of the fact derivation (:func:`report_facts`,
#: :func:`boundary`), recorded in each parsed report's ``capture.parser``: ``perfledger audit``
#: re-derives the facts of the events recorded under this version (or before versions were
#: recorded) from their attached raw report. Bump it when a parser's output changes.
#: Version 2: every ncu rule row, ncu text metrics as text facts, the compute capability, nsys
#: memory copies / sets and GPUs (:attr:`ProfileReport.added_facts`, ``text_facts``,
#: ``added_limitations``); 2021-era PyTorch traces read, non-NVIDIA traces refused.
PARSER_VERSION = "2"
#: Every parser version whose fact derivation :func:`report_facts` still reproduces.
PARSER_VERSIONS = ("1", "2")
#: The unit of a text-valued fact (its value is null, its text is the note).
TEXT_UNIT = "text"
#: A recognised layout (``ProfileReport.layout``, recorded as ``capture.layout``) -> the kind
#: that parses it; ncu's layouts all begin with ``ncu-``.
_LAYOUT_KINDS = {
    "nsys-sqlite": "nsys",
    "nsys-stats-kern-sum": "nsys-stats",
    "torch-chrome-trace": "torch",
    "torch-chrome-trace-legacy": "torch",
    "ptxas-v": "ptxas",
    "cuobjdump-sass": "sass",
}
#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass a readable report of a kind perfledger reads (docs/profilers.md lists them and how to produce each)"


def kind_of_layout(layout: str) -> str | None:
    """The report kind (one of :data:`KINDS`) whose parser recognises ``layout``, or None."""
    if layout.startswith("ncu-"):
        return "ncu"
    return _LAYOUT_KINDS.get(layout)


def kinds_of_tool(tool: str) -> list[str]:
    """The report kinds whose parser names ``tool`` (``ProfileReport.tool``) as the tool."""
    return {
        "ncu": ["ncu"],
        "nsys": ["nsys", "nsys-stats"],
        "torch.profiler": ["torch"],
        "ptxas": ["ptxas"],
        "cuobjdump": ["sass"],
    }.get(tool, [])


#: Most facts one event holds (the request model's bound).
MAX_FACTS = 10_000
_MAX_NAME = 200
#: The unit of a dimensionless fact (counts, ratios without a unit): the SI "1".
DIMENSIONLESS = "1"
_MAX_SHAPES = 100


def file_hash(path: str | Path) -> str:
    """Return ``blake3:<hex>`` of a file, read in 1 MiB chunks.

    Raises: EvidenceError when the file cannot be read."""
    hasher = blake3.blake3()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
    except OSError as exc:
        raise EvidenceError(f"cannot read {str(path)!r}: {exc.strerror}", hint=_HINT) from None
    return "blake3:" + hasher.hexdigest()


def _num(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def report_facts(report: ProfileReport, *, parser: str = PARSER_VERSION) -> list[dict[str, Any]]:
    """The report's facts as ``{"name", "value", "unit", "note"}`` dicts, in base units
    (counts and other dimensionless values have unit :data:`DIMENSIONLESS` ``1``; fractions in
    [0, 1] ``ratio``; percentages ``%``; text-valued facts :data:`TEXT_UNIT`, value null).

    Per kernel ``k<i>``: each metric's mean over launches (with ``.min``/``.max`` when they
    differ), duration statistics (``k<i>.duration.median_ns`` ...) for timing tools, and ncu rule
    results; then the report's own facts. ``parser`` selects the derivation of that parser
    version (R6: an event is re-derived by the rule it was recorded under): version 1 keeps one
    fact per rule (``k<i>.rule.<section>.<rule>``: the largest estimated speedup in %); version 2
    keeps every rule row (``k<i>.rule.<section>.<rule>.<n>``, n from 0 in report order, the
    note naming its type, speedup type and description) and adds the report's text facts and
    :attr:`ProfileReport.added_facts`.
    Raises: EvidenceError when a name is longer than 200 characters, there are more than
    :data:`MAX_FACTS` facts (the raw report stays attached in full), or ``parser`` is not one
    of :data:`PARSER_VERSIONS`.
    """
    if parser not in PARSER_VERSIONS:
        raise EvidenceError(f"unknown parser version {parser!r}", hint=_HINT)
    facts: list[dict[str, Any]] = []
    keys = {name: f"k{i}" for i, name in enumerate(report.kernels)}
    for name, kernel in report.kernels.items():
        key = keys[name]
        for metric, stat in kernel.metrics.items():
            if stat.count == 0:
                facts.append(_fact(f"{key}.{metric}", None, stat.unit, "no data"))
                continue
            note = f"mean of {stat.count} launches" if stat.count > 1 else ""
            facts.append(_fact(f"{key}.{metric}", stat.mean, stat.unit, note))
            if stat.count > 1 and stat.minimum != stat.maximum:
                facts.append(_fact(f"{key}.{metric}.min", stat.minimum, stat.unit, ""))
                facts.append(_fact(f"{key}.{metric}.max", stat.maximum, stat.unit, ""))
        if parser != "1":
            first = " (first launch)" if kernel.launches > 1 else ""
            for metric, text in kernel.texts.items():
                facts.append(_fact(f"{key}.{metric}", None, TEXT_UNIT, f"{text}{first}"))
        durations = (
            report.duration_summaries.get(name)
            if name in report.duration_summaries
            else (kernel.durations.summary() if kernel.durations.count else None)
        )
        if durations:
            for stat_name, value in durations.items():
                unit = "" if stat_name == "count" else "ns"
                facts.append(_fact(f"{key}.duration.{stat_name}", value, unit, ""))
    if parser == "1":
        best: dict[str, tuple[float | None, str]] = {}
        for kernel_name, section, rule, kind, speedup, *_ in report.rules:
            fact_name = f"{keys[kernel_name]}.rule.{section}.{rule}"
            old = best.get(fact_name)
            if old is None or (speedup is not None and (old[0] is None or speedup > old[0])):
                best[fact_name] = (speedup, kind)
        for fact_name, (speedup, kind) in best.items():
            facts.append(_fact(fact_name, speedup, "%", f"ncu rule {kind}: estimated speedup"))
    else:
        rows: dict[str, int] = {}
        for kernel_name, section, rule, kind, speedup, *detail in report.rules:
            stem = f"{keys[kernel_name]}.rule.{section}.{rule}"
            n = rows[stem] = rows.get(stem, -1) + 1
            speedup_type, description = detail if detail else ("", "")
            note = f"ncu rule {kind}: estimated speedup" + (
                f" ({speedup_type})" if speedup_type else ""
            )
            if description:
                note += f": {description}"
            facts.append(_fact(f"{stem}.{n}", speedup, "%", note[:2000]))
    for name, value, unit, note in report.facts:
        facts.append(_fact(name, value, unit, note))
    if parser != "1":
        for name, text, note in report.text_facts:
            facts.append(_fact(name, None, TEXT_UNIT, (text + (f" ({note})" if note else ""))))
        for name, value, unit, note in report.added_facts:
            facts.append(_fact(name, value, unit, note))
    if len(facts) > MAX_FACTS:
        raise EvidenceError(
            f"the report yields {len(facts)} facts, more than the {MAX_FACTS} one event holds",
            hint="profile fewer kernels (ncu -k/-c) or metrics (--section/--metrics)",
        )
    return facts


def report_limitations(report: ProfileReport, *, parser: str = PARSER_VERSION) -> list[str]:
    """The report's limitations (R16) as parser version ``parser`` recorded them, each cut to
    200 characters: version 1 lacks :attr:`ProfileReport.added_limitations`."""
    found = list(report.limitations)
    if parser != "1":
        found += report.added_limitations
    return [item[:200] for item in found]


def _fact(name: str, value: float | None, unit: str, note: str) -> dict[str, Any]:
    if len(name) > _MAX_NAME:
        raise EvidenceError(
            f"fact name longer than {_MAX_NAME} characters: {name[:80]}...", hint=_HINT
        )
    return {"name": name, "value": _num(value), "unit": unit or DIMENSIONLESS, "note": note}


def boundary(report: ProfileReport, *, shapes: str = "", graph: bool | None = None) -> dict:
    """The measured boundary (R6): each kernel's key, name, launches, grids, blocks, streams
    (at most 100 distinct shapes each, sorted), plus the caller's ``shapes`` and ``graph``."""
    kernels = []
    for i, (name, kernel) in enumerate(report.kernels.items()):
        kernels.append(
            {
                "key": f"k{i}",
                "name": name[:20_000],
                "launches": kernel.launches,
                "grids": sorted(kernel.grids)[:_MAX_SHAPES],
                "blocks": sorted(kernel.blocks)[:_MAX_SHAPES],
                "streams": sorted(kernel.streams)[:_MAX_SHAPES],
            }
        )
    return {"kernels": kernels, "shapes": shapes, "graph": graph}


def evidence_request(
    report: ProfileReport,
    *,
    evidence_id: str,
    report_hash: str,
    applicability: str = "diagnostic",
    layer: str | None = None,
    source_file: str = "",
    command: list[str] | None = None,
    exit_status: int | None = None,
    target_id: str | None = None,
    description: str = "",
    shapes: str = "",
    graph: bool | None = None,
) -> dict[str, Any]:
    """Build the ``evidence.add`` request body of a parsed report (R6, R16).

    Args:
        report: the parsed report.
        evidence_id: the caller's id for it.
        report_hash: ``blake3:<hex>`` of the raw report (attached as artifact ``report``).
        applicability: ``same_boundary``, ``conservative_upper_bound`` or ``diagnostic``.
        layer: ``kernel``/``workload``/``service``; default the report's own layer.
        source_file: the imported file's name (empty for a capture).
        command / exit_status: the capture command and its exit status (``evidence ncu``).
        target_id, description, shapes, graph: optional context.
    Returns: the request body (builtins).
    Raises: EvidenceError from :func:`report_facts`.
    """
    body: dict[str, Any] = {
        "evidence_id": evidence_id,
        "layer": layer or report.layer,
        "tool": {"name": report.tool, "version": report.tool_version},
        "facts": report_facts(report),
        "limitations": report_limitations(report),
        "description": description
        or f"{report.tool} {report.layout}: {len(report.kernels)} kernel(s)"
        + (f" from {Path(source_file).name}" if source_file else ""),
        "report_hash": report_hash,
        "applicability": applicability,
        "boundary": boundary(report, shapes=shapes, graph=graph),
        "capture": {
            "command": list(command or []),
            "exit_status": exit_status,
            "source_file": Path(source_file).name if source_file else "",
            "source_hash": report_hash,
            "layout": report.layout,
            "grouping": report.attributes.get("grouping", ""),
            "parser": PARSER_VERSION,
        },
    }
    if target_id is not None:
        body["target_id"] = target_id
    return body
