"""Seeding beyond dense similarity: full-text entity linking and hybrid (fused) seeds.

Dense seeding misses a question's topic entity when its name is rare or short; a full-text
index on node names finds it by the words themselves. ``hybrid`` fuses both rankings with
reciprocal-rank fusion. The question reaches Cypher only as a parameter, with every Lucene
special character escaped.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from seeder_dgl.errors import SeederError

SEEDING_MODES = ("dense", "fulltext", "hybrid")
RRF_K = 60
_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/&|])')
_WORD = re.compile(r"\w+", re.UNICODE)
# Query terms keep inner apostrophes and periods ("O'Malley", "T.J"), as Lucene's tokenizer does.
_TERM = re.compile(r"\w(?:[\w'.]*\w)?", re.UNICODE)
MAX_TERMS = 64


def lucene_query(question: str) -> str:
    """An OR query of the question's words, each escaped; '' when nothing searchable remains."""
    # Lower case: the analyzer lower-cases anyway, and AND / OR / NOT in a question must not
    # become Lucene operators.
    words = [w.lower() for w in _TERM.findall(question)[:MAX_TERMS]]
    return " ".join(_LUCENE_SPECIAL.sub(r"\\\1", w) for w in words)


def _normal(text: str) -> str:
    return " ".join(w.lower() for w in _WORD.findall(text))


def names_in_question(question: str, names: Sequence[str | None]) -> list[str]:
    """The ``names`` that occur in ``question`` as a whole phrase (case and punctuation aside), by
    the same test as ``link_entities``."""
    q_lower = f" {_normal(question)} "
    return [n for n in names if _normal(n or "") and f" {_normal(n)} " in q_lower]


def link_entities(question: str, hits: list[dict]) -> list[dict]:
    """Order full-text hits for entity linking. Names that occur in the question as a whole
    phrase come first; among them, an occurrence with the same letter case, then one that is
    capitalised (a proper noun: 'Butter' before the tag 'actors', 'Love' before 'love'), then
    longer names ('The Lord of the Rings' before 'Rings'). The rest follow by Lucene score."""
    q_lower = f" {_normal(question)} "
    q_words = " " + " ".join(_WORD.findall(question)) + " "

    def key(hit):
        words = _WORD.findall(hit["name"] or "")
        name = " ".join(w.lower() for w in words)
        if not name or f" {name} " not in q_lower:
            return (1, 0, 0, 0, -hit["text_score"], hit["id"])
        exact = f" {' '.join(words)} " in q_words
        proper = exact and any(c.isupper() for c in hit["name"])
        return (0, not exact, not proper, -len(name), -hit["text_score"], hit["id"])

    return sorted(hits, key=key)


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


def seed(graph, question: str, embedding: np.ndarray, k: int, mode: str = "dense",
         exact: bool = False, candidates: int = 50) -> list[tuple[int, float]]:
    """k seeds as (node id, cos(q, v)) for ``mode`` on a LiveGraph."""
    return seed_linked(graph, question, embedding, k, mode, exact, candidates)[0]


def seed_linked(graph, question: str, embedding: np.ndarray, k: int, mode: str = "dense",
                exact: bool = False, candidates: int = 50) -> tuple[list[tuple[int, float]], list[str]]:
    """``seed``'s seeds, and the names of those seeds that the question mentions (found by full-text
    linking; none with dense seeding). The relation prior reads the question with them masked."""
    check_mode(mode)
    if k <= 0:
        return [], []
    if mode == "dense":
        return graph.dense_seeds(embedding, k, exact=exact), []
    linked = link_entities(question, graph.fulltext_hits(question, embedding, candidates))
    if mode == "fulltext":
        seeds = [(h["id"], h["similarity"]) for h in linked[:k]]
        chosen = linked[:k]
        if len(seeds) < k:  # no name in the graph matches the question's words: dense seeds fill in
            taken = {i for i, _ in seeds}
            dense = graph.dense_seeds(embedding, k + len(seeds), exact=exact)
            seeds += [(i, s) for i, s in dense if i not in taken][:k - len(seeds)]
    else:
        dense = graph.dense_seeds(embedding, max(k, 10), exact=exact)
        ids = fuse([[h["id"] for h in linked], [i for i, _ in dense]], k)
        sims = {**{i: s for i, s in dense}, **{h["id"]: h["similarity"] for h in linked}}
        seeds = [(i, sims[i]) for i in ids]
        picked = set(ids)
        chosen = [h for h in linked if h["id"] in picked]
    return seeds, names_in_question(question, [h["name"] for h in chosen])
