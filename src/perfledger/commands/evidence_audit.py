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

Versioning: events recorded under this perfledger's parser version, or before the version was
recorded (``capture.parser`` empty: the parsers then were version 1), are re-derived; an event
recorded by another parser version cannot be re-derived here and gets a note. Evidence recorded
from a hand-written request (no parsed layout, no attached report) has nothing to re-derive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfledger.errors import EvidenceError

#: The artifact holding the raw report, and the CSV an ``.ncu-rep`` was exported to and parsed.
REPORT = "report"
EXPORT = "export.csv"
#: Parser versions an event recorded without ``capture.parser`` was derived by.
_UNVERSIONED = "1"


def rederive_evidence(
    payload: Any, artifacts: dict[str, Any], read: Callable[[str], bytes]
) -> tuple[str | None, str | None]:
    """Re-derive one ``EvidenceRecorded`` from its attached raw report (R6).

    Args:
        payload: the event's decoded :class:`~perfledger.events.workflow.EvidenceRecorded`.
        artifacts: the envelope's artifacts, name -> ref (with ``blake3``), verified by verify.
        read: artifact name -> its bytes (checked against its blake3).
    Returns: (finding, note): the mismatch to report as an integrity finding, or None; a note
        when the event cannot be re-derived here (recorded by another parser version, or a
        layout this perfledger does not parse), or None.
    """
    from perfledger.kernels.profilers.evidence import (
        PARSER_VERSION,
        kind_of_layout,
        reparse_report,
    )

    capture = payload.capture
    report_ref = artifacts.get(REPORT)
    if report_ref is not None and payload.report_hash is not None:
        attached = "blake3:" + report_ref.blake3
        if payload.report_hash != attached:
            return (
                f"its report_hash {payload.report_hash} is not the attached report's "
                f"({attached}): the report was swapped or the hash edited",
                None,
            )
        if capture is not None and capture.source_hash and capture.source_hash != attached:
            return (
                f"its capture.source_hash {capture.source_hash} is not the attached report's "
                f"({attached})",
                None,
            )
    if capture is None or not capture.layout or report_ref is None:
        return None, None  # not a parsed report: facts as written, nothing to re-derive
    parser = capture.parser or _UNVERSIONED
    if parser != PARSER_VERSION:
        return None, (
            f"evidence {payload.evidence_id!r} was parsed by perfledger's parsers version "
            f"{parser}; this perfledger has version {PARSER_VERSION}: facts not re-derived"
        )
    kind = kind_of_layout(capture.layout)
    if kind is None:
        return None, (
            f"evidence {payload.evidence_id!r} has layout {capture.layout!r}, which this "
            "perfledger does not parse: facts not re-derived"
        )
    parsed_name = EXPORT if kind == "ncu" and EXPORT in artifacts else REPORT
    try:
        report = reparse_report(
            kind, read(parsed_name), tool_version=payload.tool.version, grouping=capture.grouping
        )
    except EvidenceError as exc:
        return (
            f"its attached {parsed_name!r} no longer parses as the {kind} report it was "
            f"recorded from: {exc.message}",
            None,
        )
    differs = _differences(payload, report)
    if not differs:
        return None, None
    return (
        f"its recorded {', '.join(differs)} differ from what its attached {parsed_name!r} "
        f"yields, re-parsed as {kind} {payload.tool.version} (R6: facts are derived from "
        "the report, never edited)",
        None,
    )


def _differences(payload: Any, report: Any) -> list[str]:
    """Names of the recorded fields that differ from those derived from ``report``."""
    from perfledger.kernels.profilers.evidence import boundary, report_facts

    derived_facts = [(f["name"], f["value"], f["unit"], f["note"]) for f in report_facts(report)]
    recorded_facts = [(f.name, f.value, f.unit, f.note) for f in payload.facts]
    limitations = [item[:200] for item in report.limitations]
    capture = payload.capture
    if capture.exit_status not in (None, 0):  # `evidence ncu` notes a failed capture
        limitations.append(f"ncu exited with status {capture.exit_status}")
    derived_kernels = [
        (k["key"], k["name"], k["launches"], tuple(k["grids"]), tuple(k["blocks"]),
         tuple(k["streams"]))
        for k in boundary(report)["kernels"]
    ]  # fmt: skip
    recorded_kernels = [
        (k.key, k.name, k.launches, tuple(k.grids), tuple(k.blocks), tuple(k.streams))
        for k in (payload.boundary.kernels if payload.boundary is not None else ())
    ]
    checks = {
        "facts": recorded_facts == derived_facts,
        "limitations": list(payload.limitations) == limitations,
        "tool": (payload.tool.name, payload.tool.version) == (report.tool, report.tool_version),
        "kernels": recorded_kernels == derived_kernels,
        "layout": capture.layout == report.layout,
        "grouping": capture.grouping == report.attributes.get("grouping", ""),
    }
    return [name for name, same in checks.items() if not same]
