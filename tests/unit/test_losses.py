"""Rewards, REINFORCE and BPR on hand-computed examples; the training configuration."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from seeder_dgl.training import (DATASET_DEFAULTS, TrainConfig, advantage, bpr_loss, group_advantage, recall_at_any,
                                 reinforce_loss)
from seeder_dgl.training.losses import hop_distance, path_recall, shortest_path_nodes


def test_recall_at_any():
    selected = torch.tensor([1, 1, 0, 1, 1, 0, 1], dtype=torch.bool)
    labels = torch.tensor([1, 0, 1, 1, 0, 0, 0], dtype=torch.bool)
    graph = torch.tensor([0, 0, 0, 1, 1, 1, 2])
    num_answers = torch.tensor([4, 1, 0])  # graph 0 has two answers outside the subgraph; graph 2 has none
    torch.testing.assert_close(recall_at_any(selected, labels, graph, num_answers), torch.tensor([0.25, 1.0, 0.0]))


def test_group_advantage_and_baselines():
    reward = torch.tensor([[1.0, 0.0, 0.5, 0.5], [0.2, 0.2, 0.2, 0.2]])
    torch.testing.assert_close(group_advantage(reward), torch.tensor([[0.5, -0.5, 0.0, 0.0], [0.0] * 4]))
    torch.testing.assert_close(advantage(reward, "none"), reward)
    torch.testing.assert_close(advantage(reward, "greedy", torch.tensor([0.5, 0.0])),
                               torch.tensor([[0.5, -0.5, 0.0, 0.0], [0.2] * 4]))
    with pytest.raises(ValueError):
        advantage(reward, "greedy")
    with pytest.raises(ValueError):
        advantage(reward, "critic")


def test_reinforce_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    reward = torch.tensor([[1.0, 0.0], [0.3, 0.1]])
    # Advantages: [[.5, -.5], [.1, -.1]]; per query −1/M Σ Â log π: −.25, −.125; mean over queries −.1875
    loss = reinforce_loss(logp, reward)
    assert loss.item() == pytest.approx(-(0.5 * -1 - 0.5 * -2) / 2 / 2 - (0.1 * -0.5 - 0.1 * -3) / 2 / 2)
    assert loss.item() == pytest.approx(-0.1875)
    loss.backward()
    torch.testing.assert_close(logp.grad, -torch.tensor([[0.5, -0.5], [0.1, -0.1]]) / 4)
    assert reward.grad is None  # the reward is a constant of the policy gradient
    assert reinforce_loss(logp, reward, "none").item() == pytest.approx(-(1 * -1 + 0.3 * -0.5 + 0.1 * -3) / 4)


def test_bpr_loss_by_hand():
    scores = torch.tensor([2.0, 0.0, 1.0, 3.0, -1.0, 0.5, 0.0], requires_grad=True)
    labels = torch.tensor([1, 0, 0, 1, 1, 1, 1], dtype=torch.bool)
    graph = torch.tensor([0, 0, 0, 1, 1, 2, 2])  # graph 1 has no negative, graph 2 no negative: no pairs
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731  softplus
    # Graph 0: pairs (2,0) and (2,1): mean of softplus(−2), softplus(−1). Only graph 0 has pairs.
    expected = (sp(-2.0) + sp(-1.0)) / 2
    loss = bpr_loss(scores, labels, graph)
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert scores.grad[0].item() == pytest.approx(-(sig(-2.0) + sig(-1.0)) / 2)
    assert scores.grad[3:].abs().sum().item() == 0

    margin = bpr_loss(scores, labels, graph, margin=0.5)
    assert margin.item() == pytest.approx((sp(0.5 - 2.0) + sp(0.5 - 1.0)) / 2)


def test_bpr_loss_means_per_query_then_over_queries():
    # Graph 0: one pair (d=1); graph 1: 1 positive × 3 negatives (d=0,1,2). Query-level means, not pair-level.
    scores = torch.tensor([1.0, 0.0, 2.0, 2.0, 1.0, 0.0])
    labels = torch.tensor([1, 0, 1, 0, 0, 0], dtype=torch.bool)
    graph = torch.tensor([0, 0, 1, 1, 1, 1])
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    expected = (sp(-1.0) + (sp(0.0) + sp(-1.0) + sp(-2.0)) / 3) / 2
    assert bpr_loss(scores, labels, graph).item() == pytest.approx(expected)
    # Node order does not matter (graphs need not be contiguous).
    perm = torch.tensor([5, 2, 0, 3, 1, 4])
    assert bpr_loss(scores[perm], labels[perm], graph[perm]).item() == pytest.approx(expected)


def test_bpr_loss_without_pairs_is_a_differentiable_zero():
    scores = torch.tensor([0.3, -0.2], requires_grad=True)
    loss = bpr_loss(scores, torch.tensor([True, True]), torch.tensor([0, 1]))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert torch.equal(scores.grad, torch.zeros(2))
    empty = torch.zeros(0, requires_grad=True)
    assert bpr_loss(empty, torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.int64)).item() == 0.0


def test_config_dataset_defaults():
    prime = TrainConfig.for_dataset("prime")
    assert (prime.k0, prime.hidden_dim, prime.num_layers, prime.expansion_sizes, prime.frontier_caps) == (
        3, 16, 3, (7, 10), (20, 50))
    mag = TrainConfig.for_dataset("mag", lr=5e-4)
    assert (mag.hidden_dim, mag.num_layers, mag.expansion_sizes, mag.frontier_caps, mag.lr) == (
        32, 4, (7, 7, 8), (20, 30, 50), 5e-4)
    amazon = TrainConfig.for_dataset("amazon")
    assert (amazon.k0, amazon.hidden_dim, amazon.expansion_sizes, amazon.lr, amazon.epochs) == (
        10, 64, (4, 4, 4), 3e-4, 10)
    metaqa = TrainConfig.for_dataset("metaqa")
    # MetaQA: Prime's model and optimiser, fewer epochs (a full run fits in an hour on 2 CPU cores).
    assert metaqa.dataset == "metaqa" and (metaqa.epochs, metaqa.warmup_epochs) == (6, 1)
    same = {k: v for k, v in DATASET_DEFAULTS["metaqa"].items() if k not in ("epochs", "warmup_epochs")}
    assert same == {k: v for k, v in DATASET_DEFAULTS["prime"].items() if k not in ("epochs", "warmup_epochs")}
    for cfg in (prime, mag, amazon):
        assert (cfg.num_trajectories, cfg.batch_size, cfg.pca_dim, cfg.bpr_weight, cfg.bpr_margin) == (
            8, 16, 256, 1.0, None)
        assert (cfg.weight_decay, cfg.warmup_epochs, cfg.max_grad_norm, cfg.dropout) == (1e-5, 3, 1.0, 0.1)
    with pytest.raises(TypeError):
        TrainConfig.for_dataset("prime", hiden_dim=3)
    with pytest.raises(KeyError):
        TrainConfig.for_dataset("wikidata")
    with pytest.raises(ValueError):
        TrainConfig(ablation="nothing")
    with pytest.raises(ValueError):
        TrainConfig(expansion_sizes=(1, 2, 3))


def test_config_ablation_switches():
    cases = {"full": (8, "group", 1.0, "expand"), "rerank": (1, "group", 1.0, "rerank"),
             "greedy_baseline": (8, "greedy", 1.0, "expand"), "single_trajectory": (1, "none", 1.0, "expand"),
             "no_baseline": (8, "none", 1.0, "expand"), "no_aux": (8, "group", 0.0, "expand")}
    for ablation, expected in cases.items():
        cfg = TrainConfig(ablation=ablation)
        assert (cfg.effective_num_trajectories, cfg.baseline, cfg.effective_bpr_weight, cfg.rollout_mode) == expected


def test_listwise_loss_by_hand():
    from seeder_dgl.training.losses import listwise_loss

    scores = torch.tensor([2.0, 0.5, -1.0, 3.0, 1.0, 0.0, 4.0], dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([1, 0, 1, 0, 1, 0, 1], dtype=torch.bool)
    graph = torch.tensor([0, 0, 0, 1, 1, 1, 2])  # graph 2 has no negative: left out
    s = scores.detach().tolist()
    g0 = -math.log((math.exp(s[0]) + math.exp(s[2])) / sum(math.exp(x) for x in s[0:3]))
    g1 = -math.log(math.exp(s[4]) / sum(math.exp(x) for x in s[3:6]))
    loss = listwise_loss(scores, labels, graph)
    assert loss.item() == pytest.approx((g0 + g1) / 2, rel=1e-12)
    loss.backward()
    # Gradient descent raises every positive and lowers every negative; graph 2 gets none.
    assert (scores.grad[labels & (graph < 2)] < 0).all() and (scores.grad[~labels] > 0).all()
    assert scores.grad[6] == 0
    # Shift-invariant and stable for large scores.
    big = listwise_loss(scores.detach() + 1000.0, labels, graph)
    assert big.item() == pytest.approx(loss.item(), rel=1e-9)
    empty = listwise_loss(torch.zeros(2, requires_grad=True), torch.tensor([True, True]), torch.tensor([0, 0]))
    assert empty.item() == 0.0 and empty.requires_grad


def test_listwise_option_is_validated():
    with pytest.raises(ValueError, match="rank_loss"):
        TrainConfig(rank_loss="pointwise")
    assert TrainConfig(rank_loss="listwise").rank_loss == "listwise"


def _undirected(pairs):
    src = torch.tensor([a for a, b in pairs] + [b for a, b in pairs])
    dst = torch.tensor([b for a, b in pairs] + [a for a, b in pairs])
    return src, dst


def test_shortest_path_nodes_and_path_recall_by_hand():
    # graph 0: seed 0 - 1 - 2 (answer), dead ends 0-3 and 1-4, and a longer way 0-5-6-2;
    # graph 1: seed 7, answer 8 not connected; graph 2: seed 9 is itself the answer.
    src, dst = _undirected([(0, 1), (1, 2), (0, 3), (1, 4), (0, 5), (5, 6), (6, 2), (9, 10)])
    seeds = torch.zeros(11, dtype=torch.bool)
    seeds[[0, 7, 9]] = True
    labels = torch.zeros(11, dtype=torch.bool)
    labels[[2, 8, 9]] = True
    graph = torch.tensor([0] * 7 + [1, 1] + [2, 2])
    torch.testing.assert_close(hop_distance(src, dst, seeds, 3), torch.tensor([0, 1, 2, 1, 2, 1, 2, 0, 4, 0, 1]))
    on_path = shortest_path_nodes(src, dst, seeds, labels, graph, 3, max_hops=3)
    assert torch.nonzero(on_path).flatten().tolist() == [1, 2]  # not the longer way, nothing in graphs 1 and 2
    assert not shortest_path_nodes(src, dst, seeds, labels, graph, 3, max_hops=1).any()  # answer 2 hops away
    selected = seeds.clone()
    selected[[1, 5, 8]] = True
    torch.testing.assert_close(path_recall(selected, on_path, graph, 3), torch.tensor([0.5, 0.0, 0.0]))


def test_path_reward_adds_credit_for_connectors_only_when_asked():
    from seeder_dgl.training.rollout import RolloutOutput, rl_reward

    src, dst = _undirected([(0, 1), (1, 2)])
    batch = SimpleNamespace(src=src, dst=dst, seed_mask=torch.tensor([True, False, False]),
                            labels=torch.tensor([False, False, True]), graph_index=torch.zeros(3, dtype=torch.int64),
                            num_graphs=1)
    out = RolloutOutput(batch=batch, num_queries=1, num_trajectories=1,
                        selected=torch.tensor([True, True, False]), step_log_prob=torch.zeros(1, 1, 2),
                        reward=torch.zeros(1, 1), scores=None)
    torch.testing.assert_close(rl_reward(out, 0.0), torch.zeros(1, 1))  # the paper's reward: the answer was missed
    torch.testing.assert_close(rl_reward(out, 0.5), torch.tensor([[0.25]]))  # one of two path nodes, times 0.5
