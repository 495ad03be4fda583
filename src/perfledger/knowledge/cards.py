"""The knowledge card format: one card per TOML file, validated by :class:`Card`.

A card states one mechanism or known fact (``statement``), the mechanisms and phenomena it is
about (tags a query matches), the conditions under which it holds and its sources. Unknown
fields are refused, so a misspelt condition (``sm_mn``) is an error naming the file and field,
never a condition silently ignored.

Example (``tma.toml``)::

    id = "hopper.tma"
    title = "Tensor Memory Accelerator: bulk asynchronous tensor copies"
    kind = "mechanism"
    statement = "..."
    mechanisms = ["tma", "async_copy"]
    phenomena = ["memory_bound", "address_generation_overhead"]

    [conditions]
    sm_min = "sm_90"
    toolkit_min = "12.0"

    [[sources]]
    title = "CUDA C++ Programming Guide"
    url = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
"""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from perfledger.errors import BadRequest

#: A card id: lower-case words joined by ``.``, ``_`` or ``-`` (``hopper.tma``).
CardId = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9._-]{0,127}$")]
#: A tag a query matches: lower-case, ``_``-joined words (``memory_bound``).
Tag = Annotated[str, Meta(pattern=r"^[a-z0-9][a-z0-9_.]{0,79}$")]
#: An SM architecture ``sm_XY`` with an optional feature suffix (``sm_90a``).
SmArch = Annotated[str, Meta(pattern=r"^sm_[0-9]{2,3}[af]?$")]
#: A dotted version (``12.0``, ``580.65.06``, ``3.1.0``).
Version = Annotated[str, Meta(pattern=r"^[0-9]+(\.[0-9]+){0,3}$")]
Text = Annotated[str, Meta(min_length=1, max_length=4000)]
Url = Annotated[str, Meta(pattern=r"^https?://[^\s]+$", max_length=500)]
CardKind = Literal["mechanism", "fact", "pitfall"]
SourceKind = Literal["docs", "paper", "repository", "blog"]

_SM = re.compile(r"^sm_([0-9]{2,3})")


class _Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of the parts of a card: closed, frozen."""


class Source(_Part, kw_only=True):
    """Where a card's statement comes from: a title, its URL and what kind of source it is.
    ``section`` names the part of a long document (a chapter or heading)."""

    title: Text
    url: Url
    kind: SourceKind = "docs"
    section: str = ""


class LibraryCondition(_Part, kw_only=True):
    """A library the statement depends on, with an inclusive version range (either end
    optional): ``name`` lower-case as the environment or ``--library`` names it (``triton``,
    ``cublas``, ``torch``, ``cutlass``, ``cupy``)."""

    name: Tag
    min: Version | None = None
    max: Version | None = None


class Conditions(_Part, kw_only=True):
    """When a card holds. Every bound is inclusive and optional (absent = no condition).

    Attributes:
        sm_min, sm_max: SM architecture range (``sm_90`` .. ``sm_100``); compared with the
            environment's compute capability (``9.0`` is ``sm_90``).
        cuda_min, cuda_max: CUDA driver API version (``perfledger env``'s
            ``cuda_driver_version``).
        toolkit_min, toolkit_max: CUDA toolkit version (nvcc's release).
        driver_min: NVIDIA driver version.
        libraries: library version ranges.
        dtypes: the data types the statement is about (``fp8_e4m3``); empty: any.
        shapes: shapes it is about, as text (listed in the answer, never checked).
    """

    sm_min: SmArch | None = None
    sm_max: SmArch | None = None
    cuda_min: Version | None = None
    cuda_max: Version | None = None
    toolkit_min: Version | None = None
    toolkit_max: Version | None = None
    driver_min: Version | None = None
    libraries: tuple[LibraryCondition, ...] = ()
    dtypes: tuple[Tag, ...] = ()
    shapes: str = ""


class Card(_Part, kw_only=True):
    """One knowledge card.

    Attributes:
        id: unique id (``hopper.tma``).
        title: one line.
        kind: ``mechanism`` (a way to make something faster), ``fact`` (how something behaves)
            or ``pitfall`` (a known way to be misled).
        statement: what the card says, with the figures its sources give.
        mechanisms: tags of the mechanisms it is about (``tma``, ``cuda_graphs``).
        phenomena: tags of what one observes when it applies (``launch_overhead``).
        catalog_methods: the loop catalog's method ids it informs (``memory.async_copy``).
        conditions: when it holds.
        sources: at least one source.
    """

    id: CardId
    title: Text
    kind: CardKind
    statement: Text
    mechanisms: Annotated[tuple[Tag, ...], Meta(min_length=1)]
    phenomena: tuple[Tag, ...] = ()
    catalog_methods: tuple[Annotated[str, Meta(pattern=r"^[a-z]+\.[a-z0-9_]+$")], ...] = ()
    conditions: Conditions = Conditions()
    sources: Annotated[tuple[Source, ...], Meta(min_length=1)]


class CardError(BadRequest):
    """A card that does not parse or does not fit the format (exit 2); the message names the
    file and the field."""

    code = "bad_card"


def sm_number(arch: str) -> int:
    """``sm_90a`` -> 90. Raises: ValueError for a string that is not an SM architecture."""
    match = _SM.match(arch)
    if match is None:
        raise ValueError(f"not an SM architecture: {arch!r}")
    return int(match.group(1))


def parse_card(text: str, origin: str) -> Card:
    """Parse and validate one card from its TOML ``text``; ``origin`` (a path) names it in errors.

    Returns: the :class:`Card`.
    Raises: CardError naming ``origin`` and the offending field (bad TOML, an unknown or missing
        field, a wrong type or pattern, an SM range whose minimum exceeds its maximum).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CardError(f"card {origin}: not valid TOML: {exc}") from None
    try:
        card = msgspec.convert(data, Card)
    except msgspec.ValidationError as exc:
        message = str(exc)
        where = re.search(r" - at `\$(?P<path>[^`]*)`$", message)
        if where:
            path = re.sub(r"\[(\d+)\]", r".\1", where.group("path")).lstrip(".") or "(card)"
            message = f"{path}: {message[: where.start()]}"
        raise CardError(
            f"card {origin}: {message}", hint="see docs/knowledge.md for the card format"
        ) from None
    c = card.conditions
    if c.sm_min and c.sm_max and sm_number(c.sm_min) > sm_number(c.sm_max):
        raise CardError(f"card {origin}: conditions.sm_min {c.sm_min} is above sm_max {c.sm_max}")
    return card


def check_unique(cards: list[tuple[str, Card]]) -> None:
    """Refuse two cards with one id (``(origin, card)`` pairs); raises CardError naming both."""
    seen: dict[str, str] = {}
    for origin, card in cards:
        if card.id in seen:
            raise CardError(f"card id {card.id!r} appears in {seen[card.id]} and in {origin}")
        seen[card.id] = origin
