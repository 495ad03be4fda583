#!/usr/bin/env bash
# Runs the GPU loop test on an H200 device machine and leaves summary.md, state.json and the
# pytest log under $OUT (how examples/loop/recorded/ was made). Run from the repository root
# with perfledger importable (PYTHONPATH=src or installed).
set -uo pipefail
: "${OUT:?set OUT to a directory for the results}"
nvidia-smi -L
ncu --version | tail -n 1
PERFLEDGER_LOOP_OUT="$OUT" timeout "${LOOP_TIMEOUT_S:-300}" python3 -m pytest tests/loop/test_gpu_loop.py \
    -m gpu -x -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log"
