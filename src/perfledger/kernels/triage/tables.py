"""The three triage tables (kernel, known-path, action) and the CUDA-graph attribution.

Time shares (R7's coverage ``f``): a kernel's total time over

- the **GPU busy time** (the union of kernel intervals, summed over devices): the share of the
  GPU's work. It is an *upper bound* on the kernel's share of end-to-end latency unless the GPU
  is the critical path (a CPU-bound or launch-bound run leaves the GPU idle part of the time);
  with kernels overlapping on several streams the shares can add up to more than 1;
- the **trace span** (first start to last end of the trace's timed events): the share of the
  traced wall time, which is the share of latency only when the whole span is the workload.

The action table's ``f`` uses the denominator the caller chooses (``busy`` by default, the
conservative choice for an Amdahl bound that must not reject a real opportunity) and states it.
"""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any

from perfledger.errors import BadRequest
from perfledger.kernels.triage.launches import Launch, TraceLaunches
from perfledger.kernels.triage.paths import KnownPath

#: What the action table says for a hotspot no known path names.
NEW = "new opportunity"
DENOMINATORS = {
    "busy": "GPU busy time (union of kernel intervals, summed over devices): an upper bound on "
    "end-to-end latency coverage unless the GPU is the critical path",
    "span": "trace span (first start to last end of the trace's timed events): the share of "
    "traced wall time",
}


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/triage.md describes the options and the traces a triage compares (`perfledger triage --help`)"


def attribute_graph_kernels(
    graph_on: TraceLaunches, graph_off: TraceLaunches
) -> tuple[dict[int, str], dict[int, str]]:
    """Attribute the CUDA-graph kernels of ``graph_on`` to the ops of ``graph_off``.

    Each graph launch's kernels (in start order) are aligned by name with the graph-off trace's
    kernel sequence (:class:`difflib.SequenceMatcher`, no junk heuristic): a kernel in a
    matching block takes the launch label (ranges and CPU op) of its graph-off counterpart.

    Args:
        graph_on: the trace whose graph kernels are attributed.
        graph_off: a trace of the same workload without CUDA graphs.
    Returns: ``(attributed, unattributed)``: launch index in ``graph_on.launches`` -> the
        graph-off label; launch index -> why it could not be attributed.
    Raises: BadRequest when ``graph_off`` itself holds graph kernels or no kernel at all.
    """
    off = [launch for launch in graph_off.launches if not launch.graph]
    if len(off) != len(graph_off.launches):
        raise BadRequest(
            f"{graph_off.path}: the --mapping trace has CUDA-graph kernels; it must be a trace "
            "of the same workload run without CUDA graphs",
            hint=_HINT,
        )
    off_names = [launch.name for launch in off]
    known = set(off_names)
    groups: dict[int, list[int]] = {}
    for index, launch in enumerate(graph_on.launches):
        if launch.graph:
            groups.setdefault(launch.graph_launch, []).append(index)
    attributed: dict[int, str] = {}
    unattributed: dict[int, str] = {}
    for indices in groups.values():
        names = [graph_on.launches[i].name for i in indices]
        matcher = difflib.SequenceMatcher(None, names, off_names, autojunk=False)
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                attributed[indices[block.a + k]] = label(off[block.b + k])
        for position, index in enumerate(indices):
            if index not in attributed:
                unattributed[index] = (
                    "its name is absent from the graph-off trace"
                    if names[position] not in known
                    else "its order differs from the graph-off trace"
                )
    return attributed, unattributed


def label(launch: Launch) -> str:
    """What launched ``launch``: its ranges, outermost first, then its CPU op (or, without
    one, its launch call), joined with `` > ``."""
    return " > ".join([*launch.ranges, launch.op or launch.launcher or "unknown"])


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def build_triage(
    trace: TraceLaunches,
    paths: list[KnownPath],
    *,
    mapping: TraceLaunches | None = None,
    top: int = 20,
    denominator: str = "busy",
) -> dict[str, Any]:
    """Build the kernel, known-path and action tables of ``trace`` (R7 coverage ``f``).

    Args:
        trace: the launches of the triaged trace.
        paths: the user's known paths (may be empty).
        mapping: the launches of a graph-off trace of the same workload, to attribute the CUDA
            graph kernels of ``trace``.
        top: how many hotspots (kernels by total time, largest first) the known-path and action
            tables cover (the kernel table lists every kernel).
        denominator: ``busy`` or ``span``: which share the action table gives as ``f``.
    Returns: a JSON-ready dict: ``source``, ``denominators`` (ns and what they cover),
        ``kernels``, ``known_paths`` (``hotspots`` and ``paths``), ``actions``, ``graph``,
        ``limitations``. Times in ns, shares as ratios (0..1; null when the denominator is 0).
    Raises: BadRequest for an unknown denominator, a ``top`` below 1, or a mapping trace that
        is not graph-off.
    """
    if denominator not in DENOMINATORS:
        raise BadRequest(f"unknown denominator {denominator!r}: busy or span", hint=_HINT)
    if top < 1:
        raise BadRequest("--top must be at least 1", hint=_HINT)
    report = trace.report
    launches = trace.launches
    graph_indices = [i for i, launch in enumerate(launches) if launch.graph]
    attributed: dict[int, str] = {}
    unattributed: dict[int, str] = {}
    limitations = list(trace.limitations)
    if mapping is not None:
        attributed, unattributed = attribute_graph_kernels(trace, mapping)
        limitations.extend(f"mapping: {item}" for item in mapping.limitations)
        if not graph_indices:
            limitations.append("--mapping given but the trace has no CUDA-graph kernels")
    else:
        unattributed = {i: "no --mapping graph-off trace was given" for i in graph_indices}
    by_name: dict[str, Counter[str]] = {}
    graph_counts: Counter[str] = Counter()
    for index, launch in enumerate(launches):
        if launch.graph:
            graph_counts[launch.name] += 1
            text = (
                f"{attributed[index]} (CUDA graph, mapped)"
                if index in attributed
                else f"{launch.launcher or 'graph'} (CUDA graph, not attributed)"
            )
        else:
            text = label(launch)
        by_name.setdefault(launch.name, Counter())[text] += 1
    busy, span = trace.busy_ns, trace.span_ns
    # per-kernel figures from the launches themselves (read_launches checked their counts
    # against the parser's)
    totals: dict[str, int] = {}
    grids: dict[str, set[str]] = {}
    blocks: dict[str, set[str]] = {}
    for launch in launches:
        totals[launch.name] = totals.get(launch.name, 0) + launch.duration_ns
        if launch.grid:
            grids.setdefault(launch.name, set()).add(launch.grid)
        if launch.block:
            blocks.setdefault(launch.name, set()).add(launch.block)
    counts = Counter(launch.name for launch in launches)
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    kernels = []
    for rank, name in enumerate(ranked):
        total = float(totals[name])
        kernels.append(
            {
                "key": f"k{rank}", "name": name, "instances": counts[name],
                "total_ns": total, "mean_ns": total / counts[name],
                "share_of_gpu_busy": _share(total, busy),
                "share_of_trace_span": _share(total, span),
                "grids": sorted(grids.get(name, ())), "blocks": sorted(blocks.get(name, ())),
                "graph_instances": graph_counts.get(name, 0),
                "launched_by": [{"by": by, "instances": n}
                                for by, n in by_name.get(name, Counter()).most_common()],
            }
        )  # fmt: skip
    hotspots = kernels[:top]
    matched = []
    path_hits: dict[int, list[str]] = {p.index: [] for p in paths}
    actions = []
    for row in hotspots:
        hit = next((p for p in paths if p.matches(row["name"])), None)
        if hit is not None:
            path_hits[hit.index].append(row["key"])
        matched.append(
            {
                "key": row["key"], "name": row["name"], "matched": hit is not None,
                "path": hit.index if hit else None, "pattern": hit.pattern if hit else None,
                "route": hit.route if hit else None, "notes": hit.notes if hit else None,
            }
        )  # fmt: skip
        f_busy, f_span = row["share_of_gpu_busy"], row["share_of_trace_span"]
        actions.append(
            {
                "key": row["key"], "name": row["name"], "f_gpu_busy": f_busy,
                "f_trace_span": f_span, "f": f_busy if denominator == "busy" else f_span,
                "action": hit.route if hit else NEW, "known": hit is not None,
            }
        )  # fmt: skip
    unattributed_rows: Counter[tuple[str, str]] = Counter(
        (launches[i].name, why) for i, why in unattributed.items()
    )
    return {
        "source": {
            "path": trace.path, "kind": trace.kind, "tool": report.tool,
            "tool_version": report.tool_version, "layout": report.layout,
            "launches": len(launches), "kernels": len(kernels),
        },
        "denominators": {
            "gpu_busy_ns": busy, "trace_span_ns": span, "f_uses": denominator,
            "f_means": DENOMINATORS[denominator], "trace_span_covers": trace.span_note,
        },
        "kernels": kernels,
        "known_paths": {
            "hotspots": matched,
            "paths": [{"index": p.index, "pattern": p.pattern, "syntax": p.syntax,
                       "route": p.route, "hotspots": path_hits[p.index]} for p in paths],
        },
        "actions": actions,
        "graph": {
            "mapping": mapping.path if mapping is not None else None,
            "graph_launches": len({launches[i].graph_launch for i in graph_indices}),
            "graph_kernels": len(graph_indices),
            "attributed": len(attributed),
            "unattributed": [{"name": name, "instances": n, "reason": why}
                             for (name, why), n in sorted(unattributed_rows.items())],
        },
        "limitations": limitations,
    }  # fmt: skip
