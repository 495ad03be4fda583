"""The body of a ``samples.record`` request that a measurement command builds (workload
driver, kernel harness, serving windows): the experiment's context as ``measure`` resolved it,
the environment, the units and the pairs (SPEC.md section 4, R5/R11/R12)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def samples_body(
    info: Mapping[str, Any],
    *,
    samples_id: str,
    experiment_id: str,
    stage: str,
    environment_id: str,
    units: Mapping[str, str],
    pairs: list[dict[str, Any]],
) -> dict[str, Any]:
    """Return the request body (a dict to validate as ``SamplesRecord``).

    Args:
        info: ``measure``'s context of the experiment: ``target_id``, ``reference``,
            ``candidate_hash``, ``test_set_hash``.
        samples_id, experiment_id, stage: the samples' id, experiment and stage.
        environment_id: the environment the pairs were measured in.
        units: metric -> unit of the metrics the pairs hold.
        pairs: the pairs, as ``SamplesRecord.pairs`` takes them.
    """
    return {
        "samples_id": samples_id,
        "target_id": info["target_id"],
        "experiment_id": experiment_id,
        "stage": stage,
        "reference": info["reference"],
        "candidate_hash": info["candidate_hash"],
        "test_set_hash": info["test_set_hash"],
        "environment_id": environment_id,
        "units": dict(units),
        "pairs": pairs,
    }
