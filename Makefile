# Two commands do all the set-up: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 6789
ARGS ?=
# `make test INSTALL_NODE=no` never installs Node.js; by default root installs it with apt-get.
INSTALL_NODE ?= yes

TS_INTEROP := tests/interop/ts

.PHONY: serve test lint bench clean mutation soak

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

# The interop install comes first: a machine without npm learns it before the long lint.
test: $(TS_INTEROP)/node_modules/.installed lint
	$(BIN)/pytest -q

bench: $(BIN)/.installed-test
	$(BIN)/python -m benchmarks --compare --modes memory,sqlite
	$(BIN)/python -m benchmarks.lateness --compare --modes memory,sqlite
	$(BIN)/python -m benchmarks.flows --compare --modes memory,sqlite

# Mutation testing (slow, not part of `make test`): mutmut mutates the modules in MUTATE (dotted
# names; the config is [tool.mutmut] in pyproject.toml), runs the in-process tests against each
# mutant and prints the score per module. Equivalent survivors are listed in
# tests/mutation_equivalents.md. Results are cached in mutants/ (delete it for a fresh run);
# mutmut's progress goes to mutants.log.
MUTATE ?= store protocol broker.engine
mutation: $(BIN)/.installed-test
	$(BIN)/pip install -q -e '.[mutation]'
	$(BIN)/mutmut run $(foreach m,$(MUTATE),"$(m).*") > mutants.log 2>&1 || (tail -20 mutants.log; false)
	$(BIN)/python -m tests.support.mutation_score

# The long fault runs (minutes): 10^6 fuzzed frames with a fresh seed, fuzzed HTTP and WebSocket
# requests per HTTP/WebSocket property, 100 kill -9 rounds per crash test and of the mixed
# workload (tests/e2e/test_long_faults.py), 2000 stateful engine examples. Each variable
# scales one of them (see README.md).
SOAK_FRAMES ?= 1000000
SOAK_REQUESTS ?= 20000
SOAK_ROUNDS ?= 100
SOAK_EXAMPLES ?= 2000
soak: $(BIN)/.installed-test
	TRIOQ_FUZZ_FRAMES=$(SOAK_FRAMES) TRIOQ_FUZZ_REQUESTS=$(SOAK_REQUESTS) \
	TRIOQ_CRASH_ROUNDS=$(SOAK_ROUNDS) TRIOQ_KILL_ROUNDS=$(SOAK_ROUNDS) \
	TRIOQ_STATEFUL_EXAMPLES=$(SOAK_EXAMPLES) \
	$(BIN)/pytest -q -p no:cacheprovider --timeout=0 -s \
		tests/e2e/test_fuzz.py tests/e2e/test_http_fuzz.py tests/e2e/test_crash.py \
		tests/e2e/test_long_faults.py tests/model

clean:
	rm -rf $(VENV) mutants mutants.log .pytest_cache .mypy_cache .ruff_cache $(TS_INTEROP)/node_modules
