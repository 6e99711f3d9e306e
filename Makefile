# The two commands: `make serve` starts the server, `make test` runs the whole suite.
# Both create or refresh .venv on first use (and whenever pyproject.toml changes).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test lint bench e2e-deps clean

$(STAMP): pyproject.toml setup.py src/iobridge/npamp/_speedups.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/iobridge serve

tests/e2e/node_modules/.installed: tests/e2e/package.json
	cd tests/e2e && npm install --no-audit --no-fund --silent
	touch $@

e2e-deps: tests/e2e/node_modules/.installed

test: $(STAMP) e2e-deps
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script; done

clean:
	rm -rf $(VENV) tests/e2e/node_modules
