"""This machine's environment identity, collected once per test process for the suites that
record readiness on it (:func:`perfledger.app.context.environment_payload`, R2, R11)."""

from __future__ import annotations

import copy
import functools
from typing import Any

from perfledger.app.context import environment_payload


@functools.cache
def _collected(tools: bool) -> dict[str, Any]:
    return environment_payload(tools=tools)


def machine_environment(tools: bool = True) -> dict[str, Any]:
    """:func:`~perfledger.app.context.environment_payload` as this process first collected it
    (a copy: the caller may change it). The machine does not change during a test run, and
    collecting it again (GPU, driver, toolkit, container, the Python installation's digest)
    cost a few tenths of a second in each of the fifty-odd tests that record readiness; the
    ``measure`` commands they run still collect their own and compare."""
    return copy.deepcopy(_collected(tools))
