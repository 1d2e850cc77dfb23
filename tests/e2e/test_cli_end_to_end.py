"""The command line end to end on a tiny movie graph in MetaQA format, with the real MiniLM
encoder (packaged, offline) and the real Neo4j: ingest, query, upsert, query again."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from seeder_dgl.api import Retriever
from seeder_dgl.cli import app
from seeder_dgl.graphstore.writer import GraphWriter, dataset_label as label_for

runner = CliRunner()

KB = """Inception|directed_by|Christopher Nolan
Inception|written_by|Christopher Nolan
Inception|starred_actors|Leonardo DiCaprio
Inception|release_year|2010
Interstellar|directed_by|Christopher Nolan
Interstellar|starred_actors|Matthew McConaughey
Titanic|directed_by|James Cameron
Titanic|starred_actors|Leonardo DiCaprio
Titanic|release_year|1997
Avatar|directed_by|James Cameron
Avatar|has_genre|Science Fiction
The Revenant|starred_actors|Leonardo DiCaprio
The Revenant|directed_by|Alejandro G. Inarritu
Amores Perros|directed_by|Alejandro G. Inarritu
Birdman|directed_by|Alejandro G. Inarritu
"""


@pytest.fixture
def movie_dataset(tmp_path, neo4j_env, neo4j_driver, dataset_label, monkeypatch):
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "movies"
    (folder / "qa").mkdir(parents=True)
    (folder / "kb.txt").write_text(KB)
    name = dataset_label.lower()
    result = runner.invoke(app, ["ingest", "metaqa", "--source", str(folder), "--name", name])
    assert result.exit_code == 0, result.output
    yield name, folder
    GraphWriter(neo4j_driver, name).reset()


def _query(name, question, *extra):
    result = runner.invoke(app, ["query", name, question, "--method", "khop", "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_ingest_query_upsert_query(movie_dataset, tmp_path):
    name, folder = movie_dataset
    again = runner.invoke(app, ["ingest", "metaqa", "--source", str(folder), "--name", name])
    assert again.exit_code == 0 and "nothing to do" in again.output

    answer = _query(name, "who directed Inception", "--k", "5", "--seeds", "1", "--budgets", "10,10")
    names = [n["name"] for n in answer["nodes"]]
    assert "Christopher Nolan" in names
    assert any(t["head"] == "Inception" and t["tail"] == "Christopher Nolan" for t in answer["triples"])

    nodes = tmp_path / "nodes.jsonl"
    edges = tmp_path / "edges.jsonl"
    nodes.write_text(json.dumps({"id": 1000, "name": "Tenet", "type": "movie"}) + "\n")
    edges.write_text(json.dumps({"source": 1000, "target": answer["nodes"][names.index("Christopher Nolan")]["id"],
                                 "relation": "directed_by"}) + "\n")
    up = runner.invoke(app, ["upsert", name, "--nodes", str(nodes), "--edges", str(edges)])
    assert up.exit_code == 0, up.output
    assert "now has 16 nodes" in up.output.replace("\n", " ")

    after = _query(name, "which movies did Christopher Nolan direct", "--k", "10", "--seeds", "1", "--budgets", "10")
    assert "Tenet" in [n["name"] for n in after["nodes"]]

    triples = runner.invoke(app, ["query", name, "movies directed by James Cameron", "--method", "khop",
                                  "--format", "triples", "--k", "6"])
    assert triples.exit_code == 0 and "-[directed_by]-> James Cameron" in triples.output


def test_python_api_and_bad_input(movie_dataset):
    name, _ = movie_dataset
    with Retriever(name, method="dense") as retriever:
        result = retriever.retrieve("Leonardo DiCaprio", k=3)
        assert result.nodes[0].name == "Leonardo DiCaprio" and len(result.nodes) == 3
        big = retriever.retrieve("Titanic", k=1000)  # k larger than the graph: everything, ranked
        assert len(big.nodes) == 15
        long_question = retriever.retrieve("movie " * 5000, k=2, method="khop")
        assert 1 <= len(long_question.nodes) <= 2
    for args, message in [(["query", name, "   "], "the question is empty"),
                          (["query", name, "x", "--k", "0"], "k must be at least 1"),
                          (["query", name, "x", "--method", "magic"], "unknown method 'magic'"),
                          (["query", name, "x", "--format", "xml"], "--format is table, json, triples or cypher"),
                          (["query", "not_ingested_xyz", "x"], "is not in Neo4j")]:
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_ingest_with_precomputed_embeddings_and_errors(tmp_path, neo4j_env, neo4j_driver, dataset_label, monkeypatch):
    import torch

    from tests.helpers.graphs import random_embeddings

    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "movies"
    folder.mkdir()
    (folder / "kb.txt").write_text(KB)
    vectors = random_embeddings(15, dim=384, seed=5)
    torch.save({i: torch.from_numpy(vectors[i]) for i in range(15)}, tmp_path / "emb.pt")
    name = dataset_label.lower()
    result = runner.invoke(app, ["ingest", "metaqa", "--source", str(folder), "--name", name,
                                 "--embeddings", str(tmp_path / "emb.pt")])
    assert result.exit_code == 0, result.output
    try:
        stored = neo4j_driver.execute_query(f"MATCH (n:{label_for(name)} {{id: 3}}) RETURN n.embedding AS e").records
        assert abs(sum(a * b for a, b in zip(stored[0]["e"], vectors[3])) - 1.0) < 1e-5
        torch.save({i: torch.from_numpy(vectors[i]) for i in range(14)}, tmp_path / "short.pt")
        bad = runner.invoke(app, ["ingest", "metaqa", "--source", str(folder), "--name", name + "x",
                                  "--embeddings", str(tmp_path / "short.pt")])
        assert bad.exit_code == 1 and "Traceback" not in bad.output and "14" in bad.output.replace("\n", " ")
    finally:
        GraphWriter(neo4j_driver, name).reset()


def test_a_database_that_is_down_is_a_one_line_error(tmp_path, monkeypatch):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{port}")
    for args in (["status"], ["query", "metaqa", "who"], ["ingest", "metaqa", "--source", str(tmp_path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert len(lines) <= 2 and "cannot reach Neo4j" in result.output and "Traceback" not in result.output
