"""Every refusal says what to do instead (issue 38 item 3): a walk over the syntax tree of every
module of perfledger finds each place that builds a refusal (``refuse(...)``,
``RuleRefused(...)``) and checks it passes a hint that is not empty. ``hint`` is a required
argument of both, so a new site without one fails at import-free review time here and with a
TypeError at run time. Bad requests (``BadRequest`` and its subclasses) pass a hint too: the
walk lists every site without one (there were 413, then 363; none is left)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import perfledger
from source_trees import parsed

SRC = Path(perfledger.__file__).resolve().parent
#: Calls that build a rule refusal: (name, index of the hint among the positional arguments).
REFUSALS = {"refuse": 2, "RuleRefused": 1}
#: Calls that build a bad request.
BAD_REQUESTS = {"BadRequest", "AmbiguousId", "NotALedger", "CanonicalEncodingError",
                "EvidenceError"}  # fmt: skip
#: Functions that return a refusal's (message, hint) pair, passed as ``refuse(rule, *pair)``.
PAIRS = {"r14_interval_missing"}
#: Bad-request sites without a hint: none (a new one must say what to do instead).
MAX_BAD_REQUESTS_WITHOUT_HINT = 0


def _name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


@cache
def _calls() -> list[tuple[str, int, ast.Call]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = parsed(path)
        rel = str(path.relative_to(SRC))
        found += [(rel, n.lineno, n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    return found


def _hint(call: ast.Call, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "hint":
            return keyword.value
    if len(call.args) > position:
        return call.args[position]
    return None


def _empty(expr: ast.expr) -> bool:
    """True for ``""`` or an f-string with no text and no value."""
    if isinstance(expr, ast.Constant):
        return not (isinstance(expr.value, str) and expr.value.strip())
    if isinstance(expr, ast.JoinedStr):
        return not expr.values
    return False


def test_every_refusal_site_passes_a_hint_that_is_not_empty() -> None:
    missing = []
    sites = 0
    for where, line, call in _calls():
        name = _name(call)
        if name not in REFUSALS or where == "errors.py":
            continue
        sites += 1
        starred = [a for a in call.args if isinstance(a, ast.Starred)]
        if starred:  # refuse(rule, *pair): the pair's function returns (message, hint)
            inner = starred[0].value
            if isinstance(inner, ast.Call) and _name(inner) in PAIRS:
                continue
            missing.append(f"{where}:{line}: a starred argument not known to hold a hint")
            continue
        hint = _hint(call, REFUSALS[name])
        if hint is None or _empty(hint):
            missing.append(f"{where}:{line}: {ast.unparse(call)[:120]}")
    assert sites > 200  # the walk found the refusals
    assert missing == [], "\n".join(missing)


def test_a_refusal_without_a_hint_cannot_be_built() -> None:
    """``hint`` is required: the honest control beside the walk (a site it missed fails here)."""
    import pytest

    from perfledger.commands.workflow.rules import refuse
    from perfledger.errors import RuleRefused

    with pytest.raises(TypeError):
        RuleRefused("R1: no", rule="R1")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        refuse("R1", "no")  # type: ignore[call-arg]
    assert refuse("R1", "no", "freeze it").hint == "freeze it"


def test_every_bad_request_site_passes_a_hint_that_is_not_empty() -> None:
    without = [
        f"{where}:{line}"
        for where, line, call in _calls()
        if _name(call) in BAD_REQUESTS
        and where != "errors.py"
        and (_hint(call, 99) is None or _empty(_hint(call, 99)))  # type: ignore[arg-type]
    ]
    assert len(without) <= MAX_BAD_REQUESTS_WITHOUT_HINT, (
        f"{len(without)} bad requests without a hint (at most {MAX_BAD_REQUESTS_WITHOUT_HINT}): "
        + ", ".join(without)
    )
