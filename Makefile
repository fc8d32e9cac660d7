# Two commands do all the set-up: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 6789

TS_INTEROP := tests/interop/ts

.PHONY: serve test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(BIN)/.installed-test: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $(BIN)/.installed $@

serve: $(BIN)/.installed
	$(BIN)/trioq serve --host $(HOST) --port $(PORT)

lint: $(BIN)/.installed-test
	$(BIN)/ruff check broker protocol store tests benchmarks
	$(BIN)/mypy

# The TypeScript SDK and bun for the interop test, pinned by package-lock.json.
$(TS_INTEROP)/node_modules/.installed: $(TS_INTEROP)/package.json $(TS_INTEROP)/package-lock.json
	cd $(TS_INTEROP) && npm ci --no-audit --no-fund
	touch $@

test: lint $(TS_INTEROP)/node_modules/.installed
	$(BIN)/pytest -q

bench: $(BIN)/.installed-test
	$(BIN)/python -m benchmarks --compare --modes memory,sqlite
	$(BIN)/python -m benchmarks.lateness --compare --modes memory,sqlite
	$(BIN)/python -m benchmarks.flows --compare --modes memory,sqlite

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(TS_INTEROP)/node_modules
