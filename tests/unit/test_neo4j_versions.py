"""Neo4j versions without a server: calendar versions parse and compare above 5.x, a start picks a
Java the version needs, reads the server class the jar declares, and never opens a store made by
another version."""
from __future__ import annotations

import stat
import zipfile

import pytest

from seeder_dgl.graphstore import server as server_module
from seeder_dgl.graphstore.server import VERSION_FILE, LocalNeo4j, Neo4jServerError, ServerSettings
from seeder_dgl.graphstore.versions import (NEO4J_CALENDAR_VERSION, NEO4J_VERSION, Neo4jVersionError, check_version,
                                            is_calendar_version, parse_version, required_java, version_supported)


def test_calendar_versions_parse_and_compare_above_every_5x():
    assert parse_version("2026.08.1") == (2026, 8, 1) and parse_version("5.26.30") == (5, 26, 30)
    assert parse_version("5.26.0-aura") == (5, 26, 0) and parse_version("2025.01") == (2025, 1, 0)
    assert parse_version("2025.01.0") > parse_version("5.26.30") > parse_version("5.9.0")
    assert is_calendar_version("2025.10.1") and not is_calendar_version("5.26.30")
    assert required_java("2026.08.1") == 21 and required_java("5.26.30") == 17
    with pytest.raises(ValueError):
        parse_version("latest")
    assert [version_supported(v) for v in ("5.26.0", "2025.01.0", "2026.08.1-aura", "5.25.9", "4.4.30", "dev")] == [
        True, True, True, False, False, False]


def test_versions_and_aliases_are_checked_in_one_line():
    assert check_version("lts") == NEO4J_VERSION and check_version(" Calendar ") == NEO4J_CALENDAR_VERSION
    assert check_version("2025.10.1") == "2025.10.1"
    for bad, says in (("5.25.2", "older than 5.26"), ("2026.08", "not of the form"), ("5.26.30;rm", "not of the form"),
                      ("", "not of the form")):
        with pytest.raises(Neo4jVersionError, match=says) as info:
            check_version(bad)
        assert "\n" not in str(info.value)


def _fake_java(folder, version_line: str):
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return str(java)


def test_a_start_finds_a_java_new_enough_for_the_version(tmp_path, monkeypatch):
    jvm = tmp_path / "jvm"
    old = _fake_java(jvm / "java-17", 'openjdk version "17.0.15" 2025-04-15')
    new = _fake_java(jvm / "temurin-25", 'openjdk version "25" 2025-09-16 LTS')
    ancient = _fake_java(tmp_path / "java8", 'java version "1.8.0_402"')
    assert server_module._java_major(old) == 17 and server_module._java_major(new) == 25
    assert server_module._java_major(ancient) == 8
    monkeypatch.setattr(server_module, "JVM_DIR", jvm)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "java8"))
    assert server_module.java_for(NEO4J_VERSION) == old  # the first that is new enough
    assert server_module.java_for(NEO4J_CALENDAR_VERSION) == new
    monkeypatch.setattr(server_module, "JVM_DIR", tmp_path / "none")
    with pytest.raises(Neo4jServerError, match=r"needs Java 21 or newer, found Java 8 at .*JAVA_HOME") as info:
        server_module.java_for(NEO4J_CALENDAR_VERSION)
    assert "\n" not in str(info.value)


def test_the_server_class_is_the_one_the_jar_declares(tmp_path):
    settings = ServerSettings(home=tmp_path, version=NEO4J_CALENDAR_VERSION)
    server = LocalNeo4j(settings)
    assert server.entry_point() == server_module.ENTRY_POINT  # no jar yet: 5.26's class
    settings.lib_dir.mkdir(parents=True)
    with zipfile.ZipFile(settings.lib_dir / f"neo4j-{settings.version}.jar", "w") as jar:
        jar.writestr(server_module.ENTRY_POINT_SERVICE, "org.neo4j.server.Neo4jCommunity\n")
    assert server.entry_point() == "org.neo4j.server.Neo4jCommunity"


def test_a_store_made_by_another_version_is_never_opened(tmp_path):
    settings = ServerSettings(home=tmp_path, version=NEO4J_VERSION)
    server = LocalNeo4j(settings)
    assert server.store_version() is None
    (settings.data_dir / "databases").mkdir(parents=True)
    assert server.store_version() == NEO4J_VERSION  # a store from before versions were recorded
    (settings.instance_dir / VERSION_FILE).write_text(NEO4J_CALENDAR_VERSION)
    with pytest.raises(Neo4jServerError, match=f"holds a Neo4j {NEO4J_CALENDAR_VERSION} store.*would not read it.*"
                                               f"--version {NEO4J_CALENDAR_VERSION}") as info:
        server.start(timeout=1)
    assert "\n" not in str(info.value) and not settings.pid_file.exists()
    (settings.instance_dir / VERSION_FILE).write_text(NEO4J_VERSION)
    newer = LocalNeo4j(ServerSettings(home=tmp_path, version=NEO4J_CALENDAR_VERSION))
    with pytest.raises(Neo4jServerError, match="would upgrade it for good"):
        newer.preflight()


def test_jars_fetched_before_versioned_folders_are_kept(tmp_path):
    old = tmp_path / "lib"
    old.mkdir()
    (old / f"neo4j-{NEO4J_VERSION}.jar").write_bytes(b"jar")
    (old / ".complete").write_text(NEO4J_VERSION)
    server = LocalNeo4j(ServerSettings(home=tmp_path))
    assert server.fetch() == tmp_path / f"lib-{NEO4J_VERSION}" and not old.exists()
    assert server.jars_present()


def test_docker_compose_and_the_maven_files_name_the_versions_the_code_runs():
    from pathlib import Path

    yaml = pytest.importorskip("yaml")
    repo = Path(__file__).resolve().parents[2]
    services = yaml.safe_load((repo / "docker-compose.yml").read_text())["services"]
    assert services["neo4j"]["image"] == f"neo4j:{NEO4J_VERSION.rsplit('.', 1)[0]}-community"
    assert services["neo4j-calendar"]["image"] == f"neo4j:{NEO4J_CALENDAR_VERSION}-community"
    import xml.etree.ElementTree as ElementTree

    for pom in ("neo4j/pom.xml", "neo4j/procedures/pom.xml"):
        text = (repo / pom).read_text()
        assert f"<neo4j.version>{NEO4J_VERSION}</neo4j.version>" in text
        ElementTree.fromstring(text)  # Maven refuses a file that is not XML (e.g. "--" in a comment)
    makefile = (repo / "Makefile").read_text()
    assert f"NEO4J_CALENDAR ?= {NEO4J_CALENDAR_VERSION}" in makefile
