"""Synthetic graphs: Prime-scale typed graphs for benchmarks and the paper's relation-tracing graphs.

Everything is a deterministic function of its arguments and ``seed``.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from loaders.kg import KnowledgeGraph, Query, QASet

_TYPE_NAMES = ["disease", "gene/protein", "drug", "pathway", "anatomy", "effect/phenotype",
               "biological_process", "molecular_function", "cellular_component", "exposure"]
_RELATION_NAMES = ["ppi", "carrier", "enzyme", "target", "transporter", "contraindication", "indication",
                   "off-label use", "synergistic interaction", "associated with", "parent-child",
                   "phenotype absent", "phenotype present", "side effect", "interacts with", "linked to",
                   "expression present", "expression absent"]
_TRACING_RELATIONS = ["knows", "follows", "mentors", "trusts", "advises", "funds", "admires", "employs"]
_SYLLABLES = ["ba", "ce", "di", "fo", "gu", "ka", "le", "mi", "no", "pu", "ra", "se", "ti", "vo", "xa", "zu",
              "bel", "cor", "dan", "fen", "gil", "har", "jin", "kel", "lor", "mar", "nis", "pel", "quin",
              "ros", "tan", "vel"]


def pseudo_words(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct pronounceable names ('Kelmiros'), in random order."""
    base = len(_SYLLABLES)
    digits = max(2, math.ceil(math.log(max(n, 2), base)))
    codes = rng.permutation(base ** digits)[:n] if base ** digits <= 4 * n else \
        rng.choice(base ** digits, size=n, replace=False)
    parts = (codes[:, None] // base ** np.arange(digits)[None, :]) % base
    syll = np.array(_SYLLABLES)
    words = syll[parts[:, 0]]
    for d in range(1, digits):
        words = np.char.add(words, syll[parts[:, d]])
    return [w.capitalize() for w in words.tolist()]


def _names(pool: list[str], count: int, prefix: str) -> list[str]:
    return [pool[i] if i < len(pool) else f"{prefix}_{i}" for i in range(count)]


def _power_law_ranks(size: int, n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Ranks in ``0..n-1`` drawn with density ~ ``(rank+1)^-exponent`` (inverse-CDF of the continuous law).

    Closed form, so millions of draws cost one vectorised expression rather than a search each.
    """
    u = rng.random(size)
    if abs(exponent - 1.0) < 1e-9:
        x = np.exp(u * math.log(n + 1.0))
    else:
        a = 1.0 - exponent
        x = (1.0 + u * ((n + 1.0) ** a - 1.0)) ** (1.0 / a)
    return (x.astype(np.int64) - 1).clip(0, n - 1)


def typed_graph(num_nodes: int, num_edges: int, num_types: int = 10, num_relations: int = 18, seed: int = 0,
                exponent: float = 0.6) -> KnowledgeGraph:
    """A typed graph with a heavy-tailed degree distribution (Chung–Lu with Zipf weights).

    The node of weight rank ``i`` (ranks shuffled, so hubs are random nodes) is drawn as an edge
    endpoint with probability ~ ``(i+1)^-exponent``. The relation of an edge depends on the
    unordered type pair of its endpoints (one of two relations per pair), as in real typed KGs.
    No self loops and no duplicate (unordered pair, relation) triples. Prime scale (129,375 nodes,
    4.05M edges) builds in a few seconds.
    """
    if num_nodes < 2 or num_types < 1 or num_relations < 1:
        raise ValueError("typed_graph needs at least 2 nodes, 1 type and 1 relation")
    capacity = num_nodes * (num_nodes - 1) // 2 * num_relations
    if num_edges > capacity // 4:
        raise ValueError(f"{num_edges} edges is too dense for {num_nodes} nodes and {num_relations} relations "
                         f"(at most {capacity // 4} here)")
    rng = np.random.default_rng(seed)
    type_p = 1.0 / np.arange(1, num_types + 1) ** 0.8
    node_type = rng.choice(num_types, size=num_nodes, p=type_p / type_p.sum()).astype(np.int64)
    hub_order = rng.permutation(num_nodes)  # node of each weight rank: hubs are random nodes
    pair_rel = rng.integers(0, num_relations, size=(2, num_types, num_types))

    keys = np.empty(0, dtype=np.int64)
    src = np.empty(0, dtype=np.int64)
    dst = np.empty(0, dtype=np.int64)
    for _ in range(50):
        need = num_edges - keys.size
        if need <= 0:
            break
        m = int(need * 1.3) + 1024
        u = hub_order[_power_law_ranks(m, num_nodes, exponent, rng)]
        v = hub_order[_power_law_ranks(m, num_nodes, exponent, rng)]
        ok = u != v
        u, v = u[ok], v[ok]
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        t_lo, t_hi = np.minimum(node_type[u], node_type[v]), np.maximum(node_type[u], node_type[v])
        rel = pair_rel[rng.integers(0, 2, size=u.size), t_lo, t_hi]
        new_keys = (lo * num_nodes + hi) * num_relations + rel
        all_keys = np.concatenate([keys, new_keys])
        # First occurrence of each triple, in sampling order (keeps the result deterministic).
        _, first = np.unique(all_keys, return_index=True)
        first.sort()
        all_src, all_dst = np.concatenate([src, u]), np.concatenate([dst, v])
        keys, src, dst = all_keys[first], all_src[first], all_dst[first]
    else:
        raise ValueError(f"could not draw {num_edges} distinct edges; lower num_edges or exponent")
    keys, src, dst = keys[:num_edges], src[:num_edges], dst[:num_edges]
    edge_rel = keys % num_relations

    type_names = _names(_TYPE_NAMES, num_types, "type")
    names = pseudo_words(num_nodes, rng)
    texts = [f"{name} is a {type_names[t].replace('_', ' ')}." for name, t in zip(names, node_type.tolist())]
    kg = KnowledgeGraph(name=f"synthetic-{num_nodes}", node_names=names, node_texts=texts, node_type=node_type,
                        node_type_names=type_names, edge_src=src, edge_dst=dst, edge_rel=edge_rel,
                        relation_names=_names(_RELATION_NAMES, num_relations, "relation"))
    kg.validate()
    return kg


def embed_synthetic(kg: KnowledgeGraph, dim: int = 384, seed: int = 0, type_weight: float = 0.5,
                    chunk: int = 65536, rows: int | None = None) -> np.ndarray:
    """Cheap deterministic unit vectors [N, dim] for scale benchmarks (no text encoder needed).

    Each node is random noise plus ``type_weight`` times a random direction of its type, so
    nodes of one type are somewhat similar, as text embeddings of one type are. ``rows``: only
    the first rows (the same values as the first rows of the whole matrix), e.g. a handful of
    relation embeddings without a [N, dim] matrix at MAG scale.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((len(kg.node_type_names), dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    total = kg.num_nodes if rows is None else min(int(rows), kg.num_nodes)
    out = np.empty((total, dim), dtype=np.float32)
    for lo in range(0, total, chunk):
        hi = min(lo + chunk, total)
        block = rng.standard_normal((hi - lo, dim), dtype=np.float32) / np.float32(math.sqrt(dim))
        block += np.float32(type_weight) * centres[kg.node_type[lo:hi]]
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[lo:hi] = block
    return out


# ---- relation-tracing graphs (the paper's Definition: k permutations on [n]) ------------------------
def _cyclic_permutation(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random n-cycle: no fixed points (self loops) and no 2-cycles (duplicate pairs)."""
    order = rng.permutation(n)
    sigma = np.empty(n, dtype=np.int64)
    sigma[order] = np.roll(order, -1)
    return sigma


def follow(sigmas: np.ndarray, start: int | np.ndarray, sequence: tuple[int, ...]) -> int | np.ndarray:
    """Apply ``sigma_{r_l} o ... o sigma_{r_1}`` to ``start``."""
    node = start
    for r in sequence:
        node = sigmas[r][node]
    return node


def _all_sequences(k: int, max_hops: int) -> list[tuple[int, ...]]:
    seqs: list[tuple[int, ...]] = []
    layer: list[tuple[int, ...]] = [()]
    for _ in range(max_hops):
        layer = [s + (r,) for s in layer for r in range(k)]
        seqs += layer
    return seqs


def _ball(adj: list[np.ndarray], source: int, radius: int) -> set[int]:
    """Nodes within ``radius`` undirected hops of ``source``."""
    seen = {source}
    queue = deque([(source, 0)])
    while queue:
        v, d = queue.popleft()
        if d == radius:
            continue
        for u in adj[v].tolist():
            if u not in seen:
                seen.add(u)
                queue.append((u, d + 1))
    return seen


def relation_tracing(num_chains: int = 3000, num_nodes: int = 2000, num_relations: int = 4, max_hops: int = 3,
                     seed: int = 0, split_by: str = "sequence",
                     fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)) -> tuple[KnowledgeGraph, QASet]:
    """A relation-tracing graph and ``num_chains`` compositional queries over it.

    Relation ``r`` is a random cyclic permutation ``sigma_r`` of the nodes (edge ``u -r-> sigma_r(u)``).
    A query names a start node ``s`` and a relation sequence ``(r_1..r_l)``; its single answer is
    ``sigma_r(s)``. Node texts carry only names, so no embedding of a node can reveal the answer: it
    is reached only by tracing the sequence. Kept queries satisfy: the answer is reached from
    ``s`` by no other sequence of length <= ``max_hops``, and is not within ``l - 1`` undirected
    hops of ``s``.

    ``split_by='sequence'`` holds out whole relation compositions (length >= 2) for val/test, so
    they test compositional generalisation; one-hop sequences are all in train. ``'query'``
    splits queries at random.
    """
    if num_relations < 2 or max_hops < 1 or num_nodes < 8:
        raise ValueError("relation_tracing needs >= 2 relations, >= 1 hop and >= 8 nodes")
    if split_by not in ("sequence", "query"):
        raise ValueError(f"split_by must be 'sequence' or 'query', not {split_by!r}")
    rng = np.random.default_rng(seed)
    k, n = num_relations, num_nodes
    sigmas = np.stack([_cyclic_permutation(n, rng) for _ in range(k)])
    inverse = np.empty_like(sigmas)
    for r in range(k):
        inverse[r][sigmas[r]] = np.arange(n)
    adj = [np.unique(np.concatenate([sigmas[:, v], inverse[:, v]])) for v in range(n)]

    sequences = _all_sequences(k, max_hops)
    ends = np.stack([follow(sigmas, np.arange(n), s) for s in sequences])  # [num_sequences, n]
    by_length = {length: [s for s in sequences if len(s) == length] for length in range(1, max_hops + 1)}

    chosen: dict[tuple[int, tuple[int, ...]], int] = {}
    for _ in range(num_chains * 20):
        if len(chosen) == num_chains:
            break
        hops = int(rng.integers(1, max_hops + 1))
        seq = by_length[hops][int(rng.integers(len(by_length[hops])))]
        s = int(rng.integers(n))
        if (s, seq) in chosen:
            continue
        t = int(follow(sigmas, s, seq))
        if t == s or int((ends[:, s] == t).sum()) != 1:
            continue
        if hops > 1 and t in _ball(adj, s, hops - 1):
            continue
        chosen[(s, seq)] = t
    if len(chosen) < num_chains:
        raise ValueError(f"only {len(chosen)} of {num_chains} queries qualify: use more nodes or fewer chains")

    names = pseudo_words(n, rng)
    relation_names = _names(_TRACING_RELATIONS, k, "relation")
    queries: dict[int, Query] = {}
    for qid, ((s, seq), t) in enumerate(chosen.items()):
        path = ", then ".join(relation_names[r] for r in seq)
        queries[qid] = Query(id=qid, text=f"Start at {names[s]} and follow {path}. Which entity is reached?",
                             answers=[t], topic=[s], hops=len(seq),
                             qtype=">".join(relation_names[r] for r in seq))

    splits = _tracing_splits(queries, split_by, fractions, rng)
    kg = KnowledgeGraph(name="relation-tracing", node_names=names, node_texts=[f"{x} is an entity." for x in names],
                        node_type=np.zeros(n, dtype=np.int64), node_type_names=["entity"],
                        edge_src=np.tile(np.arange(n, dtype=np.int64), k), edge_dst=sigmas.reshape(-1).copy(),
                        edge_rel=np.repeat(np.arange(k, dtype=np.int64), n), relation_names=relation_names)
    kg.validate()
    return kg, QASet(name="relation-tracing", queries=queries, splits=splits)


def _tracing_splits(queries: dict[int, Query], split_by: str, fractions: tuple[float, float, float],
                    rng: np.random.Generator) -> dict[str, list[int]]:
    train_f, val_f, _ = (f / sum(fractions) for f in fractions)
    splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    if split_by == "query":
        ids = np.array(sorted(queries))[rng.permutation(len(queries))]
        a, b = int(len(ids) * train_f), int(len(ids) * (train_f + val_f))
        splits = {"train": ids[:a].tolist(), "val": ids[a:b].tolist(), "test": ids[b:].tolist()}
    else:
        compositions = sorted({q.qtype for q in queries.values() if q.hops and q.hops > 1})
        order = [compositions[i] for i in rng.permutation(len(compositions))]
        a, b = round(len(order) * train_f), round(len(order) * (train_f + val_f))
        where = {c: "train" for c in order[:a]} | {c: "val" for c in order[a:b]} | {c: "test" for c in order[b:]}
        for qid in sorted(queries):
            q = queries[qid]
            splits[where.get(q.qtype, "train")].append(qid)
    return {name: sorted(ids) for name, ids in splits.items()}
