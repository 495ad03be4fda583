"""The method catalog: the shipped default is complete and valid; user catalogs are validated
(unknown axis, duplicate id or priority, unknown feature, bad group -> a clear BadRequest); the
reason checks of R24 agree with the catalog's conditions for any metric value (property)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.errors import BadRequest
from perfledger.events import catalog as cat
from perfledger.events.loop import AXES, Condition

REQUIRED = {
    "compute": ["tensor_cores", "compute_memory_overlap", "launch_configuration",
                "reduction_restructuring", "warp_shuffles", "unrolling", "fma_fast_math",
                "strength_reduction", "warp_specialization", "branch_elimination"],
    "memory": ["kernel_fusion", "coalescing", "shared_memory_tiling", "register_pressure",
               "multi_stage_pipeline", "vectorized_access", "async_copy", "bank_conflicts",
               "data_layout", "readonly_cache_hints"],
    "latency": ["shuffle_sync_removal", "fewer_barriers", "async_pipeline",
                "cooperative_groups_clusters", "cuda_graphs", "streams_events",
                "persistent_kernels", "atomics"],
}  # fmt: skip


def test_default_catalog_covers_the_issue_and_is_strictly_ordered() -> None:
    catalog, digest, text = cat.load_default_catalog()
    assert digest == cat.content_hash(text) and digest.startswith("blake3:")
    for axis in AXES:
        methods = cat.methods_of_axis(catalog, axis)
        ids = [m.id for m in methods]
        for name in REQUIRED[axis]:
            assert f"{axis}.{name}" in ids
        assert [m.priority for m in methods] == sorted({m.priority for m in methods})
    pipeline = cat.method(catalog, "memory.multi_stage_pipeline")
    async_pipeline = cat.method(catalog, "latency.async_pipeline")
    assert pipeline is not None and async_pipeline is not None
    assert pipeline.group == async_pipeline.group == "pipeline"


def _broken(old: str, new: str) -> str:
    text = cat.default_catalog_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('axis = "compute"\npriority = 1', 'axis = "shader"\npriority = 1', "unknown axis"),
        ('id = "compute.compute_memory_overlap"', 'id = "compute.tensor_cores"', "duplicate method id"),
        ('id = "compute.compute_memory_overlap"\naxis = "compute"\npriority = 2',
         'id = "compute.compute_memory_overlap"\naxis = "compute"\npriority = 1', "already"),
        ('requires = ["tensor_cores_fp16"]', 'requires = ["tensor_cores_fp64"]', "unknown feature"),
        ('sm_70 = ["warp_shuffle"', 'sm_70 = ["warp_teleport"', "unknown feature"),
        ('group = "pipeline"', 'group = "pipelines"', "unknown group"),
        ('id = "memory.coalescing"', 'id = "latency.coalescing"', "id must be"),
        ('sm_75 = [', 'ampere = [', "not of the form sm_XX"),
        ('catalog_id = "perfledger-default"', 'catalog_id = 7', "does not fit"),
        ('version = "1"', 'version = "1"\nbogus = true', "does not fit"),
    ],
)  # fmt: skip
def test_user_catalog_errors_are_clear(old: str, new: str, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        cat.parse_catalog(_broken(old, new), source="mine.toml")
    assert message in info.value.message and "mine.toml" in info.value.message


def test_group_with_one_method_is_refused() -> None:
    text = _broken('group = "pipeline"', "")
    with pytest.raises(BadRequest, match="a group needs two or more"):
        cat.parse_catalog(text)


def test_malformed_toml_is_a_bad_request() -> None:
    with pytest.raises(BadRequest, match="not valid TOML"):
        cat.parse_catalog("[[methods]\n")


_OPS = ["<", "<=", ">", ">="]


@pytest.mark.slow
@given(
    value=st.floats(-1e6, 1e6, allow_nan=False),
    threshold=st.floats(-1e6, 1e6, allow_nan=False),
    op=st.sampled_from(_OPS),
)
def test_evaluate_matches_the_comparison(value: float, threshold: float, op: str) -> None:
    catalog, _, _ = cat.load_default_catalog()
    condition = Condition(metric="m", op=op, threshold=threshold)  # type: ignore[arg-type]
    expected = {"<": value < threshold, "<=": value <= threshold,
                ">": value > threshold, ">=": value >= threshold}[op]  # fmt: skip
    assert cat.evaluate(catalog, condition, {"m": value}) is expected
    assert cat.evaluate(catalog, condition, {}) is None


@pytest.mark.slow
@given(sectors=st.floats(0, 1e9), requests=st.floats(0, 1e6))
def test_derived_metric_is_a_ratio_or_none(sectors: float, requests: float) -> None:
    catalog, _, _ = cat.load_default_catalog()
    metrics = {"l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": sectors,
               "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": requests}  # fmt: skip
    value = cat.metric_value(catalog, metrics, "perfledger__global_st_sectors_per_request")
    assert value == (None if requests == 0 else sectors / requests)
