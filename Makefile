# perfledger: the two commands a new user needs (README.md).
#   make demo  - set up .venv, run a whole optimization session through the CLI (the GPU session
#                when a GPU and CuPy are present, else the CPU one) and audit it
#   make test  - set up .venv with the dev extras and run the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m compileall -q src >/dev/null
	$(BIN)/python examples/run_demo.py

# Byte-compile the package first: with PYTHONDONTWRITEBYTECODE set (some shells and CI runners
# set it) every `perfledger` process the tests start would compile every module it imports from
# source again; compileall writes the caches whatever that variable says.
test: $(STAMP)
	$(BIN)/python -m compileall -q src >/dev/null
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

bench: $(STAMP)
	$(BIN)/python bench/ledger_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
