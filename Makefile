# Two commands set everything up on a fresh machine with python3:
#   make run    the server on its embedded default (SQLite + web inbox), over HTTP on 127.0.0.1:8765
#   make test   the whole test suite (lint included)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# the Node clients of tests/test_ts_client.py, exactly as locked
TS_DEPS := tests/ts/node_modules/.package-lock.json

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

$(TS_DEPS): tests/ts/package.json tests/ts/package-lock.json
	npm ci --prefix tests/ts --no-audit --no-fund
	touch $@

run: $(STAMP)
	$(VENV)/bin/hitl-mcp serve --transport http

lint: $(STAMP)
	$(PY) -m ruff check
	$(PY) -m ruff format --check

test: lint $(TS_DEPS)
	$(PY) -m pytest -q

bench: $(STAMP)
	@for script in bench/[a-z]*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

# the README's inbox screenshots (docs/inbox-desktop.png, -phone.png, -forced-colors.png); needs Debian's chromium
.PHONY: screenshots
screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache tests/ts/node_modules
