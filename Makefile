# The two commands a new user runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
SHARED ?= ../shared
CONFORMANCE ?= $(SHARED)/conformance/noetl
FORMS := tests/fixtures/noetl_forms

.PHONY: install demo test unit conformance bench verify lint clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) examples/demo.py

unit: install
	$(PY) -m pytest -q

conformance: install
	$(BIN)/milepost conformance $(CONFORMANCE)
	$(BIN)/milepost conformance $(CONFORMANCE) --cluster

# the conformance suite and the fixtures of the NoETL forms (tests/fixtures/noetl_forms,
# DSL 12) run twice: embedded (SQLite, in-process workers) and through a server on a fresh
# PostgreSQL database with two worker processes
test: install
	$(PY) -m pytest -q -n 2 --dist loadfile
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

# the fault suite's long version (README, "Verifying an installation"); `make test` runs
# the short one on SQLite and PostgreSQL (tests/e2e/test_verify.py)
verify: install
	$(BIN)/milepost verify --runs 50 --seed 1 --duration 120

lint: install
	$(BIN)/ruff check milepost tests examples
	$(BIN)/mypy --strict milepost

clean:
	rm -rf $(VENV) .milepost .pytest_cache
