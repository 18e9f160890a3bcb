# The two commands a new user runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
SHARED ?= ../shared
CONFORMANCE ?= $(SHARED)/conformance/noetl
FORMS := tests/fixtures/noetl_forms

.PHONY: install demo test unit conformance bench bench-ui verify lint clean ui ui-test browser

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# the web UI (ui/): `npm ci` from the committed lock file when it changed, `npm run build`
# into the package (milepost/web/dist, served at /ui/, carried by a wheel) when a source is
# newer than the build
UI_MODULES := ui/node_modules/.package-lock.json
UI_DIST := milepost/web/dist/index.html
UI_SRC := $(shell find ui/src -type f 2>/dev/null) ui/index.html ui/package.json \
	ui/vite.config.ts ui/tsconfig.json

$(UI_MODULES): ui/package-lock.json
	cd ui && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(UI_DIST): $(UI_MODULES) $(UI_SRC)
	cd ui && npm run build --silent

ui: $(UI_DIST)

# the UI's component tests (Vitest, no watch)
ui-test: $(UI_MODULES)
	cd ui && npm test --silent

# Debian's chromium for the browser tests (tests/e2e/test_web_ui.py); installed only where
# we may (root), else the test skips outside CI and fails under it
browser:
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

install: $(VENV)/.installed $(UI_DIST)

demo: install
	$(PY) examples/demo.py

unit: install
	$(PY) -m pytest -q

conformance: install
	$(BIN)/milepost conformance $(CONFORMANCE)
	$(BIN)/milepost conformance $(CONFORMANCE) --cluster

# lint first (ruff, the formatter's check, mypy --strict): the cheapest failure comes first;
# the conformance suite and the fixtures of the NoETL forms (tests/fixtures/noetl_forms,
# DSL 12) run twice: embedded (SQLite, in-process workers) and through a server on a fresh
# PostgreSQL database with two worker processes
test: install browser ui-test lint
	$(PY) -m pytest -q -n 3 --dist loadfile
	$(BIN)/milepost conformance $(CONFORMANCE)
	$(BIN)/milepost conformance $(CONFORMANCE) --cluster
	$(BIN)/milepost conformance $(FORMS)
	$(BIN)/milepost conformance $(FORMS) --cluster

bench: install
	$(BIN)/milepost bench W1 200
	$(BIN)/milepost bench W2 1000
	$(BIN)/milepost bench W3 200
	$(BIN)/milepost bench W1 200 --variant server
	$(BIN)/milepost bench W2 1000 --variant server
	$(BIN)/milepost bench W3 200 --variant server
	$(BIN)/milepost bench INGEST 200

# the web UI's speed in headless Chromium (issue 14; BENCHMARKS.md "web UI"): a run page of
# 100,000 loop iterations, of a 500-step chain and of 500 steps without chains, a live
# page's idle CPU, 100,000 runs listed on PostgreSQL
bench-ui: install browser
	$(PY) -m tests.ui_speed

# the fault suite's long version (README, "Verifying an installation"); `make test` runs
# the short one on SQLite and PostgreSQL (tests/e2e/test_verify.py)
verify: install
	$(BIN)/milepost verify --runs 50 --seed 1 --duration 120

lint: install
	$(BIN)/ruff check milepost tests examples
	$(BIN)/ruff format --check milepost tests examples
	$(BIN)/mypy --strict milepost
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .milepost .pytest_cache
