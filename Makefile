# Bulkhead: `make run` (the app with the demo fleet) and `make test` (the suite). See README.md.
SHELL := /bin/bash
PYTHON := $(shell bin/find-python)
VENV := .venv
PY := $(VENV)/bin/python
UV := .tools/bin/uv
PORT ?= 8000
export DJANGO_SETTINGS_MODULE := fleet.settings

.PHONY: install run web worker test lint typecheck migrations-check check bench clean

$(UV):
	@test -n "$(PYTHON)" || { echo "no Python >= 3.12 found"; exit 1; }
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet uv==0.13.8

$(VENV)/.installed: pyproject.toml uv.lock $(UV)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync --frozen --python $(PYTHON) --quiet
	@touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(VENV)/.installed node_modules/.installed

run: install
	$(PY) manage.py migrate --no-input -v 0
	SITE_URL=http://127.0.0.1:$(PORT) LOG_LEVEL=WARNING $(PY) manage.py demo --quiet
	@bin/run-embedded $(PORT)

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: install
	$(VENV)/bin/mypy fleet runs escalations

migrations-check: install
	$(PY) manage.py makemigrations --check --dry-run

check: lint typecheck migrations-check test

bench: install
	$(PY) bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .tools node_modules var staticfiles
