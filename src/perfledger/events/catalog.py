"""The method catalog of the kernel-iteration loop: loading, validation, lookups (R19-R25).

A catalog is TOML (the shipped default is ``catalog_default.toml`` beside this module): per axis,
methods in strict priority order with their ncu triggers and skip conditions, the SM features they
need, an explicit per-architecture feature map, and coupled groups. :func:`parse_catalog` turns
TOML text into a validated :class:`~perfledger.events.loop.Catalog` and its hash
(``blake3:<hex>`` of the UTF-8 text), both recorded in ``RunSetUp``; everything else here is a
pure lookup on a catalog and a profile's metrics, used by the deciders and the summary.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from typing import Any

import blake3
import msgspec

from perfledger.errors import BadRequest
from perfledger.events.loop import AXES, Catalog, CatalogMethod, Condition

#: The shipped default catalog's resource name (package data of ``perfledger.events``).
DEFAULT_CATALOG = "catalog_default.toml"
#: Largest catalog accepted (bytes of TOML).
MAX_CATALOG_BYTES = 512 * 1024
_ARCH = re.compile(r"^sm_[0-9]{2,3}[a-z]?\Z")
_NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "a method catalog is TOML like the shipped src/perfledger/events/catalog_default.toml (docs/loop.md)"


def content_hash(text: str) -> str:
    """Return ``blake3:<hex>`` of ``text`` encoded as UTF-8 (kernels, references, catalogs)."""
    return "blake3:" + blake3.blake3(text.encode("utf-8")).hexdigest()


def default_catalog_text() -> str:
    """Return the TOML text of the shipped default catalog."""
    return resources.files("perfledger.events").joinpath(DEFAULT_CATALOG).read_text("utf-8")


def parse_catalog(text: str, *, source: str = "catalog") -> tuple[Catalog, str]:
    """Parse and validate a catalog's TOML ``text``.

    Returns: (the catalog, its hash ``blake3:<hex>`` of the text).
    Raises: BadRequest naming the problem: malformed TOML, an unknown or missing field, an
        unknown axis, a method id not of the form ``axis.name`` or not matching its axis, a
        duplicate id, a duplicate priority within an axis, an unknown feature (in ``requires`` or
        in an architecture's list), a malformed architecture name, an unknown group or a group
        with a single method, an axis without methods, a bad comparison.
    """
    if len(text.encode("utf-8")) > MAX_CATALOG_BYTES:
        raise BadRequest(f"{source}: larger than {MAX_CATALOG_BYTES} bytes", hint=_HINT)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadRequest(f"{source}: not valid TOML: {exc}", hint=_HINT) from None
    for entry in data.get("methods", []) if isinstance(data.get("methods"), list) else []:
        if isinstance(entry, dict) and entry.get("axis") not in AXES:
            raise BadRequest(
                f"{source}: method {entry.get('id')!r}: unknown axis {entry.get('axis')!r} "
                f"(axes: {', '.join(AXES)})",
                hint=_HINT,
            )
    try:
        catalog = msgspec.convert(data, Catalog, strict=True)
    except msgspec.ValidationError as exc:
        raise BadRequest(
            f"{source}: does not fit the catalog schema: {exc}",
            hint="see perfledger/events/catalog_default.toml for the format",
        ) from None
    validate_catalog(catalog, source=source)
    return catalog, content_hash(text)


def load_default_catalog() -> tuple[Catalog, str, str]:
    """Return (the default catalog, its hash, its TOML text)."""
    text = default_catalog_text()
    catalog, digest = parse_catalog(text, source=DEFAULT_CATALOG)
    return catalog, digest, text


def validate_catalog(catalog: Catalog, *, source: str = "catalog") -> None:
    """Check a catalog's consistency (see :func:`parse_catalog` for what is refused).

    Raises: BadRequest naming the first problem found.
    """

    def bad(message: str) -> BadRequest:
        return BadRequest(f"{source}: {message}", hint=_HINT)

    for feature in catalog.features:
        if not _NAME.match(feature):
            raise bad(f"feature name {feature!r} must be lower_snake_case")
    for arch, features in catalog.architectures.items():
        if not _ARCH.match(arch):
            raise bad(f"architecture {arch!r} is not of the form sm_XX")
        unknown = sorted(set(features) - set(catalog.features))
        if unknown:
            raise bad(f"architecture {arch} lists unknown feature(s) {unknown}")
    if not 0 < catalog.bottleneck_change_min < 10:
        raise bad("bottleneck_change_min must be a ratio in (0, 10)")
    derived_names = {d.name for d in catalog.derived}
    if len(derived_names) != len(catalog.derived):
        raise bad("a derived metric is defined twice")
    for axis in catalog.axis_metrics:
        if axis not in AXES:
            raise bad(f"axis_metrics: unknown axis {axis!r} (axes: {', '.join(AXES)})")
    ids: set[str] = set()
    priorities: dict[tuple[str, int], str] = {}
    groups: dict[str, list[str]] = {}
    for method in catalog.methods:
        where = f"method {method.id!r}"
        if method.axis not in AXES:
            raise bad(f"{where}: unknown axis {method.axis!r} (axes: {', '.join(AXES)})")
        axis, _, name = method.id.partition(".")
        if axis not in AXES:
            raise bad(f"{where}: id must be axis.name with axis in {', '.join(AXES)}")
        if axis != method.axis or not _NAME.match(name):
            raise bad(f"{where}: id must be '{method.axis}.<lower_snake_case name>'")
        if method.id in ids:
            raise bad(f"duplicate method id {method.id!r}")
        ids.add(method.id)
        if method.priority < 1:
            raise bad(f"{where}: priority must be >= 1")
        key = (method.axis, method.priority)
        if key in priorities:
            raise bad(
                f"{where}: priority {method.priority} on axis {method.axis} is already "
                f"{priorities[key]!r} (priorities are strict)"
            )
        priorities[key] = method.id
        unknown = sorted(set(method.requires) - set(catalog.features))
        if unknown:
            raise bad(f"{where}: requires unknown feature(s) {unknown}")
        if method.group is not None:
            if method.group not in catalog.groups:
                raise bad(f"{where}: unknown group {method.group!r} (declare it under [groups])")
            groups.setdefault(method.group, []).append(method.id)
        for condition in (*method.triggers, *method.skips):
            if condition.op not in _COMPARE:
                raise bad(f"{where}: bad comparison {condition.op!r}")
    for axis in AXES:
        if not any(m.axis == axis for m in catalog.methods):
            raise bad(f"axis {axis!r} has no methods (R19 selects one per axis)")
    for group in catalog.groups:
        members = groups.get(group, [])
        if len(members) < 2:
            raise bad(
                f"group {group!r} couples {len(members)} method(s); a group needs two or more"
            )


def methods_of_axis(catalog: Catalog, axis: str) -> list[CatalogMethod]:
    """Return the methods of ``axis`` in strict priority order (R19)."""
    return sorted((m for m in catalog.methods if m.axis == axis), key=lambda m: m.priority)


def method(catalog: Catalog, method_id: str) -> CatalogMethod | None:
    """Return the method ``method_id``, or None when the catalog has none."""
    for candidate in catalog.methods:
        if candidate.id == method_id:
            return candidate
    return None


def missing_features(catalog: Catalog, method_: CatalogMethod, sm_arch: str) -> list[str]:
    """Return the features ``method_`` requires that ``sm_arch`` lacks (all of them for an
    architecture the catalog does not list) (R23)."""
    have = set(catalog.architectures.get(sm_arch, ()))
    return [f for f in method_.requires if f not in have]


def metric_value(catalog: Catalog, metrics: Mapping[str, float], name: str) -> float | None:
    """Return the value of ``name`` in a profile's ``metrics``, computing a derived metric from
    its recorded inputs; None when it (or an input) was not recorded or a denominator is 0."""
    if name in metrics:
        return metrics[name]
    for derived in catalog.derived:
        if derived.name == name:
            numerator = metrics.get(derived.numerator)
            denominator = metrics.get(derived.denominator)
            if numerator is None or denominator is None or denominator == 0:
                return None
            return numerator / denominator
    return None


def evaluate(catalog: Catalog, condition: Condition, metrics: Mapping[str, float]) -> bool | None:
    """Evaluate ``metric op threshold`` on ``metrics``; None when the metric is not recorded."""
    value = metric_value(catalog, metrics, condition.metric)
    if value is None:
        return None
    return bool(_COMPARE[condition.op](value, condition.threshold))


def describe(condition: Condition) -> str:
    """``metric op threshold`` as text."""
    return f"{condition.metric} {condition.op} {condition.threshold:g}"


def digest(
    catalog: Catalog, metrics: Mapping[str, float], top_k: int
) -> dict[str, tuple[str, ...]]:
    """The per-axis digest of a profile: for each axis, the first ``top_k`` of the catalog's
    ``axis_metrics`` whose value can be computed from ``metrics`` (recorded or derived)."""
    out: dict[str, tuple[str, ...]] = {}
    for axis in AXES:
        names = [
            n
            for n in catalog.axis_metrics.get(axis, ())
            if metric_value(catalog, metrics, n) is not None
        ]
        out[axis] = tuple(names[:top_k])
    return out


def catalog_metric_names(catalog: Catalog) -> list[str]:
    """Every raw metric a catalog's conditions and digests read (derived ones expanded)."""
    derived = {d.name: d for d in catalog.derived}
    names: set[str] = set()

    def add(name: str) -> None:
        if name in derived:
            names.update((derived[name].numerator, derived[name].denominator))
        elif not name.startswith("perfledger__"):
            names.add(name)

    for method_ in catalog.methods:
        for condition in (*method_.triggers, *method_.skips):
            add(condition.metric)
    for axis_names in catalog.axis_metrics.values():
        for name in axis_names:
            add(name)
    return sorted(names)


def to_builtins(catalog: Catalog) -> dict[str, Any]:
    """The catalog as builtins (for JSON output)."""
    result = msgspec.to_builtins(catalog)
    assert isinstance(result, dict)
    return result
