# Two commands do all the set-up: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 6789
ARGS ?=
# `make test INSTALL_NODE=no` never installs Node.js; by default root installs it with apt-get.
INSTALL_NODE ?= yes
# Likewise for PostgreSQL's server binaries (INSTALL_POSTGRES=no), looked for in PG_BINDIRS,
# pg_config's bindir and PATH.
INSTALL_POSTGRES ?= yes
PG_BINDIRS ?= /usr/lib/postgresql/*/bin

TS_INTEROP := tests/interop/ts

.PHONY: serve test lint bench soak clean postgres-binaries

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

# Extra options go in ARGS: make serve ARGS="--http-port 0 --data-dir /tmp/q"
serve: $(BIN)/.installed
	$(BIN)/trioq serve --host $(HOST) --port $(PORT) $(ARGS)

lint: $(BIN)/.installed-test
	$(BIN)/ruff check broker protocol store tests benchmarks
	$(BIN)/mypy

# npm for the TypeScript interop test. Missing npm is installed with apt-get when make runs
# as root (as CI does); otherwise `make test` stops with one line saying what to install.
# These are expanded only when the interop install has to run.
NODE_MISSING = make test needs Node.js and npm for the TypeScript interop test (npm downloads \
about 113 MB into $(TS_INTEROP)): install them (e.g. sudo apt-get install nodejs npm) and rerun
APT_NODE = apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
can_install_node = $(and $(filter yes,$(INSTALL_NODE)),$(filter 0,$(shell id -u)),\
	$(shell command -v apt-get))
npm_ready = $(or $(shell command -v npm),\
	$(if $(can_install_node),$(shell $(APT_NODE) >&2 && command -v npm)))

# The TypeScript SDK and bun for the interop test, pinned by package-lock.json.
$(TS_INTEROP)/node_modules/.installed: $(TS_INTEROP)/package.json $(TS_INTEROP)/package-lock.json
	$(if $(npm_ready),,$(error $(NODE_MISSING)))
	cd $(TS_INTEROP) && npm ci --no-audit --no-fund
	touch $@

# PostgreSQL's initdb and pg_ctl, for the private database server the tests start (one per
# test session, in a temporary directory). Missing ones are installed with apt-get when make
# runs as root (as CI does); otherwise `make test` stops with one line saying what to install.
PG_MISSING = make test needs PostgreSQL's server binaries (initdb, pg_ctl) for the tests' \
private database server: install them (e.g. sudo apt-get install postgresql) and rerun
APT_POSTGRES = apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
pg_found = $(or $(wildcard $(addsuffix /initdb,$(PG_BINDIRS))),$(shell command -v initdb),\
	$(shell d=$$(pg_config --bindir 2>/dev/null) && test -x "$$d/initdb" && echo "$$d"))
can_install_postgres = $(and $(filter yes,$(INSTALL_POSTGRES)),$(filter 0,$(shell id -u)),\
	$(shell command -v apt-get))
postgres_ready = $(or $(pg_found),\
	$(if $(can_install_postgres),$(shell $(APT_POSTGRES) >&2 && echo installed)))

postgres-binaries:
	$(if $(postgres_ready),,$(error $(PG_MISSING)))

# The interop install comes first: a machine without npm learns it before the long lint.
test: $(TS_INTEROP)/node_modules/.installed postgres-binaries lint
	$(BIN)/pytest -q

# More seeds of the failover test (kill -9 of the active broker at a random moment).
SOAK_SEEDS ?= 20
soak: $(BIN)/.installed-test postgres-binaries
	TRIOQ_FAILOVER_SEEDS=$(SOAK_SEEDS) $(BIN)/pytest -q tests/e2e/test_failover.py

bench: $(BIN)/.installed-test postgres-binaries
	$(BIN)/python -m benchmarks --compare --modes memory,sqlite,postgres
	$(BIN)/python -m benchmarks.lateness --compare --modes memory,sqlite
	$(BIN)/python -m benchmarks.flows --compare --modes memory,sqlite

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(TS_INTEROP)/node_modules
