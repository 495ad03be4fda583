"""Canonical form of a parsed profiler report, for the golden-file test of the ncu and PyTorch
parsers (tests/profilers/test_parse_golden.py).
Mutated inputs are pinned by the blake3 of their canonical JSON (or ``"refused"``), to keep the
file small.

The canonical form holds everything a :class:`ProfileReport` carries (kernels with their metric
statistics, duration counters, shapes and streams in first-seen order, facts, limitations,
attributes, rules), the evidence boundary derived from it and, for ncu, the per-axis digest. Floats
are written with ``float.hex`` so that "byte-identical" means bit-identical, not "equal after
rounding to 17 digits".

Regenerate the golden file only for an intended change of the parse results:

    .venv/bin/python tests/profilers/profiler_golden.py
"""

from __future__ import annotations

import gzip
import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import ProfileReport
from perfledger.kernels.profilers.evidence import boundary
from perfledger.kernels.profilers.ncu import parse_ncu_csv, top_metrics_per_axis
from perfledger.kernels.profilers.torch_trace import parse_torch_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profilers"
GOLDEN = FIXTURES / "golden_parse.json"
NCU_VERSION = (FIXTURES / "ncu_version.txt").read_text()

#: fixture file -> parser, for the golden results.
CASES: dict[str, Callable[[io.BytesIO], ProfileReport]] = {
    "ncu_details_rules.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_details_norules.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_details_import.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_details_defaultunits.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_raw.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_raw_defaultunits.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_summary.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "ncu_summary_pergpu.csv": lambda s: parse_ncu_csv(s, tool_version=NCU_VERSION),
    "torch_trace.json": lambda s: parse_torch_trace(s, torch_version="2.11.0"),
    # a public 2021 trace (see public/SOURCES.md), read through gzip as a path would be
    "public/kineto2021_resnet50_v100.json.gz": lambda s: parse_torch_trace(
        gzip.GzipFile(fileobj=s, mode="rb")  # type: ignore[arg-type]
    ),
}
#: Seeded mutations per fixture whose outcome (refused, or the parse's canonical form) is pinned.
MUTATIONS = 60


def _canon(value: Any) -> Any:
    if isinstance(value, float):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _canon(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, set):
        return sorted(_canon(v) for v in value)
    return value


def canonical(report: ProfileReport) -> dict[str, Any]:
    """The report as builtins (floats as hex strings), in the report's own orders."""
    kernels = []
    for name, kernel in report.kernels.items():
        kernels.append(
            {
                "name": name,
                "launches": kernel.launches,
                "grids": sorted(kernel.grids),
                "blocks": sorted(kernel.blocks),
                "streams": sorted(kernel.streams),
                "metrics": [
                    [key, s.unit, s.count, s.total, s.minimum, s.maximum, s.missing]
                    for key, s in kernel.metrics.items()
                ],
                "durations": sorted(kernel.durations.counts.items()),
                "durations_count": kernel.durations.count,
                "durations_total": kernel.durations.total_ns,
                "texts": kernel.texts,
            }
        )
    out = {
        "tool": report.tool,
        "tool_version": report.tool_version,
        "layout": report.layout,
        "layer": report.layer,
        "kernels": kernels,
        "facts": report.facts,
        "limitations": report.limitations,
        "attributes": report.attributes,
        "rules": report.rules,
        "duration_summaries": report.duration_summaries,
        "added_facts": report.added_facts,
        "text_facts": report.text_facts,
        "added_limitations": report.added_limitations,
        "boundary": boundary(report),
    }
    if report.tool == "ncu":
        out["digest"] = top_metrics_per_axis(report)
    return _canon(out)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three seeded mutations of ``data``: byte flips, deletions, insertions, truncation,
    duplicated or swapped lines (the fuzz test's kinds, deterministic)."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["flip", "delete", "insert", "truncate", "dup", "swap"])
        at = rng.randint(0, max(0, len(out) - 1))
        if kind == "flip" and out:
            out[at] = rng.randint(0, 255)
        elif kind == "delete":
            del out[at : at + rng.randint(1, 64)]
        elif kind == "insert":
            out[at:at] = rng.choice(
                [b'"', b",", b"\n", b"{", b"]", b"1e999", b"nan", b'","', b"\x00", b"\xff", b"7"]
            )
        elif kind == "truncate":
            del out[at:]
        else:
            lines = bytes(out).split(b"\n")
            i, j = rng.randint(0, len(lines) - 1), rng.randint(0, len(lines) - 1)
            if kind == "dup":
                lines.insert(i, lines[j])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            out = bytearray(b"\n".join(lines))
    return bytes(out)


def outcome(parse: Callable[[io.BytesIO], ProfileReport], data: bytes) -> Any:
    """The canonical parse of ``data``, or ``"refused"`` for an EvidenceError."""
    try:
        return canonical(parse(io.BytesIO(data)))
    except EvidenceError:
        return "refused"


def digest(result: Any) -> str:
    """``"refused"``, or the blake3 of a canonical parse's sorted, compact JSON."""
    if result == "refused":
        return result
    text = json.dumps(result, sort_keys=True, separators=(",", ":"))
    return blake3.blake3(text.encode()).hexdigest()


def results() -> dict[str, Any]:
    """Every pinned outcome: each fixture's canonical parse and its seeded mutations' outcomes."""
    out: dict[str, Any] = {}
    for name, parse in CASES.items():
        data = (FIXTURES / name).read_bytes()
        out[name] = outcome(parse, data)
        rng = random.Random(f"golden:{name}")
        out[name + ":mutations"] = [
            digest(outcome(parse, mutate(data, rng))) for _ in range(MUTATIONS)
        ]
    return out


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(results(), sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {GOLDEN}")
