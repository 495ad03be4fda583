"""The subject side of perfledger's worker protocol, for Python subjects (docs/measurement.md,
"Workload worker protocol").

A subject's ``bench.py``::

    from perfledger.subject import serve

    def setup():                      # once per worker: imports, loading the model, ...
        return {"weights": load()}

    def call(state, case, seed, output):   # one timed call: make the inputs from `seed`,
        x = make_input(case, seed)         # compute, write the output to `output`
        numpy.save(output, run(state, x))

    serve(setup, call)

perfledger starts the process, waits for its ``ready`` line, then sends each call and times it
with its own clock until ``done`` comes back; it judges every output itself. ``call`` may return
a mapping of name -> number: sent as ``reported`` (labelled as self-reported; it decides
nothing). Without the protocol's descriptors in the environment (whole-command mode, or a run by
hand), :func:`serve` makes one call from ``$PERFLEDGER_CASE``, ``$PERFLEDGER_SEED`` and
``$PERFLEDGER_OUTPUT`` and returns.

Imports: the standard library only (this runs inside the subject's process).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

#: Must match :data:`perfledger.kernels.workload.worker.PROTOCOL` and ``FDS_ENV``.
PROTOCOL = "perfledger-worker/1"
FDS_ENV = "PERFLEDGER_WORKER_FDS"
#: After answering perfledger's ``wake`` (sent just before a call's clock starts), the worker
#: looks for the call's line without sleeping for at most this long (ns), yielding its CPU
#: between looks, then sleeps until it comes: the call's line then finds it awake, and the
#: wake-up of a sleeping process (an idle virtual CPU's, on a VM) is not inside the clock.
WAKE_POLL_NS = 200_000
#: A call line as perfledger writes it (``json.dumps`` of these fields, in this order).
_CALL_LINE = b'{"op": "call", "id": %d, "case": "%s", "seed": %d, "output": "%s"}'


def _call_of(line: bytes) -> dict[str, Any] | None:
    """The call in ``line`` where the line is byte for byte what perfledger writes
    (:data:`_CALL_LINE`) with no escape in it (no backslash: no string holds a quote), read
    without the JSON decoder: it is the first work a worker does as a call's line wakes it,
    inside the call's clock, where a cold ``json.loads`` costs tens of microseconds. None for
    any other line (then decoded as JSON); where not None, what ``json.loads`` would give."""
    pieces = line.split(b'"')
    if len(pieces) != 17 or b"\\" in line:
        return None
    try:
        n, seed = int(pieces[6][2:-2]), int(pieces[12][2:-2])
        case, output = pieces[9].decode(), pieces[15].decode()
    except ValueError:  # UnicodeDecodeError included
        return None
    if line.rstrip(b"\n") != _CALL_LINE % (n, pieces[9], seed, pieces[15]):
        return None  # not the canonical form (the numbers re-made, every other byte the same)
    return {"op": "call", "id": n, "case": case, "seed": seed, "output": output}


def _lines(fd: int, write: Callable[[bytes], Any]) -> Iterator[bytes]:
    """perfledger's lines on ``fd`` until it closes it, ``wake`` answered here: ``awake`` is
    written, then the next line is looked for without sleeping for :data:`WAKE_POLL_NS` (the
    descriptor non-blocking meanwhile), yielding the CPU between looks, then waited for."""
    buffer = b""
    with os.fdopen(fd, "rb", buffering=0) as calls:
        while True:
            while b"\n" not in buffer:
                chunk = calls.read(65536)
                if not chunk:
                    return
                buffer += chunk
            line, _, buffer = buffer.partition(b"\n")
            if line.strip() != b'{"op": "wake"}':
                yield line
                continue
            write(b'{"op": "awake"}\n')
            os.set_blocking(fd, False)
            try:
                end = time.monotonic_ns() + WAKE_POLL_NS
                while b"\n" not in buffer and time.monotonic_ns() < end:
                    chunk = calls.read(65536)
                    if chunk is None:  # nothing yet
                        os.sched_yield()
                        continue
                    if not chunk:
                        return
                    buffer += chunk
            finally:
                os.set_blocking(fd, True)


def serve(
    setup: Callable[[], Any],
    call: Callable[[Any, str, int, str], Mapping[str, float] | None],
) -> None:
    """Run ``setup()`` once, then answer perfledger's calls until it says ``exit``.

    Args:
        setup: makes the worker's state (anything), before the ``ready`` line.
        call: ``call(state, case, seed, output_path)`` does one unit of work on the inputs made
            from ``seed`` and writes the output at ``output_path`` (``numpy.save``, ``numpy.savez``
            or JSON); may return ``{name: number}``, sent as ``reported``.
    Raises: whatever ``setup`` or ``call`` raise (the worker then exits and perfledger reports
        its stderr); ValueError for a malformed message from the parent.
    """
    fds = os.environ.get(FDS_ENV)
    state = setup()
    if not fds:  # one call, from the environment (whole-command mode or by hand)
        call(
            state,
            os.environ.get("PERFLEDGER_CASE", ""),
            int(os.environ.get("PERFLEDGER_SEED", "0")),
            os.environ["PERFLEDGER_OUTPUT"],
        )
        return
    calls_fd, answers_fd = (int(x) for x in fds.split(","))
    with os.fdopen(answers_fd, "wb", buffering=0) as answers:

        def say(message: dict[str, Any]) -> None:
            answers.write(json.dumps(message).encode() + b"\n")

        say({"op": "ready", "protocol": PROTOCOL, "wake": True})
        for line in _lines(calls_fd, answers.write):
            message = _call_of(line) or json.loads(line)
            op = message.get("op")
            if op == "exit":
                return
            if op != "call":
                raise ValueError(f"unknown message from perfledger: {message!r}")
            reported = call(state, message["case"], int(message["seed"]), message["output"])
            if not reported and type(message["id"]) is int:  # the common answer, made cheaply
                answers.write(b'{"op": "done", "id": %d}\n' % message["id"])  # inside the clock
                continue
            answer: dict[str, Any] = {"op": "done", "id": message["id"]}
            if reported:
                answer["reported"] = {str(k): float(v) for k, v in reported.items()}
            say(answer)


__all__ = ["FDS_ENV", "PROTOCOL", "WAKE_POLL_NS", "serve"]
