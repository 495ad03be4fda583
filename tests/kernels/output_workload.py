"""A workload command that writes its output where the driver says (``--out``, the ``{output}``
place), for the tests of the cross-process output check; honest, or cheating on purpose.

It draws ``--n`` numbers from ``--seed`` (the driver's per-pair ``{seed}``) and the case, and its
output is their cumulative sum (``numpy.save``, or JSON with ``--json``). It sleeps ``--work-s``
and reports that as ``time_ms``. Modes:

- ``honest``: the right output, and an honest own check (``correct`` true).
- ``noise``: the right output times ``1 + 1e-9``: within a tolerance, not exact.
- ``wrong``: an output 1 % off, and prints ``"correct": true`` all the same.
- ``int_eq``: an output 1 % off; its own check compares checksums held in an ``int`` subclass
  whose ``__eq__`` is always true, so the check it prints is ``true``.
- ``steal``: copies any output file an earlier call left under the temporary directory (the
  reference's, for one); without one, replays the output of its own first call, which it keeps
  in ``--cache``.
- ``nothing``: writes no output, claims correct.
- ``jitter``: the right output times ``1 + u * 1e-9``, ``u`` drawn afresh each call: not
  deterministic.
- ``fifo``: puts a named pipe at the output path (a reader that opens it would wait for ever).
- ``wrong_once``: honest, except on its ``--wrong-call``-th call (counted in ``--cache``), whose
  output is 1 % off while it claims correct.
- ``downcast``: the right output stored as float16 (a precision downgrade whose values stay
  within a 1 % tolerance of the reference's float64).

Started by perfledger's worker protocol (``$PERFLEDGER_WORKER_FDS`` set), it is a worker
(``perfledger.subject.serve``): each call takes its case, seed and output place from perfledger
and sleeps ``--work-s``, writes the output and reports nothing; ``honest``, ``jitter`` and
``wrong_once`` (its calls counted in ``--cache``) as above.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile
import time

import numpy as np


class AlwaysEqual(int):
    """An integer equal to anything: the rigged accuracy check."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


def _right(seed: str, case: str, n: int) -> np.ndarray:
    rng = np.random.default_rng([int(seed), sum(case.encode())])
    return np.cumsum(rng.random(n))


def _write(out: str, value: np.ndarray, as_json: bool) -> None:
    if as_json:
        with open(out, "w") as stream:
            json.dump({"cumsum": value.tolist()}, stream)
    else:
        np.save(out, value)  # numpy appends .npy to the driver's path


def _serve(args: argparse.Namespace) -> None:
    """The worker protocol's subject (module docstring)."""
    from perfledger.subject import serve

    def call(_state: None, case: str, seed: int, output: str) -> None:
        time.sleep(args.work_s)
        right = _right(str(seed), case, args.n)
        wrong = False
        if args.mode == "wrong_once":
            count = 1
            if os.path.exists(args.cache):
                with open(args.cache) as stream:
                    count += int(stream.read() or 0)
            with open(args.cache, "w") as stream:
                stream.write(str(count))
            wrong = count == args.wrong_call
        elif args.mode == "jitter":
            right = right * (1 + np.random.default_rng().random() * 1e-9)
        elif args.mode != "honest":
            raise SystemExit(f"mode {args.mode} is not served as a worker")
        _write(output, right * (1.01 if wrong else 1.0), args.json)

    serve(lambda: None, call)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", required=True)
    parser.add_argument("--case", default="a")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--mode", default="honest")
    parser.add_argument("--work-s", type=float, default=0.05)
    parser.add_argument("--cache", default="")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--wrong-call", type=int, default=0)
    args = parser.parse_args()
    if os.environ.get("PERFLEDGER_WORKER_FDS"):
        _serve(args)
        return
    start = time.perf_counter()
    time.sleep(args.work_s)
    right = _right(args.seed, args.case, args.n)
    correct = True
    if args.mode == "honest":
        _write(args.out, right, args.json)
    elif args.mode == "noise":
        _write(args.out, right * (1 + 1e-9), args.json)
    elif args.mode == "wrong":
        _write(args.out, right * 1.01, args.json)
    elif args.mode == "int_eq":
        mine = right * 1.01
        correct = AlwaysEqual(int(mine.sum() * 1e6)) == int(right.sum() * 1e6)
        _write(args.out, mine, args.json)
    elif args.mode == "steal":
        mine_dir = os.path.dirname(args.out)
        earlier = [
            f
            for f in glob.glob(os.path.join(tempfile.gettempdir(), "perfledger-out-*", "output*"))
            if os.path.dirname(f) != mine_dir
        ]
        stolen = False
        for found in earlier:  # another run's place may vanish while it is read
            try:
                shutil.copy(found, args.out + ".npy")
                stolen = True
                break
            except OSError:
                continue
        if stolen:
            pass
        elif args.cache and os.path.exists(args.cache):
            shutil.copy(args.cache, args.out + ".npy")
        else:
            _write(args.out, right, False)
            if args.cache:
                shutil.copy(args.out + ".npy", args.cache)
    elif args.mode == "jitter":
        _write(args.out, right * (1 + np.random.default_rng().random() * 1e-9), args.json)
    elif args.mode == "fifo":
        os.mkfifo(args.out)
    elif args.mode == "wrong_once":
        count = 1
        if os.path.exists(args.cache):
            with open(args.cache) as stream:
                count += int(stream.read() or 0)
        with open(args.cache, "w") as stream:
            stream.write(str(count))
        _write(args.out, right * (1.01 if count == args.wrong_call else 1.0), args.json)
    elif args.mode == "downcast":
        _write(args.out, right.astype(np.float16), args.json)
    elif args.mode != "nothing":
        raise SystemExit(f"unknown mode {args.mode}")
    took_ms = (time.perf_counter() - start) * 1e3
    print(json.dumps({"correct": bool(correct), "metrics": {"time_ms": took_ms}}))


if __name__ == "__main__":
    main()
