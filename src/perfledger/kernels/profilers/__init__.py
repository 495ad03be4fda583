"""Profiler and compiler report parsers (R6, R16): Nsight Compute CSV, Nsight Systems SQLite and
``nsys stats`` CSV, PyTorch profiler Chrome traces, ``nvcc -Xptxas -v`` and ``cuobjdump
--dump-sass``. Each streams its input and raises :class:`~perfledger.errors.EvidenceError` for
anything it does not know (R6). :mod:`.evidence` turns a parsed report into an ``evidence.add``
request. This package imports ``perfledger.events`` and ``perfledger.errors`` only.
"""
