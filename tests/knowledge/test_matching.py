"""Matching cards against an environment: each selected card compatible, related or
incompatible with the exact differences; terms select; an empty result is only empty."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.knowledge.cards import Card
from perfledger.knowledge.matching import EnvFacts, classify, compare, env_facts, query


def card(conditions: dict[str, Any] | None = None, **over: Any) -> Card:
    body: dict[str, Any] = {
        "id": "c.one", "title": "t", "kind": "mechanism", "statement": "s",
        "mechanisms": ["tma", "async_copy"], "phenomena": ["memory_bound"],
        "sources": [{"title": "guide", "url": "https://docs.nvidia.com/cuda/"}],
        "conditions": conditions or {},
    }  # fmt: skip
    body.update(over)
    return msgspec.convert(body, Card)


H200 = EnvFacts(sm=90, cuda="13.0", toolkit="13.0", driver="580.65.06", gpu="NVIDIA H200")
A100 = EnvFacts(sm=80, cuda="12.4", toolkit="12.4", driver="550.54.15")


@pytest.mark.parametrize(
    ("conditions", "env", "status", "texts"),
    [
        ({"sm_min": "sm_90", "sm_max": "sm_100"}, H200, "compatible", []),
        ({"sm_min": "sm_90", "sm_max": "sm_100"}, A100, "incompatible",
         ["needs sm_90..sm_100, environment sm_80"]),
        ({"sm_min": "sm_90"}, EnvFacts(sm=120), "compatible", []),
        ({"sm_max": "sm_90"}, EnvFacts(sm=100), "incompatible",
         ["needs sm_90 or earlier, environment sm_100"]),
        ({"sm_min": "sm_90"}, None, "related",
         ["needs sm_90 or later, environment's SM architecture unknown"]),
        ({"sm_min": "sm_90"}, EnvFacts(), "related",
         ["needs sm_90 or later, environment's SM architecture unknown"]),
        ({"cuda_min": "12.0"}, A100, "compatible", []),
        ({"cuda_min": "12.8"}, A100, "incompatible",
         ["needs CUDA (driver API) >= 12.8, environment 12.4"]),
        ({"toolkit_min": "12.0", "toolkit_max": "12.3"}, A100, "incompatible",
         ["needs CUDA toolkit 12.0..12.3, environment 12.4"]),
        ({"driver_min": "560"}, A100, "incompatible", ["needs driver >= 560, environment 550.54.15"]),
        ({"sm_min": "sm_90", "cuda_min": "12.0"}, EnvFacts(sm=80), "incompatible",
         ["needs sm_90 or later, environment sm_80",
          "needs CUDA (driver API) >= 12.0, environment's CUDA (driver API) unknown"]),
        ({"libraries": [{"name": "triton", "min": "3.0"}]}, A100, "related",
         ["needs triton >= 3.0, environment's triton unknown"]),
        ({"libraries": [{"name": "triton", "min": "3.0"}]},
         EnvFacts(libraries={"triton": "2.3.1"}), "incompatible",
         ["needs triton >= 3.0, environment 2.3.1"]),
        ({"libraries": [{"name": "triton"}]}, EnvFacts(libraries={"triton": "3.1.0"}),
         "compatible", []),
        ({"libraries": [{"name": "triton"}]}, A100, "related",
         ["needs triton, environment's triton unknown"]),
        ({}, None, "compatible", []),
    ],
)  # fmt: skip
def test_a_card_is_classified_with_its_exact_differences(
    conditions: dict[str, Any], env: EnvFacts | None, status: str, texts: list[str]
) -> None:
    diffs = compare(card(conditions), env)
    assert [d.text for d in diffs] == texts
    assert classify(diffs) == status


@pytest.mark.parametrize(
    ("dtype", "status", "texts"),
    [
        (None, "related", ["needs dtype fp8_e4m3 or fp8_e5m2, no dtype given (--dtype)"]),
        ("fp8_e4m3", "compatible", []),
        ("FP8-E4M3", "compatible", []),
        ("fp16", "incompatible", ["needs dtype fp8_e4m3 or fp8_e5m2, query dtype fp16"]),
    ],
)
def test_a_card_about_dtypes_is_compared_with_the_query_dtype(
    dtype: str | None, status: str, texts: list[str]
) -> None:
    diffs = compare(card({"dtypes": ["fp8_e4m3", "fp8_e5m2"]}), H200, dtype)
    assert [d.text for d in diffs] == texts
    assert classify(diffs) == status


def test_env_facts_read_the_shape_perfledger_env_prints() -> None:
    facts = env_facts(
        {"compute_capability": "9.0", "cuda_driver_version": "13.0",
         "nvcc_version": "release 13.0, V13.0.48", "driver_version": "580.65.06",
         "cupy_version": "14.0.1", "gpu_name": "NVIDIA H200", "missing": [], "errors": {}},
        {"Triton": "3.4.0"},
    )  # fmt: skip
    assert facts == EnvFacts(sm=90, cuda="13.0", toolkit="13.0", driver="580.65.06",
                             libraries={"cupy": "14.0.1", "triton": "3.4.0"},
                             gpu="NVIDIA H200")  # fmt: skip
    assert env_facts({"compute_capability": "10.0"}).sm == 100


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"compute_capability": 9.0}, "compute_capability must be a string"),
        ({"compute_capability": "sm_90"}, "is not MAJOR.MINOR"),
        ({"libraries": ["triton"]}, "libraries must be an object"),
    ],
)
def test_an_environment_of_the_wrong_shape_is_refused(env: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        env_facts(env)


def test_query_terms_select_by_tag_part_and_order_by_status() -> None:
    cards = [
        ("a", card({"sm_min": "sm_90"}, id="a.hopper")),
        ("b", card({"sm_min": "sm_80"}, id="b.ampere")),
        ("c", card({"cuda_min": "99.0"}, id="c.later", phenomena=["launch_overhead"])),
        ("d", card({}, id="d.other", mechanisms=["cuda_graphs"], phenomena=["launch_overhead"])),
    ]
    found = query(cards, A100, mechanisms=["async-copy"])
    assert [(m.card.id, m.status) for m in found] == [
        ("b.ampere", "compatible"), ("a.hopper", "incompatible"), ("c.later", "incompatible")
    ]  # fmt: skip
    found = query(cards, A100, phenomena=["overhead"], mechanisms=["graphs"])
    assert [m.card.id for m in found] == ["d.other"]
    assert found[0].matched_on == ("launch_overhead", "cuda_graphs")
    assert query(cards, A100, mechanisms=["wgmma"]) == []
    assert len(query(cards, None)) == 4


def test_shapes_are_noted_never_checked() -> None:
    (match,) = query([("x", card({"shapes": "K >= 4096"}))], H200)
    assert match.status == "compatible"
    assert match.notes == ("applies to shapes: K >= 4096 (not checked)",)


_SM = st.sampled_from([70, 75, 80, 86, 89, 90, 100, 103, 120])


@given(low=_SM, high=_SM, env_sm=st.one_of(st.none(), _SM),
       cuda_min=st.one_of(st.none(), st.sampled_from(["11.0", "12.0", "12.4", "13.0"])),
       env_cuda=st.one_of(st.none(), st.sampled_from(["11.8", "12.4", "13.0"])))  # fmt: skip
def test_status_follows_the_conditions_exactly(
    low: int, high: int, env_sm: int | None, cuda_min: str | None, env_cuda: str | None
) -> None:
    low, high = min(low, high), max(low, high)
    conditions: dict[str, Any] = {"sm_min": f"sm_{low}", "sm_max": f"sm_{high}"}
    if cuda_min:
        conditions["cuda_min"] = cuda_min
    diffs = compare(card(conditions), EnvFacts(sm=env_sm, cuda=env_cuda))
    version = lambda text: tuple(int(p) for p in text.split("."))  # noqa: E731
    contradicted = (env_sm is not None and not low <= env_sm <= high) or (
        cuda_min is not None and env_cuda is not None and version(env_cuda) < version(cuda_min)
    )
    unknown = env_sm is None or (cuda_min is not None and env_cuda is None)
    expected = "incompatible" if contradicted else ("related" if unknown else "compatible")
    assert classify(diffs) == expected
    # every difference names what the card needs
    assert all(d.text.startswith("needs ") for d in diffs)
    if env_sm is not None and contradicted and not low <= env_sm <= high:
        assert f"needs sm_{low}..sm_{high}, environment sm_{env_sm}" in [d.text for d in diffs]
