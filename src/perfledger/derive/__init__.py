"""Pure derivations from raw measurements (SPEC.md section 1): statistics, the wall check,
units, output re-judging and serving statistics. Deciders, projections, kernels and the audit
import them alike, so an auditor re-derives a figure with the code that first derived it.

Imports: :mod:`perfledger.events`, :mod:`perfledger.errors`, numpy, scipy, msgspec and blake3
only; no I/O.
"""
