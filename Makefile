# The commands the README names. Each sets up .venv on first use and again only when the lock
# file changes, so re-runs start at once. Pass extra arguments with ARGS="...".

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# The Python lock files (uv pip compile, hashes for every platform): the service alone, for the
# image, and with the embedded servers and the dev tools, for `make up`, `make test` and CI.
LOCK_PRODUCTION := requirements/production.txt
LOCK_DEVELOPMENT := requirements/development.txt
LOCK_OPTIONS := --quiet --universal --python-version 3.11 --generate-hashes --custom-compile-command "make lock"
# npm ci writes node_modules/.package-lock.json: the dashboards' browser assets (Chart.js).
NODE_INSTALLED := node_modules/.package-lock.json
# The TypeScript client's own packages (openapi-fetch, openapi-typescript, tsc), for its tests.
TS_CLIENT := clients/typescript
TS_INSTALLED := $(TS_CLIENT)/node_modules/.package-lock.json
# The browser tests drive Debian's chromium, never a downloaded one.
CHROMIUM := /usr/bin/chromium

.PHONY: up demo test lint typecheck check setup lock

up: $(INSTALLED) $(NODE_INSTALLED)
	exec $(BIN)/python manage.py up $(ARGS)

demo: $(INSTALLED) $(NODE_INSTALLED)
	exec $(BIN)/python manage.py up --demo $(ARGS)

test: $(INSTALLED) $(NODE_INSTALLED) $(TS_INSTALLED) $(CHROMIUM)
	$(BIN)/python -m pytest $(ARGS)

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(INSTALLED)
	$(BIN)/mypy .

check: lint typecheck test

setup: $(INSTALLED) $(NODE_INSTALLED) $(TS_INSTALLED)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Every dependency from the lock, hash-checked; then the project and the client themselves
# (editable, nothing more to resolve).
$(INSTALLED): $(LOCK_DEVELOPMENT) clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes \
		-r $(LOCK_DEVELOPMENT)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		-e . -e ./clients/python
	touch $@

# After a change to pyproject.toml's dependencies: pin them again (uv is a dev dependency).
# tests/test_deployment_files.py fails while a lock no longer satisfies pyproject.toml.
lock: $(INSTALLED)
	$(BIN)/uv pip compile $(LOCK_OPTIONS) pyproject.toml -o $(LOCK_PRODUCTION)
	$(BIN)/uv pip compile $(LOCK_OPTIONS) --extra embedded --extra dev pyproject.toml \
		-o $(LOCK_DEVELOPMENT)

$(NODE_INSTALLED): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

$(TS_INSTALLED): $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund
	touch $@

# Installed for the tests when this is Debian and we may (root); otherwise say how.
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq || true) && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
	else \
		echo "the browser tests need Debian's chromium: sudo apt-get install chromium"; exit 1; \
	fi
