"""The project's Neo4j: the real Community server (5.26 LTS, or the calendar release that
SEEDER_NEO4J_VERSION names), its lifecycle and its one-line errors."""
from __future__ import annotations

import os
import socket
import stat

import pytest
from typer.testing import CliRunner

from seeder_dgl.cli import app
from seeder_dgl.graphstore.connection import server_components
from seeder_dgl.graphstore import server as server_module
from seeder_dgl.graphstore.server import LocalNeo4j, Neo4jServerError, ServerSettings
from seeder_dgl.graphstore.versions import required_java
from tests.conftest import NEO4J_VERSION as SESSION_VERSION

runner = CliRunner()


def test_server_is_the_asked_neo4j_community(neo4j_driver):
    info = server_components(neo4j_driver)
    assert info["name"] == "Neo4j Kernel"
    assert info["versions"][0] == SESSION_VERSION
    assert info["edition"] == "community"


def test_start_twice_keeps_one_server(neo4j_target):
    if neo4j_target.kind != "local":
        pytest.skip("the session server is not the project's local one")  # never the case in CI
    server = LocalNeo4j(neo4j_target.server.settings)
    pid_before = server.pid()
    pid, started = server.start()
    assert not started and pid == pid_before


def test_the_local_server_runs_with_the_procedures_of_these_sources(neo4j_target, neo4j_driver):
    """`neo4j start` builds the jar once per version of the Java sources and loads it from its own
    folder; `neo4j plugin` prints that same jar for a server of one's own."""
    from seeder_dgl.graphstore.procedures import JAR_NAME, server_has_procedures, sources_hash

    if neo4j_target.kind != "local":
        pytest.skip("the session server is not the project's local one")  # never the case in CI
    settings = neo4j_target.server.settings
    plugins = settings.plugins_cache / f"{sources_hash()}-{settings.version}"
    assert sorted(p.name for p in plugins.iterdir()) == [JAR_NAME]
    assert f"server.directories.plugins={plugins}" in (settings.conf_dir / "neo4j.conf").read_text().splitlines()
    assert server_has_procedures(neo4j_driver)
    result = runner.invoke(app, ["neo4j", "plugin"], env={"SEEDER_NEO4J_HOME": str(settings.home)})
    assert result.exit_code == 0 and result.stdout.strip() == str(plugins / JAR_NAME), result.output


def _isolated_settings(tmp_path, port: int | None = None) -> ServerSettings:
    settings = ServerSettings.from_env(home=tmp_path / "neo4j-home")
    if port is not None:
        settings.port = port
    return settings


def test_stop_with_none_running_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("NEO4J_URI", raising=False)
    monkeypatch.setenv("SEEDER_NEO4J_HOME", str(tmp_path / "empty-home"))
    result = runner.invoke(app, ["neo4j", "stop"])
    assert result.exit_code == 0
    assert "No local Neo4j server is running" in result.output
    assert LocalNeo4j(_isolated_settings(tmp_path)).stop() is False


def test_port_already_taken_is_one_line_error(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        with pytest.raises(Neo4jServerError, match=f"port {port} .* already in use") as info:
            LocalNeo4j(_isolated_settings(tmp_path, port)).start(timeout=5)
    assert "\n" not in str(info.value)


def test_missing_java_is_one_line_error(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(server_module, "JVM_DIR", tmp_path / "jvm")
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    with pytest.raises(Neo4jServerError, match=f"Java {required_java(SESSION_VERSION)} was not found"):
        LocalNeo4j(_isolated_settings(tmp_path, 1)).start(timeout=5)


def test_missing_java_through_cli(tmp_path, monkeypatch):
    monkeypatch.delenv("NEO4J_URI", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(server_module, "JVM_DIR", tmp_path / "jvm")
    monkeypatch.setenv("SEEDER_NEO4J_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = runner.invoke(app, ["neo4j", "start"])
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: Java {required_java(SESSION_VERSION)} was not found"), \
        result.output


def test_failed_jar_fetch_is_one_line_error_and_leaves_no_partial_lib(tmp_path, monkeypatch):
    # Maven that cannot reach any repository: an offline run against an empty local repository.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real_mvn = "/usr/bin/mvn" if os.path.exists("/usr/bin/mvn") else None
    if real_mvn is None:
        pytest.skip("Maven is not installed")  # .ci/run installs it; never skipped in CI
    wrapper = bin_dir / "mvn"
    wrapper.write_text(f'#!/bin/sh\nexec {real_mvn} -o -Dmaven.repo.local={tmp_path}/empty-m2 "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    server = LocalNeo4j(_isolated_settings(tmp_path))
    with pytest.raises(Neo4jServerError, match="could not fetch Neo4j .* from Maven Central") as info:
        server.fetch()
    assert "\n" not in str(info.value)
    assert not server.settings.lib_dir.exists()
    assert not list(server.settings.home.glob("lib*"))


def test_status_reports_version_through_cli(neo4j_env):
    result = runner.invoke(app, ["neo4j", "status"])
    assert result.exit_code == 0, result.output
    assert f"Neo4j {SESSION_VERSION} community" in result.output


@pytest.mark.parametrize("variable", ["SEEDER_NEO4J_PORT", "SEEDER_NEO4J_VECTOR_BUFFER_MB"])
def test_a_setting_that_is_not_a_number_is_one_line_error(tmp_path, monkeypatch, variable):
    monkeypatch.delenv("NEO4J_URI", raising=False)
    monkeypatch.setenv("SEEDER_NEO4J_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(variable, "lots")
    with pytest.raises(Neo4jServerError, match=f"{variable} must be a whole number, not 'lots'"):
        ServerSettings.from_env()
    result = runner.invoke(app, ["neo4j", "start"])
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and variable in lines[0], result.output
    monkeypatch.setenv(variable, "7688")
    assert getattr(ServerSettings.from_env(), "port" if variable.endswith("PORT") else "vector_buffer_mb") == 7688


def test_transaction_memory_cap_is_validated_and_written(tmp_path, monkeypatch):
    monkeypatch.setenv("SEEDER_NEO4J_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SEEDER_NEO4J_TX_MEMORY", "256m; rm -rf /")
    with pytest.raises(Neo4jServerError, match="SEEDER_NEO4J_TX_MEMORY must be a size such as 256m"):
        ServerSettings.from_env()
    monkeypatch.setenv("SEEDER_NEO4J_TX_MEMORY", "256m")
    settings = ServerSettings.from_env()
    LocalNeo4j(settings).write_config()
    conf = (settings.conf_dir / "neo4j.conf").read_text().splitlines()
    assert "db.memory.transaction.max=256m" in conf
    monkeypatch.delenv("SEEDER_NEO4J_TX_MEMORY")
    settings = ServerSettings.from_env()
    LocalNeo4j(settings).write_config()
    assert not any(line.startswith("db.memory.transaction.max") for line in
                   (settings.conf_dir / "neo4j.conf").read_text().splitlines())


def test_track_changes_is_the_one_procedure_let_out_of_the_sandbox(tmp_path):
    settings = _isolated_settings(tmp_path)
    plugins = tmp_path / "plugins"
    LocalNeo4j(settings).write_config(plugins)
    conf = (settings.conf_dir / "neo4j.conf").read_text().splitlines()
    assert [line for line in conf if "unrestricted" in line] == [
        "dbms.security.procedures.unrestricted=seeder.trackChanges"]
    settings.track_changes = False
    LocalNeo4j(settings).write_config(plugins)
    assert not any("unrestricted" in line for line in (settings.conf_dir / "neo4j.conf").read_text().splitlines())


def test_khop_walks_the_store_on_a_server_that_keeps_the_procedures_sandboxed(neo4j_target):
    """A self-managed server with the jar but without the unrestricted setting: seeder.trackChanges
    cannot run there, so K-hop never trusts a copy of the relationships; it walks the store, with
    no error, and gives the reference's nodes."""
    import shutil

    import numpy as np
    from neo4j import GraphDatabase

    from seeder_dgl.graphstore.live import LiveGraph
    from seeder_dgl.graphstore.writer import GraphWriter
    from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_select
    from tests.conftest import _free_port
    from tests.helpers.graphs import random_embeddings, random_kg

    if neo4j_target.kind != "local":
        pytest.skip("the session server is not the project's local one")  # never the case in CI
    settings = ServerSettings.from_env(home=neo4j_target.server.settings.home, instance="pytest-sandboxed")
    settings.port, settings.heap, settings.pagecache, settings.track_changes = _free_port(), "512m", "256m", False
    shutil.rmtree(settings.instance_dir, ignore_errors=True)
    server = LocalNeo4j(settings)
    server.start()
    try:
        with GraphDatabase.driver(settings.uri, auth=(settings.user, settings.password)) as driver:
            kg, emb = random_kg("sandboxed", 400, 2400, seed=5), random_embeddings(400, seed=5)
            rel_emb = random_embeddings(len(kg.relation_names), seed=6)
            GraphWriter(driver, "sandboxed").ingest(kg, emb, rel_emb, "test-model", progress=False)
            live = LiveGraph(driver, "sandboxed", khop="procedure", procedure_options={"adjacency_wait": True})
            q = random_embeddings(1, seed=7)[0]
            ids, sims = dense_topk(emb, q, 3)
            for _ in range(2):
                sub = live.khop_filter(q, list(zip(ids.tolist(), sims.tolist())), [15, 30], with_edges=False)
                assert live.last_walked == "store"
            ref = khop_select(GraphArrays.from_kg(kg), emb, rel_emb, q, ids, [15, 30], seed_scores=sims)
            assert sub.node_ids.tolist() == ref.node_ids.tolist()
            np.testing.assert_allclose(sub.exact_score, ref.score, atol=1e-12)
    finally:
        server.stop()
        shutil.rmtree(settings.instance_dir, ignore_errors=True)
