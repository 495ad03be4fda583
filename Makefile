# perfledger: the two commands a new user needs (README.md).
#   make demo  - set up .venv, run a whole optimization session through the CLI (the GPU session
#                when a GPU and CuPy are present, else the CPU one) and audit it
#   make test  - set up .venv with the dev extras and run the whole test suite
# and, for development, make test-fast: the same suite less its tests marked slow or gpu (unit,
# property, contract, every rule test, the fast docs), to run after every change.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The suite starts the `perfledger` CLI as a subprocess thousands of times; where the environment
# sets PYTHONDONTWRITEBYTECODE, each start compiled the whole package again. The test targets run
# with Python's default: bytecode cached in `__pycache__` beside the sources (git ignores it).
# Their temporary files (every test's ledgers) go to /dev/shm where there is one: a ledger fsyncs
# about ten times per event, and no test needs a disk under it (power loss is simulated by FUSE).
TEST_TMPDIR := $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm)
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) \
	$(BIN)/python -m pytest
# Tests run in TEST_WORKERS processes (pytest-xdist), except those marked `serial`: they measure
# on this host under the real monitor (another test's load would refuse their baseline, R17) or
# aim at timing, or write into this interpreter's installation (which refuses a parallel
# measurement, R11), so `make test` runs them alone after the rest. Every serial test is also
# slow. The package's bytecode is compiled first: a test process compiling a module into
# src/.../__pycache__ writes the editable install's sources, which a measurement running beside
# it would refuse (R11).
TEST_WORKERS ?= 2

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo's CLI calls read byte-compiled modules even where PYTHONDONTWRITEBYTECODE is set
# (compileall writes the caches whatever that variable says).
demo: $(STAMP)
	$(BIN)/python -m compileall -q src >/dev/null
	$(BIN)/python examples/run_demo.py

test: $(STAMP)
	$(BIN)/python -m compileall -q src >/dev/null
	$(PYTEST) -q -n $(TEST_WORKERS) -m "not serial"; parallel=$$?; \
	$(PYTEST) -q -m serial; serial=$$?; \
	test $$parallel = 0 && test $$serial = 0

test-fast: $(STAMP)
	$(BIN)/python -m compileall -q src >/dev/null
	$(PYTEST) -q -n $(TEST_WORKERS) -m "not slow and not gpu"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

bench: $(STAMP)
	$(BIN)/python bench/ledger_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
