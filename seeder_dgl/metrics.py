"""Retrieval metrics, computed here (no torchmetrics: >= 1.8 drops scores <= 0 in MRR/recall).

Conventions (docs/method.md, STaRK):

* a ranking is an ordered list of node ids (or ``(id, score)`` pairs, order as given: ties were
  already broken by the retriever); a repeated id counts once, at its first position;
* ``hit@k``: some answer is in the top k; ``recall@k``: answers in the top k ÷ |A|
  (NOT ÷ min(|A|, k)); ``mrr``: 1 / rank of the first answer in the whole ranking, 0 if none;
* ``hit@any`` / ``recall@any``: the same over the whole ranking; ``size``: distinct ids retrieved;
* negative ids are padding and ignored;
* a query without answers scores 0 on every metric (``size`` is still its retrieved-set size).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

DEFAULT_KS = (1, 5, 20)


def _ids(ranking) -> np.ndarray:
    """int64 ids of a ranking given as ids or (id, score) pairs."""
    items = list(ranking)
    if items and isinstance(items[0], (tuple, list)):
        items = [it[0] for it in items]
    return np.asarray(items, dtype=np.int64).reshape(-1)


def first_occurrences(ids: np.ndarray) -> np.ndarray:
    """``ids`` with repeats removed, keeping the first position of each."""
    _, first = np.unique(ids, return_index=True)
    return ids[np.sort(first)]


def metric_names(ks: Sequence[int] = DEFAULT_KS) -> list[str]:
    return ([f"hit@{k}" for k in ks] + [f"recall@{k}" for k in ks]
            + ["mrr", "hit@any", "recall@any", "size"])


def query_metrics(ranking, answers: Iterable[int], ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """All metrics of one query (see the module docstring)."""
    ids = _ids(ranking)
    ids = first_occurrences(ids[ids >= 0])
    gold = np.unique(np.asarray(list(answers), dtype=np.int64))
    out = {name: 0.0 for name in metric_names(ks)}
    out["size"] = float(ids.shape[0])
    if gold.size == 0:
        return out
    hit = np.isin(ids, gold)
    for k in ks:
        found = int(hit[:k].sum())
        out[f"hit@{k}"] = float(found > 0)
        out[f"recall@{k}"] = found / gold.shape[0]
    if hit.any():
        out["mrr"] = 1.0 / (int(np.argmax(hit)) + 1)
        out["hit@any"] = 1.0
        out["recall@any"] = float(hit.sum()) / gold.shape[0]
    return out


def aggregate(per_query: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Mean of every metric over queries, plus ``num_queries``."""
    out: dict[str, float] = {}
    if per_query:
        for name in per_query[0]:
            out[name] = float(np.mean([m[name] for m in per_query]))
    out["num_queries"] = float(len(per_query))
    return out


def batch_metrics(rankings: Sequence, answers: Sequence[Iterable[int]],
                  ks: Sequence[int] = DEFAULT_KS) -> dict[str, np.ndarray]:
    """Per-query metric arrays for many queries at once (same values as ``query_metrics``).

    ``rankings``: a list of rankings, or an int array [Q, L] padded with negative ids.
    """
    num_q = len(rankings)
    if isinstance(rankings, np.ndarray):
        qi, pos = np.nonzero(rankings >= 0)
        ids = rankings[qi, pos].astype(np.int64)
    else:
        parts = [_ids(r) for r in rankings]
        lengths = np.asarray([p.shape[0] for p in parts], dtype=np.int64)
        qi = np.repeat(np.arange(num_q), lengths)
        ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        valid = ids >= 0
        qi, ids = qi[valid], ids[valid]
    gold = [np.unique(np.asarray(list(a), dtype=np.int64)) for a in answers]
    if len(gold) != num_q:
        raise ValueError(f"{num_q} rankings but {len(gold)} answer sets")
    n_gold = np.asarray([g.shape[0] for g in gold], dtype=np.float64)
    gq = np.repeat(np.arange(num_q), n_gold.astype(np.int64))
    gids = np.concatenate(gold) if gold else np.zeros(0, np.int64)

    # One integer key per (query, id): dedupe to first occurrence and test membership at once.
    base = int(max(ids.max(initial=-1), gids.max(initial=-1))) + 1
    key = qi * base + ids
    _, first = np.unique(key, return_index=True)
    first = np.sort(first)  # entries are in (query, position) order, so this keeps ranking order
    qi, key = qi[first], key[first]
    size = np.bincount(qi, minlength=num_q).astype(np.float64)
    start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    rank = np.arange(qi.shape[0]) - start[qi]  # 0-based position within the deduplicated ranking
    hit = np.isin(key, gq * base + gids)

    safe = np.where(n_gold > 0, n_gold, 1.0)
    out: dict[str, np.ndarray] = {}
    for k in ks:
        found = np.bincount(qi[hit & (rank < k)], minlength=num_q).astype(np.float64)
        out[f"hit@{k}"] = (found > 0).astype(np.float64)
        out[f"recall@{k}"] = found / safe
    first_hit = np.full(num_q, np.inf)
    np.minimum.at(first_hit, qi[hit], rank[hit].astype(np.float64))
    out["mrr"] = np.where(np.isfinite(first_hit), 1.0 / (first_hit + 1.0), 0.0)
    found = np.bincount(qi[hit], minlength=num_q).astype(np.float64)
    out["hit@any"] = (found > 0).astype(np.float64)
    out["recall@any"] = found / safe
    out["size"] = size
    return out
