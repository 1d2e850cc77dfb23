"""Every retrieval method by name: what the API, ``query``, ``serve`` and ``eval`` build."""
from __future__ import annotations

from seeder_dgl.errors import SeederError
from seeder_dgl.retrieval.pipeline import GraphBackend, RetrievalSettings
from seeder_dgl.retrieval.base import GraphRetriever
from seeder_dgl.retrieval.baselines import (
    BeamRetriever,
    DenseRetriever,
    KHopRetriever,
    PCSTRetriever,
    PPRMMRRetriever,
    PPRRetriever,
)
from seeder_dgl.retrieval.policy import PolicyRetriever

RETRIEVERS: dict[str, type[GraphRetriever]] = {cls.name: cls for cls in (
    DenseRetriever, KHopRetriever, PPRRetriever, PPRMMRRetriever, BeamRetriever, PCSTRetriever, PolicyRetriever)}
BASELINES = ("dense", "khop", "ppr", "ppr_mmr", "beam", "pcst")
"""The non-learned methods, in table order."""


def make_retriever(name: str, graph: GraphBackend, settings: RetrievalSettings, *, policy=None) -> GraphRetriever:
    """The method ``name`` on ``graph`` with ``settings`` (``seeder`` also needs a loaded ``policy``)."""
    if name not in RETRIEVERS:
        raise SeederError(f"unknown method {name!r}: choose one of {', '.join(RETRIEVERS)}")
    if name == PolicyRetriever.name:
        if policy is None:
            raise SeederError("method seeder needs a trained policy: load a checkpoint first")
        return PolicyRetriever(graph, settings, policy=policy)
    return RETRIEVERS[name](graph, settings)
