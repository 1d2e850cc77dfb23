"""Small graphs built in the tests themselves (no data files needed)."""
from __future__ import annotations

import numpy as np

from loaders.kg import KnowledgeGraph


def random_kg(name: str, num_nodes: int, num_edges: int, seed: int = 0, num_types: int = 3,
              num_relations: int = 4) -> KnowledgeGraph:
    rng = np.random.default_rng(seed)
    return KnowledgeGraph(
        name=name,
        node_names=[f"node {i}" for i in range(num_nodes)],
        node_texts=[f"node {i} of type {i % num_types}" for i in range(num_nodes)],
        node_type=rng.integers(0, num_types, num_nodes),
        node_type_names=[f"type/{t}" for t in range(num_types)],
        edge_src=rng.integers(0, num_nodes, num_edges),
        edge_dst=rng.integers(0, num_nodes, num_edges),
        edge_rel=rng.integers(0, num_relations, num_edges),
        relation_names=[f"relation {r}" for r in range(num_relations)],
    )


def random_embeddings(rows: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


class NameIndex:
    """The live graph's full-text index as seeding uses it: each question links one node
    (``linked``: question -> node id); ``calls`` counts the lookups."""

    def __init__(self, graph, linked: dict[str, int]):
        self.graph, self.linked, self.calls = graph, linked, 0

    def fulltext_hits(self, question, embedding, candidates=50, words=None):
        from seeder_dgl.retrieval.memory import unit_query

        self.calls += 1
        node = self.linked[question]
        sim = float(self.graph.node_emb[node].astype(np.float64) @ unit_query(embedding))
        return [{"id": node, "name": question, "text_score": 1.0, "similarity": sim}]
