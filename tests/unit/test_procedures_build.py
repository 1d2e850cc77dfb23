"""The procedure jar is built with Maven once per version of its sources, offline first, and a
build that fails is one line that says what to install; the local server then starts without it."""
from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from seeder_dgl.graphstore import procedures
from seeder_dgl.graphstore.procedures import JAR_NAME, ProceduresError, build_jar, sources_hash
from seeder_dgl.graphstore.versions import NEO4J_CALENDAR_VERSION, NEO4J_VERSION
from seeder_dgl.graphstore.server import LocalNeo4j, ServerSettings

# A stand-in for Maven: logs its arguments, fails offline while $FAIL_OFFLINE is set and always
# while $FAIL is, else writes the jar where the pom puts it (<-Dseeder.build>/plugins/).
FAKE_MVN = """#!/bin/sh
echo "$@" >> "$MVN_LOG"
for arg in "$@"; do
  case "$arg" in -Dseeder.build=*) build="${arg#-Dseeder.build=}" ;; -o) offline=1 ;; esac
done
if [ -n "$FAIL" ] || { [ -n "$offline" ] && [ -n "$FAIL_OFFLINE" ]; }; then
  echo "[ERROR] No compiler is provided in this environment."; exit 1
fi
mkdir -p "$build/plugins" && echo jar > "$build/plugins/seeder-dgl-procedures.jar"
"""


@pytest.fixture
def fake_maven(tmp_path, monkeypatch) -> Path:
    """Sources copied to tmp_path/src (so a test may edit them) and the fake mvn first on PATH;
    returns the log of its calls."""
    sources = tmp_path / "src"
    shutil.copytree(procedures.NEO4J_PROCEDURES, sources, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setattr(procedures, "NEO4J_PROCEDURES", sources)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text(FAKE_MVN)
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    log = tmp_path / "mvn.log"
    log.touch()
    monkeypatch.setenv("MVN_LOG", str(log))
    monkeypatch.delenv("FAIL", raising=False)
    monkeypatch.delenv("FAIL_OFFLINE", raising=False)
    return log


def test_the_jar_is_built_once_per_version_of_the_sources(fake_maven, tmp_path):
    cache = tmp_path / "plugins"
    jar = build_jar(cache)
    assert jar == cache / f"{sources_hash()}-{NEO4J_VERSION}" / JAR_NAME and jar.is_file()
    assert sorted(p.name for p in jar.parent.iterdir()) == [JAR_NAME]  # the folder is a plugins directory
    assert build_jar(cache) == jar and len(fake_maven.read_text().splitlines()) == 1  # cached
    (call,) = fake_maven.read_text().splitlines()
    assert " -o " in f" {call} " and "package" in call.split()

    java = next((procedures.NEO4J_PROCEDURES / "src").rglob("Retrieval.java"))
    java.write_text(java.read_text() + "\n// changed\n")
    changed = build_jar(cache)
    assert changed.parent.name == f"{sources_hash()}-{NEO4J_VERSION}" != jar.parent.name and changed.is_file()
    assert len(fake_maven.read_text().splitlines()) == 2

    # the calendar line: its own jar, compiled for Java 21 against that version's API jars
    calendar = build_jar(cache, NEO4J_CALENDAR_VERSION)
    assert calendar.parent.name == f"{sources_hash()}-{NEO4J_CALENDAR_VERSION}" and calendar.is_file()
    call = fake_maven.read_text().splitlines()[-1].split()
    assert f"-Dneo4j.version={NEO4J_CALENDAR_VERSION}" in call and "-Dmaven.compiler.release=21" in call
    assert not [p for p in cache.iterdir() if p.name.startswith(".build-")]  # no staging left behind


def test_maven_goes_online_only_when_offline_fails(fake_maven, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_OFFLINE", "1")
    assert build_jar(tmp_path / "plugins").is_file()
    offline, online = fake_maven.read_text().splitlines()
    assert " -o " in f" {offline} " and " -o " not in f" {online} "


def test_a_failed_build_is_one_line_and_the_server_starts_without_the_procedures(fake_maven, tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL", "1")
    with pytest.raises(ProceduresError, match=r"No compiler is provided.*openjdk-17-jdk-headless") as caught:
        build_jar(tmp_path / "plugins")
    assert "\n" not in str(caught.value)
    assert not list((tmp_path / "plugins").glob(f"{sources_hash()}*"))

    server = LocalNeo4j(ServerSettings(home=tmp_path / "home"))
    assert server.install_procedures() is None and "No compiler" in server.procedures_problem
    server.write_config(server.install_procedures())
    conf = (server.settings.conf_dir / "neo4j.conf").read_text()
    assert "server.directories.plugins" not in conf
    monkeypatch.delenv("FAIL")
    plugins = server.install_procedures()
    assert server.procedures_problem is None and (plugins / JAR_NAME).is_file()
    server.write_config(plugins)
    assert f"server.directories.plugins={plugins}" in (server.settings.conf_dir / "neo4j.conf").read_text().splitlines()


def test_no_maven_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProceduresError, match="Maven was not found"):
        build_jar(tmp_path / "plugins")
