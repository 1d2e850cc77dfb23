"""Edge directions: which way each subgraph edge's stored relationship points, and a policy that reads them.

Every subgraph holds each relationship in both directions, so without directions "the successor
of X" and "the predecessor of X" are the same question to the policy: one relation type, one hop.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from seeder_dgl.model.batch import collate
from seeder_dgl.retrieval.memory import GraphArrays, attach_labels, directed_induced_edges, induced_edges, khop_filter
from seeder_dgl.subgraph.cache import load_shard, save_shard
from seeder_dgl.subgraph.record import BACKWARD, FORWARD
from seeder_dgl.training.trainer import train
from tests.unit.test_trainer import tiny_config


def test_each_edge_knows_which_way_its_triple_was_stored():
    # 0 -> 1 twice (once written 1 <- 0 the other way round: the first one read is kept), 2 -> 1, a self loop.
    graph = GraphArrays.from_arrays(4, [0, 2, 3, 1], [1, 1, 3, 0], [0, 0, 1, 0])
    src, dst, rel, direction = directed_induced_edges(graph, np.asarray([0, 1, 2, 3]))
    got = {(int(s), int(d), int(r)): int(k) for s, d, r, k in zip(src, dst, rel, direction) if s != d}
    assert got == {(0, 1, 0): FORWARD, (1, 0, 0): BACKWARD, (2, 1, 0): FORWARD, (1, 2, 0): BACKWARD}
    loops = sorted(int(k) for s, d, k in zip(src, dst, direction) if s == d)
    assert loops == [FORWARD, BACKWARD]
    # The undirected reading is unchanged, edge for edge.
    for a, b in zip(induced_edges(graph, np.asarray([0, 1, 2, 3])), (src, dst, rel)):
        np.testing.assert_array_equal(a, b)


def test_directions_follow_the_subgraph_through_the_cache(tmp_path):
    graph = GraphArrays.from_arrays(6, [0, 1, 2, 3, 4], [1, 2, 3, 4, 5], [0, 1, 0, 1, 0])
    emb = np.eye(6, 4, dtype=np.float32) + 0.1
    sub = khop_filter(graph, emb, emb[:2], emb[2], [2], [2, 2], query_id=7)
    assert sub.direction.shape == sub.src.shape and set(sub.direction.tolist()) == {FORWARD, BACKWARD}
    for s, d, k in zip(sub.src, sub.dst, sub.direction):
        stored = (sub.node_ids[s], sub.node_ids[d]) if k == FORWARD else (sub.node_ids[d], sub.node_ids[s])
        assert stored[1] == stored[0] + 1  # this graph's triples all go i -> i + 1
    save_shard(tmp_path / "shard-00000.npz", [sub], emb[2:3])
    (back,), _ = load_shard(tmp_path / "shard-00000.npz")
    np.testing.assert_array_equal(back.direction, sub.direction)
    batch = collate([back], emb, emb[2:3])
    view = batch.induced(torch.ones(batch.num_nodes, dtype=torch.bool))
    np.testing.assert_array_equal(view.direction.numpy(), sub.direction.astype(np.int64))


def chain_task(chains: int, seed: int, dim: int = 8):
    """Chains p -> s -> t of one relation type. Question "successor of s" (query near one direction
    of the space) has answer t, "predecessor of s" answer p; node embeddings are random, so t and p
    differ only by which way their edge to the seed points."""
    rng = np.random.default_rng(seed)
    n = 3 * chains
    src = np.concatenate([np.arange(chains) * 3, np.arange(chains) * 3 + 1])
    dst = src + 1
    graph = GraphArrays.from_arrays(n, src, dst, np.zeros(src.shape[0], np.int64))
    node_emb = rng.normal(size=(n, dim)).astype(np.float32)
    node_emb /= np.linalg.norm(node_emb, axis=1, keepdims=True)
    asks = rng.normal(size=(2, dim)).astype(np.float32)
    records, queries = [], []
    for c in range(chains):
        for kind in (0, 1):
            q = asks[kind] + 0.1 * rng.normal(size=dim).astype(np.float32)
            sub = khop_filter(graph, node_emb, node_emb[:1], q, [3 * c + 1], [2], query_id=len(records))
            answer = 3 * c + 2 if kind == 0 else 3 * c
            records.append(attach_labels(sub, [answer]))
            queries.append(q)
    return records, np.stack(queries), node_emb


@pytest.mark.parametrize("edge_direction", [False, True])
def test_a_policy_with_directions_tells_the_successor_from_the_predecessor(edge_direction, tmp_path):
    torch.manual_seed(0)
    records, queries, node_emb = chain_task(60, seed=1)
    cut = 80  # 40 chains to train on, 20 never seen
    cfg = tiny_config(epochs=6, warmup_epochs=1, expansion_sizes=(2,), frontier_caps=(4,), query_relations=True,
                      edge_direction=edge_direction, dropout=0.0, pca_dim=8, batch_size=8, lr=1e-2)
    result = train(cfg, records[:cut], queries[:cut], records[cut:], queries[cut:], node_emb, 1, tmp_path,
                   progress=False)
    hit1 = result.history[-1]["val"]["hit@1"]
    if edge_direction:
        assert hit1 >= 0.95
    else:  # the two answers look alike: right about half the time
        assert hit1 <= 0.75


@pytest.mark.parametrize("graphs,relations", [(3, 2), (2, 40)])
def test_direction_rows_are_the_same_from_the_whole_table_or_the_triples_present(graphs, relations):
    """Few relation types: the whole [G, 3, R] table; many: only the triples the edges use. Edge for
    edge the same embedding, e_r + e_direction FiLM-ed by the edge's query, either way."""
    from seeder_dgl.model.encoder import RelationEncoder

    torch.manual_seed(0)
    enc = RelationEncoder(relations, 4, query_dim=5, edge_direction=True)
    for p in (enc.direction.weight, enc.film.weight, enc.film.bias):
        torch.nn.init.normal_(p)
    z_q = torch.randn(graphs, 5)
    m = 30
    rel, direction, graph = torch.randint(0, relations, (m,)), torch.randint(0, 3, (m,)), torch.randint(0, graphs, (m,))
    rows, index = enc.rows(rel, direction, graph, z_q)
    assert (rows.shape[0] == graphs * 3 * relations) == (graphs * 3 * relations <= m)
    gamma, beta = enc.film(z_q).chunk(2, dim=-1)
    expected = (enc.table.weight[rel] + enc.direction.weight[direction]) * (1 + gamma[graph]) + beta[graph]
    torch.testing.assert_close(rows[index], expected)


def test_subgraphs_cached_without_directions_are_refused_with_the_command_to_run(tmp_path):
    from seeder_dgl.errors import SeederError
    from seeder_dgl.training.command import check_directions

    graph = GraphArrays.from_arrays(4, [0, 1, 2], [1, 2, 3], [0, 0, 0])
    emb = np.eye(4, dtype=np.float32)
    sub = khop_filter(graph, emb, emb[:1], emb[1], [1], [2])
    check_directions([sub], "mykg", tmp_path)  # extracted now: accepted
    save_shard(tmp_path / "shard-00000.npz", [sub], emb[1:2])
    (back,), _ = load_shard(tmp_path / "shard-00000.npz")
    check_directions([back], "mykg", tmp_path)
    sub.direction = np.zeros(0, np.int8)  # as a shard written before directions were kept reads
    save_shard(tmp_path / "shard-00000.npz", [sub], emb[1:2])
    (old,), _ = load_shard(tmp_path / "shard-00000.npz")
    with pytest.raises(SeederError, match=r"without edge directions: run `seeder-dgl extract mykg --overwrite`"):
        check_directions([old], "mykg", tmp_path)


@pytest.mark.parametrize("edges", [50, 400])
def test_edge_prior_rows_add_the_priors_reading_of_the_hop_each_edge_steps_into(edges):
    """Row by row e_r + e_direction FiLM-ed by the query, plus W [p, √p] with p the prior's belief in
    the edge's relation at the hop it steps into; an edge within one hop, or of a relation the prior
    does not know, reads p = 0."""
    from seeder_dgl.model.encoder import RelationEncoder

    torch.manual_seed(0)
    relations, graphs, hops = 6, 3, 2
    enc = RelationEncoder(relations, 4, query_dim=5, edge_direction=True, edge_prior=True)
    for p in (enc.direction.weight, enc.film.weight, enc.film.bias, enc.prior_step.weight):
        torch.nn.init.normal_(p)
    z_q = torch.randn(graphs, 5)
    scores = torch.rand(graphs, hops, relations - 1)  # the last relation (the unknown slot) has no score
    m = edges  # 50: rows for the keys present; 400: the whole [G, S, 3, R] table (3 * 3 * 3 * 6 = 162 rows)
    rel, direction = torch.randint(0, relations, (m,)), torch.randint(0, 3, (m,))
    graph, step = torch.randint(0, graphs, (m,)), torch.randint(0, hops + 1, (m,))
    rows, index = enc.rows(rel, direction, graph, z_q, step, scores)
    assert (rows.shape[0] == graphs * (hops + 1) * 3 * relations) == (m == 400)
    plain, plain_index = enc.rows(rel, direction, graph, z_q)
    p = torch.zeros(m)
    known = (step > 0) & (rel < relations - 1)
    p[known] = scores[graph[known], step[known] - 1, rel[known]]
    expected = plain[plain_index] + enc.prior_step(torch.stack([p, p.sqrt()], -1))
    torch.testing.assert_close(rows[index], expected)
    if m == 50:
        assert rows.shape[0] == torch.unique(torch.stack([rel, direction, graph, step]), dim=1).shape[1]  # a row a key
    with pytest.raises(ValueError, match="edge_direction"):
        RelationEncoder(relations, 4, edge_prior=True)


def test_a_policy_with_the_edge_prior_reads_the_priors_scores():
    from seeder_dgl.model.policy import SeederPolicy
    from seeder_dgl.training.config import TrainConfig
    from seeder_dgl.training.rollout import training_objective

    records, queries, node_emb = chain_task(6, seed=3)
    for r in records:
        r.relation_scores = np.full((1, 1), 0.5, np.float32)
    batch = collate(records, node_emb, queries)
    assert batch.relation_scores is not None
    cfg = TrainConfig(hidden_dim=8, num_layers=1, heads=2, expansion_sizes=(2,), frontier_caps=(4,), edge_direction=True,
                      edge_prior=True, query_relations=True, dropout=0.0)
    torch.manual_seed(0)
    policy = SeederPolicy.from_config(cfg, in_dim=node_emb.shape[1], num_relations=2)
    objective = training_objective(policy, batch, cfg)
    objective.loss.backward()
    grad = policy.encoder.relations.prior_step.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    torch.nn.init.normal_(policy.encoder.relations.prior_step.weight)
    view = batch.induced(torch.ones(batch.num_nodes, dtype=torch.bool))
    from seeder_dgl.model.ops import TorchOps
    selected = batch.hop == 0
    out = policy.encoder(batch, view, selected, TorchOps())
    batch.relation_scores = torch.full_like(batch.relation_scores, 0.9)
    assert not torch.allclose(out, policy.encoder(batch, view, selected, TorchOps()))


def test_the_edge_prior_reads_zero_on_subgraphs_grown_without_a_prior():
    """No relation scores: every edge reads p = 0, the rows are ``rows``' own, and the projection
    still takes part in the step (DistributedDataParallel needs every parameter used)."""
    from seeder_dgl.model.ops import TorchOps
    from seeder_dgl.model.policy import SeederPolicy
    from seeder_dgl.training.config import TrainConfig

    records, queries, node_emb = chain_task(4, seed=5)
    batch = collate(records, node_emb, queries)
    assert batch.relation_scores is None
    cfg = TrainConfig(hidden_dim=8, num_layers=1, heads=2, expansion_sizes=(2,), frontier_caps=(4,), edge_direction=True,
                      edge_prior=True, query_relations=True, dropout=0.0)
    torch.manual_seed(0)
    policy = SeederPolicy.from_config(cfg, in_dim=node_emb.shape[1], num_relations=2)
    torch.nn.init.normal_(policy.encoder.relations.prior_step.weight)
    view = batch.induced(torch.ones(batch.num_nodes, dtype=torch.bool))
    out = policy.encoder(batch, view, batch.hop == 0, TorchOps())
    out.sum().backward()
    assert policy.encoder.relations.prior_step.weight.grad is not None
    torch.nn.init.zeros_(policy.encoder.relations.prior_step.weight)
    without = SeederPolicy.from_config(replace(cfg, edge_prior=False), in_dim=node_emb.shape[1], num_relations=2)
    without.load_state_dict({k: v for k, v in policy.state_dict().items() if "prior_step" not in k})
    torch.testing.assert_close(policy.encoder(batch, view, batch.hop == 0, TorchOps()),
                               without.encoder(batch, view, batch.hop == 0, TorchOps()))
