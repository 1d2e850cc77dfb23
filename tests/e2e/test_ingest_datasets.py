"""Real dataset shapes into the real Neo4j: the MetaQA graph's counts, and a STaRK-format SKB
round trip (every node, type, text and edge as loaded). Embeddings are random here: counts and
structure do not depend on them, and the MiniLM path is tested in test_cli_end_to_end."""
from __future__ import annotations

import pytest

from loaders.metaqa import default_root, load_metaqa_kb
from loaders.stark import load_skb, write_skb
from seeder_dgl.graphstore.writer import GraphWriter, undirected_unique
from seeder_dgl.graphstore.writer import dataset_label as label_for
from tests.conftest import IN_CI
from tests.helpers.graphs import random_embeddings
from tests.unit.test_loaders_stark import raw_parts


def _counts(driver, label):
    nodes = driver.execute_query(f"MATCH (n:{label}) RETURN count(n) AS c").records[0]["c"]
    rels = driver.execute_query(f"MATCH (:{label})-[r]->(:{label}) RETURN count(r) AS c").records[0]["c"]
    return nodes, rels


def test_metaqa_graph_counts_and_second_run(neo4j_driver, dataset_label):
    root = default_root()
    if root is None:
        if IN_CI:
            pytest.fail("CI has ../shared beside the clone: MetaQA must be there")
        pytest.skip("../shared/data/metaqa is not here")
    kg, duplicate_lines = load_metaqa_kb(root / "kb.txt")
    assert (kg.num_nodes, kg.num_edges, len(kg.relation_names)) == (43_234, 133_582, 9)
    writer = GraphWriter(neo4j_driver, dataset_label)
    emb = random_embeddings(kg.num_nodes, dim=8, seed=1)
    summary = writer.ingest(kg, emb, random_embeddings(9, dim=8, seed=2), "random-8", progress=False)
    try:
        unique = len(undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel))
        assert summary.duplicates_removed == kg.num_edges - unique  # exact undirected duplicates, reported
        label = label_for(dataset_label)
        assert _counts(neo4j_driver, label) == (43_234, unique)
        state = neo4j_driver.execute_query("SHOW INDEXES YIELD name, state WHERE name = $n RETURN state",
                                           n=f"{label}_embedding").records
        assert state[0]["state"] == "ONLINE"
        again = writer.ingest(kg, emb, random_embeddings(9, dim=8, seed=2), "random-8", progress=False)
        assert again.skipped and _counts(neo4j_driver, label) == (43_234, unique)
    finally:
        writer.reset()


def test_stark_format_skb_round_trips_through_neo4j(neo4j_driver, dataset_label, tmp_path):
    node_info = {
        0: {"type": "gene/protein", "name": "ACHE", "source": "NCBI", "details": {"summary": "Hydrolyses ACh."}},
        1: {"type": "drug", "name": "Donepezil", "source": "DrugBank", "details": {"description": "An inhibitor."}},
        2: {"type": "disease", "name": "Alzheimer disease", "source": "MONDO"},
        3: {"type": "drug", "name": "Galantamine", "source": "DrugBank"},
    }
    parts = raw_parts(node_info, [1, 2, 0, 2], {0: "disease", 1: "gene/protein", 2: "drug"},
                      [(1, 0, 0), (0, 2, 1), (3, 0, 0), (1, 0, 0)], {0: "target", 1: "associated with"})
    kg = load_skb(write_skb(parts, tmp_path), "prime")
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, random_embeddings(4, seed=3), random_embeddings(2, seed=4), "random", progress=False)
    try:
        label = label_for(dataset_label)
        rows = neo4j_driver.execute_query(
            f"MATCH (n:{label}) RETURN n.id AS id, n.name AS name, n.type AS type, n.text AS text, "
            "labels(n) AS labels ORDER BY id").records
        assert [(r["id"], r["name"], r["type"], r["text"]) for r in rows] == [
            (i, kg.node_names[i], kg.node_type_names[kg.node_type[i]], kg.node_texts[i]) for i in range(4)]
        assert "gene_protein" in rows[0]["labels"]
        edges = {(r["s"], r["t"], r["d"]) for r in neo4j_driver.execute_query(
            f"MATCH (a:{label})-[r]->(b:{label}) RETURN a.id AS s, type(r) AS t, b.id AS d").records}
        assert edges == {(1, "TARGET", 0), (0, "ASSOCIATED_WITH", 2), (3, "TARGET", 0)}  # the duplicate once
    finally:
        writer.reset()
