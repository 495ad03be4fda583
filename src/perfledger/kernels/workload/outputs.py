"""Workload outputs judged by the measuring process, not by the subject (SPEC.md section 5,
"Workload driver"; R5).

A workload command's own ``"correct": true`` is decided inside the process whose correctness is
in question: an accuracy check that is rigged (an ``int`` subclass whose ``__eq__`` is always
true, or a bare ``print('{"correct": true, ...}')``) passes it. Where the readiness driver
declares an ``{output}`` place, the driver gives every call a fresh path there and the command
writes its output to it; the process that runs the driver reads both subjects' outputs of one
pair (same case, same ``{seed}``) and compares them by the Target's accuracy rule
(:class:`perfledger.events.workflow.Accuracy`). Both must hold: the subject's own ``correct``
and the comparison.

A missing, unreadable or oversized (more than
:data:`~perfledger.derive.outputs.OUTPUT_MAX_BYTES`) output makes its call
incorrect, with the reason; outputs of at most
:data:`~perfledger.derive.outputs.STORE_MAX_BYTES` are kept (their bytes,
content-addressed by blake3) so an auditor can re-make the comparison.

The comparison rule itself (decoding, :func:`~perfledger.derive.outputs.compare`) is
:mod:`perfledger.derive.outputs`.

Imports: the standard library and :mod:`perfledger.derive.outputs`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Sequence

import blake3

from perfledger.derive.outputs import OUTPUT_MAX_BYTES, Output

#: The placeholder a driver's argv puts where the output path goes.
OUTPUT_PLACEHOLDER = "{output}"
#: The placeholder a driver's argv puts where the call's seed goes (the same for both calls of a
#: pair, fresh and unpredictable for each pair).
SEED_PLACEHOLDER = "{seed}"
#: Environment variables carrying the output path and the seed into every call.
OUTPUT_ENV = "PERFLEDGER_OUTPUT"
SEED_ENV = "PERFLEDGER_SEED"
#: Suffixes numpy (or a user) may have added to the path the driver gave.
SUFFIXES = ("", ".npy", ".npz", ".json")


def declares_output(argv: Sequence[str]) -> bool:
    """True when a driver's argv declares an output place (an ``{output}`` placeholder)."""
    return any(OUTPUT_PLACEHOLDER in word for word in argv)


def new_seed() -> str:
    """A fresh seed for one pair's calls: 63 random bits as decimal text, from the OS's
    generator, so no subject can predict the next pair's inputs from earlier calls."""
    return str(secrets.randbits(63))


class OutputPlace:
    """A fresh, private directory for one call's output (mode 0700, a random name under the
    system's temporary directory), removed with everything in it by :meth:`collect`: nothing a
    call wrote is left for a later call to find."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="perfledger-out-")
        self.path = os.path.join(self.directory, "output")

    def read(self) -> Output:
        """Read the output the call wrote (:func:`read_output`), leaving the directory. Never
        raises."""
        return read_output(self.path)

    def read_bytes(self) -> Output:
        """The part of :meth:`read` a call's clock must cover (:func:`read_output_bytes`): the
        listing, the digest (:meth:`finish`) and the removal (:meth:`remove`) need not."""
        return read_output_bytes(self.path)

    def finish(self, read: Output) -> Output:
        """What :meth:`read_bytes` read, checked and digested (:func:`finish_output`)."""
        return finish_output(self.path, read)

    def remove(self) -> None:
        """Remove the directory and everything in it. Never raises."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def collect(self) -> Output:
        """Read the output the call wrote, then remove the directory. Never raises."""
        try:
            return self.read()
        finally:
            self.remove()


def read_output(path: str) -> Output:
    """Read the output a call wrote at ``path`` (or at ``path`` plus one of :data:`SUFFIXES`):
    :func:`read_output_bytes`, then :func:`finish_output`.

    Returns: the :class:`Output`; ``error`` says why it is unusable (missing, several files,
    not a regular file, larger than :data:`OUTPUT_MAX_BYTES`, unreadable). Never raises."""
    return finish_output(path, read_output_bytes(path))


def read_output_bytes(path: str) -> Output:
    """The part of reading a call's output that a call's clock must cover: open the first of
    ``path`` plus :data:`SUFFIXES` that exists and read its bytes (``blake3`` left None). One
    ``open`` in the common case: no listing and no digest, which :func:`finish_output` makes
    after the clock (the listing then also sees any file a call wrote late).

    Returns: the :class:`Output` without its digest, or with ``error``. Never raises."""
    fd = -1
    for suffix in SUFFIXES:
        try:
            # no symbolic link followed; a FIFO must not block the driver on open
            fd = os.open(path + suffix, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            break
        except FileNotFoundError:
            continue
        except OSError as exc:
            return Output(None, None, None, f"the output cannot be opened ({exc.strerror})")
    if fd < 0:
        return Output(None, None, None, "the command wrote no output at the {output} path")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return Output(None, None, None, "the output is not a regular file")
        if info.st_size > OUTPUT_MAX_BYTES:
            return Output(
                None, None, info.st_size, f"the output is {info.st_size} bytes, more than the "
                f"{OUTPUT_MAX_BYTES} bytes read",
            )  # fmt: skip
        chunks, size = [], 0
        while size <= OUTPUT_MAX_BYTES:
            asked = min(info.st_size + 1, OUTPUT_MAX_BYTES + 1 - size) or 1
            chunk = os.read(fd, asked)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if len(chunk) < asked:  # a regular file's end: no second read to find it
                break
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except OSError as exc:
        return Output(None, None, None, f"the output cannot be read ({exc.strerror})")
    finally:
        os.close(fd)
    if len(data) > OUTPUT_MAX_BYTES:  # it grew while read
        return Output(None, None, len(data), f"the output is more than {OUTPUT_MAX_BYTES} bytes")
    return Output(data, None, len(data))


def finish_output(path: str, read: Output) -> Output:
    """The rest of reading a call's output, outside its clock: ``read`` (what
    :func:`read_output_bytes` read inside it) stands only when exactly one output file is at
    ``path`` now (a second one, written late or beside it, makes the output unusable); its
    blake3 digest is added.

    Returns: the :class:`Output`. Never raises."""
    directory, name = os.path.split(path)
    try:
        present = set(os.listdir(directory or "."))
    except OSError:
        present = set()
    found = [name + s for s in SUFFIXES if name + s in present]
    if len(found) > 1:
        return Output(
            None, None, None, f"several outputs at the {{output}} path ({', '.join(found)})"
        )
    if read.data is None or read.blake3 is not None:
        return read
    return Output(read.data, blake3.blake3(read.data).hexdigest(), read.size)


__all__ = [
    "OUTPUT_ENV",
    "OUTPUT_PLACEHOLDER",
    "SEED_ENV",
    "SEED_PLACEHOLDER",
    "OutputPlace",
    "declares_output",
    "finish_output",
    "new_seed",
    "read_output",
    "read_output_bytes",
]
