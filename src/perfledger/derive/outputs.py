"""The output comparison rule of R5 (SPEC.md section 5, "Workload driver"): how two outputs
a workload's calls wrote are decoded and compared, by the process that measured them and again
by an auditor from the kept bytes (:func:`rejudge`). Reading the files is
:mod:`perfledger.kernels.workload.outputs`.

Output formats (told apart by their first bytes, whatever the file is called):

- ``.npy`` (``numpy.save``): one array;
- ``.npz`` (``numpy.savez``/``savez_compressed``): named arrays; both sides must hold the same
  names, each compared as an array;
- JSON (UTF-8): any document; numbers compared by the rule, everything else exactly (a JSON
  ``true`` is not ``1``).

``numpy.save(path, a)`` appends ``.npy`` to a path without it (and ``savez`` ``.npz``): the output
is the file at the path, or else the one file ``path + ".npy" | ".npz" | ".json"``.

The rule (:data:`METHOD`): the candidate's output has the reference's form: the same kind
(``.npy``, ``.npz`` or JSON), for arrays the same names (``.npz``), shape and dtype (byte order
and precision included: float16 where the reference wrote float32 is a mismatch, whatever the
values), for JSON the same structure (containers, keys, lengths, value types). Then ``exact``:
equal values; ``allclose``: ``|cand - ref| <= atol + rtol * |ref|`` element-wise (numpy's
``isclose``), on numbers; non-numeric arrays and JSON strings, booleans and nulls are compared
exactly. (:data:`METHOD_V1`, recorded before, let ``allclose`` compare numeric arrays of any
dtype.) NaN is
never equal to anything, NaN included; an infinity equals only the same infinity. Object arrays
are never loaded (no pickle): such an output is unreadable.

Imports: the standard library, numpy and blake3; no I/O.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import blake3

#: The comparison rule's version, recorded with every check: ``outputs_v2`` holds ``allclose``
#: arrays to the reference's dtype (byte order included) as ``exact`` always did; checks
#: recorded as ``outputs_v1`` are re-made by that rule (``allclose`` took any numeric dtype).
METHOD = "outputs_v2"
#: The earlier rule: ``allclose`` compared numeric arrays of any dtype by value.
METHOD_V1 = "outputs_v1"
#: Largest output file read (bytes): a larger one is an incorrect call.
OUTPUT_MAX_BYTES = 256 * 1024 * 1024
#: Largest total size of the arrays in an ``.npz`` output once inflated (bytes).
NPZ_MAX_INFLATED_BYTES = 4 * OUTPUT_MAX_BYTES
#: Largest output file whose bytes are kept in the raw table's artifacts (bytes).
STORE_MAX_BYTES = 64 * 1024
#: Artifact name prefix of a kept output (``output-<blake3 hex>``).
OUTPUT_ARTIFACT_PREFIX = "output-"
#: Most differing elements named in a mismatch reason.
_SHOWN = 3


def output_artifact_name(blake3_hex: str) -> str:
    """The artifact name under which a kept output's bytes are attached to its samples."""
    return OUTPUT_ARTIFACT_PREFIX + blake3_hex


@dataclass(frozen=True)
class Output:
    """What one call wrote at its output place.

    Attributes:
        data: the file's bytes, None when it could not be read.
        blake3: blake3 hex of ``data`` (None without data).
        size: bytes (None without data).
        error: why the output is unusable ('' when it was read).
    """

    data: bytes | None
    blake3: str | None
    size: int | None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        """The call's output as recorded: digest, size, error and, for a small one, the artifact
        name its bytes are kept under (``stored``, None when too large or absent)."""
        stored = (
            output_artifact_name(self.blake3)
            if self.data is not None and self.blake3 and len(self.data) <= STORE_MAX_BYTES
            else None
        )
        return {"blake3": self.blake3, "size": self.size, "error": self.error, "stored": stored}


# ------------------------------------------------------------------------------ loading


def load(data: bytes) -> tuple[str, Any]:
    """Decode an output's bytes: ``("npy", array)``, ``("npz", {name: array})`` or
    ``("json", value)``, by the first bytes. Raises: ValueError when it is none of them (or an
    object array, which would need pickle)."""
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    if data.startswith(b"\x93NUMPY"):
        _check_npy_header(io.BytesIO(data), len(data))
        return "npy", np.load(io.BytesIO(data), allow_pickle=False)
    if data.startswith(b"PK\x03\x04") or data.startswith(b"PK\x05\x06"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as members:  # a small file can inflate hugely
                inflated = sum(info.file_size for info in members.infolist())
                if inflated > NPZ_MAX_INFLATED_BYTES:
                    raise ValueError(
                        f".npz archive inflates to {inflated} bytes, more than the "
                        f"{NPZ_MAX_INFLATED_BYTES} read"
                    )
                for info in members.infolist():
                    if info.filename.endswith(".npy"):
                        with members.open(info) as member:
                            _check_npy_header(member, info.file_size, info.filename)
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                return "npz", {name: archive[name] for name in archive.files}
        except zipfile.BadZipFile as exc:
            raise ValueError(f"not a readable .npz archive ({exc})") from None
    try:
        return "json", json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"neither .npy, .npz nor JSON ({type(exc).__name__}: {exc})") from None


def _check_npy_header(stream: Any, size: int, name: str = "") -> None:
    """Refuse an ``.npy`` whose header declares more data than the file holds, before numpy
    allocates it: numpy reserves the declared array first, so a few bytes declaring 2**40
    elements would make the measuring process die of MemoryError (or swap). ``stream`` is at
    the file's start; ``size`` is the file's length (bytes). Raises: ValueError."""
    from numpy.lib import format as npformat  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    version = npformat.read_magic(stream)
    if version == (1, 0):
        shape, _fortran, dtype = npformat.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, _fortran, dtype = npformat.read_array_header_2_0(stream)
    else:  # 3.0 (UTF-8 field names) has no public reader
        shape, _fortran, dtype = npformat._read_array_header(stream, version)
    if dtype.hasobject:
        return  # numpy refuses it without pickle
    declared = math.prod(shape) * dtype.itemsize
    held = size - stream.tell()
    if declared > held:
        where = f"{name}: " if name else ""
        raise ValueError(
            f"{where}its header declares shape {shape} of {dtype} ({declared} bytes), the file "
            f"holds {held} bytes"
        )


def _decode(data: bytes, who: str) -> tuple[str, Any]:
    try:
        return load(data)
    except (ValueError, OSError, EOFError, MemoryError) as exc:  # numpy's for a torn file
        raise _Mismatch(f"the {who}'s output is unreadable: {exc}") from None


class _Mismatch(Exception):
    """Why two outputs differ (internal: turned into a reason)."""


# ------------------------------------------------------------------------------ comparing


def compare(
    ref: bytes,
    cand: bytes,
    compare: str,
    rtol: float = 0.0,
    atol: float = 0.0,
    method: str = METHOD,
) -> str:
    """Compare a candidate's output with its reference's (the rule in the module docstring).

    Args:
        ref, cand: the two outputs' bytes.
        compare: ``exact`` or ``allclose``.
        rtol, atol: the tolerances of ``allclose`` (ratios; units of the values), >= 0.
        method: the rule's version (:data:`METHOD`, or :data:`METHOD_V1` for checks recorded
            under it).
    Returns: '' when they match, else the reason, for people (the first differences).
    Raises: ValueError for an unknown ``compare`` or ``method``.
    """
    if compare not in ("exact", "allclose"):
        raise ValueError(f"compare must be 'exact' or 'allclose', not {compare!r}")
    if method not in (METHOD, METHOD_V1):
        raise ValueError(f"unknown output comparison method {method!r}")
    same_dtype = method != METHOD_V1
    try:
        ref_kind, ref_value = _decode(ref, "reference")
        cand_kind, cand_value = _decode(cand, "candidate")
        if ref_kind != cand_kind:
            raise _Mismatch(f"the candidate wrote {cand_kind}, the reference {ref_kind}")
        tol = (rtol, atol) if compare == "allclose" else None
        if ref_kind == "npy":
            _arrays(ref_value, cand_value, tol, "the array", same_dtype)
        elif ref_kind == "npz":
            if sorted(ref_value) != sorted(cand_value):
                raise _Mismatch(
                    f"arrays {sorted(cand_value)} in the candidate's archive, "
                    f"{sorted(ref_value)} in the reference's"
                )
            for name in sorted(ref_value):
                _arrays(ref_value[name], cand_value[name], tol, f"array {name!r}", same_dtype)
        else:
            _json(ref_value, cand_value, tol, "$")
    except _Mismatch as exc:
        return str(exc)
    except RecursionError:
        return "the outputs are nested too deeply to compare"
    return ""


def _arrays(
    ref: Any, cand: Any, tol: tuple[float, float] | None, where: str, same_dtype: bool = True
) -> None:
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    if ref.shape != cand.shape:
        raise _Mismatch(
            f"{where}: shape {cand.shape} in the candidate, {ref.shape} in the reference"
        )
    numeric = all(np.issubdtype(a.dtype, np.number) and a.dtype.kind != "V" for a in (ref, cand))
    # dtype.str names byte order and width ('<f4', '>f4', '<f2'): a precision downgrade or a
    # byte-swapped copy is another output, even when its values round to the reference's
    if (same_dtype or tol is None or not numeric) and ref.dtype.str != cand.dtype.str:
        raise _Mismatch(
            f"{where}: dtype {cand.dtype.str} ({cand.dtype}) in the candidate, {ref.dtype.str} "
            f"({ref.dtype}) in the reference"
        )
    if tol is None or not numeric:
        if ref.dtype != cand.dtype:
            raise _Mismatch(
                f"{where}: dtype {cand.dtype} in the candidate, {ref.dtype} in the reference"
            )
        if numeric:
            same = np.asarray(cand == ref)
            if ref.dtype.kind in "fc":  # NaN never equal, NaN included (== says so already)
                same = same & ~np.isnan(ref)
        else:
            same = np.asarray(cand == ref)
            if same.shape != ref.shape:  # structured or odd dtypes: compare the raw bytes
                same = np.full(ref.shape, cand.tobytes() == ref.tobytes())
    else:
        rtol, atol = tol
        with np.errstate(all="ignore"):
            same = np.isclose(cand, ref, rtol=rtol, atol=atol, equal_nan=False)
    if bool(np.all(same)):
        return
    bad = np.argwhere(~np.asarray(same, dtype=bool))
    shown = ", ".join(
        f"{tuple(int(i) for i in idx)}: {cand[tuple(idx)]!r} vs {ref[tuple(idx)]!r}"
        for idx in bad[:_SHOWN]
    )
    rule = "exactly" if tol is None else f"within rtol={tol[0]:g}, atol={tol[1]:g}"
    raise _Mismatch(
        f"{where}: {len(bad)} of {ref.size} elements differ from the reference's {rule} "
        f"(candidate vs reference at {shown})"
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _close_as_fractions(ref: Any, cand: Any, tol: tuple[float, float] | None) -> bool:
    """The rule on two JSON numbers one of which is an integer too large for a float: exactly
    (as rationals, no rounding); NaN and infinities never equal such an integer."""

    if any(isinstance(v, float) and not math.isfinite(v) for v in (ref, cand)):
        return False
    if tol is None:
        return bool(cand == ref)
    diff = abs(Fraction(cand) - Fraction(ref))
    return diff <= Fraction(tol[1]) + Fraction(tol[0]) * abs(Fraction(ref))


def _json(ref: Any, cand: Any, tol: tuple[float, float] | None, where: str) -> None:
    if _number(ref) and _number(cand):
        try:
            a, b = float(cand), float(ref)
        except OverflowError:  # an integer beyond a float's range: compared as fractions
            if not _close_as_fractions(ref, cand, tol):
                raise _Mismatch(
                    f"{where}: {cand!r} in the candidate, {ref!r} in the reference"
                ) from None
            return
        if math.isnan(a) or math.isnan(b):
            raise _Mismatch(f"{where}: NaN is never equal ({cand!r} vs {ref!r})")
        if math.isinf(b) or math.isinf(a):
            ok = a == b
        elif tol is None:
            ok = cand == ref
        else:
            ok = abs(a - b) <= tol[1] + tol[0] * abs(b)
        if not ok:
            raise _Mismatch(f"{where}: {cand!r} in the candidate, {ref!r} in the reference")
        return
    if type(ref) is not type(cand):
        raise _Mismatch(
            f"{where}: {type(cand).__name__} in the candidate, {type(ref).__name__} in the reference"
        )
    if isinstance(ref, list):
        if len(ref) != len(cand):
            raise _Mismatch(
                f"{where}: {len(cand)} items in the candidate, {len(ref)} in the reference"
            )
        for i, (r, c) in enumerate(zip(ref, cand, strict=True)):
            _json(r, c, tol, f"{where}[{i}]")
    elif isinstance(ref, dict):
        if sorted(ref) != sorted(cand):
            raise _Mismatch(
                f"{where}: keys {sorted(cand)} in the candidate, {sorted(ref)} in the reference"
            )
        for key in sorted(ref):
            _json(ref[key], cand[key], tol, f"{where}.{key}")
    elif ref != cand:
        raise _Mismatch(f"{where}: {cand!r} in the candidate, {ref!r} in the reference")


def judge_pair(
    ref: Output, cand: Output, compare_rule: str, rtol: float, atol: float, method: str = METHOD
) -> str:
    """Why the candidate's output of a pair is not accepted, or '' when it matches the
    reference's: the candidate's own output unusable, the reference's unusable (then the pair
    has no verdict: the reference failed, R11), or the comparison's reason (by ``method``,
    :func:`compare`)."""
    if cand.data is None:
        return f"output: {cand.error}"
    if ref.data is None:
        return f"output: the reference's output is unusable ({ref.error}): nothing to compare with"
    # compared even when the bytes are the same: a NaN in both is never equal
    reason = compare(ref.data, cand.data, compare_rule, rtol, atol, method)
    return f"output: {reason}" if reason else ""


def _trivial_arrays(ref: Any) -> list[tuple[str, Any]]:
    """Outputs of ``ref``'s shape and dtype that do no work: zeros, every element the
    reference's mean, the reference's rows in reverse order (where that changes them)."""
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    if ref.dtype.kind not in "biufc" or ref.size < 2:
        return [("zeros", np.zeros_like(ref))] if ref.dtype.kind in "biufc" else []
    with np.errstate(all="ignore"):
        mean = np.asarray(ref).mean()
    out = [("zeros", np.zeros_like(ref)), ("its mean everywhere", np.full_like(ref, mean))]
    flipped = ref[::-1] if ref.ndim >= 1 and ref.shape[0] > 1 else ref
    if flipped.tobytes() != ref.tobytes():
        out.append(("its rows in reverse order", flipped))
    return out


def _trivial_json(value: Any) -> Any:
    """``value`` with every number 0 (the same structure, no work)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return 0
    if isinstance(value, list):
        return [_trivial_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _trivial_json(v) for k, v in value.items()}
    return value


def trivial_output_passes(
    ref: bytes, compare_rule: str, rtol: float, atol: float, method: str = METHOD
) -> str:
    """Whether the accuracy rule accepts, against the reference's output ``ref``, an output
    that does no work: zeros, a constant (the reference's mean), the reference's rows in
    another order (R5: an accuracy rule the readiness declares is checked against what was
    measured, not taken on its word). Returns: '' when every such output is refused, else
    what passed, for a message. Never raises (an unreadable ``ref`` gives '')."""
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    try:
        kind, value = _decode(ref, "reference")
    except _Mismatch:
        return ""
    tries: list[tuple[str, bytes]] = []
    if kind == "json":
        zero = json.dumps(_trivial_json(value)).encode()
        if zero != ref:
            tries.append(("zeros", zero))
    elif kind == "npy":
        for name, array in _trivial_arrays(value):
            buf = io.BytesIO()
            np.save(buf, array, allow_pickle=False)
            tries.append((name, buf.getvalue()))
    else:
        for name, array in _trivial_arrays(next(iter(value.values()), np.zeros(0))):
            buf = io.BytesIO()
            np.savez(buf, **{k: (array if k == next(iter(value)) else v) for k, v in value.items()})
            tries.append((f"{name} in array {next(iter(value))!r}", buf.getvalue()))
    for name, data in tries:
        if compare(ref, data, compare_rule, rtol, atol, method) == "":
            rule = "exact" if compare_rule == "exact" else f"allclose rtol={rtol:g}, atol={atol:g}"
            return f"an output of {name} passes the accuracy rule ({rule})"
    return ""


def rejudge(
    ref: bytes | None,
    cand: bytes | None,
    compare_rule: str,
    rtol: float,
    atol: float,
    method: str = METHOD,
) -> bool:
    """An auditor's re-made comparison of two kept outputs, by the ``method`` they were judged
    under: True when the candidate's matches. Raises: ValueError for an unknown method."""
    if ref is None or cand is None:
        return False
    mk = lambda data: Output(data, blake3.blake3(data).hexdigest(), len(data))  # noqa: E731
    return judge_pair(mk(ref), mk(cand), compare_rule, rtol, atol, method) == ""


__all__ = [
    "METHOD",
    "METHOD_V1",
    "OUTPUT_MAX_BYTES",
    "STORE_MAX_BYTES",
    "Output",
    "compare",
    "judge_pair",
    "load",
    "output_artifact_name",
    "rejudge",
    "trivial_output_passes",
]
