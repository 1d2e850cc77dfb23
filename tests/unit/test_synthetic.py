"""Synthetic graphs: sizes, determinism, heavy tails, no duplicates; relation-tracing answers by tracing only."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from loaders.synthetic import embed_synthetic, follow, relation_tracing, typed_graph


def degrees(kg) -> np.ndarray:
    return np.bincount(np.concatenate([kg.edge_src, kg.edge_dst]), minlength=kg.num_nodes)


def test_typed_graph_sizes_no_loops_no_duplicates_heavy_tail():
    kg = typed_graph(5_000, 60_000, num_types=6, num_relations=9, seed=3)
    kg.validate()
    assert kg.num_nodes == 5_000 and kg.num_edges == 60_000
    assert len(kg.node_type_names) == 6 and len(kg.relation_names) == 9
    assert not np.any(kg.edge_src == kg.edge_dst)
    lo, hi = np.minimum(kg.edge_src, kg.edge_dst), np.maximum(kg.edge_src, kg.edge_dst)
    triples = (lo * kg.num_nodes + hi) * len(kg.relation_names) + kg.edge_rel
    assert np.unique(triples).size == kg.num_edges
    deg = degrees(kg)
    assert deg.max() > 10 * deg.mean()
    assert len(set(kg.node_names)) == kg.num_nodes
    assert kg.node_texts[0].startswith(kg.node_names[0])
    # The relation depends on the endpoint types: a type pair uses at most two relations.
    pairs = {}
    for a, b, r in zip(kg.node_type[lo].tolist(), kg.node_type[hi].tolist(), kg.edge_rel.tolist()):
        pairs.setdefault((min(a, b), max(a, b)), set()).add(r)
    assert max(len(rs) for rs in pairs.values()) <= 2


def test_typed_graph_is_deterministic():
    a, b = typed_graph(2_000, 10_000, seed=7), typed_graph(2_000, 10_000, seed=7)
    assert a.node_names == b.node_names and a.node_texts == b.node_texts
    for field in ("node_type", "edge_src", "edge_dst", "edge_rel"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    c = typed_graph(2_000, 10_000, seed=8)
    assert not np.array_equal(a.edge_src, c.edge_src)


def test_typed_graph_rejects_impossible_density():
    with pytest.raises(ValueError, match="too dense"):
        typed_graph(10, 500, num_relations=2)


def test_prime_scale_graph_is_heavy_tailed():
    # Its build time is a benchmark's business (bench_ingest.py), not a test's: it varies with the machine's load.
    kg = typed_graph(129_375, 4_050_000, seed=0)
    assert kg.num_nodes == 129_375 and kg.num_edges == 4_050_000
    deg = degrees(kg)
    assert deg.max() > 50 * deg.mean() and deg.min() >= 0


def test_embed_synthetic_unit_and_deterministic():
    kg = typed_graph(3_000, 9_000, seed=1)
    x = embed_synthetic(kg, dim=64, seed=2, chunk=1_000)
    assert x.shape == (3_000, 64) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(x, embed_synthetic(kg, dim=64, seed=2))
    # Same-type nodes are closer on average than different-type nodes.
    same = x[kg.node_type == 0][:200]
    other = x[kg.node_type == 1][:200]
    assert (same @ same.T).mean() > (same @ other.T).mean()


# ---- relation tracing -----------------------------------------------------------------------------
def trace(kg, start: int, relation_ids: list[int]) -> set[int]:
    """BFS along directed edges that follows exactly the relation sequence."""
    frontier = {start}
    for r in relation_ids:
        mask = kg.edge_rel == r
        src, dst = kg.edge_src[mask], kg.edge_dst[mask]
        frontier = set(dst[np.isin(src, list(frontier))].tolist())
    return frontier


def undirected_distance(kg, start: int, goal: int) -> int:
    adj: dict[int, set[int]] = {}
    for u, v in zip(kg.edge_src.tolist(), kg.edge_dst.tolist()):
        adj.setdefault(u, set()).add(v)
        adj.setdefault(v, set()).add(u)
    seen, queue = {start: 0}, deque([start])
    while queue:
        v = queue.popleft()
        if v == goal:
            return seen[v]
        for u in adj[v]:
            if u not in seen:
                seen[u] = seen[v] + 1
                queue.append(u)
    return -1


@pytest.fixture(scope="module")
def tracing():
    return relation_tracing(num_chains=400, num_nodes=500, num_relations=4, max_hops=3, seed=5)


def test_relation_tracing_graph_shape(tracing):
    kg, qa = tracing
    kg.validate()
    assert kg.num_nodes == 500 and kg.num_edges == 500 * 4
    # Every relation is a permutation: out- and in-degree 1 per relation, so 2k overall.
    for r in range(4):
        mask = kg.edge_rel == r
        assert np.array_equal(np.sort(kg.edge_src[mask]), np.arange(500))
        assert np.array_equal(np.sort(kg.edge_dst[mask]), np.arange(500))
    assert not np.any(kg.edge_src == kg.edge_dst)
    assert len(qa.queries) == 400


def test_answers_are_reached_only_by_the_relation_sequence(tracing):
    kg, qa = tracing
    rel_index = {name: i for i, name in enumerate(kg.relation_names)}
    rng = np.random.default_rng(0)
    for q in list(qa.queries.values())[:120]:
        sequence = [rel_index[name] for name in q.qtype.split(">")]
        assert len(sequence) == q.hops and len(q.topic) == 1 and len(q.answers) == 1
        assert trace(kg, q.topic[0], sequence) == set(q.answers)
        # Not reachable in fewer hops, in any direction, with any relations.
        assert undirected_distance(kg, q.topic[0], q.answers[0]) == q.hops
        # A different relation sequence of the same length does not lead there.
        other = list(sequence)
        other[int(rng.integers(len(other)))] = (other[0] + 1) % 4
        if other != sequence:
            assert q.answers[0] not in trace(kg, q.topic[0], other)
        # The text names the start and the relations but never the answer.
        assert kg.node_names[q.topic[0]] in q.text and kg.node_names[q.answers[0]] not in q.text


def test_relation_tracing_splits_hold_out_compositions(tracing):
    _, qa = tracing
    splits = {name: set(ids) for name, ids in qa.splits.items()}
    assert set(qa.splits) == {"train", "val", "test"}
    assert splits["train"].isdisjoint(splits["val"]) and splits["val"].isdisjoint(splits["test"])
    assert splits["train"] | splits["val"] | splits["test"] == set(qa.queries)
    seen = {qa.queries[i].qtype for i in splits["train"]}
    assert all(qa.queries[i].qtype not in seen for i in splits["val"] | splits["test"])
    assert all(qa.queries[i].hops > 1 for i in splits["val"] | splits["test"])
    assert splits["val"] and splits["test"]


def test_relation_tracing_is_deterministic(tracing):
    kg, qa = tracing
    kg2, qa2 = relation_tracing(num_chains=400, num_nodes=500, num_relations=4, max_hops=3, seed=5)
    assert kg.node_names == kg2.node_names and np.array_equal(kg.edge_dst, kg2.edge_dst)
    assert [q.text for q in qa.queries.values()] == [q.text for q in qa2.queries.values()]
    assert qa.splits == qa2.splits
    _, random_split = relation_tracing(num_chains=400, num_nodes=500, seed=5, split_by="query")
    assert len(random_split.splits["train"]) == 280


def test_follow_composes_left_to_right():
    sigmas = np.array([[1, 2, 0], [0, 2, 1]])
    assert follow(sigmas, 0, (0, 1)) == 2  # sigma_1(sigma_0(0)) = sigma_1(1) = 2


def test_embed_synthetic_rows_are_the_first_rows_of_the_whole_matrix():
    kg = typed_graph(3000, 9000, num_types=4, seed=0)
    whole = embed_synthetic(kg, dim=32, seed=1, chunk=1000)
    for rows in (1, 18, 1500):
        assert np.array_equal(embed_synthetic(kg, dim=32, seed=1, chunk=1000, rows=rows), whole[:rows])
