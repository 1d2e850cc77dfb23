"""The expansion rollout: V_0 → V_1 → … → V_T inside each query subgraph, then final scoring.

At step t, for every graph of the batch: U_t = capped frontier of V_t; logits l_t on U_t from
the policy; S_t = c_t frontier nodes, either sampled without replacement (training: Gumbel-top-k
on l_t/τ, with the exact Plackett–Luce log-probability of the sampled ordered subset) or the
top-c_t (inference); V_{t+1} = V_t ∪ S_t. M trajectories per query run as M copies of the batch
(query-major, ``SubgraphBatch.replicate``), so one encoder pass per step serves all of them.
Frontiers differ in size per graph; they are laid out in a padded [G, width] matrix with −inf.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from seeder_dgl.model.batch import SubgraphBatch
from seeder_dgl.model.ops import MessagePassingOps, select_ops
from seeder_dgl.model.policy import NodeScores, SeederPolicy
from seeder_dgl.training.config import TrainConfig
from seeder_dgl.training.losses import (advantage, bpr_loss, listwise_loss, path_recall, recall_at_any, reinforce_loss,
                                       shortest_path_nodes)

ROLLOUT_MODES = ("expand", "rerank")


def gumbel_top_k(logits: Tensor, k: int, sample: bool = True,
                 generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Pick up to ``k`` entries per row of ``logits`` [G, F] (−inf = padding), in pick order.

    ``sample=True``: top-k of ``logits + Gumbel(0, 1)``, an exact sample of k draws without
    replacement from softmax(logits) (Plackett–Luce); ``sample=False``: plain top-k.
    Returns ``index`` [G, k'] (k' = min(k, F)) and ``valid`` [G, k'] (False where the row has
    fewer than k' real entries; those indices point at padding).
    """
    num_rows, width = logits.shape
    k = min(k, width)
    keys = logits
    if sample:
        # −log(Exp(1)) is Gumbel(0, 1); exponential_ takes a generator, unlike torch's gumbel helpers.
        exp = torch.empty_like(logits).exponential_(generator=generator)
        keys = logits - torch.log(exp.clamp_min(torch.finfo(logits.dtype).tiny))
    index = torch.topk(keys.detach(), k, dim=1, sorted=True).indices
    count = torch.isfinite(logits).sum(dim=1, keepdim=True)
    valid = torch.arange(k, device=logits.device).unsqueeze(0) < count
    return index, valid


def plackett_luce_log_prob(logits: Tensor, index: Tensor, valid: Tensor) -> Tensor:
    """Exact log-probability [G] of drawing ``index`` [G, k] in that order, without replacement.

    Σ_i [ l_{s_i} − logsumexp(l over the entries not yet drawn before i) ], over valid picks only.
    Padding (−inf) never contributes; invalid positions are replaced by finite dummies before any
    arithmetic so that no NaN can reach the gradient.
    """
    num_rows, width = logits.shape
    k = index.shape[1]
    if k == 0:
        return logits.sum(dim=1) * 0.0 if width else logits.new_zeros(num_rows)
    picked = torch.zeros(num_rows, k, width, dtype=torch.int64, device=logits.device)
    picked.scatter_(2, index.unsqueeze(2), valid.unsqueeze(2).to(torch.int64))
    drawn_before = (picked.cumsum(dim=1) - picked) > 0  # [G, k, F]: entry f drawn at a position < i
    remaining = logits.unsqueeze(1).expand(num_rows, k, width).masked_fill(drawn_before, -math.inf)
    remaining = torch.where(valid.unsqueeze(2), remaining, torch.zeros_like(remaining))
    chosen = torch.where(valid, logits.gather(1, index), torch.zeros_like(index, dtype=logits.dtype))
    terms = torch.where(valid, chosen - torch.logsumexp(remaining, dim=2), torch.zeros_like(chosen))
    return terms.sum(dim=1)


@dataclass
class StepTrace:
    """What one step saw and chose (kept only when asked: tests, analysis)."""

    frontier: Tensor
    """int64 [f]: batch-node indices of U_t (after the cap)."""
    chosen: Tensor
    """int64 [s]: batch-node indices of S_t."""
    logits: Tensor
    """float [f]: l_t on U_t (before the temperature)."""


@dataclass
class RolloutOutput:
    batch: SubgraphBatch
    """The batch the trajectories ran on: B·M graphs, graph b·M + m is trajectory m of query b."""
    num_queries: int
    num_trajectories: int
    selected: Tensor
    """bool [n of ``batch``]: V_T of every trajectory."""
    step_log_prob: Tensor
    """[B, M, T]: log π(S_t | s_t) of each step (the PL probability of the picks, also for top-k;
    zeros for top-k picks made without gradients, as in ``infer``)."""
    reward: Tensor
    """[B, M]: Recall@Any of V_T."""
    scores: NodeScores | None
    """Final scores of the nodes of V_T (None when scoring was skipped)."""
    trace: list[StepTrace] | None = None

    @property
    def log_prob(self) -> Tensor:
        """[B, M]: Σ_t log π(a_t | s_t)."""
        return self.step_log_prob.sum(dim=-1)

    def ranked(self, k: int | None = None) -> tuple[list[list[int]], list[list[float]]]:
        """Per graph of ``batch`` (per query when M = 1): global node ids of V_T by decreasing score, and the scores."""
        if self.scores is None:
            raise ValueError("this rollout was run with score=False")
        s = self.scores
        order = torch.sort(s.scores.detach(), descending=True, stable=True).indices
        order = order[torch.sort(s.graph[order], stable=True).indices]
        ids = self.batch.node_ids[s.nodes[order]].tolist()
        values = s.scores.detach()[order].tolist()
        counts = torch.bincount(s.graph, minlength=self.batch.num_graphs).tolist()
        out_ids, out_scores, start = [], [], 0
        for c in counts:
            stop = start + (c if k is None else min(c, k))
            out_ids.append(ids[start:stop])
            out_scores.append(values[start:stop])
            start += c
        return out_ids, out_scores

    def rankings(self, k: int | None = None) -> list[list[int]]:
        return self.ranked(k)[0]


def rollout(policy: SeederPolicy, batch: SubgraphBatch, *, num_trajectories: int = 1, sample: bool = False,
            temperature: float = 1.0, mode: str = "expand", ops: MessagePassingOps | None = None,
            generator: torch.Generator | None = None, score: bool = True, keep_trace: bool = False) -> RolloutOutput:
    """Run T expansion steps (``mode='expand'``) or none (``'rerank'``: V_T = the whole subgraph), then score V_T.

    Training: ``sample=True`` with the policy in train mode; inference: ``sample=False`` under
    ``torch.no_grad()`` with the policy in eval mode (deterministic top-c_t).
    """
    if mode not in ROLLOUT_MODES:
        raise ValueError(f"mode must be one of {ROLLOUT_MODES}, not {mode!r}")
    ops = ops or select_ops(batch.device)
    num_queries, m = batch.num_graphs, num_trajectories
    # The query-injection part of every node's input is the same in all trajectories and steps:
    # computed once here, on the batch before replication (whose features are then not copied).
    static = policy.encoder.static(batch)
    if mode == "expand" and m > 1:
        _ = batch.frontier_order  # sorted once here: the M copies inherit it instead of sorting M times the nodes
    run = batch.replicate(m, features=False) if m > 1 else batch
    trace: list[StepTrace] | None = [] if keep_trace else None
    dtype = run.x.dtype

    if mode == "rerank":
        selected = torch.ones(run.num_nodes, dtype=torch.bool, device=run.device)
        step_log_prob = torch.zeros(num_queries, m, 0, dtype=dtype, device=run.device)
    else:
        selected = run.seed_mask.clone()
        per_step = []
        for step, size in enumerate(policy.expansion_sizes):
            if step == 0 and m > 1:
                logits, nodes, seen = _shared_first_step(policy, batch, run, m, ops, static, temperature)
            else:
                expansion = policy.expand(run, selected, step, ops, static)
                frontier = expansion.frontier
                logits = frontier.to_dense(expansion.logits / temperature, -math.inf)  # [G, width]
                nodes = frontier.to_dense(frontier.nodes, -1)
                seen = (frontier.nodes, expansion.logits)
            index, valid = gumbel_top_k(logits, size, sample=sample, generator=generator)
            # Deterministic picks without gradients (inference) need no probability: zeros instead,
            # which saves the [G, k, width] tensors of the Plackett-Luce terms on every live query.
            per_step.append(plackett_luce_log_prob(logits, index, valid) if sample or torch.is_grad_enabled()
                            else logits.new_zeros(logits.shape[0]))
            chosen = nodes.gather(1, index)[valid]
            selected = selected.clone()
            selected[chosen] = True
            if trace is not None:
                trace.append(StepTrace(frontier=seen[0], chosen=chosen, logits=seen[1].detach()))
        if per_step:
            step_log_prob = torch.stack(per_step, dim=-1).view(num_queries, m, -1)
        else:
            step_log_prob = torch.zeros(num_queries, m, 0, dtype=dtype, device=run.device)

    reward = recall_at_any(selected, run.labels, run.graph_index, run.num_answers).view(num_queries, m)
    scores = policy.score(run, selected, ops, static) if score else None
    return RolloutOutput(batch=run, num_queries=num_queries, num_trajectories=m, selected=selected,
                         step_log_prob=step_log_prob, reward=reward, scores=scores, trace=trace)


def _shared_first_step(policy: SeederPolicy, batch: SubgraphBatch, run: SubgraphBatch, m: int,
                       ops: MessagePassingOps, static: Tensor, temperature: float) -> tuple[Tensor, Tensor, tuple]:
    """Step 0 of ``m`` trajectories per query. All of them start from the same V_0 (the seeds), so
    one encoder pass over the B queries of ``batch`` gives the logits every copy samples from,
    instead of m identical passes over ``run`` (the gradients of the m copies add up in the shared
    logits, as they would in m separate passes; only dropout masks are shared).

    Returns the [B·m, width] logits (divided by the temperature) and frontier nodes as indices of
    ``run`` (−1 = padding), and the frontier nodes and logits of every copy (for the trace).
    """
    expansion = policy.expand(batch, batch.seed_mask, 0, ops, static)
    frontier = expansion.frontier
    # Node i of graph b of ``batch`` is node i − offset_b + offset_{b·m+j} of copy j in ``run``.
    local = frontier.nodes - batch.node_offsets[frontier.graph]
    local = frontier.to_dense(local, -1).repeat_interleave(m, dim=0)  # [B·m, width]
    real = local >= 0
    nodes = torch.where(real, local + run.node_offsets.unsqueeze(1), local)
    raw = frontier.to_dense(expansion.logits, -math.inf).repeat_interleave(m, dim=0)
    return raw / temperature, nodes, (nodes[real], raw[real])


@torch.no_grad()
def infer(policy: SeederPolicy, batch: SubgraphBatch, ops: MessagePassingOps | None = None,
          mode: str = "expand") -> RolloutOutput:
    """Deterministic retrieval: eval mode, top-c_t at every step, final scores. Restores the train flag."""
    was_training = policy.training
    policy.eval()
    try:
        return rollout(policy, batch, sample=False, mode=mode, ops=ops)
    finally:
        policy.train(was_training)


@dataclass
class Objective:
    loss: Tensor
    """L = L_RL + λ L_BPR (call ``.backward()`` on it)."""
    rl_loss: Tensor
    bpr_loss: Tensor
    reward: Tensor
    """[B, M] Recall@Any of the sampled trajectories."""
    advantage: Tensor
    """[B, M] the advantages used in L_RL."""
    baseline_reward: Tensor | None
    """[B] reward of the greedy rollout (only for the greedy-baseline ablation)."""
    rollout: RolloutOutput


def rl_reward(out: RolloutOutput, path_weight: float = 0.0) -> Tensor:
    """[B, M]: the reward REINFORCE learns from: Recall@Any of V_T, plus ``path_weight`` times the
    share of the shortest seed-to-answer paths' nodes that V_T holds (``TrainConfig.path_reward``)."""
    if path_weight <= 0:
        return out.reward
    run = out.batch
    horizon = int(out.step_log_prob.shape[-1])
    on_path = shortest_path_nodes(run.src, run.dst, run.seed_mask, run.labels, run.graph_index,
                                  run.num_graphs, horizon)
    credit = path_recall(out.selected, on_path, run.graph_index, run.num_graphs)
    return out.reward + path_weight * credit.view_as(out.reward).to(out.reward.dtype)


def training_objective(policy: SeederPolicy, batch: SubgraphBatch, cfg: TrainConfig,
                       ops: MessagePassingOps | None = None, generator: torch.Generator | None = None) -> Objective:
    """One training step's loss for ``cfg`` (ablations included). The policy should be in train mode."""
    ops = ops or select_ops(batch.device, cfg.ops)
    mode, bpr_weight = cfg.rollout_mode, cfg.effective_bpr_weight
    out = rollout(policy, batch, num_trajectories=cfg.effective_num_trajectories, sample=True,
                  temperature=cfg.temperature, mode=mode, ops=ops, generator=generator, score=bpr_weight > 0)

    baseline_reward = None
    if cfg.baseline == "greedy" and mode == "expand":
        # Self-critical baseline: the deterministic policy's own reward on the same queries.
        baseline_reward = rl_reward(infer(policy, batch, ops=ops), cfg.path_reward)[:, 0]

    zero = torch.zeros((), dtype=out.batch.x.dtype, device=out.batch.device)
    if mode == "rerank":
        rl = zero  # nothing is sampled: the reranker learns from the ranking loss alone
        adv = torch.zeros_like(out.reward)
    else:
        reward = rl_reward(out, cfg.path_reward)
        rl = reinforce_loss(out.log_prob, reward, cfg.baseline, baseline_reward)
        adv = advantage(reward, cfg.baseline, baseline_reward)
    if out.scores is not None:
        s = out.scores
        if cfg.rank_loss == "listwise":
            bpr = listwise_loss(s.scores, out.batch.labels[s.nodes], s.graph)
        else:
            bpr = bpr_loss(s.scores, out.batch.labels[s.nodes], s.graph, cfg.bpr_margin)
    else:
        bpr = zero
    return Objective(loss=rl + bpr_weight * bpr, rl_loss=rl, bpr_loss=bpr, reward=out.reward, advantage=adv,
                     baseline_reward=baseline_reward, rollout=out)
