"""Edge cases of the msgspec requests (commands/workflow/requests.py, operations.validate/condense).

Each test was a finding of an adversarial review (it failed at 031ae8c).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wf_scenario import ORIGINAL_HASH, Session, experiment, samples, target_freeze

from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute, validate
from perfledger.errors import BadRequest, PerfledgerError


@pytest.mark.parametrize(
    ("op", "body"),
    [
        ("target.freeze", target_freeze("t1\n")),  # Id
        ("experiment.create", experiment(candidate="sha256:" + "1" * 16 + "\n")),  # Hash
    ],
    ids=["id", "hash"],
)
def test_a_pattern_field_with_a_trailing_newline_is_refused(op: str, body: dict) -> None:
    """Id and Hash are ``^...$`` patterns. pydantic (Rust regex: ``$`` is the end of the text)
    refused ``"t1\\n"``; msgspec uses Python's ``re``, whose ``$`` also matches before a trailing
    newline, so ``"t1\\n"`` is now a valid id, distinct from ``"t1"`` yet printed the same."""
    with pytest.raises(BadRequest, match=r"target_id|content_hash"):
        validate(op, body)


def test_r11_a_candidate_equal_to_the_original_plus_newline_is_not_a_new_candidate(
    tmp_path: Path,
) -> None:
    """R11 refuses a candidate whose content hash is the original's. The same hash with a
    trailing newline passes both the Hash pattern and the R11 comparison, so the original
    itself is accepted as a 'different' candidate."""
    session = Session(Ledger.init(tmp_path / "ledger", name="b", actor="agent")).ready()
    head = session.ledger.head()
    with pytest.raises(PerfledgerError):
        session.run("experiment.create", experiment("e9", candidate=ORIGINAL_HASH + "\n"))
    assert session.ledger.head() == head


def test_a_str_subclass_in_a_library_body_is_not_a_traceback(tmp_path: Path) -> None:
    """Through the library API (``operations.execute``), a ``str`` subclass (e.g. a
    ``pathlib``-like or enum-ish string type) passes ``msgspec.convert`` unchanged and then
    ``stored_request`` -> ``msgspec.to_builtins`` raises TypeError ('Encoding objects of type S
    is unsupported'). pydantic accepted it (as a plain str). Expected: accepted and stored as
    a plain str, or a BadRequest; never a TypeError."""

    class Label(str):
        pass

    ledger = Ledger.init(tmp_path / "ledger", name="b", actor="agent")
    try:
        execute(ledger, "target.freeze", target_freeze(Label("t1")), actor="agent")
    except PerfledgerError:
        pass  # a clear refusal is fine too
    finally:
        ledger.close()


def test_an_invalid_dict_key_error_names_its_field() -> None:
    """A bad key of a map field (``units``, ``driver.env``, a pair's ``values``) is reported as
    ``(request): Expected `str` of length >= 1 - at `key` in `$.units``` : the path is left at
    ``(request)`` and msgspec's raw suffix leaks into the message, because ``condense``'s
    pattern expects `` - at `$...``` only. Reachable from the CLI (``{"units": {"": "ms"}}``)."""
    body = samples("s1", "screen")
    body["units"] = {"": "ms"}
    with pytest.raises(BadRequest) as info:
        validate("samples.record", body)
    message = info.value.message
    assert message.startswith("samples.record: invalid request: units"), message
    assert "(request)" not in message and "$." not in message, message


def test_a_nan_through_the_library_is_named_as_such() -> None:
    """The CLI refuses NaN when it reads the JSON; the library API (``execute`` with Python
    floats) relies on the bounds: for a ``Positive``/``NonNegative``/ranged field the message is
    'Expected `float` > 0.0' for a NaN, which reads as if the value were negative."""
    with pytest.raises(BadRequest) as info:
        validate("target.freeze", target_freeze(min_effect=float("nan")))
    assert "finite" in info.value.message or "NaN" in info.value.message, info.value.message


@pytest.mark.parametrize("bad", ["t 1", "", "t1\n", "abé"])
def test_a_bad_id_is_named_with_its_value_and_the_rule_in_words(bad: str) -> None:
    with pytest.raises(BadRequest) as info:
        validate("target.freeze", target_freeze(bad))
    message = info.value.message
    assert f"target_id: {bad!r} is not an id: 1-128 characters" in message, message
    assert "regex" not in message
