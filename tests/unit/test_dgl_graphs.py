"""Query subgraphs as DGL graphs: `QuerySubgraph.to_dgl` and `dgl.batch` match the model's batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seeder_dgl.model.batch import collate
from seeder_dgl.retrieval.memory import GraphArrays, attach_labels, khop_filter
from tests.helpers.graphs import random_embeddings


def _records():
    rng = np.random.default_rng(0)
    n = 200
    graph = GraphArrays.from_arrays(n, rng.integers(0, n, 800), rng.integers(0, n, 800), rng.integers(0, 3, 800))
    emb, rel = random_embeddings(n, seed=1), random_embeddings(3, seed=2)
    records = []
    for i, q in enumerate(random_embeddings(4, seed=3)):
        seeds = np.argsort(-(emb @ q))[:3]
        sub = khop_filter(graph, emb, rel, q, seeds, [10, 15], query_id=i)
        records.append(attach_labels(sub, rng.integers(0, n, 3)))
    return records, emb


@pytest.mark.dgl
def test_to_dgl_and_batch_match_the_model_batch():
    import dgl

    records, emb = _records()
    graphs = [r.to_dgl(emb) for r in records]
    for r, g in zip(records, graphs):
        assert g.num_nodes() == r.num_nodes and g.num_edges() == r.src.shape[0]
        assert torch.equal(g.ndata["nid"], torch.from_numpy(r.node_ids))
        assert torch.equal(g.ndata["seed"], torch.from_numpy(r.hop == 0))
        assert torch.equal(g.ndata["label"], torch.from_numpy(r.labels))
        assert torch.equal(g.edata["rel"], torch.from_numpy(r.rel))
        np.testing.assert_allclose(g.ndata["x"].numpy(), emb[r.node_ids])
    batched = dgl.batch(graphs)
    model_batch = collate(records, emb, random_embeddings(len(records), seed=4))
    src, dst = batched.edges()
    assert torch.equal(src, model_batch.src) and torch.equal(dst, model_batch.dst)
    assert torch.equal(batched.edata["rel"], model_batch.rel)
    assert torch.equal(batched.edata["direction"], model_batch.direction)
    assert torch.equal(batched.batch_num_nodes(), model_batch.batch_num_nodes)
    assert torch.allclose(batched.ndata["x"], model_batch.x)
