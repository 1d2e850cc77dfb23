"""One retriever interface: a method, a graph backend and the dataset's retrieval settings.

Every method (dense, K-hop, PPR, PPR+MMR, beam, PCST and SeedER) is a ``GraphRetriever``
subclass built on a ``GraphBackend`` (the live Neo4j graph or an in-memory export) and the
``RetrievalSettings`` of a profile, and answers ``search(question, embedding, k)``. The API,
``query``, ``serve`` and ``eval`` all call that method, so what ``eval`` measures on the export
is what ``query`` serves from Neo4j (tests/e2e/test_extract.py checks the two backends agree).

A method reads the graph only through the backend protocol. Its seeds come from the backend's
seeding, per the settings (``dense``, ``fulltext`` or ``hybrid``): the same seeds K-hop
expands, whichever method asks.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from seeder_dgl.retrieval.pipeline import GraphBackend, RetrievalSettings, Seeds
from seeder_dgl.retrieval.seeding import seed
from seeder_dgl.validation import check_k

Ranking = list[tuple[int, float]]
"""(node id, score) pairs, best first, ids distinct."""


@dataclass
class Ranked:
    """What one method found for one question."""

    ranking: Ranking
    """At most k nodes, best first (ties by the smaller id unless a method says otherwise)."""
    seeds: Seeds
    """The seeds the method started from (none for dense retrieval)."""
    considered: int
    """Nodes the ranking was chosen from: the subgraph, neighbourhood or set of nodes reached."""


class GraphRetriever(ABC):
    """A retrieval method on one graph backend with one profile's settings.

    Subclasses set ``name`` (the method's name in the CLI, the API and eval's tables) and
    implement ``rank``; ``search`` checks ``k`` once for all of them.
    """

    name: ClassVar[str]

    def __init__(self, graph: GraphBackend, settings: RetrievalSettings | None = None):
        self.graph = graph
        self.settings = settings or RetrievalSettings()

    def search(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        """The ``k`` best nodes for ``question`` (``embedding``: its vector from the dataset's encoder)."""
        return self.rank(question, embedding, check_k(k))

    @abstractmethod
    def rank(self, question: str, embedding: np.ndarray, k: int) -> Ranked:
        """``search`` after its checks."""

    def seed(self, question: str, embedding: np.ndarray) -> Seeds:
        """The question's seeds per the settings (how many, and dense, full-text or hybrid)."""
        s = self.settings
        return seed(self.graph, question, embedding, s.seeds, s.seeding, exact=s.exact_seeds, linker=s.linker)

    def describe(self) -> dict:
        """How the method is configured (eval writes it beside its numbers)."""
        return {"class": type(self).__name__, "seeds": self.settings.seeds, "seeding": self.settings.seeding,
                **self.options()}

    def options(self) -> dict:
        """The method's own parameters."""
        return {}
