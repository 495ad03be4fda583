"""The stopping rule of the harness (SPEC.md section 5, "Stopping"): at least ``min_samples``
samples and ``min_gpu_s`` of GPU time, then stop when the relative standard deviation is below
``target_rsd`` or when the noise estimate has settled; a hard cap of ``max_gpu_s`` of GPU time per
subject (and ``max_samples``). The reason it stopped is recorded.

Pure (numpy only), so it is tested without a GPU. For a single subject the noise is the relative
standard deviation of its samples; for a paired comparison it is the standard deviation of the
per-pair log ratios (a relative quantity too).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: Reasons the rule may give.
STOP_REASONS = ("target_rsd", "noise_settled", "max_gpu_s", "max_samples")


@dataclass(frozen=True)
class StoppingRule:
    """Stopping rule parameters (defaults of SPEC.md section 5; all recorded).

    Attributes:
        min_samples: samples (or pairs) before any stop (>= 10 by default).
        min_gpu_s: GPU seconds per subject before any stop (0.5 s).
        target_rsd: stop when the relative stdev is below this (0.005 = 0.5 %).
        settle_tol: the noise estimate has settled when it moved by less than this share
            (0.05 = 5 %) between the last ``settle_checks`` checkpoints.
        settle_checks: consecutive checkpoints that must agree.
        max_gpu_s: hard cap of GPU seconds per subject (15 s).
        max_samples: hard cap of samples (or pairs).
    """

    min_samples: int = 10
    min_gpu_s: float = 0.5
    target_rsd: float = 0.005
    settle_tol: float = 0.05
    settle_checks: int = 3
    max_gpu_s: float = 15.0
    max_samples: int = 200_000

    def to_json(self) -> dict[str, Any]:
        """JSON builtins."""
        return asdict(self)


def relative_noise(values: Sequence[float], *, logs: bool = False) -> float:
    """Relative spread: stdev/mean of ``values``, or the stdev of ``values`` when they are
    already log ratios (``logs=True``). 0 for fewer than 2 values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2:
        return 0.0
    if logs:
        return float(np.std(arr, ddof=1))
    mean = float(np.mean(arr))
    return float(np.std(arr, ddof=1) / mean) if mean else 0.0


class Stopper:
    """Applies a :class:`StoppingRule` as samples arrive.

    Call :meth:`check` after each batch with all values so far and the GPU seconds spent per
    subject; it returns the stop reason (one of :data:`STOP_REASONS`) or None to continue.
    """

    def __init__(self, rule: StoppingRule, *, logs: bool = False) -> None:
        self.rule = rule
        self.logs = logs
        self.history: list[float] = []

    def check(self, values: Sequence[float], gpu_s: float) -> str | None:
        """Return why to stop now, or None (see the module docstring)."""
        r = self.rule
        n = len(values)
        if gpu_s >= r.max_gpu_s:
            return "max_gpu_s"
        if n >= r.max_samples:
            return "max_samples"
        if n < r.min_samples or gpu_s < r.min_gpu_s:
            return None
        noise = relative_noise(values, logs=self.logs)
        if noise < r.target_rsd:
            return "target_rsd"
        self.history.append(noise)
        recent = self.history[-(r.settle_checks + 1) :]
        if len(recent) == r.settle_checks + 1 and all(
            abs(b - a) <= r.settle_tol * max(a, 1e-12) for a, b in itertools.pairwise(recent)
        ):
            return "noise_settled"
        return None


__all__ = ["STOP_REASONS", "Stopper", "StoppingRule", "relative_noise"]
