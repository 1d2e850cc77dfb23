"""The schema file's vector index returns nodes in exact cosine order."""
from __future__ import annotations

import numpy as np

from seeder_dgl.graphstore.cypher import query
from seeder_dgl.graphstore.schema import StoreSchema


def test_vector_index_matches_numpy_cosine_order(neo4j_driver, dataset_label):
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(40, 16)).astype(np.float32)
    names = StoreSchema.ingested(dataset_label).identifiers()
    neo4j_driver.execute_query(query("schema/node_id_constraint", **names))
    neo4j_driver.execute_query(query("schema/vector_index", **names), dimensions=16, quantization=False,
                               ef_construction=100)
    rows = [{"id": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
    neo4j_driver.execute_query(
        f"UNWIND $rows AS row CREATE (n:{dataset_label} {{id: row.id}}) "
        "WITH n, row CALL db.create.setNodeVectorProperty(n, 'embedding', row.embedding)",
        rows=rows,
    )
    index = f"{dataset_label}_embedding"
    neo4j_driver.execute_query(query("schema/await_index"), name=index, seconds=120)
    state = neo4j_driver.execute_query(query("schema/index_state"), name=index).records[0]
    assert state["state"] == "ONLINE" and state["type"] == "VECTOR"

    for _ in range(5):
        q = rng.normal(size=16).astype(np.float32)
        records = neo4j_driver.execute_query(query("seeding/dense", **names), index=index, k=40, candidates=40,
                                               embedding=q.tolist()).records
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        cosine = unit @ (q / np.linalg.norm(q))
        assert [r["id"] for r in records] == list(np.argsort(-cosine, kind="stable"))
        np.testing.assert_allclose([r["similarity"] for r in records], np.sort(cosine)[::-1], atol=1e-5)

    neo4j_driver.execute_query(f"MATCH (n:{dataset_label}) DETACH DELETE n")
    neo4j_driver.execute_query(f"DROP INDEX {index}")
    neo4j_driver.execute_query(f"DROP CONSTRAINT {dataset_label}_id")
