"""The Neo4j writer against a real server: round trip, idempotence, resume after a kill, bad input."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from seeder_dgl.graphstore.writer import GraphWriter, IngestError, undirected_unique, unit_vectors
from seeder_dgl.graphstore.writer import dataset_label as label_for
from tests.helpers.graphs import random_embeddings, random_kg


def _counts(driver, label):
    nodes = driver.execute_query(f"MATCH (n:{label}) RETURN count(n) AS c").records[0]["c"]
    rels = driver.execute_query(f"MATCH (:{label})-[r]->(:{label}) RETURN count(r) AS c").records[0]["c"]
    return nodes, rels


def test_undirected_unique_keeps_one_per_pair_and_relation():
    src = np.array([0, 1, 0, 2, 2, 3])
    dst = np.array([1, 0, 1, 3, 3, 3])
    rel = np.array([0, 0, 1, 0, 1, 0])
    kept = undirected_unique(src, dst, rel)
    triples = {(int(src[i]), int(dst[i]), int(rel[i])) for i in kept}
    assert triples == {(0, 1, 0), (0, 1, 1), (2, 3, 0), (2, 3, 1), (3, 3, 0)}


def test_unit_vectors_rescale_only_rows_that_are_not_unit():
    unit = random_embeddings(5, seed=3)
    mixed = unit.copy()
    mixed[[1, 3]] *= np.float32([[2.5], [0.1]])
    out = unit_vectors(mixed)
    assert out.dtype == np.float32 and out.shape == (5, 16)
    np.testing.assert_array_equal(out[[0, 2, 4]], unit[[0, 2, 4]])  # untouched, bit for bit
    np.testing.assert_allclose(np.linalg.norm(out.astype(np.float64), axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(out[[1, 3]], unit[[1, 3]], atol=1e-6)


def test_round_trip_and_second_run_changes_nothing(neo4j_driver, dataset_label):
    kg = random_kg(dataset_label, 300, 1200, seed=1)
    emb, rel_emb = random_embeddings(300, seed=1), random_embeddings(4, seed=2)
    writer = GraphWriter(neo4j_driver, dataset_label, node_batch=70, relationship_batch=100)
    summary = writer.ingest(kg, emb, rel_emb, "test-model", progress=False)
    label = label_for(dataset_label)
    expected_rels = len(undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel))
    assert _counts(neo4j_driver, label) == (300, expected_rels)
    assert summary.duplicates_removed == kg.num_edges - expected_rels

    rows = neo4j_driver.execute_query(
        f"MATCH (n:{label}) RETURN n.id AS id, n.name AS name, n.text AS text, n.type AS type, "
        "n.embedding AS e, labels(n) AS labels ORDER BY id").records
    for r in rows:
        i = r["id"]
        assert r["name"] == kg.node_names[i] and r["text"] == kg.node_texts[i]
        assert r["type"] == kg.node_type_names[kg.node_type[i]]
        assert kg.node_labels()[kg.node_type[i]] in r["labels"]
        np.testing.assert_allclose(r["e"], emb[i], rtol=0, atol=1e-7)
    stored = {(r["s"], r["d"], r["t"]) for r in neo4j_driver.execute_query(
        f"MATCH (a:{label})-[r]->(b:{label}) RETURN a.id AS s, b.id AS d, type(r) AS t").records}
    types = kg.relation_types()
    expected = {(int(kg.edge_src[i]), int(kg.edge_dst[i]), types[kg.edge_rel[i]])
                for i in undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel)}
    assert stored == expected

    again = writer.ingest(kg, emb, rel_emb, "test-model", progress=False)
    assert again.skipped
    assert _counts(neo4j_driver, label) == (300, expected_rels)
    state = neo4j_driver.execute_query(
        "SHOW INDEXES YIELD name, state, options WHERE name = $n RETURN state, options",
        n=f"{label}_embedding").records
    assert state[0]["state"] == "ONLINE"
    assert state[0]["options"]["indexConfig"]["vector.hnsw.ef_construction"] == 100  # Neo4j's default
    # The reset commits every 100 deletions (relationship_batch) and leaves nothing behind.
    assert writer.reset() == 300
    assert _counts(neo4j_driver, label) == (0, 0) and writer.record() is None
    left = neo4j_driver.execute_query("SHOW INDEXES YIELD name WHERE name STARTS WITH $p RETURN name",
                                      p=f"{label}_").records
    assert [r["name"] for r in left] == [f"{label}_id"]  # only the id constraint's index stays


def test_wrong_dimension_and_nan_are_refused_before_writing(neo4j_driver, dataset_label):
    kg = random_kg(dataset_label, 50, 100, seed=3)
    writer = GraphWriter(neo4j_driver, dataset_label)
    bad = random_embeddings(50, seed=3)
    bad[7, 2] = np.nan
    with pytest.raises(IngestError, match="row 7 has NaN"):
        writer.ingest(kg, bad, random_embeddings(4), "m", progress=False)
    assert _counts(neo4j_driver, label_for(dataset_label)) == (0, 0)

    writer.ingest(kg, random_embeddings(50, dim=16), random_embeddings(4, dim=16), "m", progress=False)
    with pytest.raises(IngestError, match="16-d embeddings but these are 8-d"):
        writer.ingest(kg, random_embeddings(50, dim=8), random_embeddings(4, dim=8), "m2", progress=False)
    writer.reset()


def test_bad_edge_ids_are_refused(neo4j_driver, dataset_label):
    kg = random_kg(dataset_label, 20, 30)
    kg.edge_dst[5] = 99
    with pytest.raises(IngestError, match="node id 99"):
        GraphWriter(neo4j_driver, dataset_label).ingest(kg, random_embeddings(20), random_embeddings(4), "m",
                                                        progress=False)


def test_killed_ingest_resumes_to_the_same_counts(neo4j_target, neo4j_driver, dataset_label):
    """Kill a real ingest process part way through, run it again, compare with a clean run."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(os.getcwd())!r})
        from neo4j import GraphDatabase
        from seeder_dgl.graphstore.writer import GraphWriter
        from tests.helpers.graphs import random_embeddings, random_kg
        driver = GraphDatabase.driver({neo4j_target.uri!r}, auth=({neo4j_target.user!r}, {neo4j_target.password!r}))
        kg = random_kg({dataset_label!r}, 2000, 20000, seed=5)
        writer = GraphWriter(driver, {dataset_label!r}, node_batch=50, relationship_batch=200)
        summary = writer.ingest(kg, random_embeddings(2000, seed=5), random_embeddings(4, seed=6), "m", progress=False)
        print("RESUMED" if summary.resumed else "FRESH", summary.nodes, summary.relationships)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    label = label_for(dataset_label)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until some batches are committed, then kill
        done = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m.nodes_done AS d",
                                          n=dataset_label).records
        if done and done[0]["d"] and done[0]["d"] >= 500:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    proc.stdout.close()
    partial = _counts(neo4j_driver, label)
    assert 0 < partial[0] < 2000 or partial[1] < 20000

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("RESUMED")
    kg = random_kg(dataset_label, 2000, 20000, seed=5)
    expected = (2000, len(undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel)))
    assert _counts(neo4j_driver, label) == expected
    GraphWriter(neo4j_driver, dataset_label).reset()


def test_a_node_lost_during_the_relationship_phase_rolls_its_batch_back(neo4j_driver, dataset_label,
                                                                        monkeypatch):
    """Relationships are written by internal node id: a batch that meets a node that is no longer
    there writes nothing, says so in one line, and the next run finishes the ingest."""
    kg = random_kg(dataset_label, 300, 3000, seed=7)
    emb, rel = random_embeddings(300, seed=7), random_embeddings(4, seed=8)
    writer = GraphWriter(neo4j_driver, dataset_label, relationship_batch=100)
    real_keys = GraphWriter._node_keys
    keep = undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel)
    victim = int(kg.edge_src[keep][len(keep) // 2])

    def keys_with_one_gone(self, num_nodes):
        keys = real_keys(self, num_nodes)
        keys[victim] = keys.max() + 10**9  # an internal id no node has
        return keys

    monkeypatch.setattr(GraphWriter, "_node_keys", keys_with_one_gone)
    with pytest.raises(IngestError) as caught:
        writer.ingest(kg, emb, rel, "m", progress=False)
    assert "lost a node" in str(caught.value) and "\n" not in str(caught.value)
    done = writer.record()["relationships_done"]
    assert done < len(keep) and _counts(neo4j_driver, label_for(dataset_label))[1] == done  # batch rolled back
    monkeypatch.setattr(GraphWriter, "_node_keys", real_keys)
    summary = writer.ingest(kg, emb, rel, "m", progress=False)
    assert summary.resumed
    assert _counts(neo4j_driver, label_for(dataset_label)) == (300, len(keep))
    writer.reset()


def test_index_build_width_reaches_the_index_and_is_checked(neo4j_driver, dataset_label):
    kg = random_kg(dataset_label, 30, 60, seed=2)
    writer = GraphWriter(neo4j_driver, dataset_label)
    with pytest.raises(IngestError, match="ef_construction must be between 1 and 3200"):
        writer.ingest(kg, random_embeddings(30), random_embeddings(4), "m", progress=False, ef_construction=0)
    writer.ingest(kg, random_embeddings(30), random_embeddings(4), "m", progress=False, ef_construction=40)
    try:
        options = neo4j_driver.execute_query("SHOW INDEXES YIELD name, options WHERE name = $n RETURN options",
                                             n=f"{label_for(dataset_label)}_embedding").records[0]["options"]
        assert options["indexConfig"]["vector.hnsw.ef_construction"] == 40
    finally:
        writer.reset()


def test_cli_default_build_width_is_the_writers():
    import inspect

    from seeder_dgl.cli import graph_commands
    from seeder_dgl.graphstore.writer import EF_CONSTRUCTION

    assert inspect.signature(graph_commands.ingest).parameters["ef_construction"].default.default == EF_CONSTRUCTION
