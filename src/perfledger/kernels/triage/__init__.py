"""Hotspot triage (the loop playbook's "mode 0"): from an Nsight Systems SQLite export or a
PyTorch profiler trace, a kernel table, a known-path table and an action table whose time shares
are the coverage ``f`` an experiment's claim may cite (R7), with CUDA-graph kernels attributed
through a graph-off trace of the same workload.

- :mod:`.launches` reads every kernel launch with what launched it (runtime call, CPU op, NVTX or
  user ranges, CUDA graph), on top of the strict parsers of :mod:`perfledger.kernels.profilers`;
- :mod:`.paths` reads the user's known-path file (TOML);
- :mod:`.tables` builds the three tables and the graph attribution.

This package imports ``perfledger.errors`` and the profiler parsers only.
"""
