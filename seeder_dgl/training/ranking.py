"""The deterministic ranking of query subgraphs by a policy: one loop for training's validation and
for inference (``seeder_dgl.inference``), so what a run reports on validation is what a loaded
checkpoint serves."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from seeder_dgl.model.ops import MessagePassingOps
from seeder_dgl.model.policy import SeederPolicy
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training.checkpoint import FeatureRows, Preprocessing
from seeder_dgl.training.rollout import rollout

EVAL_BATCH_SIZE = 64
"""Queries per inference batch (one trajectory each, so larger than the training batch)."""


@torch.inference_mode()
def rank_subgraphs(policy: SeederPolicy, prep: Preprocessing, records: Sequence[QuerySubgraph], rows: FeatureRows,
                   query_features: np.ndarray, device: torch.device, ops: MessagePassingOps, mode: str = "expand",
                   batch_size: int = EVAL_BATCH_SIZE) -> list[tuple[list[int], list[float]]]:
    """Per record: the global ids of V_T by decreasing score and the scores (empty subgraphs: empty).

    The deterministic rollout (top-c_t at every step) with the policy in eval mode; the policy's
    train flag is restored afterwards. ``query_features``: already preprocessed
    (``Preprocessing.features``), row i for ``records[i]``.
    """
    out: list[tuple[list[int], list[float]]] = [([], []) for _ in records]
    todo = [i for i, r in enumerate(records) if r.num_nodes > 0]
    was_training = policy.training
    if was_training:
        policy.eval()
    try:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            batch = prep.batch([records[i] for i in chunk], rows, query_features[chunk], device)
            ids, scores = rollout(policy, batch, sample=False, mode=mode, ops=ops).ranked()
            for i, node_ids, node_scores in zip(chunk, ids, scores):
                out[i] = (node_ids, node_scores)
    finally:
        if was_training:
            policy.train()
    return out
