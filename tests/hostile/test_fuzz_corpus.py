"""Replays every input kept by the long fuzzing run (``bench/fuzz_readers.py``) and the inputs
that found the defects of issue 35, under ``tests/fixtures/fuzz/<reader>/``: each must now keep
its reader's property (tests/hostile/readers.py: the documented error, nothing else)."""

from __future__ import annotations

from pathlib import Path

import pytest
from readers import CORPUS, READERS, check

FOUND = sorted(CORPUS.glob("*/*.bin"))


@pytest.mark.parametrize("path", FOUND, ids=[f"{p.parent.name}/{p.name}" for p in FOUND])
def test_a_kept_input_keeps_the_property(path: Path) -> None:
    reader = READERS[path.parent.name]
    assert check(reader, path.read_bytes()) is None


def test_the_corpus_names_only_known_readers() -> None:
    assert FOUND, "the corpus holds at least the inputs of the defects issue 35 found"
    assert {p.parent.name for p in FOUND} <= set(READERS)
