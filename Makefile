# Bulkhead: `make run` (the app with the demo fleet) and `make test` (the suite). See README.md.
SHELL := /bin/bash
PYTHON := $(shell bin/find-python)
VENV := .venv
PY := $(VENV)/bin/python
UV := .tools/bin/uv
PORT ?= 8000
export DJANGO_SETTINGS_MODULE := fleet.settings

.PHONY: client-types install run demo-reset web worker test lint typecheck migrations-check check policy-lab bench clean

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

# The TypeScript client's tools (tsc, openapi-typescript), from its own lock file.
clients/typescript/node_modules/.installed: clients/typescript/package.json clients/typescript/package-lock.json
	cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

install: $(VENV)/.installed node_modules/.installed clients/typescript/node_modules/.installed

run: install
	$(PY) manage.py migrate --no-input -v 0
	@mkdir -p var && echo $(PORT) >var/port
	SITE_URL=http://127.0.0.1:$(PORT) LOG_LEVEL=WARNING $(PY) manage.py demo --quiet
	@bin/run-embedded $(PORT)

# The demo as new: its fleet and everything it recorded are deleted and the stories played again
# (the environment, other fleets and users stay). Stop `make run` first, then start it again.
# Its links are on the port `make run` last served (var/port), unless PORT is given.
demo-reset: install
	$(PY) manage.py migrate --no-input -v 0
	SITE_URL=http://127.0.0.1:$(if $(filter command line environment,$(origin PORT)),$(PORT),$(shell cat var/port 2>/dev/null || echo $(PORT))) LOG_LEVEL=WARNING $(PY) manage.py demo --reset --quiet

# The suite in TEST_WORKERS processes (pytest-xdist), a test file to each at a time; each worker
# has its own test database, Redis databases and var/ folder (tests/parallel.py). TEST_WORKERS=0
# runs it in this process.
TEST_WORKERS ?= 2
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: install
	$(VENV)/bin/mypy fleet runs escalations
	$(VENV)/bin/mypy --strict clients/python/bulkhead_client

migrations-check: install
	$(PY) manage.py makemigrations --check --dry-run

check: lint typecheck migrations-check test

# The policy lab's evidence: the inputs, raw JSON results and the table, with the result hash.
LAB_RESULTS ?= docs/research/evidence/scoped-progress-partial-failure
policy-lab: install
	$(PY) manage.py policy_lab --verify --write-results $(LAB_RESULTS)

bench: install
	$(PY) bench/run.py $(BENCH_ARGS)

# Everything the build and the app made: the environment (.venv, node_modules), the database
# and files under var/. `make run` builds it all again; `make demo-reset` keeps the environment.
clean:
	rm -rf $(VENV) .tools node_modules var staticfiles

# After an API change: the TypeScript client's copy of the OpenAPI document and its generated types.
client-types: install
	$(PY) -c "import django, json; django.setup(); from django.test import Client; \
	print(json.dumps(Client().get('/api/v1/openapi.json').json(), indent=2))" > clients/typescript/openapi.json
	cd clients/typescript && npm run --silent generate && npm run --silent build
