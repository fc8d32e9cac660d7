# Two commands do all the set-up: `make serve` and `make test`.
# The interpreter .venv is made with: of python3 on PATH and the system's /usr/bin/python3, the
# one benchmarks/interpreter.py measures fastest (builds of one CPython version differ: a pyenv
# build without PGO ran the broker about 20% slower than Debian's). Worked out only when a venv
# is made; `make PYTHON=python3.12 ...` chooses one.
PYTHON ?= $(eval PYTHON := $(or $(shell python3 benchmarks/interpreter.py python3 /usr/bin/python3),python3))$(PYTHON)
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
# `make test INSTALL_CHROMIUM=no` never installs Chromium; by default root installs it with apt-get.
INSTALL_CHROMIUM ?= yes

TS_INTEROP := tests/interop/ts

.PHONY: serve test lint bench soak mutation clean postgres-binaries chromium

# Said once, when the venv is made: the command is not on PATH.
INSTALLED_HINT = @echo "trioq is installed in $(VENV), not on PATH: run $(BIN)/trioq, or \
'source $(BIN)/activate' to have trioq on PATH in this shell"

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@
	$(INSTALLED_HINT)

$(BIN)/.installed-test: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $(BIN)/.installed $@
	$(INSTALLED_HINT)

# Extra options go in ARGS: make serve ARGS="--port 7000 --data-dir /tmp/q"
serve: $(BIN)/.installed
	$(BIN)/trioq serve --host $(HOST) --port $(PORT) $(ARGS)

lint: $(BIN)/.installed-test
	$(BIN)/ruff check broker protocol store tests benchmarks trioq examples
	$(BIN)/mypy

# Tools a test needs. Each is installed with apt-get when make runs as root (as CI does) and its
# INSTALL_X is yes; otherwise `make test` stops with one line saying what to install. These
# are expanded only when a target needs the tool.
can_install = $(and $(filter yes,$(1)),$(filter 0,$(shell id -u)),$(shell command -v apt-get))
apt_install = apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1)

# npm for the TypeScript interop test.
NODE_MISSING = make test needs Node.js and npm for the TypeScript interop test (npm downloads \
about 113 MB into $(TS_INTEROP)): install them (e.g. sudo apt-get install nodejs npm) and rerun
npm_ready = $(or $(shell command -v npm),\
	$(if $(call can_install,$(INSTALL_NODE)),$(shell $(call apt_install,nodejs npm) >&2 && command -v npm)))

# The TypeScript SDK and bun for the interop test, pinned by package-lock.json.
$(TS_INTEROP)/node_modules/.installed: $(TS_INTEROP)/package.json $(TS_INTEROP)/package-lock.json
	$(if $(npm_ready),,$(error $(NODE_MISSING)))
	cd $(TS_INTEROP) && npm ci --no-audit --no-fund
	touch $@

# PostgreSQL's initdb and pg_ctl, for the private database server the tests start (one per
# test session, in a temporary directory).
PG_MISSING = make test needs PostgreSQL's server binaries (initdb, pg_ctl) for the tests' \
private database server: install them (e.g. sudo apt-get install postgresql) and rerun
pg_found = $(or $(wildcard $(addsuffix /initdb,$(PG_BINDIRS))),$(shell command -v initdb),\
	$(shell d=$$(pg_config --bindir 2>/dev/null) && test -x "$$d/initdb" && echo "$$d"))
postgres_ready = $(or $(pg_found),\
	$(if $(call can_install,$(INSTALL_POSTGRES)),$(shell $(call apt_install,postgresql) >&2 && echo installed)))

postgres-binaries:
	$(if $(postgres_ready),,$(error $(PG_MISSING)))

# Chromium for the dashboard's browser tests (tests/browser, driven by Playwright).
CHROMIUM_MISSING = make test needs Chromium for the dashboard's browser tests: install it \
(e.g. sudo apt-get install chromium chromium-driver) and rerun
chromium_ready = $(or $(shell command -v chromium),$(if $(call can_install,$(INSTALL_CHROMIUM)),\
	$(shell $(call apt_install,chromium chromium-driver) >&2 && command -v chromium)))

chromium:
	$(if $(chromium_ready),,$(error $(CHROMIUM_MISSING)))

# The installs come first: a machine without npm or Chromium learns it before the long lint.
test: $(TS_INTEROP)/node_modules/.installed postgres-binaries chromium lint
	$(BIN)/pytest -q

# Concurrent load beside the reference (interleaved runs, medians), the do-nothing Trio server as
# floor, the official SDKs' workloads beside the reference (the TypeScript SDK and bun come from
# the interop test's npm install), delayed-job lateness, RSS per million waiting jobs, PUSHF flows.
# BENCH_ARGS adds options to the first, SDK_BENCH_ARGS to the second, e.g.
# make bench BENCH_ARGS="--jobs 5000 --repeat 5" SDK_BENCH_ARGS="--jobs 20000". Last, the trioq
# Python client beside the official Python and TypeScript SDKs (benchmarks/clients.py).
BENCH_ARGS ?=
SDK_BENCH_ARGS ?=
bench: $(BIN)/.installed-test postgres-binaries $(TS_INTEROP)/node_modules/.installed
	$(BIN)/python -m benchmarks.loadgen --compare --modes memory,sqlite,postgres $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.sdk --modes memory,sqlite,postgres $(SDK_BENCH_ARGS)
	$(BIN)/python -m benchmarks.lateness --compare --modes memory,sqlite --spread-ms 1000
	$(BIN)/python -m benchmarks.memory --only waiting --jobs 1000000
	$(BIN)/python -m benchmarks.flows --compare --modes memory,sqlite
	$(BIN)/python -m benchmarks.clients

# Mutation testing (slow, not part of `make test`): mutmut mutates protocol/, store/ and
# broker/engine/ (the config is [tool.mutmut] in pyproject.toml), runs the in-process tests against
# each mutant and prints the score per module. Verdicts are kept between sessions in
# tests/mutation_record.json (tests/support/mutation_record.py): a run saves what an earlier
# mutants/ holds, seeds a new mutants/ from the record, tests only the mutants whose verdict does
# not stand (new or changed functions, survivors, the rest of an unfinished run), saves what it
# found back, and prints the record's scores. Commit the record after a run.
# MUTATE=store (dotted module names) re-tests those modules' mutants whatever the record says;
# FRESH=yes starts from an empty mutants/ and ignores the record. Equivalent survivors are listed in
# tests/mutation_equivalents.md. mutmut's progress goes to mutants.log.
MUTATE ?=
FRESH ?= no
# One private PostgreSQL server for every mutant's test session (each would otherwise run initdb);
# mutants run one at a time, since the tests stop and kill that server.
MUTATION_PG ?= /tmp/trioq-mutation-pg
mutation: $(BIN)/.installed-test
	$(BIN)/pip install -q -e '.[mutation]'
	if [ -d mutants ]; then $(BIN)/python -m tests.support.mutation_record save && rm -rf mutants; fi
	$(if $(filter yes,$(FRESH)),,$(BIN)/python -m tests.support.mutation_record seed)
	TRIOQ_TEST_POSTGRES_DIR=$(MUTATION_PG) $(BIN)/mutmut run --max-children 1 $(foreach m,$(MUTATE),"$(m).*") \
		> mutants.log 2>&1 || ($(BIN)/python -m tests.support.postgres stop $(MUTATION_PG); \
		$(BIN)/python -m tests.support.mutation_record save; tail -20 mutants.log; false)
	$(BIN)/python -m tests.support.postgres stop $(MUTATION_PG)
	$(BIN)/python -m tests.support.mutation_record save
	$(BIN)/python -m tests.support.mutation_score --files
	$(BIN)/python -m tests.support.mutation_score

# The long fault runs (minutes): 10^6 fuzzed frames with a fresh seed, fuzzed HTTP and WebSocket
# requests per HTTP/WebSocket property, 100 kill -9 rounds per crash test and of the mixed
# workload (tests/e2e/test_long_faults.py), 2000 stateful engine examples, 20 seeds of the
# PostgreSQL failover test (kill -9 of the active broker). Each variable scales one of them
# (see README.md).
SOAK_SEEDS ?= 20
SOAK_FRAMES ?= 1000000
SOAK_REQUESTS ?= 20000
SOAK_ROUNDS ?= 100
SOAK_EXAMPLES ?= 2000
soak: $(BIN)/.installed-test postgres-binaries
	TRIOQ_FUZZ_FRAMES=$(SOAK_FRAMES) TRIOQ_FUZZ_REQUESTS=$(SOAK_REQUESTS) \
	TRIOQ_CRASH_ROUNDS=$(SOAK_ROUNDS) TRIOQ_KILL_ROUNDS=$(SOAK_ROUNDS) \
	TRIOQ_STATEFUL_EXAMPLES=$(SOAK_EXAMPLES) TRIOQ_FAILOVER_SEEDS=$(SOAK_SEEDS) \
	$(BIN)/pytest -q -p no:cacheprovider --timeout=0 -s \
		tests/e2e/test_fuzz.py tests/e2e/test_http_fuzz.py tests/e2e/test_crash.py \
		tests/e2e/test_long_faults.py tests/e2e/test_failover.py tests/model

clean:
	rm -rf $(VENV) mutants mutants.log .pytest_cache .mypy_cache .ruff_cache $(TS_INTEROP)/node_modules \
		test-artifacts
