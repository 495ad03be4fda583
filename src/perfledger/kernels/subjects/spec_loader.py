"""Loading a kernel spec (``perfledger measure kernel|aa --spec``): a Python file that defines
``PROBLEMS`` (case -> :class:`~perfledger.kernels.harness.harness.Problem`) or ``PROBLEM``,
``REFERENCE`` and ``CANDIDATE`` (subjects), or ``SUBJECT`` (the one subject of a spec that lives
in a code directory of its own, R11: ``measure kernel --ref DIR --cand DIR``), and optional ``CONFIG``
(:class:`~perfledger.kernels.harness.harness.HarnessConfig`), or a ``.json`` spec of host-launched
``solve`` subjects.

Loading a Python spec *runs* it (subject code): under property 3 of SPEC.md section 5 only a
subject worker (:mod:`perfledger.kernels.isolation.subject_worker`) calls :func:`load_spec`; the measuring
process asks a worker instead. The in-process library path (``Harness.compare``) may call it.
"""

from __future__ import annotations

import runpy
from typing import Any

from perfledger.errors import BadRequest

#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/subjects.md describes a spec: PROBLEMS (or PROBLEM), REFERENCE and CANDIDATE, or SUBJECT for a spec in a subject directory"


def load_spec(path: str) -> dict[str, Any]:
    """Load a kernel spec file: ``PROBLEMS`` (case -> Problem) or ``PROBLEM``, ``REFERENCE``,
    ``CANDIDATE`` (subjects) or ``SUBJECT`` (a spec in a subject directory: the code of that
    directory), optional ``CONFIG`` (HarnessConfig); or a ``.json`` spec of
    host-launched ``solve`` subjects (:func:`perfledger.kernels.subjects.solve.load_solve_spec`).
    Raises BadRequest."""

    if path.endswith(".json"):
        from perfledger.kernels.subjects.solve import load_solve_spec  # noqa: PLC0415 (numpy via perfledger.kernels.subjects.solve)

        spec = load_solve_spec(path)
        # in a subject directory (R11), the spec's "reference" source is that directory's kernel
        return {**spec, "subject": spec["reference"]}

    try:
        namespace = runpy.run_path(path)
    except FileNotFoundError:
        raise BadRequest(f"no spec file {path!r}", hint=_HINT) from None
    except ModuleNotFoundError as exc:
        hint = (
            "the kernel harness needs an NVIDIA GPU with CuPy: pip install -e '.[gpu]' on a GPU "
            "machine (`perfledger env` shows what this machine has)"
            if exc.name in ("cupy", "cupyx", "pynvml")
            else ""
        )
        raise BadRequest(
            f"the spec {path!r} failed to load: {type(exc).__name__}: {exc}", hint=hint
        ) from None
    except Exception as exc:
        raise BadRequest(
            f"the spec {path!r} failed to load: {type(exc).__name__}: {exc}", hint=_HINT
        ) from None
    problems = namespace.get("PROBLEMS")
    if problems is None and "PROBLEM" in namespace:
        problems = {"default": namespace["PROBLEM"]}
    has_subject = "REFERENCE" in namespace or "SUBJECT" in namespace
    if not isinstance(problems, dict) or not problems or not has_subject:
        raise BadRequest(
            f"the spec {path!r} must define PROBLEMS (or PROBLEM) and REFERENCE (and CANDIDATE), "
            "or SUBJECT (a spec in a subject directory)",
            hint=_HINT,
        )
    return {
        "problems": problems,
        "reference": namespace.get("REFERENCE"),
        "candidate": namespace.get("CANDIDATE"),
        "subject": namespace.get("SUBJECT"),
        "config": namespace.get("CONFIG"),
    }


__all__ = ["load_spec"]
