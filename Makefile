# The two commands a newcomer needs: `make demo` and `make test`. Both do all set-up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export DGLBACKEND ?= pytorch

.PHONY: setup system-deps neo4j-jars demo test bench clean-neo4j

# Java 17 runs Neo4j 5.26, Maven fetches it and builds seeder-dgl's procedures (javac: the JDK); the
# page of `seeder-dgl serve` is tested in a headless Chromium driven through chromedriver. Installed
# from Debian when missing (needs root).
system-deps:
	@command -v javac >/dev/null && command -v mvn >/dev/null || { \
	  echo "installing Java 17 (JDK) and Maven from Debian packages"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null; }
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  echo "installing Chromium and its driver from Debian packages"; \
	  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip<25"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

setup: system-deps $(VENV)/.installed neo4j-jars

neo4j-jars: $(VENV)/.installed
	$(PY) -c "from seeder_dgl.graphstore.server import LocalNeo4j; LocalNeo4j().fetch()"

# End to end on the small default dataset (MetaQA from ../shared, or DATA=path).
demo: setup
	bash scripts/demo.sh

test: setup
	$(PY) -m pytest -q

bench: setup
	bash benchmarks/run_all.sh

clean-neo4j:
	-$(VENV)/bin/seeder-dgl neo4j stop
	rm -rf .neo4j/default .neo4j/pytest
