"""Two datasets on one server: every command run on one of them leaves the other identical — its
record, nodes (ids, names, types, labels, keys, embeddings), relationships and cache folder — and
the same holds when a command fails half way through its input."""
from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from seeder_dgl.cli import app
from tests.helpers.own_graph import company_graph, write_questions, write_triples

runner = CliRunner()


def _run(*args: str, ok: bool = True) -> str:
    result = runner.invoke(app, list(args))
    if ok:
        assert result.exit_code == 0, f"{args}: {result.output}"
    else:
        assert result.exit_code == 1 and "Traceback" not in result.output, f"{args}: {result.output}"
    return result.output


def fingerprint(driver, name: str, cache) -> str:
    """A hash of everything seeder-dgl keeps for dataset ``name``: Neo4j record, nodes, relationships,
    and the files of its cache folder."""
    digest = hashlib.sha256()
    record = driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m {.*} AS m", n=name).records
    assert record, f"dataset {name} is gone"
    meta = dict(record[0]["m"])
    label = meta["label"]
    digest.update(json.dumps(meta, sort_keys=True, default=str).encode())
    nodes = driver.execute_query(
        f"MATCH (n:{label}) RETURN n.id AS id, n.name AS name, n.type AS type, n.key AS key, labels(n) AS labels, "
        "n.embedding AS emb, n.sketch AS sketch ORDER BY id").records
    for r in nodes:
        digest.update(json.dumps([r["id"], r["name"], r["type"], r["key"], sorted(r["labels"]),
                                  [round(float(x), 6) for x in r["emb"]], list(r["sketch"] or b"")]).encode())
    rels = driver.execute_query(f"MATCH (a:{label})-[r]->(b:{label}) RETURN a.id AS a, type(r) AS t, b.id AS b "
                                "ORDER BY a, t, b").records
    digest.update(json.dumps([[r["a"], r["t"], r["b"]] for r in rels]).encode())
    folder = cache / name
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return f"{len(nodes)} nodes, {len(rels)} relationships, {digest.hexdigest()[:16]}"


@pytest.fixture
def two_datasets(tmp_path, neo4j_env, neo4j_driver, dataset_label, monkeypatch):
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SEEDER_RUNS", str(tmp_path / "runs"))
    kept, changed = f"{dataset_label.lower()}_b", f"{dataset_label.lower()}_a"
    for name, seed in ((kept, 1), (changed, 2)):
        graph = company_graph(seed=seed, people=16)
        write_triples(graph, tmp_path / name)
        write_questions(graph, tmp_path / name)
    _run("ingest", kept, "--source", str(tmp_path / kept))
    try:
        yield kept, changed, tmp_path
    finally:
        for name in (changed, kept):
            runner.invoke(app, ["drop", name, "--yes"])


def test_every_command_on_one_dataset_leaves_the_other_identical(two_datasets, neo4j_driver):
    kept, changed, root = two_datasets
    cache = root / "cache"
    before = fingerprint(neo4j_driver, kept, cache)
    source = str(root / changed)

    steps = [
        ("ingest", lambda: _run("ingest", changed, "--source", source)),
        ("ingest again (idempotent)", lambda: _run("ingest", changed, "--source", source)),
        ("ingest --reset", lambda: _run("ingest", changed, "--source", source, "--reset")),
        ("tune", lambda: _run("tune", changed)),
        ("extract", lambda: _run("extract", changed, "--split", "train", "--split", "val")),
        ("eval", lambda: _run("eval", changed, "--split", "val", "--methods", "khop")),
        ("query", lambda: _run("query", changed, "Where does anyone work?", "--method", "khop", "--format", "json")),
        ("status", lambda: _run("status")),
    ]
    nodes, edges = root / "nodes.jsonl", root / "edges.jsonl"
    nodes.write_text(json.dumps({"id": 100000, "name": "Zoe Quartz", "type": "entity"}) + "\n")
    edges.write_text(json.dumps({"source": 100000, "target": 0, "relation": "works at"}) + "\n")
    bad_edges = root / "bad_edges.jsonl"
    bad_edges.write_text(json.dumps({"source": 100000, "target": 0, "relation": "works at"}) + "\n"
                         + json.dumps({"source": 100000, "target": 99999999, "relation": "works at"}) + "\n")
    steps += [
        ("upsert", lambda: _run("upsert", changed, "--nodes", str(nodes), "--edges", str(edges))),
        ("upsert that fails half way", lambda: _run("upsert", changed, "--edges", str(bad_edges), ok=False)),
        ("ingest of a missing folder", lambda: _run("ingest", changed, "--source", str(root / "nowhere"), ok=False)),
        ("drop", lambda: _run("drop", changed, "--yes")),
    ]
    for what, step in steps:
        step()
        assert fingerprint(neo4j_driver, kept, cache) == before, f"{what} on {changed} changed {kept}"
    assert not neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m", n=changed).records
