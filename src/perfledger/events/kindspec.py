"""What an event kind is (:class:`KindSpec`) and the registry each vocabulary module registers
its kinds into on import (:func:`register_kind`). Looking kinds up, upcasting and validating are
:mod:`perfledger.events.kinds`; the full set of kinds is :mod:`perfledger.events.vocabulary`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

#: An upcaster turns a payload of version ``v`` (builtins) into one of version ``v + 1``.
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class KindSpec:
    """The registration of one event kind.

    Attributes:
        kind: the kind's name, e.g. ``LedgerInitialized``.
        version: the current schema version (>= 1).
        payload_type: the frozen msgspec Struct the current payload decodes into.
        upcasters: ``{v: f}`` where ``f`` lifts a version-``v`` payload to version ``v + 1``;
            one for every ``v`` in ``1 .. version-1``.
        summary: one-line summary of a payload for the commit message (no newline).
        legacy_summaries: summaries earlier perfledger versions wrote; ``verify`` accepts a
            commit subject made by any of them or by ``summary``, and no other.
    """

    kind: str
    version: int
    payload_type: type[msgspec.Struct]
    upcasters: Mapping[int, Upcaster] = field(default_factory=dict)
    summary: Callable[[Any], str] = lambda payload: ""
    legacy_summaries: tuple[Callable[[Any], str], ...] = ()

    def __post_init__(self) -> None:
        missing = [v for v in range(1, self.version) if v not in self.upcasters]
        if missing:
            raise ValueError(f"kind {self.kind}: no upcaster from schema version(s) {missing}")


#: kind name -> its registration (filled by the vocabulary modules on import)
_REGISTRY: dict[str, KindSpec] = {}


def register_kind(spec: KindSpec) -> KindSpec:
    """Register ``spec`` (idempotent for the same spec); returns it.

    Raises: ValueError when another spec is already registered under the same kind.
    """
    existing = _REGISTRY.get(spec.kind)
    if existing is not None and existing != spec:
        raise ValueError(f"kind {spec.kind} is already registered differently")
    _REGISTRY[spec.kind] = spec
    return spec


__all__ = ["KindSpec", "Upcaster", "register_kind"]
