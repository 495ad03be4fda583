"""The auditor re-derives evidence (R6): an ``EvidenceRecorded`` parsed from a profiler or compiler
report is checked against that report, re-parsed.

``evidence add --kind`` and ``evidence ncu`` attach the raw report (artifact ``report``; for an
``.ncu-rep``, also ``export.csv``, the CSV that was parsed) and record its blake3, its layout,
the digit grouping, the tool's version and the version of perfledger's parsers
(``capture.parser``). The audit parses the attached report again with the recorded tool version
and grouping, and the derived facts, limitations, tool and measured kernels must equal the
recorded ones; the recorded ``report_hash`` must be the attached report's. A mismatch (facts
edited and the event's id recomputed, a report swapped for another) is an integrity finding
naming the event.

Fails closed. An event recorded under one of this perfledger's parser versions (each re-derived
by the fact derivation of its own version, ``PARSER_VERSIONS``), or before the version was
recorded (``capture.parser`` empty: the parsers then were version 1), is re-derived; one
recorded by a parser version this perfledger does not have, or that records a parsed layout
without attaching its report, is a finding (rule R6): it cannot be vouched for here. Evidence
recorded before the capture was (a report attached, no layout) is re-derived by the parsers its
tool names. Evidence recorded from a hand-written request (no layout, no report) has nothing to
re-derive: the audit lists it as written (``AuditReport.evidence_as_written``), so an auditor
sees which facts rest on a report and which on someone's word.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.evidence import (
    PARSER_VERSION,
    PARSER_VERSIONS,
    boundary,
    kind_of_layout,
    kinds_of_tool,
    report_facts,
    report_limitations,
)

#: The artifact holding the raw report, and the CSV an ``.ncu-rep`` was exported to and parsed.
REPORT = "report"
EXPORT = "export.csv"
#: The parser version of an event recorded without ``capture.parser``.
_UNVERSIONED = "1"


@dataclass(frozen=True)
class EvidenceCheck:
    """The outcome of :func:`rederive_evidence` for one event.

    Attributes:
        rederived: its facts were re-derived from its attached report (False: evidence recorded
            as written, from a hand-written request without a report, or a finding).
        finding: what is wrong, for a finding naming the event; None when nothing is.
        rule: the finding's rule: ``integrity`` when the event contradicts its attached
            report, ``R6`` when it claims a parsed report that cannot be re-derived here.
    """

    rederived: bool
    finding: str | None = None
    rule: str = "integrity"


def rederive_evidence(
    payload: Any, artifacts: dict[str, Any], read: Callable[[str], bytes]
) -> EvidenceCheck:
    """Re-derive one ``EvidenceRecorded`` from its attached raw report (R6).

    Args:
        payload: the event's decoded :class:`~perfledger.events.workflow.EvidenceRecorded`.
        artifacts: the envelope's artifacts, name -> ref (with ``blake3``), verified by verify.
        read: artifact name -> its bytes (checked against its blake3).
    Returns: an :class:`EvidenceCheck`. Fails closed: an event that records a parsed report
        (a layout) without attaching it, or parsed by a parser version or layout this
        perfledger does not have, is a finding (rule R6), never skipped.
    """
    capture = payload.capture
    report_ref = artifacts.get(REPORT)
    if report_ref is not None and payload.report_hash is not None:
        attached = "blake3:" + report_ref.blake3
        if payload.report_hash != attached:
            return EvidenceCheck(
                False,
                f"its report_hash {payload.report_hash} is not the "
                f"attached report's ({attached}): the report was swapped or "
                "the hash edited",
            )
        if capture is not None and capture.source_hash and capture.source_hash != attached:
            return EvidenceCheck(
                False,
                f"its capture.source_hash {capture.source_hash} is not "
                f"the attached report's ({attached})",
            )
    if payload.tool.name == "perfledger-triage":  # a triage: re-run on its attached inputs
        return _triage_check(payload, artifacts, read)
    parsed = capture is not None and bool(capture.layout)
    if report_ref is None:
        if not parsed:
            return EvidenceCheck(False)  # a hand-written request: facts as written
        return EvidenceCheck(
            False,
            f"it records facts parsed from a {capture.layout} report "
            "but attaches no report: they cannot be re-derived",
            "R6",
        )
    if parsed:
        parser = capture.parser or _UNVERSIONED
        if parser not in PARSER_VERSIONS:
            return EvidenceCheck(
                False,
                f"its facts were derived by perfledger's parsers "
                f"version {parser}, unknown to this perfledger (version "
                f"{PARSER_VERSION}): they cannot be re-derived here",
                "R6",
            )
        kind = kind_of_layout(capture.layout)
        kinds = [kind] if kind is not None else []
    else:  # recorded before the capture was: the tool names the parsers that could have run
        kinds = kinds_of_tool(payload.tool.name)
        parser = _UNVERSIONED
    if not kinds:
        what = f"layout {capture.layout!r}" if parsed else f"tool {payload.tool.name!r}"
        return EvidenceCheck(
            False,
            f"its report ({what}) is of no kind this perfledger parses: "
            "its facts cannot be re-derived",
            "R6",
        )
    from perfledger.kernels.profilers.parse import reparse_report  # noqa: PLC0415 (every parser, with csv, sqlite3 and subprocess: loaded only where a ledger holds parsed evidence, off `perfledger audit`'s start-up path)

    parsed_name = EXPORT if kinds == ["ncu"] and EXPORT in artifacts else REPORT
    data = read(parsed_name)
    problems = []
    for kind in kinds:
        try:
            grouping = capture.grouping if capture is not None else ""
            report = reparse_report(
                kind, data, tool_version=payload.tool.version, grouping=grouping
            )
        except EvidenceError as exc:
            problems.append(
                f"its attached {parsed_name!r} no longer parses as the {kind} "
                f"report it was recorded from: {exc.message}"
            )
            continue
        differs = _differences(payload, report, parser)
        if not differs:
            return EvidenceCheck(True)
        problems.append(
            f"its recorded {', '.join(differs)} differ from what its attached {parsed_name!r} "
            f"yields, re-parsed as {kind} {payload.tool.version} (R6: facts are derived from "
            "the report, never edited)"
        )
    return EvidenceCheck(False, problems[0])


def _differences(payload: Any, report: Any, parser: str) -> list[str]:
    """Names of the recorded fields that differ from those derived from ``report`` by the
    parser version ``parser`` the event was recorded under."""

    derived = report_facts(report, parser=parser)
    derived_facts = [(f["name"], f["value"], f["unit"], f["note"]) for f in derived]
    recorded_facts = [(f.name, f.value, f.unit, f.note) for f in payload.facts]
    limitations = report_limitations(report, parser=parser)
    capture = payload.capture
    if capture is not None and capture.exit_status not in (None, 0):
        limitations.append(f"ncu exited with status {capture.exit_status}")  # `evidence ncu`
    derived_kernels = [
        (
            k["key"],
            k["name"],
            k["launches"],
            tuple(k["grids"]),
            tuple(k["blocks"]),
            tuple(k["streams"]),
        )
        for k in boundary(report)["kernels"]
    ]
    recorded_kernels = [
        (k.key, k.name, k.launches, tuple(k.grids), tuple(k.blocks), tuple(k.streams))
        for k in (payload.boundary.kernels if payload.boundary is not None else ())
    ]
    checks = {
        "facts": recorded_facts == derived_facts,
        "limitations": list(payload.limitations) == limitations,
        "tool": (payload.tool.name, payload.tool.version) == (report.tool, report.tool_version),
        # evidence recorded before the boundary and the capture were has neither
        "kernels": payload.boundary is None or recorded_kernels == derived_kernels,
        "layout": capture is None or capture.layout == report.layout,
        "grouping": capture is None or capture.grouping == report.attributes.get("grouping", ""),
    }
    return [name for name, same in checks.items() if not same]


def _triage_check(payload: Any, artifacts: dict[str, Any], read: Callable[[str], bytes]) -> Any:
    """Re-derive a recorded ``perfledger triage`` (R6): same tables and facts from the attached
    trace, mapping trace and known-path file; another triage version is a finding."""
    from perfledger.kernels.triage.record import TRIAGE_VERSION, recheck  # noqa: PLC0415 (sqlite3 via perfledger.kernels.triage.record)

    if payload.tool.version.split(" ", 1)[0] != TRIAGE_VERSION:
        return EvidenceCheck(
            False,
            f"its triage was derived by perfledger-triage version {payload.tool.version}, "
            f"unknown to this perfledger (version {TRIAGE_VERSION}): it cannot be re-derived",
            "R6",
        )
    facts = [(f.name, f.value, f.unit, f.note) for f in payload.facts]
    problem = recheck(facts, payload.report_hash, set(artifacts), read)
    return EvidenceCheck(True) if problem is None else EvidenceCheck(False, problem)
