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
from typing import Any

import msgspec

from perfledger.commands.registry.operations import get_operation, json_schema
from perfledger.commands.registry.placeholders import with_placeholders

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
    """The examples of ``op`` for either kind of Target, when they differ (R11): ``{"without
    subject directories": ..., "with subject directories": ...}``; else ``{}``."""
    if get_operation(op).name not in SUBJECT_DEPENDENT:
        return {}
    return {
        "without subject directories": _unbound(op),
        "with subject directories": _subject_bound(op),
    }


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
