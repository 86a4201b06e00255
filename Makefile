# The commands the README names. Each sets up .venv on first use and again only when
# pyproject.toml changes, so re-runs start at once. Pass extra arguments with ARGS="...".

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
# npm ci writes node_modules/.package-lock.json: the dashboards' browser assets (Chart.js).
NODE_INSTALLED := node_modules/.package-lock.json
# The TypeScript client's own packages (openapi-fetch, openapi-typescript, tsc), for its tests.
TS_CLIENT := clients/typescript
TS_INSTALLED := $(TS_CLIENT)/node_modules/.package-lock.json
# The browser tests drive Debian's chromium, never a downloaded one.
CHROMIUM := /usr/bin/chromium

.PHONY: up demo test lint typecheck check setup

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

$(INSTALLED): pyproject.toml clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]" -e ./clients/python
	touch $@

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
