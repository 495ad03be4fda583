"""What the measuring process and a subject worker share (SPEC.md section 5, property 3): the
keyed digest of a call's outputs, the reveal file format and the codec of correctness reports.

The parent (:mod:`perfledger.kernels.isolation.isolated`) and the worker
(:mod:`perfledger.kernels.isolation.subject_worker`) speak JSON lines; the requests are

- ``{"op": "hello", "seed": int}`` -> problem facts (:func:`perfledger.kernels.isolation.subject_worker`);
- ``{"op": "check"}`` -> ``{"report": <CorrectnessReport as JSON>, "overhead_s": float}``;
- ``{"op": "run", "seeds": [int, ...], "key": hex}`` -> per call ``times_s``, ``wall_s``,
  ``span_s``, ``digests``, and the batch's ``recheck_failures`` / ``checked_calls``;
- ``{"op": "reveal", "index": int, "path": str}`` -> the call's outputs written to ``path``;
- ``{"op": "exit"}``.

A reply with ``"error": {"type", "message", "hint"}`` is a failure the worker reports itself
(``type`` ``BadRequest`` for a spec that does not load, else ``MeasurementError``).

NumPy and blake3 only (no CuPy): the parent recomputes digests on revealed bytes.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any

import blake3
import numpy as np

from perfledger.kernels.harness.harness import CorrectnessReport, TrialResult
from perfledger.kernels.proc import set_dumpable  # re-exported: workers import it here

#: The digest key's length (bytes): blake3's keyed mode takes 32.
KEY_BYTES = 32


def combine_digests(parts: Sequence[tuple[str, str, Sequence[int], str]], key: bytes) -> str:
    """The digest of one call's outputs from each output's ``(name, dtype.str, shape, keyed
    blake3 hex of its bytes)``: keyed blake3 of one line per output, sorted by name.

    Raises: ValueError for a key that is not :data:`KEY_BYTES` bytes.
    """
    if len(key) != KEY_BYTES:
        raise ValueError(f"the digest key must be {KEY_BYTES} bytes")
    lines = "".join(
        f"{name}\x00{dtype}\x00{json.dumps([int(n) for n in shape])}\x00{hexdigest}\n"
        for name, dtype, shape, hexdigest in sorted(parts)
    )
    return blake3.blake3(lines.encode(), key=key).hexdigest()


def output_digest(arrays: Mapping[str, np.ndarray], key: bytes) -> str:
    """Keyed digest (hex) of one call's outputs (host arrays): each output's bytes (C order)
    hashed with keyed blake3, then :func:`combine_digests` over names, dtypes and shapes. A
    cryptographic hash, so a subject cannot reveal bytes other than the ones it committed to,
    even knowing the key; keyed per batch, so a digest cannot be computed before the batch's
    request arrives. A worker computes the same digest on the device
    (:func:`perfledger.kernels.cuda.gpu_digest.device_digest` per output).

    Args:
        arrays: output name -> host array.
        key: :data:`KEY_BYTES` bytes.
    Raises: ValueError for a key of another length.
    """
    if len(key) != KEY_BYTES:
        raise ValueError(f"the digest key must be {KEY_BYTES} bytes")
    parts = []
    for name, array in arrays.items():
        a = np.ascontiguousarray(array)
        h = blake3.blake3(key=key, max_threads=blake3.blake3.AUTO)
        h.update(memoryview(a.reshape(-1).view(np.uint8)))
        parts.append((name, a.dtype.str, a.shape, h.hexdigest()))
    return combine_digests(parts, key)


def write_reveal(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write one call's outputs (name -> host array) to ``path``: each output's bytes in C
    order, one after another, sorted by name (the reader knows every output's shape and dtype
    from ``hello``, so the file needs no header; no archive to pack and unpack)."""
    with open(path, "wb") as f:
        for name in sorted(arrays):
            a = np.ascontiguousarray(arrays[name])
            f.write(memoryview(a.reshape(-1).view(np.uint8)))


def read_reveal(path: str, expected: Mapping[str, tuple[Any, str]]) -> dict[str, np.ndarray]:
    """Read a reveal written by :func:`write_reveal`: the ``expected`` outputs (name -> (shape,
    dtype)), in sorted name order, and nothing more.

    The worker wrote ``path`` and may still run while it is read: only a regular file is
    read (not a link, which could name any file; not a named pipe, whose reading would wait
    on the worker with no deadline), and only when its size is exactly the outputs' bytes.

    Raises: ValueError when the file is not a regular file, is unreadable, or its size is not
    the expected outputs' total.
    """
    shapes = {
        name: (tuple(int(n) for n in shape), np.dtype(dtype))
        for name, (shape, dtype) in expected.items()
    }
    total = sum(dtype.itemsize * math.prod(shape) for shape, dtype in shapes.values())
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("the reveal is not a regular file: a symbolic link") from None
        raise ValueError(f"unreadable reveal: {exc}") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("the reveal is not a regular file")
        if info.st_size != total:
            raise ValueError(
                f"the reveal holds {info.st_size} bytes, the outputs "
                f"{', '.join(f'{n} {d}{list(s)}' for n, (s, d) in sorted(shapes.items()))} "
                f"{total}"
            )
        arrays: dict[str, np.ndarray] = {}
        for name in sorted(shapes):
            shape, dtype = shapes[name]
            a = np.empty(shape, dtype=dtype)
            view = memoryview(a.reshape(-1).view(np.uint8))
            got = 0
            while got < view.nbytes:
                n = f.readinto(view[got:])
                if not n:  # shortened since fstat
                    raise ValueError("unreadable reveal: the file ended early")
                got += n
            arrays[name] = a
    return arrays


def report_to_json(report: CorrectnessReport) -> dict[str, Any]:
    """A :class:`CorrectnessReport` as JSON builtins (the inverse of :func:`report_from_json`)."""
    return {
        "subject": report.subject,
        "ok": report.ok,
        "trials": [
            {
                "trial": t.trial,
                "ok": t.ok,
                "reasons": list(t.reasons),
                "errors": t.errors,
                "pending_s": t.pending_s,
            }
            for t in report.trials
        ],
    }


def report_from_json(data: Mapping[str, Any]) -> CorrectnessReport:
    """Decode :func:`report_to_json`'s form. Raises: KeyError / TypeError / ValueError when
    malformed."""
    trials = tuple(
        TrialResult(
            int(t["trial"]),
            bool(t["ok"]),
            tuple(str(r) for r in t["reasons"]),
            {str(k): None if v is None else float(v) for k, v in dict(t["errors"]).items()},
            float(t["pending_s"]),
        )
        for t in data["trials"]
    )
    # ok only when every trial passed, whatever the worker says
    return CorrectnessReport(
        str(data["subject"]), bool(trials) and all(t.ok for t in trials), trials
    )


__all__ = [
    "KEY_BYTES",
    "combine_digests",
    "output_digest",
    "read_reveal",
    "report_from_json",
    "report_to_json",
    "set_dumpable",
    "write_reveal",
]
