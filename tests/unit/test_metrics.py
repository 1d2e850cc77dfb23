"""Retrieval metrics: hand-made cases and a brute-force property check."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder_dgl.metrics import aggregate, batch_metrics, metric_names, query_metrics


def test_hand_made_ranking():
    m = query_metrics([7, 3, 9, 4, 1, 8], answers=[4, 8, 100], ks=(1, 3, 5))
    assert m["hit@1"] == 0 and m["hit@3"] == 0 and m["hit@5"] == 1
    assert m["recall@5"] == pytest.approx(1 / 3)  # ÷ |A| = 3, not ÷ min(|A|, k)
    assert m["mrr"] == pytest.approx(1 / 4)
    assert m["hit@any"] == 1 and m["recall@any"] == pytest.approx(2 / 3)
    assert m["size"] == 6


def test_recall_divides_by_all_answers_even_when_k_is_small():
    m = query_metrics([1, 2], answers=list(range(1, 11)), ks=(1,))
    assert m["hit@1"] == 1 and m["recall@1"] == pytest.approx(0.1) and m["mrr"] == 1


def test_duplicates_count_once_at_first_position():
    m = query_metrics([5, 5, 5, 6], answers=[6], ks=(1, 2))
    assert m["hit@2"] == 1 and m["mrr"] == pytest.approx(0.5) and m["size"] == 2


def test_pairs_with_tied_scores_keep_the_given_order():
    ranking = [(3, 0.5), (2, 0.5), (1, 0.5)]
    assert query_metrics(ranking, [2])["mrr"] == pytest.approx(0.5)
    # scores <= 0 are still retrieved items (the torchmetrics >= 1.8 pitfall)
    assert query_metrics([(3, -1.0), (2, 0.0)], [2])["mrr"] == pytest.approx(0.5)


def test_empty_ranking_and_no_answers():
    m = query_metrics([], [1, 2])
    assert all(m[k] == 0 for k in metric_names()) and m["size"] == 0
    m = query_metrics([1, 2, 3], [])
    assert all(m[k] == 0 for k in metric_names() if k != "size") and m["size"] == 3


def test_answers_given_with_repeats():
    assert query_metrics([1, 2], [2, 2, 3])["recall@any"] == pytest.approx(0.5)


def test_aggregate_means():
    a = query_metrics([1], [1])
    b = query_metrics([2], [1])
    agg = aggregate([a, b])
    assert agg["hit@1"] == 0.5 and agg["mrr"] == 0.5 and agg["num_queries"] == 2
    assert aggregate([]) == {"num_queries": 0.0}


def test_batch_accepts_padded_arrays():
    rankings = np.array([[4, 2, -1, -1], [1, 1, 3, 5], [-1, -1, -1, -1]])
    out = batch_metrics(rankings, [[2], [3, 5], [7]], ks=(1, 2))
    assert out["mrr"].tolist() == pytest.approx([0.5, 0.5, 0.0])
    assert out["recall@2"].tolist() == pytest.approx([1.0, 0.5, 0.0])
    assert out["size"].tolist() == [2, 3, 0]


def brute_force(ranking, answers, ks):
    seen, ranked = set(), []
    for x in ranking:
        if x >= 0 and x not in seen:
            seen.add(x)
            ranked.append(x)
    gold = set(answers)
    out = {"size": float(len(ranked))}
    if not gold:
        out.update({f"hit@{k}": 0.0 for k in ks} | {f"recall@{k}": 0.0 for k in ks})
        out.update(mrr=0.0, **{"hit@any": 0.0, "recall@any": 0.0})
        return out
    for k in ks:
        top = ranked[:k]
        out[f"hit@{k}"] = float(any(x in gold for x in top))
        out[f"recall@{k}"] = sum(x in gold for x in top) / len(gold)
    ranks = [i + 1 for i, x in enumerate(ranked) if x in gold]
    out["mrr"] = 1.0 / ranks[0] if ranks else 0.0
    out["hit@any"] = float(bool(ranks))
    out["recall@any"] = len(ranks) / len(gold)
    return out


rankings_st = st.lists(st.integers(0, 30), max_size=40)
answers_st = st.lists(st.integers(0, 30), max_size=8)


@settings(max_examples=300, deadline=None)
@given(ranking=rankings_st, answers=answers_st, ks=st.lists(st.integers(1, 25), min_size=1, max_size=4, unique=True))
def test_query_metrics_match_brute_force(ranking, answers, ks):
    got = query_metrics(ranking, answers, ks=tuple(ks))
    want = brute_force(ranking, answers, ks)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(st.tuples(rankings_st, answers_st), max_size=12))
def test_batch_matches_per_query(batch):
    rankings = [r for r, _ in batch]
    answers = [a for _, a in batch]
    out = batch_metrics(rankings, answers)
    for i, (r, a) in enumerate(batch):
        single = query_metrics(r, a)
        for name, value in single.items():
            assert out[name][i] == pytest.approx(value, abs=1e-12), name
