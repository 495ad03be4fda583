"""Canonical JSON (SPEC.md section 2): sorted keys, compact, UTF-8 unescaped, shortest floats,
NaN/Inf and out-of-range integers refused with the path named; plus property tests."""

from __future__ import annotations

import enum
import json
import math
import random
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import BadRequest, CanonicalEncodingError
from perfledger.events.canonical import (
    canonical_bytes,
    decode_json,
    is_canonical,
    to_canonical_value,
)

INT_MIN, INT_MAX = -(2**63), 2**64 - 1

#: Every JSON value canonical JSON can hold (lists and dicts only, so values round-trip as is).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=INT_MIN, max_value=INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    """Return ``value`` with every dict rebuilt in a random key insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _significant_digits(token: str) -> str:
    """The significant decimal digits of a float literal (``1.50e3`` -> ``15``)."""
    mantissa = token.lstrip("-").lower().split("e")[0].replace(".", "")
    return mantissa.strip("0") or "0"


# ------------------------------------------------------------------------------- the byte form


def test_keys_sorted_and_output_compact() -> None:
    """Keys are sorted by code point at every depth; no whitespace anywhere."""
    value = {"b": [1, {"z": None, "a": True}], "a": "x", "B": 2.5, "aa": {}, "é": []}
    assert canonical_bytes(value) == (
        b'{"B":2.5,"a":"x","aa":{},"b":[1,{"a":true,"z":null}],"\xc3\xa9":[]}'
    )


def test_keys_sort_by_code_point_beyond_the_bmp() -> None:
    """A key outside the BMP sorts after U+FFFF (code point order, not UTF-16 order)."""
    value = {"\U0001f600": 1, "\uffff": 2, "\u00e9": 3}
    assert canonical_bytes(value) == '{"é":3,"\uffff":2,"\U0001f600":1}'.encode()


def test_utf8_unescaped_and_controls_escaped() -> None:
    """Non-ASCII text is raw UTF-8; quotes, backslashes and control characters are escaped."""
    assert canonical_bytes("héllo ✓ \U0001f600") == '"héllo ✓ \U0001f600"'.encode()
    assert canonical_bytes('a"b\\c\nd\x00') == b'"a\\"b\\\\c\\nd\\u0000"'
    assert canonical_bytes("/") == b'"/"'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, b"1.0"),
        (0.1, b"0.1"),
        (-0.0, b"-0.0"),
        (100.0, b"100.0"),
        (1e16, b"1e16"),
        (1e-7, b"1e-7"),
        (1e300, b"1e300"),
        (5e-324, b"5e-324"),
        (1.0000000000000002, b"1.0000000000000002"),
        (1.7976931348623157e308, b"1.7976931348623157e308"),
    ],
)
def test_floats_in_shortest_round_trip_form(value: float, expected: bytes) -> None:
    """Floats are written in their shortest round-trip form, always recognisable as floats."""
    assert canonical_bytes(value) == expected
    assert decode_json(expected) == value


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_float_is_shortest_and_round_trips(value: float) -> None:
    """Every finite float re-reads exactly and has no more significant digits than Python's
    own shortest repr."""
    token = canonical_bytes(value).decode()
    assert float(token) == value and math.copysign(1, float(token)) == math.copysign(1, value)
    assert _significant_digits(token) == _significant_digits(repr(value))


def test_integers_at_the_64_bit_limits() -> None:
    """Integers from -2**63 to 2**64-1 are exact, written without a fraction."""
    assert canonical_bytes([INT_MIN, INT_MAX, 0]) == f"[{INT_MIN},{INT_MAX},0]".encode()


def test_tuples_are_arrays_and_structs_are_objects() -> None:
    """A tuple encodes as an array; a msgspec Struct as an object with sorted keys."""

    class Point(msgspec.Struct):
        y: int
        x: int

    assert canonical_bytes((1, 2)) == b"[1,2]"
    assert canonical_bytes({"p": Point(y=1, x=2)}) == b'{"p":{"x":2,"y":1}}'


# ------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (float("nan"), "$"),
        (float("inf"), "$"),
        (float("-inf"), "$"),
        ({"a": {"b": [1, float("nan")]}}, "$.a.b[1]"),
        ({"x": [0.5, {"y": float("inf")}]}, "$.x[1].y"),
        ([[float("-inf")]], "$[0][0]"),
        ((1.0, float("nan")), "$[1]"),
    ],
)
def test_nan_and_infinities_refused_naming_the_path(value: Any, path: str) -> None:
    """NaN, Inf and -Inf have no canonical form; the error names where the value is."""
    with pytest.raises(CanonicalEncodingError) as info:
        canonical_bytes(value)
    assert info.value.message.startswith(f"{path}: ")
    assert isinstance(info.value, BadRequest) and info.value.exit_code == 2


@pytest.mark.parametrize("number", [INT_MAX + 1, INT_MIN - 1, 10**30, -(10**30)])
def test_out_of_range_integers_refused(number: int) -> None:
    """Integers outside the signed/unsigned 64-bit range are refused, with their path."""
    with pytest.raises(CanonicalEncodingError, match=r"^\$\.n\[0\]: .*64-bit"):
        canonical_bytes({"n": [number]})


@pytest.mark.parametrize(
    "key",
    [1, 1.5, None, True, (1, 2), b"a"],
    ids=["int", "float", "none", "bool", "tuple", "bytes"],
)
def test_non_string_keys_refused(key: Any) -> None:
    """Object keys must be strings: any other key is refused, never coerced."""
    with pytest.raises(CanonicalEncodingError):
        canonical_bytes({"outer": {key: 1}})


def test_coerced_key_never_silently_drops_another_key() -> None:
    """Two distinct keys never collapse into one (no silent data loss)."""
    value = {b"a": 1, "YQ==": 2}  # b"a" in base64 is "YQ=="
    try:
        data = canonical_bytes(value)
    except CanonicalEncodingError:
        return
    assert len(decode_json(data)) == 2, data


@pytest.mark.parametrize("text", ["\ud800", "ok \udcff"], ids=["lone-high", "surrogateescape"])
def test_unencodable_text_is_a_canonical_encoding_error(text: str) -> None:
    """Text that has no UTF-8 form (a lone surrogate, e.g. from a command line byte that is not
    UTF-8) is refused as a CanonicalEncodingError (a bad request), not a UnicodeEncodeError."""
    with pytest.raises(CanonicalEncodingError):
        canonical_bytes({"text": text})


def test_unsupported_type_refused() -> None:
    """A value of a type with no JSON form is refused."""
    with pytest.raises(CanonicalEncodingError):
        canonical_bytes({"f": object()})


# ------------------------------------------------------------------------------- is_canonical


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1, "b":2}',
        b' {"a":1}',
        b'{"a":1}\n',
        b"[1,\n2]",
        b'{"b":1,"a":2}',
        b'{"a":1,"a":1}',
        b'{"a":1,"a":2}',
        b"1.00",
        b"1E2",
        b"1e2",
        b"-0",
        b'"\\u0041"',
        b'"\\/"',
        b'"\\u00e9"',
        b"NaN",
        b"18446744073709551616",
        b'{"a":',
        b"",
        b"\xff",
    ],
)
def test_is_canonical_false(data: bytes) -> None:
    """Whitespace, unsorted or duplicate keys, non-shortest numbers, needless escapes, invalid
    JSON: not canonical."""
    assert is_canonical(data) is False


@pytest.mark.parametrize(
    "data", [b'{"a":1,"b":[true,null,1.5,"x"]}', b"[]", b"{}", b'"\xc3\xa9"', b"100.0", b"1e16"]
)
def test_is_canonical_true(data: bytes) -> None:
    """Exactly canonical bytes are recognised."""
    assert is_canonical(data) is True


def test_to_canonical_value_returns_plain_builtins() -> None:
    """The checked value is builtins with keys in sorted order, encoding as the original."""
    original = {"b": [1, 2], "a": {"d": 1, "c": 2}}
    value = to_canonical_value(original)
    assert value == original
    assert list(value) == ["a", "b"] and list(value["a"]) == ["c", "d"]
    assert canonical_bytes(value) == canonical_bytes(original)


# ------------------------------------------------------------------------------- properties


@settings(max_examples=100)
@given(json_values)
def test_property_deterministic(value: Any) -> None:
    """Encoding the same value twice gives the same bytes, and they are canonical."""
    first = canonical_bytes(value)
    assert canonical_bytes(value) == first
    assert is_canonical(first)


@settings(max_examples=100)
@given(json_values)
def test_property_round_trip(value: Any) -> None:
    """decode(canonical_bytes(v)) is v again and re-encodes to the very same bytes."""
    data = canonical_bytes(value)
    decoded = decode_json(data)
    assert decoded == value
    assert canonical_bytes(decoded) == data


@settings(max_examples=100)
@given(json_values, st.randoms(use_true_random=False))
def test_property_key_order_never_matters(value: Any, rng: random.Random) -> None:
    """Rebuilding every object with another key insertion order never changes the bytes."""
    assert canonical_bytes(_shuffled(value, rng)) == canonical_bytes(value)


@settings(max_examples=100)
@given(json_values)
def test_property_agrees_with_stdlib_json_structure(value: Any) -> None:
    """Apart from number spelling, the bytes are what the standard library writes with sorted
    keys, no whitespace and no ASCII escaping: parsing both gives the same value."""
    reference = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(canonical_bytes(value)) == json.loads(reference)
    if not any(isinstance(x, float) for x in _leaves(value)):
        assert canonical_bytes(value) == reference.encode()


def _leaves(value: Any) -> list[Any]:
    """All scalar leaves of a JSON value."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


# ----------------------------------------------------- Structs encoded directly (fast path)


class _Plain(msgspec.Struct):
    b: Any
    a: Any = None


class _Omitting(msgspec.Struct, omit_defaults=True, rename="camel"):
    field_two: Any = None
    field_one: Any = 0


class _Tagged(msgspec.Struct, tag=True, kw_only=True):
    z: Any
    y: tuple[Any, ...] = ()


class _Colour(enum.Enum):
    RED = "red"


def _builtins_route(value: Any) -> bytes:
    """The reference: convert to checked builtins, then encode (what canonical_bytes did
    before it encoded Structs directly)."""
    return msgspec.json.Encoder(order="sorted").encode(to_canonical_value(value))


#: json_values nested in Structs of each configuration (defaults, renames, tags, tuples).
struct_values = st.recursive(
    json_values,
    lambda children: st.one_of(
        st.builds(_Plain, children, children),
        st.builds(_Omitting, children, children),
        st.builds(_Tagged, z=children, y=st.lists(children, max_size=3).map(tuple)),
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(struct_values)
def test_property_structs_encode_as_their_builtins(value: Any) -> None:
    """canonical_bytes encodes Struct trees directly; the bytes must equal the builtins
    route's for every Struct configuration."""
    assert canonical_bytes(value) == _builtins_route(value)


@pytest.mark.parametrize(
    ("inner", "fragment"),
    [
        (float("nan"), "not allowed"),
        (float("-inf"), "not allowed"),
        (2**64, "64-bit"),
        ({1: "x"}, "not a string"),
        (b"raw", "type bytes"),
    ],
)
def test_problems_inside_structs_refused_naming_the_path(inner: Any, fragment: str) -> None:
    with pytest.raises(CanonicalEncodingError, match=fragment) as caught:
        canonical_bytes(_Plain(b={"deep": [_Omitting(field_two=inner)]}))
    assert "$.b.deep[0].fieldTwo" in caught.value.message


def test_values_needing_conversion_take_the_builtins_route() -> None:
    """Enums and sets are converted as before (by value; sets sorted), not refused."""
    value = _Plain(b=_Colour.RED, a={"s": {3, 1, 2}})
    assert canonical_bytes(value) == b'{"a":{"s":[1,2,3]},"b":"red"}'
