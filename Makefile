# Two commands set everything up on a fresh machine with python3:
#   make run    the server on its embedded default (SQLite + web inbox), over HTTP on 127.0.0.1:8765;
#               it installs only what the server needs (.[all]: the server and every channel's extra)
#   make test   the docs build (mkdocs --strict), lint, the whole test suite and the benches' smoke run;
#               it adds the test extras
#   make test-fast   the in-process core only (no subprocess, browser, PostgreSQL, replicas, Node): the inner loop
# make run PORT=9000 (or HITL_PORT=9000 make run) serves on another port.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --disable-pip-version-check -q
HASH := $(shell cksum < pyproject.toml | cut -d' ' -f1)
# one stamp per set of extras installed; a change to pyproject.toml installs again
RUN_STAMP := $(VENV)/.installed-all-$(HASH)
DOCS_STAMP := $(VENV)/.installed-docs-$(HASH)
TEST_STAMP := $(VENV)/.installed-test-$(HASH)
DIST_STAMP := $(VENV)/.installed-dist-$(HASH)
# the Node clients of tests/e2e/test_ts_client.py, exactly as locked
TS_DEPS := tests/ts/node_modules/.package-lock.json
# the mcpb CLI that packs and validates the Claude Desktop bundle, exactly as locked
MCPB := tools/node_modules/.bin/mcpb
PORT ?=
# mkdocs-material's banner about its end of life and mkdocs 2: the build does not change with it
export NO_MKDOCS_2_WARNING = 1

.PHONY: run test test-fast lint docs bench bench-smoke dist dist-check mcpb clean screenshots

$(PY):
	python3 -m venv $(VENV)

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[all]'
	rm -f $(VENV)/.installed-all-* && touch $@

$(DOCS_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[docs]'
	rm -f $(VENV)/.installed-docs-* && touch $@

$(TEST_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@ $(RUN_STAMP) $(DOCS_STAMP)

$(DIST_STAMP): pyproject.toml | $(PY)
	$(PIP) -e '.[dist]'
	rm -f $(VENV)/.installed-dist-* && touch $@

$(TS_DEPS): tests/ts/package.json tests/ts/package-lock.json
	npm ci --prefix tests/ts --no-audit --no-fund
	touch $@

$(MCPB): tools/package.json tools/package-lock.json
	npm ci --prefix tools --no-audit --no-fund
	touch $@

run: $(RUN_STAMP)
	@echo "hitl-mcp: in another terminal, in this folder: source $(VENV)/bin/activate, then hitl-mcp inbox --open"
	$(VENV)/bin/hitl-mcp serve --transport http $(if $(PORT),--port $(PORT))

lint: $(TEST_STAMP)
	$(PY) -m ruff check
	$(PY) -m ruff format --check
	$(PY) -m mypy

# the documentation site, from docs/ into site/ (mkdocs.yml); --strict fails on any warning
docs: $(DOCS_STAMP)
	$(VENV)/bin/mkdocs build --strict

# the whole suite on TEST_JOBS pytest-xdist workers (measured: docs/development.md, Running the tests);
# tests that must share one worker carry @pytest.mark.xdist_group (--dist loadgroup). A worker that
# dies (pytest-timeout's thread method ends the process of a hung test) is not replaced: with
# loadgroup, xdist 3.8 can wait forever after re-queueing a crashed worker's group, and CI would hang
# until its limit instead of failing with the traceback
TEST_JOBS ?= 3
FAST_JOBS ?= 4
# what test-fast leaves out: the markers applied by tests/support/needs.py
FAST := not process and not browser and not postgres and not replicas and not node

test: lint $(TS_DEPS)
	$(VENV)/bin/mkdocs build --strict --quiet
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadgroup --max-worker-restart 0
	$(PY) bench/_smoke.py

test-fast: $(TEST_STAMP)
	$(PY) -m pytest -q -m "$(FAST)" -n $(FAST_JOBS)

bench: $(RUN_STAMP)
	@for script in bench/[a-z]*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

# every bench at a tiny size (bench/_smoke.py), two at a time, in under a minute: they keep running
bench-smoke: $(RUN_STAMP)
	$(PY) bench/_smoke.py

# the wheel and the sdist, into dist/
dist: $(DIST_STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .

# what CI checks of the distributions (.ci/run): the wheel in a fresh venv without extras answers
# tools/list over stdio; uvx runs the wheel; the examples' command from this clone answers too;
# the Claude Desktop bundle packs and validates
dist-check: dist mcpb
	$(PY) scripts/dist_check.py

# the Claude Desktop bundle (packaging/mcpb/manifest.json), into dist/hitl-mcp-<version>.mcpb
mcpb: $(MCPB)
	python3 scripts/mcpb.py --mcpb $(MCPB)

# the inbox screenshots (docs/inbox-desktop.png, -phone.png, -forced-colors.png); needs Debian's chromium
screenshots: $(TEST_STAMP)
	$(PY) scripts/screenshots.py

# Mutation testing of the core, not in CI (see docs/development.md, Mutation testing): mutmut on each module in turn,
# against the fast in-process tests of [tool.mutmut] in pyproject.toml, then the table and the verdict
# (scripts/mutation_report.py). One module: make mutation MUTATION_MODULES=outbox
.PHONY: mutation
MUTATION_MODULES ?= core.results core.audit mcp.hosts broker.outbox core.retry broker.broker core.outcomes store \
	core.quorum core.rules core.delegation core.escalation core.settle broker.digests gate.policy gate.paths
MUTATION_CHILDREN ?= 2
MUTATION_STAMP := $(VENV)/.installed-mutation-$(HASH)

$(MUTATION_STAMP): $(TEST_STAMP)
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
	rm -rf $(VENV) .pytest_cache .ruff_cache tests/ts/node_modules tools/node_modules site dist build mutants
