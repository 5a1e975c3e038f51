# One entry point for developers and CI. `make test` is what the README and .ci/run call.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
EXTRAS ?= test,dev,spark,docs
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# `make integration` runs the whole suite on the first Kafka release (the default, 4.4.0), then
# KAFKA_SUBSET (the broker- and protocol-sensitive modules) on each other one (3.9.1, the last
# 3.x): the whole suite twice would take 25 to 45 minutes of CI's 90 on 2 busy cores.
# `make integration KAFKA_VERSIONS=3.9.1` runs the whole suite on 3.9.1.
KAFKA_VERSIONS ?= 4.4.0 3.9.1
KAFKA_SUBSET ?= $(addprefix tests/integration/,test_kafka_broker.py test_worker_rebalance.py \
	test_recovery_end.py test_strategies_kafka.py test_join_group_errors.py)

.PHONY: help venv kafka-jars browser lint typecheck docs unit unit-lowest integration test bench demo clean

help:
	@echo "make test        lint, typecheck, docs, unit and integration tests (starts its own Kafka brokers)"
	@echo "make lint        ruff check + ruff format --check"
	@echo "make typecheck   mypy (strict on assignor/)"
	@echo "make docs        the documentation site, mkdocs build --strict into build/site/"
	@echo "make unit        unit tests only (no broker)"
	@echo "make unit-lowest unit tests on the lowest faust-streaming and aiokafka releases allowed"
	@echo "make integration integration tests only (real Kafka brokers: $(KAFKA_VERSIONS))"
	@echo "make bench       benchmarks against the peers, printed as tables with ratios"
	@echo "make demo        the ad-click demo (same as 'streamapp demo')"

# pip's and setuptools' chatter (build warnings, deprecations) goes to build/pip-install.log: one
# line here, the log's tail if pip fails.
PIP_LOG := build/pip-install.log

$(PY):
	@mkdir -p build; echo "creating the virtual environment $(VENV) (log: $(PIP_LOG))"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --upgrade pip >$(PIP_LOG) 2>&1 || { tail -30 $(PIP_LOG); exit 1; }

$(STAMP): pyproject.toml | $(PY)
	@mkdir -p build; echo "installing streamapp with extras $(EXTRAS) into $(VENV) (log: $(PIP_LOG))"
	@$(PY) -m pip install -e ".[$(EXTRAS)]" >>$(PIP_LOG) 2>&1 || { tail -30 $(PIP_LOG); exit 1; }
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

# Resolves the Kafka release (4.4.0, or $$STREAMAPP_KAFKA_VERSION) through Maven Central into
# ~/.cache/streamapp (first run only).
kafka-jars: venv
	@jars=$$($(BIN)/streamapp kafka fetch) && echo "Kafka jars: $$jars"

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy streamapp assignor tables standby

# The documentation site (mkdocs.yml): --strict fails on a broken link or anchor, a missing
# snippet, or a page under docs/ left out of the nav. No -q: it would hide the warnings that
# --strict turns into failures. NO_MKDOCS_2_WARNING silences Material's end-of-life banner.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

unit: venv
	$(BIN)/pytest -q tests/unit

# The unit suite on the lowest faust-streaming and aiokafka releases pyproject.toml allows (the
# venv above has the newest), in a venv of its own; when they are the releases installed, the
# run above already covered them and this says so.
LOWEST_VENV := build/venv-lowest
unit-lowest: venv
	@pins=$$($(PY) .ci/lowest_releases.py); status=$$?; \
	if [ $$status = 1 ]; then echo "unit-lowest: the lowest allowed releases are the ones installed ($$(echo $$pins)): covered by 'make unit'"; exit 0; fi; \
	[ $$status = 0 ] || exit $$status; \
	echo "unit-lowest: the unit suite on $$(echo $$pins) (log: $(PIP_LOG))"; \
	$(PYTHON) -m venv $(LOWEST_VENV) && \
	$(LOWEST_VENV)/bin/pip install -q -e ".[test]" $$pins >>$(PIP_LOG) 2>&1 || { tail -30 $(PIP_LOG); exit 1; }; \
	$(LOWEST_VENV)/bin/pytest -q tests/unit

# Headless Chromium from Debian's packages, for the browser test of the worker's page
# (tests/integration/test_group_page.py). Installed only when missing, and only as root; apt's
# output goes to build/apt-chromium.log.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ]; then echo "chromium is missing: install Debian's chromium package (apt-get install chromium)"; exit 1; fi; \
	  mkdir -p build; echo "installing Debian's chromium (log: build/apt-chromium.log)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
	    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }; } \
	    >build/apt-chromium.log 2>&1 || { tail -20 build/apt-chromium.log; exit 1; }; }

# One pytest run per release, each with its own broker (the session fixture starts the release
# STREAMAPP_KAFKA_VERSION names); the first failing release stops the target.
integration: venv browser
	@tests=tests/integration; for version in $(KAFKA_VERSIONS); do \
		$(BIN)/streamapp kafka fetch --kafka-version $$version || exit 1; \
		echo "== integration tests on Kafka $$version: $$tests"; \
		STREAMAPP_KAFKA_VERSION=$$version $(BIN)/pytest -q $$tests || exit 1; \
		tests="$(KAFKA_SUBSET)"; \
	done

test: lint typecheck docs unit unit-lowest integration

bench: venv kafka-jars
	@for b in bench/*.py; do m=$$(basename $$b .py); echo "== bench.$$m"; $(PY) -m bench.$$m || exit 1; done

demo: venv kafka-jars
	@$(BIN)/streamapp demo

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
