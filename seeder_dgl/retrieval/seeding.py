"""Seeding beyond dense similarity: entity linking on names, and hybrid (fused) seeds.

Dense seeding misses a question's topic entity when its name is rare or short; the full-text
index on node names finds it by the words themselves, whatever their case and within a typo
(``retrieval.linking``: candidates, spans, and the dataset's learned linker). ``hybrid`` fuses
the linked and dense rankings with reciprocal-rank fusion. The question reaches Cypher only as a
parameter, with every Lucene special character escaped.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.name_index import CANDIDATES
from seeder_dgl.retrieval.linking import EntityLinker, link

SEEDING_MODES = ("dense", "fulltext", "hybrid")
RRF_K = 60


def fuse(rankings: list[list[int]], k: int) -> list[int]:
    """Reciprocal-rank fusion of several rankings of node ids (ties by first appearance)."""
    score: dict[int, float] = {}
    first: dict[int, int] = {}
    for ranking in rankings:
        for rank, node in enumerate(ranking):
            score[node] = score.get(node, 0.0) + 1.0 / (RRF_K + rank + 1)
            first.setdefault(node, len(first))
    return sorted(score, key=lambda n: (-score[n], first[n]))[:k]


def check_mode(mode: str) -> str:
    if mode not in SEEDING_MODES:
        raise SeederError(f"unknown seeding mode {mode!r}: choose one of {', '.join(SEEDING_MODES)}")
    return mode


def seed(graph, question: str, embedding: np.ndarray, k: int, mode: str = "dense", exact: bool = False,
         candidates: int = CANDIDATES, linker: EntityLinker | None = None) -> list[tuple[int, float]]:
    """Seeds as (node id, cos(q, v)) for ``mode`` on a graph backend (``seed_linked``)."""
    return seed_linked(graph, question, embedding, k, mode, exact, candidates, linker)[0]


class LinkedSeeds(NamedTuple):
    seeds: list[tuple[int, float]]
    """(node id, cos(q, v)), best first."""
    names: list[str]
    """The question's words that name the linked seeds (none with dense seeding): the relation
    prior reads the question with them masked."""
    relations: np.ndarray | None
    """bool [R]: the relation types (``info.relation_types``) at least one seed has; None where a
    seed's are not known (dense seeds)."""


def seed_linked(graph, question: str, embedding: np.ndarray, k: int, mode: str = "dense", exact: bool = False,
                candidates: int = CANDIDATES, linker: EntityLinker | None = None) -> LinkedSeeds:
    """``k`` seeds (full-text: more where the linker finds candidates close to the best), the words
    that name them and the relation types they have (``LinkedSeeds``).

    ``linker``: the dataset's fitted ``EntityLinker`` (None: the hand-set one).
    """
    check_mode(mode)
    if k <= 0:
        return LinkedSeeds([], [], None)
    if mode == "dense":
        return LinkedSeeds(graph.dense_seeds(embedding, k, exact=exact), [], None)
    linker = linker or EntityLinker.default()
    hits = graph.fulltext_hits(question, embedding, candidates, linker.name_query)
    made = getattr(graph, "mention_table", None)  # a batch read ahead made them already (``prefetch_linking``)
    found = link(question, hits, k, linker, made(question, hits, linker) if made is not None else None)
    sims = {int(h["id"]): float(h["similarity"]) for h in found.mentions.hits}
    degrees = found.mentions.degrees
    if mode == "fulltext":
        seeds = [(i, sims[i]) for i in found.ids(found.chosen)]
        relations = degrees[found.chosen].any(axis=0) if degrees is not None and found.chosen else None
        if len(seeds) < k:  # no name in the graph matches the question's words: dense seeds fill in
            taken = {i for i, _ in seeds}
            dense = graph.dense_seeds(embedding, k + len(seeds), exact=exact)
            seeds += [(i, s) for i, s in dense if i not in taken][:k - len(seeds)]
            relations = None
        return LinkedSeeds(seeds, found.names(found.chosen), relations)
    dense = graph.dense_seeds(embedding, max(k, 10), exact=exact)
    ids = fuse([found.ids(found.order), [i for i, _ in dense]], k)
    sims = {**{i: s for i, s in dense}, **sims}
    picked = set(ids)
    linked = [j for j in found.order if found.mentions.hits[j]["id"] in picked]
    known = degrees is not None and len({found.mentions.hits[j]["id"] for j in linked}) == len(ids)
    return LinkedSeeds([(i, sims[i]) for i in ids], found.names(linked),
                       degrees[linked].any(axis=0) if known and linked else None)
