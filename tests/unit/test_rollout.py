"""Sampling, log-probabilities, frontier rule and the full rollout of the SeedER policy."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from seeder_dgl.model import DGLOps, SeederPolicy, SubgraphBatch, TorchOps, capped_frontier, collate, dgl_available
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training.rollout import rl_reward
from seeder_dgl.training import (ABLATIONS, TrainConfig, gumbel_top_k, infer, plackett_luce_log_prob, rollout,
                                 training_objective)

needs_dgl = pytest.mark.dgl  # run in the DGL lane (`make test-dgl`); deselected where DGL is absent
DIM, RELATIONS = 16, 6


def random_record(rng: np.random.Generator, query_id: int, n: int, k0: int = 3, answer_rate: float = 0.15,
                  num_global: int = 2000) -> QuerySubgraph:
    parent = np.array([rng.integers(0, max(i, 1)) for i in range(k0, n)], dtype=np.int64)
    src = np.concatenate([np.arange(k0, n), rng.integers(0, n, n // 2)])
    dst = np.concatenate([parent, rng.integers(0, n, n // 2)])
    rel = rng.integers(0, RELATIONS, src.size)
    hop = np.zeros(n, np.int8)
    hop[k0:] = np.minimum(1 + np.arange(n - k0) // max((n - k0) // 2, 1), 2)
    labels = rng.random(n) < answer_rate
    return QuerySubgraph(query_id=query_id, node_ids=rng.choice(num_global, n, replace=False), hop=hop,
                         score=rng.random(n).astype(np.float32), src=np.concatenate([src, dst]),
                         dst=np.concatenate([dst, src]), rel=np.concatenate([rel, rel]), labels=labels,
                         num_answers=int(labels.sum()) + 1)


def make_batch(seed: int = 0, sizes=(40, 60, 25, 80), dtype=torch.float64) -> SubgraphBatch:
    rng = np.random.default_rng(seed)
    records = [random_record(rng, i, n) for i, n in enumerate(sizes)]
    return collate(records, rng.normal(size=(2000, DIM)), rng.normal(size=(len(sizes), DIM)), dtype=dtype)


def make_policy(seed: int = 0, dtype=torch.float64, **kw) -> SeederPolicy:
    torch.manual_seed(seed)
    args = dict(in_dim=DIM, num_relations=RELATIONS, hidden_dim=16, num_layers=2, heads=4,
                expansion_sizes=(4, 6), frontier_caps=(10, 20))
    args.update(kw)
    return SeederPolicy(**args).to(dtype)


# ---------------------------------------------------------------- Plackett–Luce and Gumbel-top-k


def brute_force_pl(logits: list[float], picks: list[int]) -> float:
    remaining, total = list(range(len(logits))), 0.0
    for p in picks:
        total += logits[p] - math.log(sum(math.exp(logits[r]) for r in remaining))
        remaining.remove(p)
    return total


def test_plackett_luce_log_prob_matches_brute_force():
    gen = torch.Generator().manual_seed(0)
    widths, k = [5, 3, 1, 4], 3
    logits = torch.full((4, 5), -math.inf, dtype=torch.float64)
    for g, w in enumerate(widths):
        logits[g, :w] = torch.randn(w, generator=gen, dtype=torch.float64) * 2
    logits.requires_grad_()
    index, valid = gumbel_top_k(logits, k, sample=True, generator=gen)
    assert valid.tolist() == [[True] * 3, [True] * 3, [True, False, False], [True] * 3]
    logp = plackett_luce_log_prob(logits, index, valid)
    for g, w in enumerate(widths):
        picks = index[g][valid[g]].tolist()
        assert len(set(picks)) == len(picks) and all(p < w for p in picks)
        assert logp[g].item() == pytest.approx(brute_force_pl(logits[g, :w].tolist(), picks), abs=1e-12)
    # Drawing every entry of the 1-wide row is certain.
    assert logp[2].item() == pytest.approx(0.0, abs=1e-12)
    logp.sum().backward()
    assert torch.isfinite(logits.grad).all() and torch.all(logits.grad[torch.isinf(logits.detach())] == 0)

    # Probabilities of all ordered picks of one row sum to one.
    row = logits.detach()[0:1, :5]
    perms = torch.tensor(list(itertools.permutations(range(5), 2)))
    probs = plackett_luce_log_prob(row.expand(len(perms), 5), perms, torch.ones_like(perms, dtype=torch.bool)).exp()
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-12)


def test_gumbel_top_k_sampling_frequencies_match_plackett_luce():
    logits = torch.tensor([1.0, 0.2, -0.5, 0.0], dtype=torch.float64)
    draws, k = 40_000, 2
    gen = torch.Generator().manual_seed(1234)
    index, valid = gumbel_top_k(logits.expand(draws, 4).clone(), k, sample=True, generator=gen)
    assert valid.all()
    outcomes = list(itertools.permutations(range(4), k))
    code = {o: i for i, o in enumerate(outcomes)}
    observed = np.bincount([code[tuple(r)] for r in index.tolist()], minlength=len(outcomes))
    picks = torch.tensor(outcomes)
    expected = plackett_luce_log_prob(logits.expand(len(outcomes), 4), picks,
                                      torch.ones_like(picks, dtype=torch.bool)).exp().numpy() * draws
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 32.9, (chi2, observed, expected)  # χ²(11) 0.9995 quantile: a 1-in-2000 false alarm


def test_temperature_flattens_the_distribution():
    logits = torch.tensor([[3.0, 0.0, 0.0, 0.0]], dtype=torch.float64).expand(20_000, 4).clone()
    gen = torch.Generator().manual_seed(0)
    first_cold = (gumbel_top_k(logits / 0.5, 1, generator=gen)[0][:, 0] == 0).double().mean()
    first_hot = (gumbel_top_k(logits / 5.0, 1, generator=gen)[0][:, 0] == 0).double().mean()
    assert first_cold > 0.95 and 0.3 < first_hot < 0.5  # softmax([6,0,0,0]) ≈ .99, softmax([.6,0,0,0]) ≈ .38


def test_top_k_without_sampling_is_plain_top_k():
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.5], [0.3, -math.inf, -math.inf, -math.inf]])
    index, valid = gumbel_top_k(logits, 2, sample=False)
    assert index[0].tolist() == [1, 3] and valid[0].tolist() == [True, True]
    assert index[1, 0].item() == 0 and valid[1].tolist() == [True, False]


# ---------------------------------------------------------------- frontier


def test_capped_frontier_matches_the_definition():
    batch = make_batch(1, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    selected = batch.seed_mask | (torch.rand(batch.num_nodes, generator=gen) < 0.1)
    for cap in (None, 1, 5, 12):
        frontier = capped_frontier(batch, selected, cap)
        for g in range(batch.num_graphs):
            lo = int(batch.batch_num_nodes[:g].sum())
            hi = lo + int(batch.batch_num_nodes[g])
            neighbours = {int(d) for s, d in zip(batch.src, batch.dst) if selected[s] and lo <= int(s) < hi}
            candidates = sorted(neighbours - set(torch.nonzero(selected).squeeze(1).tolist()),
                                key=lambda v: (-float(batch.score[v]), v))
            expected = candidates if cap is None else candidates[:cap]
            mine = frontier.graph == g
            assert frontier.nodes[mine].tolist() == expected
            assert frontier.position[mine].tolist() == list(range(len(expected)))
        assert frontier.width == max(int((frontier.graph == g).sum()) for g in range(batch.num_graphs))


@pytest.mark.parametrize("sample", [True, False])
def test_rollout_respects_caps_sizes_and_subgraphs(sample):
    batch = make_batch(2)
    policy = make_policy(expansion_sizes=(4, 6, 30), frontier_caps=(10, 20, 25)).train(sample)
    out = rollout(policy, batch, num_trajectories=3, sample=sample, keep_trace=True,
                  generator=torch.Generator().manual_seed(0))
    run = out.batch
    selected = run.seed_mask.clone()
    for step, (size, cap) in enumerate(zip(policy.expansion_sizes, policy.frontier_caps)):
        trace = out.trace[step]
        frontier_graph = run.graph_index[trace.frontier]
        chosen_graph = run.graph_index[trace.chosen]
        for g in range(run.num_graphs):
            frontier = set(trace.frontier[frontier_graph == g].tolist())
            chosen = trace.chosen[chosen_graph == g].tolist()
            assert len(frontier) <= cap
            assert len(chosen) == len(set(chosen)) == min(size, len(frontier))
            assert set(chosen) <= frontier and not selected[chosen].any()
            # Frontier nodes are neighbours of the selected set inside the same subgraph.
            for v in frontier:
                incoming = run.src[run.dst == v]
                assert selected[incoming].any() and (run.graph_index[incoming] == g).all()
        selected[trace.chosen] = True
    assert torch.equal(selected, out.selected)
    assert out.step_log_prob.shape == (4, 3, 3) and torch.isfinite(out.step_log_prob).all()
    ids, scores = out.ranked()
    for g in range(run.num_graphs):
        assert sorted(ids[g]) == sorted(run.node_ids[out.selected & (run.graph_index == g)].tolist())
        assert scores[g] == sorted(scores[g], reverse=True)
    assert out.rankings(k=5)[0] == ids[0][:5]


def test_inference_is_deterministic():
    batch = make_batch(3)
    policy = make_policy(1).train()  # infer() must switch dropout off itself
    first, second = infer(policy, batch), infer(policy, batch)
    assert policy.training
    assert torch.equal(first.selected, second.selected)
    assert first.rankings() == second.rankings()
    torch.testing.assert_close(first.scores.scores, second.scores.scores, rtol=0, atol=0)
    assert first.reward.shape == (4, 1)


@needs_dgl
def test_rollout_is_the_same_with_both_ops():
    batch = make_batch(4)
    policy = make_policy(2)
    inference = {ops.name: infer(policy, batch, ops=ops) for ops in (TorchOps(), DGLOps())}
    assert torch.equal(inference["torch"].selected, inference["dgl"].selected)
    assert inference["torch"].rankings() == inference["dgl"].rankings()
    torch.testing.assert_close(inference["torch"].scores.scores, inference["dgl"].scores.scores)

    cfg = TrainConfig(num_trajectories=4, expansion_sizes=(4, 6), frontier_caps=(10, 20))
    sampled = {}
    for ops in (TorchOps(), DGLOps()):
        policy.train()
        torch.manual_seed(7)  # dropout and Gumbel noise draw the same numbers for both backends
        objective = training_objective(policy, batch, cfg, ops=ops)
        policy.zero_grad()
        objective.loss.backward()
        sampled[ops.name] = (objective, {k: p.grad.clone() for k, p in policy.named_parameters()})
    (obj_t, grads_t), (obj_d, grads_d) = sampled["torch"], sampled["dgl"]
    assert torch.equal(obj_t.rollout.selected, obj_d.rollout.selected)
    torch.testing.assert_close(obj_t.rollout.step_log_prob, obj_d.rollout.step_log_prob)
    torch.testing.assert_close(obj_t.loss, obj_d.loss)
    for name in grads_t:
        torch.testing.assert_close(grads_t[name], grads_d[name], rtol=1e-7, atol=1e-9, msg=name)


def test_trajectories_share_one_batch_and_differ():
    batch = make_batch(5)
    policy = make_policy(3).train()
    torch.manual_seed(0)
    out = rollout(policy, batch, num_trajectories=8, sample=True)
    assert out.batch.num_graphs == 32 and out.reward.shape == (4, 8) and out.log_prob.shape == (4, 8)
    per_graph = [tuple(out.batch.node_ids[out.selected & (out.batch.graph_index == g)].tolist()) for g in range(32)]
    assert len(set(per_graph[8:16])) > 1  # sampling explores different subsets for one query
    assert all(set(per_graph[g]) <= set(batch.node_ids[batch.graph_index == g // 8].tolist()) for g in range(32))


def test_training_step_gives_gradient_to_every_parameter():
    batch = make_batch(6)
    relation_text = torch.randn(RELATIONS, 5)
    torch.manual_seed(0)
    cfg = TrainConfig(hidden_dim=16, num_layers=2, expansion_sizes=(4, 6), frontier_caps=(10, 20), relation_text=True)
    policy = SeederPolicy.from_config(cfg, in_dim=DIM, num_relations=RELATIONS, relation_text=relation_text).double()
    objective = training_objective(policy, batch, cfg)
    assert objective.advantage.abs().sum() > 0, "the test needs trajectories with different rewards"
    objective.loss.backward()
    for name, p in policy.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("ablation", ABLATIONS)
def test_every_ablation_runs_and_backpropagates(ablation):
    batch = make_batch(7)
    cfg = TrainConfig(ablation=ablation, num_trajectories=4, expansion_sizes=(4, 6), frontier_caps=(10, 20))
    policy = make_policy(4)
    torch.manual_seed(0)
    objective = training_objective(policy, batch, cfg)
    objective.loss.backward()
    m = 1 if ablation in ("rerank", "single_trajectory") else 4
    assert objective.reward.shape == (4, m) and torch.isfinite(objective.loss)
    if ablation == "rerank":
        assert objective.rollout.selected.all() and objective.rl_loss.item() == 0
        torch.testing.assert_close(objective.reward[:, 0], (objective.rollout.batch.num_answers.double() - 1)
                                   / objective.rollout.batch.num_answers.double(), check_dtype=False)
    if ablation == "greedy_baseline":
        assert objective.baseline_reward.shape == (4,)
        torch.testing.assert_close(objective.advantage, objective.reward - objective.baseline_reward[:, None])
    if ablation in ("no_baseline", "single_trajectory"):
        torch.testing.assert_close(objective.advantage, objective.reward)
    if ablation == "no_aux":
        assert objective.rollout.scores is None and objective.bpr_loss.item() == 0
    if ablation == "full":
        torch.testing.assert_close(objective.advantage.mean(1), torch.zeros(4), check_dtype=False)


def test_subgraph_smaller_than_budget_and_isolated_seeds():
    """A query whose seeds have no neighbours: the frontier is empty, nothing is sampled, no NaN."""
    rng = np.random.default_rng(0)
    lonely = QuerySubgraph(query_id=0, node_ids=np.arange(3), hop=np.zeros(3, np.int8),
                           score=np.ones(3, np.float32), src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64),
                           rel=np.zeros(0, np.int64), labels=np.array([True, False, False]), num_answers=2)
    small = random_record(rng, 1, 6)
    batch = collate([lonely, small], rng.normal(size=(2000, DIM)), rng.normal(size=(2, DIM)), dtype=torch.float64)
    policy = make_policy(5)
    objective = training_objective(policy, batch, TrainConfig(num_trajectories=2, expansion_sizes=(4, 6),
                                                              frontier_caps=(10, 20)))
    objective.loss.backward()
    assert torch.isfinite(objective.loss)
    assert objective.reward[0].tolist() == [0.5, 0.5]
    out = infer(policy, batch)
    assert out.selected[:3].all() and out.selected[3:].all()  # the small one (6 nodes) is taken whole


@pytest.mark.parametrize("ablation", ["full", "greedy_baseline"])
def test_path_reward_trains_and_leaves_the_reported_reward_alone(ablation):
    batch = make_batch(7)
    cfg = TrainConfig(ablation=ablation, num_trajectories=4, expansion_sizes=(4, 6), frontier_caps=(10, 20),
                      path_reward=0.5)
    policy = make_policy(4)
    torch.manual_seed(0)
    objective = training_objective(policy, batch, cfg)
    objective.loss.backward()
    assert torch.isfinite(objective.loss) and objective.reward.max() <= 1.0  # Recall@Any, as logged
    shaped = rl_reward(objective.rollout, 0.5)
    assert (shaped >= objective.reward).all() and (shaped > objective.reward).any()
    if ablation == "full":
        torch.testing.assert_close(objective.advantage, shaped - shaped.mean(1, keepdim=True))


def test_relation_degrees_by_hand():
    from seeder_dgl.model.encoder import relation_degrees

    src = torch.tensor([0, 0, 0, 1, 2, 2])
    rel = torch.tensor([0, 0, 2, 1, 2, 5])  # 5 is past the table: it counts as the last (unknown) slot
    expected = torch.log1p(torch.tensor([[2.0, 0, 1], [0, 1, 0], [0, 0, 2], [0, 0, 0]]))
    torch.testing.assert_close(relation_degrees(src, rel, 4, 3), expected)


def test_lookahead_policy_trains_and_sees_beyond_the_frontier():
    batch = make_batch(6)
    torch.manual_seed(0)
    cfg = TrainConfig(hidden_dim=16, num_layers=2, expansion_sizes=(4, 6), frontier_caps=(10, 20), lookahead=True)
    policy = SeederPolicy.from_config(cfg, in_dim=DIM, num_relations=RELATIONS).double()
    objective = training_objective(policy, batch, cfg)
    objective.loss.backward()
    grad = policy.encoder.lookahead.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    # The static input changes when an edge far from every selected node changes type.
    static = policy.encoder.static(batch)
    changed = dataclasses.replace(batch, rel=(batch.rel + 1) % RELATIONS)
    assert not torch.allclose(static, policy.encoder.static(changed))


def test_trajectories_share_the_first_step_exactly():
    """Step 0 runs once per query and its logits serve every trajectory (they all start from the
    seeds): without sampling, every copy must make the picks and log-probabilities of a
    one-trajectory rollout; with sampling, the copies still draw their own first picks."""
    batch = make_batch(5)
    policy = make_policy(3, expansion_sizes=(3, 5, 4), frontier_caps=(6, 12, 15)).eval()
    one = rollout(policy, batch, num_trajectories=1, sample=False)
    many = rollout(policy, batch, num_trajectories=4, sample=False)
    per_copy = many.batch.graph_index.view(-1)
    for g in range(many.batch.num_graphs):
        mine = many.selected[per_copy == g]
        assert torch.equal(mine, one.selected[one.batch.graph_index == g // 4])
    assert torch.allclose(many.step_log_prob, one.step_log_prob.expand(-1, 4, -1), atol=1e-10)

    sampled = rollout(policy.train(), batch, num_trajectories=4, sample=True,
                      generator=torch.Generator().manual_seed(2))
    assert sampled.step_log_prob.shape == (4, 4, 3) and torch.isfinite(sampled.step_log_prob).all()
    # Copies of one query sample different first picks from the same logits.
    first = sampled.step_log_prob[:, :, 0]
    assert (first.max(dim=1).values - first.min(dim=1).values > 0).any()
