#!/usr/bin/env bash
# The CPU stand-in loop end to end (what tests/loop/test_cpu_loop.py checks), into LEDGER (a new
# directory) and SUMMARY (default ./summary.md). Needs perfledger on PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
ledger="${1:?usage: run.sh LEDGER [SUMMARY]}"; summary="${2:-summary.md}"
perfledger init "$ledger" >/dev/null
pl() { perfledger --ledger "$ledger" "$@"; }
pl loop setup --run cpu --baseline "$here/kernel_v0.py" --ref "$here/ref.py" \
    --dims '{"M": 64, "N": 256}' --iterations 3 --ncu-num 2 --min-effect 0.05 \
    --driver "python3 $here/subject.py {kernel} {ref} {dims} {entry}" \
    --catalog "$here/catalog.toml" --sm-arch sm_90
close() { pl loop close-iter --run cpu --iter "$1" --kernel "$here/$2" \
    --methods "$here/iter$1/methods.json" --analysis "$here/iter$1/analysis.md" --pairs 6; }
close 1 kernel_v1_bad.py   # incorrect: recorded as attempt 1 (R25)
close 1 kernel_v1.py
close 2 kernel_v2.py
close 3 kernel_v3.py
pl loop finalize --run cpu --out "$summary" --pairs 6
pl verify
