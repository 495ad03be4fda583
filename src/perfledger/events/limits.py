"""Limits on what a ledger may hold and what perfledger reads from outside (docs/storage.md,
"Limits"; SPEC.md section 2).

Every reader of outside bytes (an event's ``event.json``, a commit, a tree, a ref, packed-refs,
a pulled history, a request file, stdin or an MCP argument) bounds what it accepts by these
constants, so that a hostile input ends in a clear error (an :class:`~perfledger.errors.
IntegrityError` naming the event in a ledger, a :class:`~perfledger.errors.BadRequest` in a
request) instead of a ``RecursionError``, an exhausted memory or a reader that never returns.

The limits on an event's shape are part of the storage format: an append refuses an event
outside them (BadRequest, nothing written) and ``verify``, ``audit``, ``pull`` and every reader
refuse one forged into a ledger (IntegrityError, exit 5); raising one is a new storage
format version (:data:`perfledger.ledger.layout.FORMAT_VERSION`, docs/storage.md "Limits").
They sit far outside what perfledger's own commands write (the recorded example session's
largest event is 1.3 MB deep 9, its longest string 252 characters, its longest array 620
items), so no ledger written by perfledger meets them.

Why each one: a nesting depth beyond ``MAX_DEPTH`` makes msgspec and the json module raise
``RecursionError``; a string, array or object beyond its limit, or an ``event.json`` beyond
``MAX_EVENT_BYTES``, only costs memory and time; more parents than ``MAX_PARENTS`` make every
merge walk quadratic; a ref name or a loose ref beyond its limit is not one git would write.
"""

from __future__ import annotations

from typing import Any

import msgspec

#: Largest ``event.json`` in bytes (canonical JSON of one envelope).
MAX_EVENT_BYTES = 64 * 1024 * 1024
#: Deepest nesting of arrays and objects in ``event.json``, the envelope itself level 1 (a
#: request or payload field holding a list of objects is at level 4).
MAX_DEPTH = 64
#: Longest string (an object key included) in ``event.json``, in characters.
MAX_STRING_CHARS = 1024 * 1024
#: Most elements of one array, or members of one object, in ``event.json``.
MAX_CONTAINER_ITEMS = 1_000_000
#: The integers canonical JSON holds: signed/unsigned 64 bits (``events.canonical``).
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
#: Most parents of one event (its event heads) and of one merge commit.
MAX_PARENTS = 256
#: Most artifacts attached to one event.
MAX_ARTIFACTS = 10_000
#: Largest raw commit object in bytes (an event commit is a few hundred; a merge of
#: ``MAX_PARENTS`` heads about 30,000).
MAX_COMMIT_BYTES = 256 * 1024
#: Largest raw tree object of an event in bytes (``MAX_ARTIFACTS`` entries of 104 bytes fit).
MAX_TREE_BYTES = 2 * 1024 * 1024
#: Longest ref name in bytes (``refs/heads/ledger``, a remote's tracking ref).
MAX_REF_NAME_BYTES = 1024
#: Largest loose ref file in bytes (a sha or a ``ref: <name>`` line).
MAX_REF_FILE_BYTES = MAX_REF_NAME_BYTES + 16
#: Decompression bombs (a git object whose zlib stream inflates far beyond its stored bytes):
#: an object, a received pack, or a delta's result may inflate to at most
#: ``max(INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO * its compressed bytes)``, checked from the
#: sizes git records before anything is inflated (a reader's bound, not a shape of the format:
#: text and tables compress 3-20 times, zlib at most about 1,000 times).
MAX_INFLATE_RATIO = 64
INFLATE_FLOOR_BYTES = 64 * 1024 * 1024
#: Largest request a command reads (a ``--request`` file, stdin), in bytes: a request is stored
#: in its event, so no larger one could be appended.
MAX_REQUEST_BYTES = MAX_EVENT_BYTES

#: The hint of an IntegrityError for a ledger that holds something outside these limits.
LEDGER_LIMITS_HINT = (
    "no perfledger writes this (docs/storage.md, Limits): the ledger was forged or damaged; "
    "restore it from a clone made before, or drop the events from this one on"
)

_STRUCT = msgspec.Struct
#: Each digit byte mapped to ``0``, every other byte to a space (:func:`has_long_digits`).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
#: A run of 19 digits: the only way JSON bytes can spell an integer outside 64 bits.
_LONG_RUN = b"0" * 19


def has_long_digits(data: bytes) -> bool:
    """True when ``data`` holds a run of 19 or more ASCII digits (the only way JSON bytes can
    spell an integer outside 64 bits: 2**64 - 1 has 20 digits, -2**63 has 19). A translation
    and a substring search, both in C: about four times faster than the regular expression
    ``[0-9]{19}``, which ``verify`` and ``audit`` ran twice over every event."""
    return _LONG_RUN in data.translate(_DIGITS_ONLY)


def bytes_within_shape(data: bytes) -> bool:
    """Cheap proof from the bytes alone that the JSON ``data`` is within every shape limit but
    the integer range: True when it is (no decode needed to know), False when it may not be.

    Counts are of bytes, strings included, so they only overstate depth and item counts; an
    integer outside 64 bits needs 19 digits or more."""
    return (
        not has_long_digits(data)
        and len(data) <= MAX_STRING_CHARS
        and data.count(b"[") + data.count(b"{") <= MAX_DEPTH
        and data.count(b",") < MAX_CONTAINER_ITEMS
    )


def shape_problem(value: Any, path: str = "$", depth: int = 1) -> str | None:
    """Return why ``value`` (builtins or msgspec Structs, as decoded or as a writer holds it)
    is outside the event-shape limits above, naming the JSON path and the limit; None when it
    is within them. ``depth`` is the nesting level of ``value`` in ``event.json`` (the envelope
    is level 1, a request or payload level 2). Iterative: any depth is walked without recursion.

    Integers are checked against the canonical range (``INT_MIN`` .. ``INT_MAX``) too."""
    # (value, its depth, its parent's path, its key or index): a path is joined only for a
    # container (to name its children) or a problem, not for every leaf
    stack: list[tuple[Any, int, str, Any]] = [(value, depth, path, None)]
    pop, push = stack.pop, stack.append
    while stack:
        item, level, parent, step = pop()
        kind = type(item)
        if kind is str:
            if len(item) > MAX_STRING_CHARS:
                where = _join(parent, step)
                return f"{where}: a string of {len(item)} characters (at most {MAX_STRING_CHARS})"
        elif kind is int:
            if not INT_MIN <= item <= INT_MAX:
                return f"{_join(parent, step)}: integer {item} is outside the 64-bit range"
        elif kind is dict or kind is list or kind is tuple or isinstance(item, _STRUCT):
            where = _join(parent, step)
            if level > MAX_DEPTH:
                return f"{where}: nests deeper than {MAX_DEPTH} levels"
            if kind is dict:
                if len(item) > MAX_CONTAINER_ITEMS:
                    return (
                        f"{where}: an object of {len(item)} members (at most {MAX_CONTAINER_ITEMS})"
                    )
                for key, sub in item.items():
                    if type(key) is str and len(key) > MAX_STRING_CHARS:
                        return (
                            f"{where}: a key of {len(key)} characters (at most {MAX_STRING_CHARS})"
                        )
                    push((sub, level + 1, where, key))
            elif kind is list or kind is tuple:
                if len(item) > MAX_CONTAINER_ITEMS:
                    return f"{where}: an array of {len(item)} items (at most {MAX_CONTAINER_ITEMS})"
                for index, sub in enumerate(item):
                    if type(sub) is not float:  # most items of a large array: nothing to check
                        push((sub, level + 1, where, index))
            else:
                for name in item.__struct_fields__:
                    push((getattr(item, name), level + 1, where, name))
    return None


def _join(parent: str, step: Any) -> str:
    """The JSON path of the member ``step`` (a key, an index, None: ``parent`` itself)."""
    if step is None:
        return parent
    return f"{parent}[{step}]" if type(step) is int else f"{parent}.{str(step)[:40]}"


def inflation_allowed(compressed_bytes: int) -> int:
    """The most bytes ``compressed_bytes`` of zlib streams may inflate to (see
    :data:`MAX_INFLATE_RATIO`)."""
    return max(INFLATE_FLOOR_BYTES, MAX_INFLATE_RATIO * compressed_bytes)


def event_size_problem(size: int) -> str | None:
    """Why an ``event.json`` of ``size`` bytes is too large, or None."""
    if size > MAX_EVENT_BYTES:
        return f"event.json is {size} bytes (at most {MAX_EVENT_BYTES})"
    return None


__all__ = [
    "INFLATE_FLOOR_BYTES",
    "INT_MAX",
    "INT_MIN",
    "LEDGER_LIMITS_HINT",
    "MAX_ARTIFACTS",
    "MAX_COMMIT_BYTES",
    "MAX_CONTAINER_ITEMS",
    "MAX_DEPTH",
    "MAX_EVENT_BYTES",
    "MAX_INFLATE_RATIO",
    "MAX_PARENTS",
    "MAX_REF_FILE_BYTES",
    "MAX_REF_NAME_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_STRING_CHARS",
    "MAX_TREE_BYTES",
    "bytes_within_shape",
    "event_size_problem",
    "has_long_digits",
    "inflation_allowed",
    "shape_problem",
]
