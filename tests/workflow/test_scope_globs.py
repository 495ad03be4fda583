"""Scope globs: a Target's modification scope and a candidate's changed paths
are relative to the repository root. Absolute globs or ``.``/``..`` segments are refused at
``target freeze`` (R1), such changed paths at ``experiment create`` (R11), each with a hint on
how globs match; the ledger head does not move (``Session.refused``)."""

from __future__ import annotations

import pytest
from wf_scenario import Session, experiment, target_freeze

from perfledger.commands.workflow.rules import SCOPE_HINT


@pytest.mark.parametrize("glob", ["/tmp/mine/impl_*.py", "~/src/*", "C:\\src\\*"])
def test_r1_absolute_scope_glob_is_refused_at_freeze(bare: Session, glob: str) -> None:
    error = bare.refused("target.freeze", target_freeze(scope=["src/*", glob]), "R1")
    assert "relative to the repository root" in error.message and repr(glob) in error.message
    assert error.hint == SCOPE_HINT and "'*' and '?' stay within one directory" in error.hint


@pytest.mark.parametrize("glob", ["../other/*", "src/../../etc/*", "./src/*"])
def test_r1_scope_glob_with_dot_segments_is_refused_at_freeze(bare: Session, glob: str) -> None:
    error = bare.refused("target.freeze", target_freeze(scope=[glob]), "R1")
    assert glob in error.message


def test_r1_relative_scope_globs_are_accepted(bare: Session) -> None:
    payload = bare.run("target.freeze", target_freeze(scope=["src/**/*.py", "tmp/mine/impl_*.py"]))
    assert payload["target"]["scope"] == ["src/**/*.py", "tmp/mine/impl_*.py"]


def _with_paths(paths: list[str]) -> dict:
    exp = experiment()
    exp["candidate"]["changed_paths"] = paths
    return exp


@pytest.mark.parametrize("path", ["/tmp/mine/impl_fast.py", "/src/kernels/attn.cu"])
def test_r11_absolute_changed_path_is_refused_with_the_hint(ready: Session, path: str) -> None:
    error = ready.refused("experiment.create", _with_paths([path]), "R11")
    assert "changed paths must be relative to the repository root" in error.message
    assert error.hint == SCOPE_HINT


def test_r11_changed_path_with_dotdot_is_refused_with_the_hint(ready: Session) -> None:
    error = ready.refused("experiment.create", _with_paths(["src/kernels/../../x.cu"]), "R11")
    assert "relative to the repository root" in error.message and error.hint == SCOPE_HINT


def test_r11_path_outside_scope_refusal_says_how_globs_match(ready: Session) -> None:
    error = ready.refused("experiment.create", _with_paths(["docs/readme.md"]), "R11")
    assert "outside the Target's modification scope" in error.message
    assert error.hint == SCOPE_HINT
    ready.run("experiment.create", _with_paths(["src/kernels/attn.cu"]))  # inside: accepted
