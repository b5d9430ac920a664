# The README's two commands: `make test` and `make demo`. Everything they need is set up here.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test lint typecheck unit demo bench clean system-deps

# Debian 12 ships python3 without venv/ensurepip; install it when we can (root), else say how.
system-deps:
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null; \
	  else echo "need python3-venv: run 'sudo apt-get install python3-venv'" >&2; exit 1; fi; }

$(STAMP): pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,controller]'
	touch $@

lint: $(STAMP)
	$(VENV)/bin/ruff check xce_agent tests bench
	$(VENV)/bin/ruff format --check xce_agent tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

test: lint typecheck $(STAMP)
	$(PY) -m pytest -q tests

demo: $(STAMP)
	$(VENV)/bin/xce-agent demo

BENCH_VENV := bench/.venv

# supervisord, the peer of the supervision benchmark, lives in its own venv from PyPI.
$(BENCH_VENV)/bin/supervisord: | system-deps
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q supervisor

bench: $(STAMP) $(BENCH_VENV)/bin/supervisord
	$(PY) -m bench

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
