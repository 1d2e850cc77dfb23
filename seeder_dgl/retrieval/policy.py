"""SeedER as a retriever: a trained policy ranks the K-hop-with-filtering subgraph of the seeds.

The subgraph is ``seed_and_expand``'s, the pipeline ``extract`` caches for training, and the
node features come from the backend (rows read from Neo4j on the live graph, from the export's
matrix in memory), so a policy ranks the same subgraph the same way on either backend.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from seeder_dgl.retrieval.pipeline import Seeds, seed_and_expand
from seeder_dgl.retrieval.base import GraphRetriever, Ranked
from seeder_dgl.subgraph.record import QuerySubgraph


class PolicyRetriever(GraphRetriever):
    """SeedER: the settings' seeds and budgets, then a trained policy's ranking.

    ``policy``: a ``LoadedPolicy`` (anything with its ``rank``). ``expansions``: subgraphs
    ``seeder-dgl extract`` already built for known questions, by question text; they replace
    seeding and expanding again (the same settings give the same subgraph), and their gold
    labels never reach the policy.
    """

    name = "seeder"

    def __init__(self, graph, settings=None, *, policy, expansions: Mapping[str, QuerySubgraph] | None = None):
        super().__init__(graph, settings)
        self.policy = policy
        self.expansions = dict(expansions or {})
        self.reused = 0
        """Questions answered from ``expansions``."""

    def options(self) -> dict:
        return {"budgets": list(self.settings.budgets)}

    def subgraph(self, question: str, embedding: np.ndarray) -> tuple[Seeds, QuerySubgraph]:
        """The seeds and the subgraph the policy ranks for ``question`` (labels always empty)."""
        found = self.expansions.get(question)
        if found is None:
            return seed_and_expand(self.graph, question, embedding, self.settings, with_features=True)
        self.reused += 1
        at_seeds = found.hop == 0
        seeds = list(zip(found.node_ids[at_seeds].tolist(), found.score[at_seeds].astype(np.float64).tolist()))
        return seeds, replace(found, labels=np.zeros(0, dtype=bool), num_answers=0)

    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        seeds, sub = self.subgraph(question, embedding)
        if sub.num_nodes == 0:
            return Ranked([], seeds, 0)
        # Read with the subgraph where the backend can (one call to the database instead of two).
        node_emb, types, _ = sub.features if sub.features is not None else self.graph.node_features(sub.node_ids)
        ranked = self.policy.rank([sub], [node_emb], np.asarray(embedding)[None, :], k=k, node_types=[types])
        return Ranked([(int(i), float(s)) for i, s in ranked[0]] if ranked else [], seeds, sub.num_nodes)
