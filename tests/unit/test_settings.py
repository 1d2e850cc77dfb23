"""``seeder_dgl.settings``: every variable the package reads is a typed field of ``Settings``, read
and checked there only, and the README's Configuration table lists exactly those variables."""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from seeder_dgl.errors import SeederError
from seeder_dgl.settings import KHOP_ENGINES, VARIABLES, Settings, settings

ROOT = Path(__file__).resolve().parents[2]

# A value for each variable, and the field it must give.
SAMPLES = {
    "SEEDER_HOME": ("~/seeder-home", Path.home() / "seeder-home"),
    "SEEDER_CACHE": ("/tmp/c", Path("/tmp/c")),
    "SEEDER_RUNS": ("/tmp/r", Path("/tmp/r")),
    "SEEDER_EMBEDDINGS": ("/tmp/e", Path("/tmp/e")),
    "SEEDER_STARK_QA": ("/tmp/qa", Path("/tmp/qa")),
    "NEO4J_URI": ("neo4j+s://example.databases.neo4j.io", "neo4j+s://example.databases.neo4j.io"),
    "NEO4J_USER": ("reader", "reader"),
    "NEO4J_PASSWORD": ("secret", "secret"),
    "NEO4J_DATABASE": ("films", "films"),
    "SEEDER_NEO4J_PORT": ("7688", 7688),
    "SEEDER_NEO4J_HOME": ("/tmp/n", Path("/tmp/n")),
    "SEEDER_NEO4J_VERSION": ("calendar", "calendar"),
    "SEEDER_NEO4J_HEAP": ("6g", "6g"),
    "SEEDER_NEO4J_PAGECACHE": ("3g", "3g"),
    "SEEDER_NEO4J_VECTOR_BUFFER_MB": ("128", 128),
    "SEEDER_NEO4J_TX_MEMORY": ("256m", "256m"),
    "SEEDER_KHOP": (" Cypher ", "cypher"),
    "SEEDER_HOP_PARTITIONS": ("3", 3),
    "SEEDER_NAME_READERS": ("2", 2),
    "SEEDER_ENCODER_BACKEND": (" ONNX ", "onnx"),
    "SEEDER_MALLOC": (" System ", "system"),
}


@pytest.fixture
def clean(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_field_is_one_variable():
    assert len(VARIABLES) == len(dataclasses.fields(Settings)) == len(set(VARIABLES.values()))
    assert all(re.fullmatch(r"(SEEDER|NEO4J)_[A-Z0-9_]+", name) for name in VARIABLES)
    assert set(SAMPLES) == set(VARIABLES), "give each variable a sample value here"


def test_each_variable_is_read_into_its_field(clean):
    for name, (raw, _) in SAMPLES.items():
        clean.setenv(name, raw)
    current = settings()
    for name, (_, expected) in SAMPLES.items():
        assert getattr(current, VARIABLES[name]) == expected, name
    assert Settings.from_env({name: raw for name, (raw, _) in SAMPLES.items()}) == current


def test_defaults_when_unset(clean):
    current = settings()
    assert current == Settings() == Settings.from_env({})
    assert (current.neo4j_user, current.neo4j_password, current.neo4j_port) == ("neo4j", "seeder-dgl", 7687)
    assert (current.neo4j_heap, current.neo4j_pagecache, current.neo4j_vector_buffer_mb) == ("2g", "2g", 50)
    assert (current.khop, current.hop_partitions) == ("auto", 2)
    assert current.home is current.cache is current.neo4j_uri is current.neo4j_tx_memory is None


def test_an_empty_path_or_uri_counts_as_unset():
    empty = {name: "" for name in ("SEEDER_HOME", "SEEDER_CACHE", "SEEDER_RUNS", "SEEDER_EMBEDDINGS",
                                   "SEEDER_STARK_QA", "SEEDER_NEO4J_HOME", "NEO4J_URI", "NEO4J_DATABASE",
                                   "SEEDER_NEO4J_VERSION", "SEEDER_NEO4J_TX_MEMORY")}
    assert Settings.from_env(empty) == Settings()


@pytest.mark.parametrize("name, raw, message", [
    ("SEEDER_HOP_PARTITIONS", "two", "SEEDER_HOP_PARTITIONS must be a whole number, not 'two'"),
    ("SEEDER_HOP_PARTITIONS", "0", "SEEDER_HOP_PARTITIONS must be at least 1, not 0"),
    ("SEEDER_NAME_READERS", "0", "SEEDER_NAME_READERS must be at least 1, not 0"),
    ("SEEDER_NEO4J_PORT", "lots", "SEEDER_NEO4J_PORT must be a whole number, not 'lots': fix or unset it"),
    ("SEEDER_NEO4J_VECTOR_BUFFER_MB", "1.5", "SEEDER_NEO4J_VECTOR_BUFFER_MB must be a whole number, not '1.5'"),
    ("SEEDER_NEO4J_TX_MEMORY", "256m; rm -rf /", "SEEDER_NEO4J_TX_MEMORY must be a size such as 256m or 1g"),
    ("SEEDER_KHOP", "fastest", f"SEEDER_KHOP must be one of {', '.join(KHOP_ENGINES)}, not 'fastest'"),
    ("SEEDER_MALLOC", "tcmalloc", "SEEDER_MALLOC must be one of keep, system, not 'tcmalloc': fix or unset it"),
    ("SEEDER_NEO4J_PORT", "76\n87", "SEEDER_NEO4J_PORT must be a whole number, not '76\\n87'"),
])
def test_a_bad_value_is_a_one_line_error_naming_the_variable(clean, name, raw, message):
    clean.setenv(name, raw)
    with pytest.raises(SeederError) as caught:
        settings()
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    with pytest.raises(SeederError, match=re.escape(message)):
        Settings.from_env({name: raw})


def test_settings_follows_the_environment(clean):
    first = settings()
    assert settings() is first  # unchanged variables: not read again
    clean.setenv("SEEDER_HOP_PARTITIONS", "5")
    assert settings().hop_partitions == 5
    clean.setenv("SEEDER_HOP_PARTITIONS", "zero")
    with pytest.raises(SeederError):
        settings()
    clean.delenv("SEEDER_HOP_PARTITIONS")
    assert settings() == first


def test_the_helpers_read_the_settings(clean, tmp_path):
    from seeder_dgl.datasets import cache_root, runs_root
    from seeder_dgl.embeddings import default_cache_dir
    from seeder_dgl.graphstore.connection import Neo4jSettings, default_database
    from seeder_dgl.graphstore.live import default_hop_partitions
    from seeder_dgl.graphstore.procedures import khop_setting
    from seeder_dgl.graphstore.server import Neo4jServerError, ServerSettings, default_home
    from seeder_dgl.graphstore.versions import NEO4J_VERSION
    from seeder_dgl.paths import project_root

    tmp_path = tmp_path.resolve()
    clean.setenv("SEEDER_HOME", str(tmp_path / "home"))
    assert project_root() == tmp_path / "home"
    assert (cache_root(), runs_root(), default_home()) == (tmp_path / "home" / ".cache", tmp_path / "home" / "runs",
                                                           tmp_path / "home" / ".neo4j")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "embeddings"
    clean.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    assert cache_root() == default_cache_dir().parent == tmp_path / "cache"
    clean.setenv("SEEDER_EMBEDDINGS", str(tmp_path / "vectors"))
    assert default_cache_dir() == tmp_path / "vectors"

    assert Neo4jSettings.from_env().uri == "bolt://127.0.0.1:7687" and default_database() is None
    clean.setenv("SEEDER_NEO4J_PORT", "7699")
    clean.setenv("NEO4J_DATABASE", "films")
    local = Neo4jSettings.from_env()
    assert (local.uri, local.database, local.external) == ("bolt://127.0.0.1:7699", "films", False)
    clean.setenv("NEO4J_URI", "bolt://elsewhere:7687")
    assert Neo4jSettings.from_env().external and default_database() == "films"
    server = ServerSettings.from_env()
    assert (server.port, server.version, server.tx_memory) == (7699, NEO4J_VERSION, None)

    clean.setenv("SEEDER_KHOP", "CYPHER")
    clean.setenv("SEEDER_HOP_PARTITIONS", "4")
    assert (khop_setting(), khop_setting("procedure"), default_hop_partitions()) == ("cypher", "procedure", 4)

    clean.setenv("SEEDER_NEO4J_TX_MEMORY", "lots")
    with pytest.raises(Neo4jServerError, match="SEEDER_NEO4J_TX_MEMORY must be a size"):
        ServerSettings.from_env()


# Reads of the environment that configure other programs, not seeder-dgl (settings.py's docstring):
# file -> the names read there ("<dynamic>": a name in a variable; "<all>": the whole environment).
ELSEWHERE = {
    "seeder_dgl/threads.py": {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "<dynamic>"},
    "seeder_dgl/embeddings.py": {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"},
    "seeder_dgl/graphstore/server.py": {"JAVA_HOME", "<all>"},
    "seeder_dgl/graphstore/procedures.py": {"<all>"},
    "seeder_dgl/training/parallel.py": {"GLOO_SOCKET_IFNAME", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                        "MASTER_ADDR"},
    "seeder_dgl/training/trainer.py": {"OMP_NUM_THREADS"},
}


def _environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) of each use of ``os.environ`` / ``os.getenv`` in ``source``."""
    tree = ast.parse(source)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def name_of(arg: ast.AST | None) -> str:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        return "<dynamic>"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [(node.lineno, f"<from os import {a.name}>") for a in node.names
                      if a.name in ("environ", "getenv")]
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
                and node.attr in ("environ", "getenv")):
            continue
        up = parent.get(node)
        if node.attr == "getenv":
            found.append((node.lineno, name_of(up.args[0] if isinstance(up, ast.Call) and up.args else None)))
        elif isinstance(up, ast.Attribute) and isinstance(parent.get(up), ast.Call):  # os.environ.get(NAME, ...)
            call = parent[up]
            found.append((node.lineno, name_of(call.args[0] if call.args else None)))
        elif isinstance(up, ast.Subscript) and up.value is node:  # os.environ[NAME]
            found.append((node.lineno, name_of(up.slice)))
        elif isinstance(up, ast.Compare):  # NAME in os.environ
            found.append((node.lineno, name_of(up.left)))
        else:  # dict(os.environ), a default argument, ...: the whole environment
            found.append((node.lineno, "<all>"))
    return found


def test_no_module_reads_a_package_variable_outside_settings():
    reads = {path.relative_to(ROOT).as_posix(): _environment_reads(path.read_text(encoding="utf-8"))
             for path in sorted((ROOT / "seeder_dgl").rglob("*.py"))}
    assert reads.pop("seeder_dgl/settings.py"), "the scan finds settings.py's own reads"
    server = "seeder_dgl/graphstore/server.py"
    assert {name for _, name in reads[server]} == ELSEWHERE[server], "the scan finds JAVA_HOME and dict(os.environ)"
    package = [f"{file}:{line} reads {name}" for file, found in reads.items() for line, name in found
               if re.match(r"(SEEDER|NEO4J)_", name)]
    assert not package, "read these through seeder_dgl.settings.settings(): " + "; ".join(package)
    other = [f"{file}:{line} reads {name}" for file, found in reads.items() for line, name in found
             if name not in ELSEWHERE.get(file, set())]
    assert not other, ("a new read of the environment: a seeder-dgl setting belongs in seeder_dgl.settings, another "
                       "program's in ELSEWHERE here and settings.py's docstring: " + "; ".join(other))


def test_the_scan_sees_each_kind_of_read():
    source = ('import os\nfrom os import environ\na = os.environ.get("SEEDER_X")\nb = os.environ["NEO4J_Y"]\n'
              'c = "SEEDER_Z" in os.environ\nd = os.getenv("SEEDER_W")\ne = dict(os.environ)\n'
              'for n in ("A",):\n    os.environ.setdefault(n, "1")\n')
    assert sorted(_environment_reads(source)) == [(2, "<from os import environ>"), (3, "SEEDER_X"), (4, "NEO4J_Y"),
                                                  (5, "SEEDER_Z"), (6, "SEEDER_W"), (7, "<all>"), (9, "<dynamic>")]


def _configuration_rows() -> list[tuple[list[str], str]]:
    """(the variables, the default cell) of each row of the README's Configuration table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    assert "`seeder_dgl.settings.Settings`" in section
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and not set(cells[0]) <= set("-:"):
            rows.append((re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0]), cells[1]))
    return rows


def test_the_readme_table_lists_exactly_the_settings():
    rows = _configuration_rows()
    listed = [name for names, _ in rows for name in names if re.match(r"(SEEDER|NEO4J)_", name)]
    assert len(listed) == len(set(listed)), "a variable is listed twice"
    assert set(listed) == set(VARIABLES), (f"missing from the README: {sorted(set(VARIABLES) - set(listed))}; "
                                          f"not a setting: {sorted(set(listed) - set(VARIABLES))}")
    defaults = Settings()
    for names, default_cell in rows:
        for name in names:
            value = getattr(defaults, VARIABLES[name]) if name in VARIABLES else None
            if value is not None:
                assert f"`{value}`" in default_cell, f"the README gives {name} the default {default_cell!r}: {value}"
