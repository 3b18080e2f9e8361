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

# the README's two inbox screenshots (docs/inbox-desktop.png, docs/inbox-phone.png); needs Debian's chromium
.PHONY: screenshots
screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

# Mutation testing of the core, not in CI (see README, Development): mutmut on each module in turn,
# against the fast in-process tests of [tool.mutmut] in pyproject.toml, then the table and the verdict
# (scripts/mutation_report.py). One module: make mutation MUTATION_MODULES=outbox
.PHONY: mutation
MUTATION_MODULES ?= results audit hosts outbox broker store
MUTATION_CHILDREN ?= 2
MUTATION_STAMP := $(VENV)/.mutation-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

$(MUTATION_STAMP): $(STAMP)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[mutation]'
	touch $@

mutation: $(MUTATION_STAMP)
	rm -rf mutants && mkdir mutants
	@start=$$(date +%s); for module in $(MUTATION_MODULES); do \
	  echo "== mutmut: hitl_mcp.$$module (log: mutants/$$module.log)"; \
	  $(VENV)/bin/mutmut run --max-children $(MUTATION_CHILDREN) "hitl_mcp.$$module*" \
	    > mutants/$$module.log 2>&1 || { tail -n 30 mutants/$$module.log; exit 1; }; \
	done; echo "mutmut ran for $$(( $$(date +%s) - start ))s"
	$(PY) scripts/mutation_report.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache tests/ts/node_modules mutants
