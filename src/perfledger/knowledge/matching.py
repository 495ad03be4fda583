"""Match knowledge cards against a query and an environment identity (pure).

Each card the query selects is classified:

- ``incompatible``: a stated condition is contradicted by the environment (``needs sm_90..sm_90,
  environment sm_80``);
- ``related``: nothing is contradicted, but at least one stated condition could not be checked
  (the environment does not say, no environment was given, or the card is about dtypes and the
  query named none);
- ``compatible``: every stated condition was checked and holds.

The differences are listed exactly, one line per condition. The query never decides: it selects
no method and refuses nothing, and an empty result says only that no card matched, never that a
mechanism is unsupported (R6: knowledge is diagnostic context).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec
from packaging.version import InvalidVersion
from packaging.version import Version as _V

from perfledger.knowledge.cards import Card, sm_number

Status = Literal["compatible", "related", "incompatible"]
#: The order results are listed in.
STATUS_ORDER: tuple[Status, ...] = ("compatible", "related", "incompatible")
#: Printed with every answer, whatever it holds (SPEC.md R6: an empty result blocks nothing).
EMPTY_BLOCKS_NOTHING = (
    "A query never decides: no matching card is not evidence that a mechanism is unsupported, "
    "and an incompatible card only says where its stated conditions differ from this environment."
)
_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)+")


class EnvFacts(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of an environment identity a card's conditions are compared with; None where
    unknown.

    Attributes:
        sm: SM architecture number (``90`` for compute capability 9.0).
        cuda: CUDA driver API version (``13.0``).
        toolkit: CUDA toolkit (nvcc) release (``13.0``).
        driver: NVIDIA driver version (``580.65.06``).
        libraries: lower-case library name -> version.
        gpu: the GPU's name (shown only).
    """

    sm: int | None = None
    cuda: str | None = None
    toolkit: str | None = None
    driver: str | None = None
    libraries: dict[str, str] = msgspec.field(default_factory=dict)
    gpu: str | None = None


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One condition of a card compared with the environment: ``condition`` (``sm``, ``cuda``,
    ``toolkit``, ``driver``, ``library:NAME``, ``dtype``), ``outcome`` ``contradicted`` or
    ``unknown``, and the exact ``text`` (``needs sm_90..sm_100, environment sm_80``)."""

    condition: str
    outcome: Literal["contradicted", "unknown"]
    text: str


class Match(msgspec.Struct, frozen=True, kw_only=True):
    """A card the query selected and how it compares with the environment.

    Attributes:
        card: the card.
        status: ``compatible``, ``related`` or ``incompatible`` (see the module docstring).
        differences: every condition that was contradicted or could not be checked.
        notes: conditions never checked (shapes), shown for the reader.
        matched_on: the tags the query terms matched (empty for a query without terms).
        origin: where the card was read from.
    """

    card: Card
    status: Status
    differences: tuple[Difference, ...]
    notes: tuple[str, ...]
    matched_on: tuple[str, ...]
    origin: str


def _version(text: str | None) -> str | None:
    """The first dotted version in ``text`` (``release 13.0, V13.0.48`` -> ``13.0``)."""
    if not text:
        return None
    found = _VERSION.search(str(text))
    return found.group(0) if found else None


def env_facts(env: Mapping[str, Any], libraries: Mapping[str, str] | None = None) -> EnvFacts:
    """Read the facts a card is compared with from ``perfledger env --json``'s object (keys
    ``compute_capability``, ``cuda_driver_version``, ``nvcc_version``, ``driver_version``,
    ``cupy_version``, ``gpu_name``; others ignored; an optional ``libraries`` object of name ->
    version), plus ``libraries`` the caller states (``--library triton=3.1.0``), which win.

    Raises: ValueError naming the key whose value is not of the expected shape.
    """
    for key in ("compute_capability", "cuda_driver_version", "nvcc_version", "driver_version",
                "cupy_version", "gpu_name"):  # fmt: skip
        if env.get(key) is not None and not isinstance(env[key], str):
            raise ValueError(f"{key} must be a string or null, got {type(env[key]).__name__}")
    sm = None
    cc = env.get("compute_capability")
    if cc:
        match = re.fullmatch(r"([0-9]+)\.([0-9])", cc)
        if match is None:
            raise ValueError(f"compute_capability {cc!r} is not MAJOR.MINOR (e.g. 9.0)")
        sm = int(match.group(1)) * 10 + int(match.group(2))
    libs: dict[str, str] = {}
    if env.get("cupy_version"):
        libs["cupy"] = env["cupy_version"]
    extra = env.get("libraries") or {}
    if not isinstance(extra, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
    ):
        raise ValueError("libraries must be an object of name -> version strings")
    libs.update({k.lower(): v for k, v in extra.items()})
    libs.update({k.lower(): v for k, v in (libraries or {}).items()})
    return EnvFacts(
        sm=sm,
        cuda=_version(env.get("cuda_driver_version")),
        toolkit=_version(env.get("nvcc_version")),
        driver=_version(env.get("driver_version")) or env.get("driver_version"),
        libraries=libs,
        gpu=env.get("gpu_name"),
    )


def _ver(text: str) -> _V | None:
    try:
        return _V(text)
    except InvalidVersion:
        return None


def _range_text(low: str | None, high: str | None, fmt: str = "{}") -> str:
    if low and high:
        return f"{fmt.format(low)}..{fmt.format(high)}"
    return f">= {fmt.format(low)}" if low else f"<= {fmt.format(high)}"


def _compare_version(
    condition: str, label: str, low: str | None, high: str | None, actual: str | None
) -> Difference | None:
    """A version range against a known or unknown version; None when it holds."""
    if low is None and high is None:
        return None
    needs = f"needs {label} {_range_text(low, high)}"
    parsed = _ver(actual) if actual else None
    if parsed is None:
        shown = f"unreadable ({actual!r})" if actual else "unknown"
        return Difference(
            condition=condition, outcome="unknown", text=f"{needs}, environment's {label} {shown}"
        )
    if (low is not None and parsed < _V(low)) or (high is not None and parsed > _V(high)):
        return Difference(
            condition=condition, outcome="contradicted", text=f"{needs}, environment {actual}"
        )
    return None


def compare(card: Card, env: EnvFacts | None, dtype: str | None = None) -> list[Difference]:
    """Every condition of ``card`` that ``env`` (None: no environment given) contradicts or
    cannot confirm, and a stated dtype list against the query's ``dtype``. Pure."""
    c = card.conditions
    out: list[Difference] = []
    if c.sm_min or c.sm_max:
        if c.sm_min and c.sm_max:
            needs = f"needs {c.sm_min}..{c.sm_max}"
        else:
            needs = f"needs {c.sm_min} or later" if c.sm_min else f"needs {c.sm_max} or earlier"
        if env is None or env.sm is None:
            out.append(Difference(condition="sm", outcome="unknown",
                                  text=f"{needs}, environment's SM architecture unknown"))  # fmt: skip
        elif (c.sm_min and env.sm < sm_number(c.sm_min)) or (
            c.sm_max and env.sm > sm_number(c.sm_max)
        ):
            out.append(Difference(condition="sm", outcome="contradicted",
                                  text=f"{needs}, environment sm_{env.sm}"))  # fmt: skip
    facts = env or EnvFacts()
    checks = [
        ("cuda", "CUDA (driver API)", c.cuda_min, c.cuda_max, facts.cuda),
        ("toolkit", "CUDA toolkit", c.toolkit_min, c.toolkit_max, facts.toolkit),
        ("driver", "driver", c.driver_min, None, facts.driver),
    ]
    checks += [
        (f"library:{lib.name}", lib.name, lib.min, lib.max, facts.libraries.get(lib.name))
        for lib in c.libraries
    ]
    for condition, label, low, high, actual in checks:
        diff = _compare_version(condition, label, low, high, actual)
        named_only = condition.startswith("library:") and low is None and high is None
        if diff is None and named_only and actual is None:
            # a library named without a range still has to be there
            diff = Difference(condition=condition, outcome="unknown",
                              text=f"needs {label}, environment's {label} unknown")  # fmt: skip
        if diff is not None:
            out.append(diff)
    if c.dtypes:
        needs = f"needs dtype {' or '.join(c.dtypes)}"
        if dtype is None:
            out.append(Difference(condition="dtype", outcome="unknown",
                                  text=f"{needs}, no dtype given (--dtype)"))  # fmt: skip
        elif _norm(dtype) not in c.dtypes:
            out.append(Difference(condition="dtype", outcome="contradicted",
                                  text=f"{needs}, query dtype {dtype}"))  # fmt: skip
    return out


def classify(differences: Iterable[Difference]) -> Status:
    """``incompatible`` if any difference is a contradiction, ``related`` if any is unknown,
    else ``compatible``."""
    outcomes = {d.outcome for d in differences}
    if "contradicted" in outcomes:
        return "incompatible"
    return "related" if "unknown" in outcomes else "compatible"


def _norm(term: str) -> str:
    """Lower-case, words joined by ``_`` (``Memory-bound`` -> ``memory_bound``)."""
    return re.sub(r"[\s\-/]+", "_", term.strip().lower())


def _hits(terms: Iterable[str], tags: Iterable[str]) -> tuple[bool, list[str]]:
    """Whether every term matches some tag (equal, or a part of it), and the tags matched."""
    tags = list(tags)
    matched: list[str] = []
    for term in terms:
        found = [t for t in tags if _norm(term) in t]
        if not found:
            return False, []
        matched += [t for t in found if t not in matched]
    return True, matched


def query(
    cards: Iterable[tuple[str, Card]],
    env: EnvFacts | None,
    *,
    phenomena: Iterable[str] = (),
    mechanisms: Iterable[str] = (),
    dtype: str | None = None,
) -> list[Match]:
    """Select the cards (``(origin, card)`` pairs) whose tags match every query term and
    classify each against ``env``.

    A phenomenon term matches a card's ``phenomena``; a mechanism term its ``mechanisms``,
    ``catalog_methods`` or ``id``; a term matches a tag it equals or is part of
    (``bandwidth`` matches ``low_dram_bandwidth``), case and ``-``/space insensitive. Without
    terms every card is selected.

    Returns: the matches, compatible first, then related, then incompatible, each by card id.
    """
    phenomena, mechanisms = list(phenomena), list(mechanisms)
    out: list[Match] = []
    for origin, card in cards:
        ok_p, on_p = _hits(phenomena, card.phenomena)
        ok_m, on_m = _hits(mechanisms, (*card.mechanisms, *card.catalog_methods, card.id))
        if not (ok_p and ok_m):
            continue
        diffs = compare(card, env, dtype)
        notes = (
            (f"applies to shapes: {card.conditions.shapes} (not checked)",)
            if (card.conditions.shapes)
            else ()
        )
        out.append(
            Match(card=card, status=classify(diffs), differences=tuple(diffs), notes=notes,
                  matched_on=tuple(on_p + on_m), origin=origin)
        )  # fmt: skip
    out.sort(key=lambda m: (STATUS_ORDER.index(m.status), m.card.id))
    return out
