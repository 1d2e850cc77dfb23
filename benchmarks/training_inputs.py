"""What the training benchmarks share: the MetaQA questions they train on, the keyword arguments
they train with, and how they time the trained policy. Nothing here imports ``seeder_dgl``, so
``compare_training.py`` can use it with another checkout's package."""
from __future__ import annotations

import time


def metaqa_two_hop(records) -> list[int]:
    """Positions of the MetaQA 2-hop questions among cached training ``records`` (their query ids
    are 2,000,000 to 2,999,999), in cache order."""
    return [i for i, r in enumerate(records) if 2_000_000 <= r.query_id < 3_000_000]


def train_kwargs(feats) -> dict:
    """``train``'s keyword arguments for MetaQA's features ``feats`` (``load_features('metaqa')``)."""
    return dict(progress=False, relation_types=feats.relation_types, dataset_meta={"dataset": "metaqa"},
                relation_emb=feats.relation_emb, node_types=feats.node_type, node_type_names=feats.node_type_names)


def rank_one_at_a_time(policy, feats, records, query_emb) -> list[float]:
    """Milliseconds ``policy`` takes to rank each of ``records`` alone (top 20), with its query
    embedding from ``query_emb`` and the nodes' embeddings and types from ``feats``."""
    names = feats.node_type_names or []
    times = []
    for r, q in zip(records, query_emb):
        node_emb = feats.node_emb[r.node_ids]
        types = [names[t] if t >= 0 else None for t in feats.node_type[r.node_ids]]
        tick = time.perf_counter()
        policy.rank([r], [node_emb], q[None], k=20, node_types=[types])
        times.append((time.perf_counter() - tick) * 1000)
    return times
