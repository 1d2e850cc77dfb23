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

ANSWER_TYPE_FLOOR = 1e-3
"""The least answer-type probability the ranking multiplies in: a type the head all but rules out
costs log(1e-3) = -6.9, which a node the policy is far surer of still outweighs."""


def answer_type_terms(prep: Preprocessing, record: QuerySubgraph) -> np.ndarray | None:
    """float64 [types + 1] by the policy's node-type id (its unknown slot last): log p(t | q) of the
    record's answer-type head (``QuerySubgraph.answer_types``), floored at ``ANSWER_TYPE_FLOOR``, 0 for
    a type the head does not know; None when the record has no head or the policy reads no types."""
    if record.answer_types.size == 0 or not prep.node_type_names:
        return None
    column = {t: i for i, t in enumerate(record.answer_type_names)}
    terms = np.zeros(len(prep.node_type_names) + 1)
    for i, name in enumerate(prep.node_type_names):
        if name in column:
            terms[i] = np.log(max(float(record.answer_types[column[name]]), ANSWER_TYPE_FLOOR))
    return terms


def with_answer_types(prep: Preprocessing, record: QuerySubgraph, rows: FeatureRows, node_ids: list[int],
                      node_scores: list[float]) -> tuple[list[int], list[float]]:
    """The policy's ranking of V_T times the question's answer-type probabilities: each score plus
    log p(type(v) | q), reordered (ties keep the policy's order). A product of two experts: the
    policy reads the subgraph, the head which kind of node the question asks for, and where a new
    wording misleads the relation prior ("which films have a screenplay by X" read as the writer's
    co-writers) the films still come first. Unchanged without a head or node types."""
    terms = answer_type_terms(prep, record)
    types = rows.type_rows
    if terms is None or types is None or not node_ids:
        return node_ids, node_scores
    scores = np.asarray(node_scores, dtype=np.float64) + terms[types[np.asarray(node_ids, dtype=np.int64)]]
    order = np.argsort(-scores, kind="stable")
    return [node_ids[i] for i in order], scores[order].tolist()


@torch.inference_mode()
def rank_subgraphs(policy: SeederPolicy, prep: Preprocessing, records: Sequence[QuerySubgraph], rows: FeatureRows,
                   query_features: np.ndarray, device: torch.device, ops: MessagePassingOps, mode: str = "expand",
                   batch_size: int = EVAL_BATCH_SIZE) -> list[tuple[list[int], list[float]]]:
    """Per record: the global ids of V_T by decreasing score and the scores (empty subgraphs: empty).

    The deterministic rollout (top-c_t at every step) with the policy in eval mode, its scores times
    the question's answer-type probabilities where the record has them (``with_answer_types``); the
    policy's train flag is restored afterwards. ``query_features``: already preprocessed
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
                out[i] = with_answer_types(prep, records[i], rows, node_ids, node_scores)
    finally:
        if was_training:
            policy.train()
    return out
