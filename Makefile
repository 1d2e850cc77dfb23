# The two commands a newcomer needs: `make demo` and `make test`. Both do all set-up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The DGL lane: DGL 2.1 (the last on PyPI) with the torch 2.2.1 / NumPy 1 stack it loads with.
VENV_DGL ?= .venv-dgl
PY_DGL := $(VENV_DGL)/bin/python
# The tests of DGL message passing, DGL graphs and training with ops=dgl, and the rest of the model's and
# trainer's tests beside them (the oldest supported torch and NumPy).
# The compatibility lane: the tests that talk to Neo4j (server, indexes, seeding, K-hop on both engines,
# live reads, ingest, adopt, GraphRAG, the CLI end to end) against the current calendar release.
NEO4J_CALENDAR ?= 2026.08.1
CALENDAR_TESTS := tests/e2e/test_neo4j_server.py tests/e2e/test_vector_index.py tests/e2e/test_seeding.py \
	tests/e2e/test_query_cypher.py tests/e2e/test_khop_cypher_vs_reference.py tests/e2e/test_live_graph.py \
	tests/e2e/test_ingest_neo4j.py tests/e2e/test_adopt_in_place.py tests/e2e/test_graphrag.py \
	tests/e2e/test_driver_parameters.py tests/e2e/test_cli_end_to_end.py
DGL_TESTS := tests/unit/test_model_ops.py tests/unit/test_rollout.py tests/unit/test_dgl_graphs.py \
	tests/unit/test_parallel_training.py tests/unit/test_trainer.py
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export DGLBACKEND ?= pytorch

.PHONY: setup setup-dgl system-deps neo4j-jars demo test test-core test-dgl test-neo4j-calendar bench clean-neo4j

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

$(VENV_DGL)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_DGL)
	$(PY_DGL) -m pip install -q --upgrade "pip<25"
	$(PY_DGL) -m pip install -q -e ".[dgl]" "pytest>=8" "hypothesis>=6.100"
	touch $@

setup-dgl: $(VENV_DGL)/.installed

neo4j-jars: $(VENV)/.installed
	$(PY) -c "from seeder_dgl.graphstore.server import LocalNeo4j; LocalNeo4j().fetch()"

# End to end on the small default dataset (MetaQA from ../shared, or DATA=path).
demo: setup
	bash scripts/demo.sh

# Every lane: the whole suite on the current stack and Neo4j 5.26 LTS (no DGL there), the DGL lane in
# its own venv, then the Neo4j tests against the calendar line (Java 21+, found under /usr/lib/jvm or
# JAVA_HOME).
test: test-core test-dgl test-neo4j-calendar

test-core: setup
	$(PY) -m pytest -q

test-dgl: setup-dgl
	SEEDER_REQUIRE_DGL=1 $(PY_DGL) -m pytest -q $(DGL_TESTS)

test-neo4j-calendar: setup
	SEEDER_NEO4J_VERSION=$(NEO4J_CALENDAR) $(PY) -m pytest -q $(CALENDAR_TESTS)

bench: setup
	bash benchmarks/run_all.sh

clean-neo4j:
	-$(VENV)/bin/seeder-dgl neo4j stop
	rm -rf .neo4j/default .neo4j/pytest
