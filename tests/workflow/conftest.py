"""Fixtures of the workflow suite shared by several of its modules."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def identity_session(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The code-identity session (``test_code_identity.build_identity_session``: a champion e1
    measured from real code directories, a final audit, an open e2), built once per run for
    test_code_identity.py and test_attest.py (each built its own before: about ten seconds of
    real measurements each)."""
    from test_code_identity import build_identity_session

    return build_identity_session(tmp_path_factory.mktemp("identity"))
