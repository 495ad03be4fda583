"""Knowledge cards: every shipped card is valid and sourced; a bad card is refused naming its
file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfledger.app.knowledge import load_cards, shipped_card_texts, user_card_texts
from perfledger.errors import BadRequest
from perfledger.knowledge.cards import CardError, parse_card

GOOD = """
id = "my.card"
title = "A card"
kind = "fact"
statement = "Something that holds."
mechanisms = ["something"]

[[sources]]
title = "CUDA C++ Programming Guide"
url = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
"""


def test_shipped_cards_are_valid_unique_and_at_least_thirty() -> None:
    cards, digest = load_cards(())
    assert len(cards) >= 30
    assert len({card.id for _, card in cards}) == len(cards)
    assert len(digest) == 16


def test_every_shipped_card_cites_a_web_source_with_a_title() -> None:
    for origin, card in load_cards(())[0]:
        assert card.sources, origin
        for source in card.sources:
            assert source.url.startswith("https://"), (origin, source.url)
            assert len(source.title) > 5, origin


def test_shipped_cards_cover_hopper_blackwell_and_library_behaviours() -> None:
    ids = {card.id for _, card in load_cards(())[0]}
    for expected in ("hopper.tma", "hopper.wgmma", "hopper.thread_block_clusters",
                     "hopper.distributed_shared_memory", "fp8.tensor_cores", "ampere.cp_async",
                     "blackwell.tcgen05_tensor_memory", "cublas.heuristics",
                     "triton.autotune_side_effects", "cuda_graphs.launch_overhead",
                     "l2.persistence"):  # fmt: skip
        assert expected in ids


def test_every_catalog_method_has_a_card_and_every_named_method_exists() -> None:
    import tomllib
    from importlib import resources

    catalog = tomllib.loads(
        resources.files("perfledger.events").joinpath("catalog_default.toml").read_text()
    )
    methods = {m["id"] for m in catalog["methods"]}
    named = {m for _, card in load_cards(())[0] for m in card.catalog_methods}
    assert named == methods, (named - methods, methods - named)


def test_a_valid_card_parses() -> None:
    card = parse_card(GOOD, "my.toml")
    assert card.id == "my.card" and card.sources[0].kind == "docs"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD + 'colour = "red"\n', "colour"),
        (GOOD.replace('kind = "fact"', 'kind = "opinion"'), "kind"),
        (GOOD.replace('mechanisms = ["something"]', "mechanisms = []"), "mechanisms"),
        (GOOD + '\n[conditions]\nsm_min = "90"\n', "conditions.sm_min"),
        (GOOD + '\n[conditions]\nsm_mn = "sm_90"\n', "sm_mn"),
        (GOOD + '\n[conditions]\nsm_min = "sm_100"\nsm_max = "sm_90"\n', "sm_min sm_100"),
        (GOOD + '\n[conditions]\ncuda_min = "twelve"\n', "conditions.cuda_min"),
        (GOOD.replace("https://docs.nvidia.com", "docs.nvidia.com"), "sources.0.url"),
        (GOOD.split("[[sources]]")[0], "sources"),
        ("id = 3\n" + GOOD, "not valid TOML"),
    ],
)
def test_a_bad_card_is_refused_naming_its_file_and_field(text: str, needle: str) -> None:
    with pytest.raises(CardError) as info:
        parse_card(text, "cards/bad.toml")
    assert "cards/bad.toml" in info.value.message
    assert needle in info.value.message
    assert info.value.exit_code == 2


def test_a_user_directory_with_a_repeated_id_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.toml").write_text(GOOD)
    with pytest.raises(CardError, match=r"my\.card"):
        load_cards((str(tmp_path),), shipped=False)


def test_a_user_card_may_not_reuse_a_shipped_id(tmp_path: Path) -> None:
    (tmp_path / "tma.toml").write_text(GOOD.replace('"my.card"', '"hopper.tma"'))
    with pytest.raises(CardError, match=r"hopper\.tma"):
        load_cards((str(tmp_path),))


def test_a_missing_or_empty_card_directory_is_a_bad_request(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="not a directory"):
        user_card_texts(str(tmp_path / "nowhere"))
    with pytest.raises(BadRequest, match="holds no card"):
        user_card_texts(str(tmp_path))


def test_shipped_card_origins_name_the_package_file() -> None:
    origins = [origin for origin, _ in shipped_card_texts()]
    assert all(o.startswith("perfledger:cards/") and o.endswith(".toml") for o in origins)
