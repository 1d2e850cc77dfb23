"""Shared fixtures. Tests in ``tests/unit`` need no server (``pytest tests/unit``); tests in ``tests/e2e``
run against a real Neo4j. The Neo4j server for the whole session comes from, in order:

1. ``NEO4J_URI`` (with ``NEO4J_USER``/``NEO4J_PASSWORD``) when set;
2. testcontainers' Neo4j container (official ``neo4j:5.26-community`` image) when a Docker engine answers;
3. the project's own local server (``LocalNeo4j``), in its own instance folder and port, started
   here and stopped at the end of the session.

The servers of 2 and 3 get seeder-dgl's procedures (the jar built once per version of their
sources): tests of K-hop run on both paths (``khop_engine``).

In CI (``CI=true``) a Neo4j test never skips: if no server can be had the session fails loudly.
"""
from __future__ import annotations

import os
import shutil
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DGLBACKEND", "pytorch")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# Each transaction of the test server may use at most this much heap: a statement whose memory
# estimate grows with candidates x rows fails a test instead of a busy server
# (tests/e2e/test_khop_cypher_vs_reference.py, the wide hub).
TEST_TX_MEMORY = "128m"
# Which Neo4j the session's server runs: SEEDER_NEO4J_VERSION (5.26.30 by default; CI's compatibility
# lane sets the calendar release), for the local server and the container alike.
def _session_neo4j_version() -> str:
    from seeder_dgl.graphstore.versions import NEO4J_VERSION, check_version

    return check_version(os.environ.get("SEEDER_NEO4J_VERSION") or NEO4J_VERSION)


NEO4J_VERSION = _session_neo4j_version()
NEO4J_IMAGE = f"neo4j:{NEO4J_VERSION}-community"


@dataclass
class Neo4jTarget:
    uri: str
    user: str
    password: str
    kind: str
    """'env', 'testcontainers' or 'local'."""
    server: object | None = None
    """The LocalNeo4j when kind == 'local'."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:  # no engine, no socket, no permission: all mean "no Docker"
        return False


def _start_testcontainer(stack: list) -> Neo4jTarget:
    from testcontainers.neo4j import Neo4jContainer

    from seeder_dgl.graphstore.procedures import build_jar
    from seeder_dgl.graphstore.server import ServerSettings, default_home

    container = Neo4jContainer(NEO4J_IMAGE, password="seeder-dgl").with_env(
        "NEO4J_db_memory_transaction_max", TEST_TX_MEMORY).with_env(
        "NEO4J_dbms_security_procedures_unrestricted", "seeder.trackChanges")
    settings = ServerSettings.from_env(home=default_home())
    plugins = build_jar(settings.plugins_cache, settings.version).parent
    container.with_volume_mapping(str(plugins), "/plugins")
    container.start()
    stack.append(container.stop)
    return Neo4jTarget(container.get_connection_url(), "neo4j", "seeder-dgl", "testcontainers")


def _start_local(stack: list) -> Neo4jTarget:
    from seeder_dgl.graphstore.server import LocalNeo4j, ServerSettings

    settings = ServerSettings.from_env(instance="pytest")
    settings.port = int(os.environ.get("SEEDER_TEST_NEO4J_PORT") or _free_port())
    settings.heap = settings.pagecache = "1g"
    settings.tx_memory = TEST_TX_MEMORY
    # A fresh database each session: tests must not depend on what an earlier run left.
    if not (settings.pid_file.exists()):
        shutil.rmtree(settings.instance_dir, ignore_errors=True)
    server = LocalNeo4j(settings)
    pid, started = server.start()
    if started:
        stack.append(server.stop)
    return Neo4jTarget(settings.uri, settings.user, settings.password, "local", server)


def _fail_or_skip(reason: str):
    if IN_CI:
        pytest.fail(f"CI needs a real Neo4j and none could be had: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def neo4j_target():
    stack: list = []
    try:
        if os.environ.get("NEO4J_URI"):
            yield Neo4jTarget(os.environ["NEO4J_URI"], os.environ.get("NEO4J_USER", "neo4j"),
                              os.environ.get("NEO4J_PASSWORD", "seeder-dgl"), "env")
            return
        errors = []
        if _docker_answers():
            try:
                target = _start_testcontainer(stack)
            except Exception as exc:  # fall back to the local server
                errors.append(f"testcontainers: {exc}")
                target = None
        else:
            target = None
        if target is None:
            try:
                target = _start_local(stack)
            except Exception as exc:
                errors.append(f"local server: {exc}")
                _fail_or_skip("; ".join(errors))
        yield target
    finally:
        for close in reversed(stack):
            close()


@pytest.fixture(scope="session")
def neo4j_driver(neo4j_target):
    from neo4j import GraphDatabase

    driver = GraphDatabase.driver(neo4j_target.uri, auth=(neo4j_target.user, neo4j_target.password))
    driver.verify_connectivity()
    yield driver
    driver.close()


@pytest.fixture
def neo4j_env(neo4j_target, monkeypatch):
    """Point the project's own code (Neo4jSettings.from_env) at the test server."""
    monkeypatch.setenv("NEO4J_URI", neo4j_target.uri)
    monkeypatch.setenv("NEO4J_USER", neo4j_target.user)
    monkeypatch.setenv("NEO4J_PASSWORD", neo4j_target.password)
    return neo4j_target


@pytest.fixture
def own_env(tmp_path, neo4j_env, monkeypatch):
    """CLI tests: caches and runs under ``tmp_path``, NEO4J_* pointing at the test server."""
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SEEDER_RUNS", str(tmp_path / "runs"))
    return tmp_path


@pytest.fixture(scope="session")
def seeder_procedures(neo4j_driver):
    """Requires seeder-dgl's procedures on the server, which every server this session starts has."""
    from seeder_dgl.graphstore.procedures import server_has_procedures

    if not server_has_procedures(neo4j_driver):
        _fail_or_skip("the Neo4j server has no seeder-dgl procedures (neo4j/procedures/): install the jar "
                      "`seeder-dgl neo4j plugin` builds")


@pytest.fixture(params=["cypher", "procedure"])
def khop_engine(request):
    """Each K-hop implementation LiveGraph can use (its ``khop`` argument)."""
    if request.param == "procedure":
        request.getfixturevalue("seeder_procedures")
    return request.param


@pytest.fixture
def dataset_label():
    """A label no other test uses, so tests share one database without seeing each other's nodes."""
    return "T" + uuid.uuid4().hex[:10]


# DGL is an optional extra (its last PyPI release loads only with torch 2.2.1 and NumPy 1), so the
# tests that exercise it carry the `dgl` marker and run in their own venv (`make test-dgl`, which sets
# SEEDER_REQUIRE_DGL=1: there a missing DGL fails the run instead of deselecting them). In the core
# venv, which has no DGL, they are deselected and the summary says where they run.
REQUIRE_DGL = os.environ.get("SEEDER_REQUIRE_DGL", "") == "1"


def _dgl_imports() -> bool:
    from seeder_dgl.model import dgl_available

    return dgl_available("cpu")


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("dgl")]
    if not marked:
        return
    if _dgl_imports():
        return
    if REQUIRE_DGL:
        raise pytest.UsageError("SEEDER_REQUIRE_DGL=1 but DGL does not import: install the extra "
                                "(pip install -e '.[dgl]') or run `make test-dgl`")
    items[:] = [item for item in items if not item.get_closest_marker("dgl")]
    config.hook.pytest_deselected(items=marked)
    config._seeder_dgl_deselected = len(marked)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    count = getattr(config, "_seeder_dgl_deselected", 0)
    if count:
        terminalreporter.write_line(f"{count} DGL tests deselected here (no DGL in this venv): "
                                    "they run in the DGL lane, `make test-dgl`")
