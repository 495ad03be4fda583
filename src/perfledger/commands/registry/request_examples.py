"""A valid example request for every operation (``perfledger schema OP --example``).

Where the package ships a curated example (``perfledger/skill/examples/OP.json``: copies of the
first request of each operation in the repository's ``examples/requests/``, a whole session in
order) that one is returned; otherwise one is built from the request's JSON Schema: its required
fields only, each with the first value the schema allows (an enum's first member, an id
``example-1``, a hash ``sha256:0123456789abcdef``, a number inside the field's range). Built
examples pass validation (a test checks every operation); the rules may still refuse them on a
given ledger, as they would any request.

An example can fit a ledger's Target (:func:`example_for`): ``experiment.create``'s candidate
types ``changed_paths`` only where the Target's readiness bound no subject directory (R11:
perfledger computes them from the snapshots where it did, and refuses typed ones); without a
ledger, :func:`variants` gives both forms.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, NamedTuple

import msgspec

from perfledger.commands.registry.catalog import get_operation
from perfledger.commands.registry.placeholders import with_placeholders
from perfledger.commands.registry.request_models import json_schema

_UNSET = msgspec.UNSET
#: The package folder of the curated examples (``OP.json``).
EXAMPLES_PACKAGE = "perfledger.skill"
EXAMPLES_DIR = "examples"
#: The value a built example gives a string matching the id pattern.
EXAMPLE_ID = "example-1"
#: The value a built example gives a string matching the content-hash pattern.
EXAMPLE_HASH = "sha256:0123456789abcdef"


def curated(op: str) -> dict[str, Any] | None:
    """The packaged example of ``op``, or None when none is shipped."""
    path = resources.files(EXAMPLES_PACKAGE).joinpath(EXAMPLES_DIR, f"{op}.json")
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def example(op: str) -> dict[str, Any]:
    """A valid request of operation ``op`` (curated, else built from its schema).

    Raises: BadRequest for an unknown operation."""

    name = get_operation(op).name
    found = curated(name)
    if found is not None:
        return found
    schema = json_schema(name)
    return built(schema, schema.get("$defs", {}))


def shown(op: str) -> dict[str, Any]:
    """The example of ``op`` as ``perfledger schema OP --example`` shows it: free text only the
    agent or its reviewer can know (an explanation, a reason) is a placeholder ``<...>`` that a
    new request is refused with (:mod:`perfledger.commands.registry.placeholders`).

    Raises: BadRequest for an unknown operation."""
    name = get_operation(op).name
    return dict(with_placeholders(name, example(name)))


def _unbound(op: str) -> dict[str, Any]:
    """The example of ``op`` for a Target without subject directories (changed paths typed)."""
    return example(op)


def _subject_bound(op: str) -> dict[str, Any]:
    """The example of ``op`` for a Target whose readiness bound the original's directory
    (``{subject}``, R11): the candidate named by its directory (:data:`CANDIDATE_SUBJECT`),
    which perfledger snapshots and hashes; no typed ``changed_paths`` or ``content_hash``."""
    body = example(op)
    candidate = body.get("candidate")
    if isinstance(candidate, dict):
        kept = {k: v for k, v in candidate.items() if k not in ("changed_paths", "content_hash")}
        body["candidate"] = {**kept, "subject": CANDIDATE_SUBJECT}
    return body


#: The candidate directory the subject-bound example names (a worktree or copy of the
#: original's directory, holding the candidate's changes).
CANDIDATE_SUBJECT = "work/candidate"


#: The operations whose example depends on whether the Target binds subject directories (R11).
SUBJECT_DEPENDENT = frozenset({"experiment.create"})


def variants(op: str) -> dict[str, dict[str, Any]]:
    """The examples of ``op`` for either kind of Target, when they differ, as ``schema OP
    --example`` shows them: ``{"without subject directories": ..., "with subject directories":
    ...}`` for ``experiment.create`` (R11); ``{"GPU Target": ..., "CPU workload Target": ...}``
    where a CPU workload's differs (:data:`CPU_DEPENDENT`); else ``{}``."""
    name = get_operation(op).name
    if name in SUBJECT_DEPENDENT:
        return {
            "without subject directories": _unbound(name),
            "with subject directories": _subject_bound(name),
        }
    if name not in CPU_DEPENDENT:
        return {}
    body = shown(name)
    target_id = str(body.get("target_id", "t1"))
    if name == "readiness.record":
        cpu = workload_readiness(body, target_id)
    elif name == "evidence.add":
        cpu = workload_evidence(body, "t1")
    else:
        cpu = {**body, "metric": "cpu_time", "unit": "ms",
               **metric_audit_words(_Primary("cpu_time", "ms"))}  # fmt: skip
    return {"GPU Target": body, "CPU workload Target": cpu}


#: The operations whose example differs for a CPU workload Target (no GPU, observed primary).
CPU_DEPENDENT = frozenset({"readiness.record", "metric-audit.record", "evidence.add"})


class _Primary(NamedTuple):
    """A primary metric's name and unit (what :func:`metric_audit_words` reads)."""

    name: str
    unit: str


def example_for(op: str, state: Any) -> dict[str, Any]:
    """The example of ``op`` fitted to the ledger's ``state``: its ``target_id`` one of the
    ledger's current Targets (when the example's is not), and for ``experiment.create`` the
    candidate's ``changed_paths`` typed only where that Target binds no subject directory
    (R11), inside its scope.

    Raises: BadRequest for an unknown operation."""
    body = example(op)
    current = [t for t, v in state.targets.items() if v.status == "current"]
    target_id = body.get("target_id")
    if isinstance(target_id, str) and target_id not in state.targets and current:
        body["target_id"] = target_id = current[0]
    target = state.targets.get(target_id) if isinstance(target_id, str) else None
    if get_operation(op).name not in SUBJECT_DEPENDENT or target is None:
        return body
    readiness = target.readiness
    bound = readiness is not None and getattr(readiness.original, "snapshot", None) not in (
        None,
        _UNSET,
    )
    if bound:
        return {**_subject_bound(op), "target_id": target_id}
    scope = list(target.definition.scope)
    if scope and isinstance(body.get("candidate"), dict):
        body["candidate"]["changed_paths"] = [_path_in(scope[0])]
    return body


def _path_in(glob: str) -> str:
    """A path that ``glob`` (a scope pattern, ``src/kernels/**``) matches: each wildcard made a
    plain name."""
    return glob.replace("**", "file").replace("*", "file").replace("?", "x")


def built(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """The first value ``schema`` allows (required object fields only); ``defs`` resolves
    ``#/$defs/NAME`` references."""
    if "$ref" in schema:
        return built(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
            return built(options[0], defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {field: built(props[field], defs) for field in schema.get("required", [])}
    if kind == "array":
        return [built(schema.get("items", {}), defs) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return _string(schema)
    if kind in ("number", "integer"):
        return _number(schema, integer=kind == "integer")
    if kind == "boolean":
        return False
    return None


def _string(schema: dict[str, Any]) -> str:
    pattern = schema.get("pattern", "")
    if pattern.startswith("^k[0-9]"):
        return "k1"
    if ":+" in pattern:  # the content-hash pattern
        return EXAMPLE_HASH
    if pattern == "^[0-9a-f]{64}$":  # a full event id (blake3 hex)
        return "0" * 64
    if pattern:
        return EXAMPLE_ID
    return "example" if schema.get("minLength", 0) <= 7 else "e" * schema["minLength"]


def _number(schema: dict[str, Any], *, integer: bool) -> float | int:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    for value in (1, 0.5, 0, 2, 5, 10, 100):
        if integer and value != int(value):
            continue
        if "minimum" in schema and value < schema["minimum"]:
            continue
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            continue
        if "maximum" in schema and value > schema["maximum"]:
            continue
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            continue
        return int(value) if integer else float(value)
    return low if low is not None else (high if high is not None else 0)


# ------------------------------------------------ examples that fit a CPU workload Target (issue 38)

#: The original's directory a workload readiness example names (``original.subject``, R11).
ORIGINAL_SUBJECT = "work/original"
#: A workload driver with its code directory's place, ``{subject}`` (R11), and the case and
#: output places perfledger's worker fills.
WORKLOAD_DRIVER: dict[str, Any] = {"argv": ["python3", "{subject}/bench.py", "{case}", "{output}"]}
#: A readiness environment of a host without a GPU (``perfledger env --json`` gives the
#: host's own, field ``readiness_environment``).
CPU_ENVIRONMENT: dict[str, Any] = {"gpu": None, "driver": None, "cuda": None, "toolkit": None,
                                   "container_base": "unknown"}  # fmt: skip
#: How perfledger's worker observes each observed primary (R3, R5): the metric audit's words.
OBSERVED_AUDIT: dict[str, dict[str, str]] = {
    "cpu_time": {
        "numerator": "CPU time of the worker's processes across one call",
        "source": "perfledger's worker protocol: the operating system's CPU clock of the worker's "
        "processes, read before and after each call",
    },
    "wall_time": {
        "numerator": "wall time of one call, timed by perfledger's worker",
        "source": "perfledger's worker protocol: the parent's monotonic clock around each call",
    },
}


def runs_on_cpu(target: Any) -> bool:
    """Whether ``target`` (a :class:`~perfledger.projections.workflow.TargetView`) is a CPU
    workload: it budgets no GPU time, or its readiness recorded an environment without a GPU.
    Its examples then name no GPU, CUDA or kernel."""
    if target.definition.budget.gpu_s == 0:
        return True
    readiness = target.readiness
    environment = getattr(readiness, "environment", None) if readiness is not None else None
    return environment is not None and getattr(environment, "gpu", None) in (None, _UNSET)


def workload_readiness(body: dict[str, Any], target_id: str) -> dict[str, Any]:
    """``readiness.record``'s example for a CPU workload Target ``target_id``: the original
    named by its directory (``original.subject``, snapshotted at the edge), a driver with
    ``{subject}`` (R11) and no CUDA variable, an environment without a GPU (the host's own is
    ``perfledger env --json``'s ``readiness_environment``)."""
    original = {k: v for k, v in body.get("original", {}).items() if k != "label"}
    return {
        **body,
        "target_id": target_id,
        "original": {**original, "label": "original", "subject": ORIGINAL_SUBJECT},
        "driver": dict(WORKLOAD_DRIVER),
        "environment": dict(CPU_ENVIRONMENT),
        "accuracy": {"compare": "exact"},
        "accuracy_rule": "the output is identical to the original's (compared exactly)",
    }


def metric_audit_words(primary: Any) -> dict[str, str]:
    """The metric audit's ``numerator``/``denominator``/``source`` for ``primary`` (R3): how
    perfledger's worker observes it, for an observed metric (``cpu_time``, ``wall_time``); a
    placeholder the agent replaces, for a metric its driver computes (labelled reported)."""
    observed = OBSERVED_AUDIT.get(primary.name)
    if observed is not None:
        return {"numerator": f"{observed['numerator']} ({primary.unit})",
                "denominator": "one call", "source": observed["source"]}  # fmt: skip
    return {
        "numerator": f"<what the driver computes as {primary.name}, in {primary.unit}>",
        "source": f"driver JSON: {primary.name}",
    }


def workload_claim_scope(body: dict[str, Any], target: Any) -> dict[str, Any]:
    """``experiment.create``'s example with a CPU workload's claim: its shapes the readiness's
    cases (when recorded). The region, boundary, execution form and title are placeholders for
    every Target (:mod:`perfledger.commands.registry.placeholders`)."""
    claim = body.get("claim")
    if not isinstance(claim, dict) or not isinstance(claim.get("scope"), dict):
        return body
    test_set = getattr(target.readiness, "test_set", None) if target.readiness else None
    cases = list(getattr(test_set, "cases", None) or []) if test_set is not None else []
    if not cases:
        return body
    return {**body, "claim": {**claim, "scope": {**claim["scope"], "shapes": cases}}}


def workload_evidence(body: dict[str, Any], target_id: str) -> dict[str, Any]:
    """``evidence.add``'s example for a CPU workload Target ``target_id``: a profile of the
    workload (cProfile) with the Target's id; no GPU profiler, no kernel layer."""
    return {
        **body,
        "evidence_id": "ev-profile",
        "layer": "workload",
        "target_id": target_id,
        "tool": {"name": "cProfile", "version": "3.11"},
        "facts": [{"name": "hot_loop_share", "value": 0.6, "unit": "ratio"}],
    }
