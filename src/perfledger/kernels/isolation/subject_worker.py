"""A subject worker: one kernel subject in a process of its own (SPEC.md section 5, property 3).

``python -m perfledger.kernels.isolation.subject_worker --spec PATH --subject reference|candidate|subject
[--case CASE]`` loads the spec (:func:`perfledger.kernels.subjects.spec_loader.load_spec`: the spec's
code, and so the subject's, runs here and never in the measuring process), builds a
:class:`~perfledger.kernels.harness.harness.Harness` for the case with this one subject, and answers the
JSON-lines requests of :mod:`perfledger.kernels.isolation.subject_protocol` on stdin / stdout:

- ``hello {seed}``: the problem's facts (case names, bytes / FLOPs per call and their unit,
  outputs, tolerances, the harness's settings, the subject's content hash); without ``--case``
  only the case names (no GPU needed: how the measuring process lists a spec's cases);
- ``check``: the harness's overhead calibration (an empty call's wall time beyond its event
  time) and correctness trials of the subject, and the persisting L2 carve-out its context
  holds after them (``persisting_l2``);
- ``run {seeds, key}``: one call per seed through the harness's protocol-2 call path
  (:meth:`Harness._timed2`: fresh inputs from the seed, L2 flush, CUDA events, a re-check drawn
  after the call), each call writing into output buffers of its own; once the batch's calls are
  done every call's outputs are digested, keyed by ``key``, on the device
  (:func:`~perfledger.kernels.cuda.gpu_digest.device_digest`, when its self-test at ``hello``
  agreed with the ``blake3`` package), or after each call following a copy to pinned host memory
  (:func:`~perfledger.kernels.isolation.subject_protocol.output_digest`): the same digest either
  way; ``persisting_l2`` says how many calls found a persisting L2 carve-out before their flush
  (each cleared: :class:`~perfledger.kernels.cuda.timing.PersistingL2`);
- ``reveal {index, path}``: writes that call's outputs of the last batch to ``path`` (raw bytes:
  :func:`~perfledger.kernels.isolation.subject_protocol.write_reveal`); without ``path``, copies them into
  the device buffer it exported at ``hello`` (``reveal_ipc``: :mod:`perfledger.kernels.isolation.reveal_ipc`).

The protocol's stream is a private duplicate of the original stdout; file descriptor 1 and
``sys.stdout`` point at stderr before the spec is loaded, so whatever the subject prints (Python
or C) cannot land in the stream by accident. A subject that goes looking for the duplicate can
write to it, as it can patch this module: what it reports is untrusted, and the measuring
process checks it against its own clock and the revealed outputs
(:mod:`perfledger.kernels.isolation.isolated`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from typing import IO, Any

from perfledger.errors import BadRequest, PerfledgerError
from perfledger.kernels.cuda.gpu_digest import digest_into, key_words, self_test, words_hex
from perfledger.kernels.cuda.timing import clear_context_default
from perfledger.kernels.harness.harness import Harness, HarnessConfig, SubjectTiming, _PairInputs
from perfledger.kernels.isolation.reveal_ipc import ExportedBuffer
from perfledger.kernels.isolation.subject_protocol import (
    combine_digests,
    output_digest,
    report_to_json,
    set_dumpable,
    write_reveal,
)
from perfledger.kernels.subjects.spec_loader import load_spec

#: The persisting L2 carve-out this worker's context started with, cleared before the subject
#: loaded (:func:`~perfledger.kernels.cuda.timing.clear_context_default`; bytes).
_CONTEXT_DEFAULT_BYTES = 0
#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "the subject worker runs one spec's cases and roles (docs/subjects.md); perfledger's harness starts it and speaks its protocol (docs/kernel-harness.md)"


def _builtin(value: Any) -> Any:
    """JSON for NumPy scalars a spec may hold (``bytes_per_call=np.prod(shape) * 4``)."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _reply(stream: IO[str], data: dict[str, Any]) -> None:
    stream.write(json.dumps(data, default=_builtin) + "\n")
    stream.flush()


def _error(exc: BaseException) -> dict[str, Any]:
    kind = "BadRequest" if isinstance(exc, BadRequest) else "MeasurementError"
    message = exc.message if isinstance(exc, PerfledgerError) else f"{type(exc).__name__}: {exc}"
    hint = getattr(exc, "hint", "") or ""
    return {"error": {"type": kind, "message": str(message)[:2000], "hint": str(hint)}}


class Worker:
    """The worker's state: the loaded spec, the subject, and (after ``hello``) the harness and
    the last batch's outputs (device arrays, one dict per call).

    Args:
        spec_path, role, case: of the command line.
    Raises: BadRequest when the spec does not load or lacks the subject or case.
    """

    def __init__(self, spec_path: str, role: str, case: str | None) -> None:

        self.spec = load_spec(spec_path)
        self.role = role
        self.case = case
        self.harness: Any = None
        self._outs: list[dict[str, Any]] = []  # device outputs, one set per call of a batch
        self._slots: list[dict[str, Any]] = []  # pinned host copies, one dict per call slot
        self.kept: list[dict[str, Any]] = []
        self._ipc: Any = None  # the exported reveal buffer (after hello, where IPC works)
        if case is not None:
            if case not in self.spec["problems"]:
                raise BadRequest(f"the spec {spec_path!r} has no case {case!r}", hint=_HINT)
            if self.spec.get(role) is None:
                raise BadRequest(f"the spec {spec_path!r} defines no {role.upper()}", hint=_HINT)

    def hello(self, seed: int) -> dict[str, Any]:
        """The facts the measuring process needs (module docstring)."""
        facts: dict[str, Any] = {
            "cases": list(self.spec["problems"]),
            "has_candidate": self.spec.get("candidate") is not None,
            "has_subject": self.spec.get("subject") is not None,
        }
        if self.case is None:
            return facts

        problem = self.spec["problems"][self.case]
        subject = self.spec[self.role]
        config = replace(self.spec["config"] or HarnessConfig(), seed=seed)
        if config.protocol != 2:  # workers run protocol 2's call path only
            raise BadRequest(
                f"the spec's CONFIG asks for protocol {config.protocol}: subjects in worker "
                "processes are measured by protocol 2 only",
                hint="remove protocol= from the spec's HarnessConfig (protocol 1 remains for "
                "the in-process library path, Harness.compare)",
            )
        self.harness = Harness(problem, config)
        self.device_digest = _device_digest_works()
        self._ipc = _export_reveals(problem.outputs) if self.device_digest else None
        facts.update(
            case=self.case,
            problem=problem.name,
            subject=subject.name,
            bytes_per_call=problem.bytes_per_call,
            flops_per_call=problem.flops_per_call,
            flops_unit=problem.flops_unit,
            outputs={k: [list(shape), str(dtype)] for k, (shape, dtype) in problem.outputs.items()},
            tolerances=dict(problem.tolerances),
            settings={
                **self.harness.settings(),
                "digest": "device" if self.device_digest else "host",
            },
            reveal_ipc=self._ipc.offer() if self._ipc is not None else None,
            content_hash=subject.content_hash(),
            identity=subject.identity() if hasattr(subject, "identity") else None,
        )
        return facts

    def check(self) -> dict[str, Any]:
        """The harness's correctness trials of the subject."""

        # calibrated here, not at hello: the parent greets both workers at once and runs each
        # check with the other stopped, so the calibration sees no other GPU work
        overhead_s = self.harness._calibrate_overhead()
        report = report_to_json(self.harness.check(self.spec[self.role]))
        return {"report": report, "overhead_s": overhead_s, "persisting_l2": self._persisting()}

    def _persisting(self) -> dict[str, Any] | None:
        """The persisting L2 carve-out set on this worker's context now (bytes, after the
        subject's setup and calls) and how many timed calls found one before their flush
        (:class:`~perfledger.kernels.cuda.timing.PersistingL2`); None without a flush."""
        flusher = self.harness.flusher
        if flusher is None:
            return None
        return {
            "bytes": flusher.persisting.carve_out_bytes(),
            **flusher.persisting.to_json(),
            "context_default_bytes": _CONTEXT_DEFAULT_BYTES,
        }

    def run(self, seeds: list[int], key: str) -> dict[str, Any]:
        """One call per seed (module docstring); the outputs are kept until the next run."""
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        h = self.harness
        subject = self.spec[self.role]
        key_bytes = bytes.fromhex(key)
        self.kept = []
        timing = SubjectTiming(subject.name, [], [], [], [], 0.0, [], False)
        digests: list[str] = []
        names = sorted(self._ring(0))
        if self.device_digest:  # every call's digest words, read back once after the batch
            key_device = cupy.asarray(key_words(key_bytes))
            words = cupy.empty((len(seeds), len(names), 8), dtype=cupy.uint32)
        for k, seed in enumerate(seeds):
            pair = _PairInputs(h._make_inputs(int(seed)), int(seed))
            outs = self._ring(k)
            h._timed2(subject, outs, pair, k, timing)
            if not self.device_digest:
                host = self._host(k)
                for name, out in outs.items():
                    out.get(out=host[name])
                digests.append(output_digest(host, key_bytes))
            self.kept.append(outs)
        if self.device_digest:
            # Every call's outputs stay in buffers of their own until the next batch, so the
            # digests are made once the batch's calls are done: queued after each call, they
            # were work the next call's stream hold waited for. Subject code runs in this
            # process either way; the parent's clock bounds the batch's work as a whole.
            with h.stream:
                for k, outs in enumerate(self.kept):
                    for j, name in enumerate(names):
                        digest_into(outs[name], key_device, words[k, j])
                got = words.get(stream=h.stream)
            h.stream.synchronize()
            for k in range(len(seeds)):
                parts = [
                    (name, self.kept[k][name].dtype.str, self.kept[k][name].shape,
                     words_hex(got[k, j]))
                    for j, name in enumerate(names)
                ]  # fmt: skip
                digests.append(combine_digests(parts, key_bytes))
        return {
            "times_s": timing.samples_s,
            "wall_s": timing.wall_s,
            "span_s": timing.span_s,
            "digests": digests,
            "recheck_failures": timing.recheck_failures,
            "checked_calls": timing.checked_calls,
            "stream_hold": {"state": h.timer.hold_off or "on", **h.timer.hold_counts},
            "persisting_l2": self._persisting(),
        }

    def _ring(self, slot: int) -> dict[str, Any]:
        """The output buffers of call ``slot`` of a batch (one set per call, kept until the next
        batch so that any call can be revealed; before a call a buffer holds the answer of the
        previous batch's call to other inputs)."""
        while len(self._outs) <= slot:
            self._outs.append(self.harness._new_outputs())
        return self._outs[slot]

    def _host(self, slot: int) -> dict[str, Any]:
        """Pinned host arrays for the outputs of call ``slot`` of a batch (allocated once: a
        copy into fresh pageable memory page-faults, and its time varies from call to call)."""
        while len(self._slots) <= slot:
            import cupyx  # noqa: PLC0415 (CuPy: optional, GPU only)

            self._slots.append(
                {
                    name: cupyx.empty_pinned(out.shape, dtype=out.dtype)
                    for name, out in self._ring(0).items()
                }
            )
        return self._slots[slot]

    def reveal(self, index: int, path: str | None) -> dict[str, Any]:
        """Write call ``index`` of the last batch's outputs to ``path``, or (``path`` None)
        copy them into the exported reveal buffer (:mod:`perfledger.kernels.isolation.reveal_ipc`)."""

        if not 0 <= index < len(self.kept):
            raise BadRequest(
                f"no call {index} in the last batch ({len(self.kept)} calls)", hint=_HINT
            )
        if path is None:
            if self._ipc is None:
                raise BadRequest("this worker offered no reveal buffer", hint=_HINT)
            self._ipc.fill(self.kept[index])
            return {"ok": True}
        # pinned, so the copy runs at the bus's speed; the host path's slot already holds the
        # call's outputs, the device path uses one slot for every reveal
        host = self._host(0 if self.device_digest else index)
        for name, out in self.kept[index].items():
            out.get(out=host[name])
        write_reveal(path, host)
        return {"ok": True}


def _export_reveals(outputs: Any) -> Any:
    """The reveal buffer exported for CUDA IPC, or None where the driver refuses (reveals then
    go through files)."""

    try:
        return ExportedBuffer(outputs)
    except Exception as exc:
        print(f"perfledger worker: no IPC reveal buffer ({exc}); reveals go through files",
              file=sys.stderr)  # fmt: skip
        return None


def _device_digest_works() -> bool:
    """Whether the device BLAKE3 compiles and equals the ``blake3`` package here (else the
    outputs are copied to the host and hashed there: slower, the same digest)."""

    try:
        return self_test()
    except Exception as exc:  # a compiler or driver failure: the host path still works
        print(f"perfledger worker: device digest unavailable ({exc}); hashing on the host",
              file=sys.stderr)  # fmt: skip
        return False


def main(argv: list[str] | None = None) -> int:
    """Serve the protocol until ``exit`` or end of input. Returns the exit status."""
    parser = argparse.ArgumentParser(prog="perfledger.kernels.isolation.subject_worker")
    parser.add_argument("--spec", required=True)
    # ``subject``: the SUBJECT of a spec in a code directory of its own (R11, the worker's cwd)
    parser.add_argument("--subject", choices=("reference", "candidate", "subject"), required=True)
    parser.add_argument("--case", default=None)
    args = parser.parse_args(argv)
    # The protocol's stream: a duplicate of stdout; fd 1 and sys.stdout now go to stderr, so the
    # subject's prints cannot reach the stream.
    sys.stdout.flush()
    # not dumpable: the other worker's subject (same user) cannot trace or write this process

    set_dumpable(False)
    stream = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    global _CONTEXT_DEFAULT_BYTES
    if args.case is not None:  # before the subject's code loads: any carve-out after is its own
        _CONTEXT_DEFAULT_BYTES = clear_context_default()
    try:
        worker: Worker | None = Worker(args.spec, args.subject, args.case)
        failure = None
    except Exception as exc:  # reported on the first request, so the parent can say why
        worker, failure = None, _error(exc)
    for line in sys.stdin:
        try:
            request = json.loads(line)
            op = request["op"]
        except (ValueError, KeyError, TypeError):
            _reply(stream, _error(BadRequest(f"malformed request: {line[:200]!r}", hint=_HINT)))
            continue
        if op == "exit":
            return 0
        if worker is None:
            _reply(stream, failure or _error(BadRequest("the worker did not start", hint=_HINT)))
            continue
        try:
            if op == "hello":
                answer = worker.hello(int(request.get("seed", 0)))
            elif op == "check":
                answer = worker.check()
            elif op == "run":
                answer = worker.run([int(s) for s in request["seeds"]], str(request["key"]))
            elif op == "reveal":
                path = request.get("path")
                answer = worker.reveal(int(request["index"]), None if path is None else str(path))
            else:
                answer = _error(BadRequest(f"unknown op {op!r}", hint=_HINT))
        except Exception as exc:  # the subject's failure, reported to the parent
            answer = _error(exc)
        _reply(stream, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
