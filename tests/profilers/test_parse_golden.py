"""The ncu and PyTorch parsers give bit-identical results on the committed fixtures and on seeded
mutations of them (refused, or the same canonical parse) as the parsers the golden file was
recorded from (tests/fixtures/profilers/golden_parse.json; see tests/profilers/profiler_golden.py)."""

from __future__ import annotations

import json
import random

import profiler_golden as golden
import pytest

EXPECTED = json.loads(golden.GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_fixture_parse_matches_the_golden_file(name: str) -> None:
    data = (golden.FIXTURES / name).read_bytes()
    got = json.loads(json.dumps(golden.outcome(golden.CASES[name], data), sort_keys=True))
    assert got != "refused"
    assert got == EXPECTED[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(golden.CASES))
def test_mutated_fixture_outcomes_match_the_golden_file(name: str) -> None:
    data = (golden.FIXTURES / name).read_bytes()
    rng = random.Random(f"golden:{name}")
    expected = EXPECTED[name + ":mutations"]
    assert len(expected) == golden.MUTATIONS
    refused = 0
    for i in range(golden.MUTATIONS):
        got = golden.digest(golden.outcome(golden.CASES[name], golden.mutate(data, rng)))
        refused += got == "refused"
        assert got == expected[i], f"mutation {i} of {name}"
    assert refused > 0  # the mutations do exercise the refusals
