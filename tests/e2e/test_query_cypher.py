"""`seeder-dgl query --format cypher` against the real Neo4j: the printed statement is read-only,
and running it returns exactly the retrieved nodes and the relationships among them."""
from __future__ import annotations

import uuid

import pytest
from typer.testing import CliRunner

from seeder_dgl.api import Retriever
from seeder_dgl.cli import app
from seeder_dgl.graphstore.writer import GraphWriter

runner = CliRunner()

KB = """Heat|directed_by|Michael Mann
Heat|starred_actors|Al Pacino
Heat|starred_actors|Robert De Niro
Heat|release_year|1995
Collateral|directed_by|Michael Mann
Collateral|starred_actors|Tom Cruise
The Insider|directed_by|Michael Mann
The Insider|starred_actors|Al Pacino
The Irishman|starred_actors|Robert De Niro
The Irishman|starred_actors|Al Pacino
The Irishman|directed_by|Martin Scorsese
Casino|directed_by|Martin Scorsese
Casino|starred_actors|Robert De Niro
Casino|release_year|1995
"""
QUESTION = "who directed Heat"
ARGS = ["--method", "khop", "--seeds", "1", "--budgets", "10,10", "--k", "6"]


@pytest.fixture
def heat(tmp_path, neo4j_env, neo4j_driver, monkeypatch):
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "qa").mkdir()
    (tmp_path / "kb.txt").write_text(KB)
    name = "t" + uuid.uuid4().hex[:10]
    result = runner.invoke(app, ["ingest", "metaqa", "--source", str(tmp_path), "--name", name])
    assert result.exit_code == 0, result.output
    yield name
    GraphWriter(neo4j_driver, name).reset()


def test_printed_statement_returns_exactly_the_retrieved_subgraph(heat, neo4j_driver):
    with Retriever(heat, method="khop", seeds=1, budgets=(10, 10), driver=neo4j_driver) as retriever:
        result = retriever.retrieve(QUESTION, k=6)
    statement = result.to_cypher()
    printed = runner.invoke(app, ["query", heat, QUESTION, *ARGS, "--format", "cypher"])
    assert printed.exit_code == 0, printed.output
    assert printed.output.strip() == statement  # K-hop ranking is deterministic

    ids = [n.id for n in result.nodes]
    label = result.label
    assert len(ids) == 6 and label.startswith("KG_")
    with neo4j_driver.session() as session:
        # Neo4j itself classifies the statement as read-only, and runs it in a read transaction
        assert session.run("EXPLAIN " + statement).consume().query_type == "r"
        rows = session.execute_read(lambda tx: [(r["n"], r["r"], r["m"]) for r in tx.run(statement)])
        expected_rels = {r["rid"] for r in session.run(
            f"MATCH (a:{label})-[r]->(b:{label}) WHERE a.id IN $ids AND b.id IN $ids RETURN elementId(r) AS rid",
            ids=ids)}
        leaving = session.run(f"MATCH (a:{label})-[r]-(b:{label}) WHERE a.id IN $ids AND NOT b.id IN $ids "
                              "RETURN count(r) AS c", ids=ids).single()["c"]
    assert leaving > 0  # the graph goes on beyond the retrieved nodes, so the filter on m is tested

    nodes = {n["id"] for n, _, _ in rows} | {m["id"] for _, _, m in rows if m is not None}
    rels = [r for _, r, _ in rows if r is not None]
    assert nodes == set(ids)
    assert {r.element_id for r in rels} == expected_rels and len(rels) == len(expected_rels)
    assert len(rels) == len(result.triples()) > 0
    for _, r, m in rows:
        assert (r is None) == (m is None)
    assert all(set(n.labels) >= {label} for n, _, _ in rows)
