"""Compiler evidence of a built ``solve()`` library (:mod:`perfledger.kernels.subjects.solve`): the
``ptxas -v`` report of its build and the ``cuobjdump --dump-sass`` listing of the very library
measured, parsed by :mod:`perfledger.kernels.profilers.compiler` and bound to the library's
blake3 hash.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.compiler import parse_ptxas, parse_sass
from perfledger.kernels.profilers.evidence import report_facts
from perfledger.kernels.subjects.solve import SolveBuild


def compiler_evidence(
    build: SolveBuild, out_dir: str | Path, *, cuobjdump: str | None = None
) -> dict[str, Any]:
    """Compiler evidence of the very library measured: the ``ptxas -v`` report of its build and
    the ``cuobjdump --dump-sass`` listing of the library file, written to ``out_dir`` (as
    ``ptxas.log`` and ``sass.txt``) and parsed by :mod:`perfledger.kernels.profilers.compiler`
    (every line must be understood), the SASS facts bound to the library's blake3 hash. Record
    them with ``perfledger evidence add --kind ptxas|sass`` (the returned ``record`` argv).

    Returns: ``{"library_blake3", "files": {kind: path}, "facts": {kind: [fact dicts]},
    "record": {kind: argv}, "limitations": [...]}``.
    """

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    binary_hash = f"blake3:{build.library_blake3}"
    limitations: list[str] = []
    files: dict[str, str] = {}
    facts: dict[str, list[dict[str, Any]]] = {}
    record: dict[str, list[str]] = {}
    # ptxas's lines and their indented continuations (a function's properties); the host
    # compiler's own messages in nvcc's stderr are not ptxas's report
    lines = [line for line in build.ptxas_log.splitlines() if line.startswith(("ptxas", " ", "\t"))]
    ptxas_path = folder / "ptxas.log"
    ptxas_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        report = parse_ptxas(ptxas_path, tool_version=build.nvcc_version)
        facts["ptxas"] = report_facts(report)
        files["ptxas"] = str(ptxas_path)
        record["ptxas"] = ["perfledger", "evidence", "add", "--kind", "ptxas", str(ptxas_path),
                           "--tool-version", build.nvcc_version]  # fmt: skip
    except EvidenceError as exc:
        limitations.append(f"ptxas report not parsed: {exc.message}")
    exe = cuobjdump or shutil.which("cuobjdump")
    if exe is None:
        limitations.append("cuobjdump not found: no SASS listing")
    else:
        try:
            proc = subprocess.run(
                [exe, "--dump-sass", str(build.library)], capture_output=True, timeout=300
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            limitations.append(f"cuobjdump could not run: {exc}")
            return {"library_blake3": build.library_blake3, "files": files, "facts": facts,
                    "record": record, "limitations": limitations}  # fmt: skip
        sass_path = folder / "sass.txt"
        sass_path.write_bytes(proc.stdout)
        if proc.returncode != 0:
            limitations.append(f"cuobjdump exited {proc.returncode}: {proc.stderr[-300:]!r}")
        else:
            try:
                report = parse_sass(
                    sass_path, tool_version=build.nvcc_version, binary_hash=binary_hash
                )
                facts["sass"] = report_facts(report)
                files["sass"] = str(sass_path)
                record["sass"] = ["perfledger", "evidence", "add", "--kind", "sass",
                                  str(sass_path), "--binary", str(build.library),
                                  "--tool-version", build.nvcc_version]  # fmt: skip
            except EvidenceError as exc:
                limitations.append(f"SASS listing not parsed: {exc.message}")
    return {
        "library_blake3": build.library_blake3,
        "files": files,
        "facts": facts,
        "record": record,
        "limitations": limitations,
    }


__all__ = ["compiler_evidence"]
