"""Training configuration: one dataclass, one docstring per field; defaults are the STaRK-Prime run."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from seeder_dgl.datasets import profile_prefix

RANK_LOSSES = ("bpr", "listwise")
ABLATIONS = ("full", "rerank", "greedy_baseline", "single_trajectory", "no_baseline", "no_aux")


@dataclass
class TrainConfig:
    dataset: str = "prime"
    """dataset name (a key of DATASET_DEFAULTS)"""
    profile: str = "paper"
    """retrieval profile whose cached subgraphs train the policy ('paper'; MetaQA also 'deep')"""
    k0: int = 3
    """number of dense seeds V_0"""
    pca_dim: int | None = 256
    """PCA dimension applied to node and query embeddings before the model (None: no PCA)"""
    hidden_dim: int = 16
    """width of the graph transformer"""
    num_layers: int = 3
    """number of graph transformer layers"""
    heads: int = 4
    """attention heads per layer (must divide hidden_dim)"""
    dropout: float = 0.1
    """dropout in the encoder and heads"""
    expansion_sizes: tuple[int, ...] = (7, 10)
    """c_t: nodes added at each expansion step; the horizon T is its length"""
    frontier_caps: tuple[int, ...] = (20, 50)
    """cap_t: frontier candidates kept at step t (highest K-hop scores)"""
    num_trajectories: int = 8
    """M: sampled trajectories per query (the group of the baseline)"""
    temperature: float = 1.0
    """τ: Gumbel-top-k samples from Plackett-Luce(logits / τ)"""
    batch_size: int = 16
    """queries per optimisation step"""
    lr: float = 1e-3
    """AdamW learning rate (peak of the cosine schedule)"""
    weight_decay: float = 1e-5
    """AdamW weight decay"""
    epochs: int = 15
    """training epochs"""
    warmup_epochs: int = 3
    """linear warm-up epochs before the cosine decay"""
    patience: int | None = None
    """stop when the validation selection metric has not improved for this many epochs after the
    warm-up (the best epoch is kept); None: train every epoch"""
    max_grad_norm: float = 1.0
    """global gradient-norm clipping"""
    bpr_weight: float = 1.0
    """λ: weight of the ranking loss in L = L_RL + λ L_BPR"""
    rank_loss: str = "bpr"
    """ranking loss on the final scores: 'bpr' (pairwise, docs/method.md) or 'listwise' (softmax over the retrieved set)"""
    bpr_margin: float | None = None
    """None: BPR −log σ(s+ − s−); a float γ: softplus(γ − (s+ − s−)) (the paper's margin variant uses 0.5)"""
    path_reward: float = 0.0
    """β: the RL reward is Recall@Any(V_T) + β · (fraction of the nodes on shortest seed-to-answer paths
    of at most T edges that V_T holds); 0 is the paper's reward"""
    query_injection: str = "concat"
    """'add' (z_v + W_q z_q), 'concat' ([z_v ‖ W_q z_q ‖ cos(z_v, z_q)] → projection) or 'product'
    ([z_v ‖ z_v ⊙ W_q z_q ‖ cos(z_v, z_q)] → projection: node-specific query interaction)"""
    node_types: bool = False
    """add a learned embedding of each node's type (from the graph; unseen types share one slot)"""
    query_relations: bool = False
    """condition the relation embeddings on the query (FiLM), so the question picks the relations to follow"""
    lookahead: bool = False
    """give each node the log-counts of its relationships by type over the whole subgraph, so the policy
    sees what lies beyond the frontier (the encoder itself sees only V_t and U_t)"""
    path_prior: bool = False
    """give each node π, how well its best K-hop path from a seed follows the relations the question
    asks for (the subgraph's learned relation prior, ``retrieval.relation_prior``); 0 without one"""
    path_end: bool = False
    """with ``path_prior``, also give each node ρ = π times the prior's belief that the question's path
    stops at the node's hop (how well the node *ends* the asked-for path: the answers' signature)"""
    relation_text: bool = False
    """add projected relation-name embeddings to the learnable relation-type embeddings"""
    edge_direction: bool = False
    """tell the policy which way each edge's stored relationship points (a subgraph holds every
    relationship both ways): "the successor of X" and "the predecessor of X" follow one relation
    type in opposite directions, as do "what lies north of X" and "what X lies north of" (read both ways alike without it)"""
    edge_prior: bool = False
    """with ``edge_direction``, add to each edge's relation embedding the relation prior's belief that
    the question's path takes that relation at the hop the edge steps into: the prior reads a wording
    hop by hop, so the attention follows it where the whole question's embedding was never trained on"""
    ablation: str = "full"
    """one of ABLATIONS: 'full', 'rerank' (score the whole K-hop subgraph, no expansion), 'greedy_baseline',
    'single_trajectory' (M=1, advantage = reward), 'no_baseline' (advantage = reward), 'no_aux' (λ = 0)"""
    ops: str = "auto"
    """message-passing backend: 'auto' (DGL where it supports the device), 'dgl' or 'torch'"""
    workers: int = 1
    """training processes on the CPU (``training.parallel``): each takes 1/workers of every batch
    with one thread and the gradients are summed before each step (two processes on two cores train
    about 1.4 to 1.5 times as fast as one); the result depends on it (same seed and workers, same
    weights); with more than one the message passing is the pure-torch ops' (DGL's OpenMP runtime
    is not safe in forked processes); a CUDA run uses one process"""
    seed: int = 0
    """random seed"""
    device: str = "auto"
    """'auto' (cuda if available), 'cpu', 'cuda', 'cuda:1', ..."""

    def __post_init__(self) -> None:
        self.expansion_sizes = tuple(int(c) for c in self.expansion_sizes)
        self.frontier_caps = tuple(int(c) for c in self.frontier_caps)
        if self.ablation not in ABLATIONS:
            raise ValueError(f"ablation must be one of {ABLATIONS}, not {self.ablation!r}")
        if self.patience is not None and int(self.patience) < 1:
            raise ValueError(f"patience must be at least 1 (or None), not {self.patience}")
        if len(self.frontier_caps) != len(self.expansion_sizes):
            raise ValueError("frontier_caps and expansion_sizes must have the same length")
        if self.rank_loss not in RANK_LOSSES:
            raise ValueError(f"rank_loss must be one of {RANK_LOSSES}, not {self.rank_loss!r}")
        if int(self.workers) < 1:
            raise ValueError(f"workers must be at least 1, not {self.workers}")
        if self.hidden_dim % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide hidden_dim ({self.hidden_dim})")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"dropout must be at least 0 and below 1, not {self.dropout}")
        for name in ("lr", "weight_decay", "max_grad_norm", "bpr_weight"):
            value = float(getattr(self, name))
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of at least 0, not {getattr(self, name)}")
        for name in ("batch_size", "epochs", "num_trajectories", "hidden_dim", "num_layers", "heads"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")

    # What each ablation changes, in one place (the rollout and the losses read these).
    @property
    def effective_num_trajectories(self) -> int:
        return 1 if self.ablation in ("single_trajectory", "rerank") else self.num_trajectories

    @property
    def baseline(self) -> str:
        """'group' (mean reward of the query's M trajectories), 'greedy' or 'none'.

        With one trajectory the group mean equals the reward (zero advantage, no learning), so
        'single_trajectory' uses no baseline.
        """
        if self.ablation == "greedy_baseline":
            return "greedy"
        if self.ablation in ("no_baseline", "single_trajectory"):
            return "none"
        return "group"

    @property
    def effective_bpr_weight(self) -> float:
        return 0.0 if self.ablation == "no_aux" else self.bpr_weight

    @property
    def rollout_mode(self) -> str:
        return "rerank" if self.ablation == "rerank" else "expand"

    def resolve_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @classmethod
    def for_dataset(cls, name: str, profile: str = "paper", **overrides: Any) -> "TrainConfig":
        if name not in DATASET_DEFAULTS:
            raise KeyError(f"no defaults for dataset {name!r}; known: {sorted(DATASET_DEFAULTS)}")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown TrainConfig fields: {sorted(unknown)}")
        profile_defaults = PROFILE_DEFAULTS.get((name, profile), {})
        return replace(cls(), dataset=name, profile=profile,
                       **{**DATASET_DEFAULTS[name], **profile_defaults, **overrides})

    @property
    def subgraph_prefix(self) -> str:
        """Cache folders and run folders of a non-paper profile carry its name ('deep-train')."""
        return profile_prefix(self.profile)


# The headline MiniLM runs (paper's hyperparameter table). MetaQA has no row: it uses Prime's.
# Parameter count: docs/method.md quotes about 1.1M trainable parameters; these settings give about
# 93k here (most of it the 256x256 query projection). The paper does not say where the rest
# lives (wider feed-forward or edge MLPs, embedding tables?), so the model is not padded to match.
_PRIME: dict[str, Any] = dict(k0=3, pca_dim=256, hidden_dim=16, num_layers=3, dropout=0.1, expansion_sizes=(7, 10),
                              frontier_caps=(20, 50), batch_size=16, lr=1e-3, weight_decay=1e-5, epochs=15,
                              warmup_epochs=3, max_grad_norm=1.0, bpr_weight=1.0)
DATASET_DEFAULTS: dict[str, dict[str, Any]] = {
    "prime": dict(_PRIME),
    "mag": dict(_PRIME, hidden_dim=32, num_layers=4, expansion_sizes=(7, 7, 8), frontier_caps=(20, 30, 50)),
    "amazon": dict(_PRIME, k0=10, hidden_dim=64, expansion_sizes=(4, 4, 4), frontier_caps=(20, 30, 50), lr=3e-4,
                   epochs=10),
    # MetaQA: Prime's model; 6 epochs (1 warmup) keep a full run over its 31k training questions
    # within an hour on a 2-core CPU.
    "metaqa": dict(_PRIME, epochs=6, warmup_epochs=1),
}

TARGET_QUESTION_PASSES = 60_000
"""``auto_epochs``: about this many training questions seen in a run (MetaQA: 31k x 2)."""


def auto_epochs(num_train: int, lo: int = 4, hi: int = 40) -> int:
    """Epochs for a dataset of one's own: ~TARGET_QUESTION_PASSES questions seen, within [lo, hi]."""
    if num_train <= 0:
        return lo
    return int(min(hi, max(lo, -(-TARGET_QUESTION_PASSES // num_train))))


# Policy settings that follow a retrieval profile (datasets.py) rather than the dataset. MetaQA's
# 'deep' profile seeds one linked topic entity and keeps three hops: three expansion steps, as
# MAG's 3-step row, so 3-hop answers are reachable from the seed inside the policy's horizon.
# Its model options were chosen on MetaQA's validation split (benchmarks/policy_variants.py,
# 8,000 questions, 2 epochs): node types, query-conditioned relations, the listwise ranking loss
# and a learning rate of 3e-3 each raised validation Hit@1, together from 0.631 to 0.721; frontier
# caps of 40/80/120 instead of MAG's 20/30/50 to 0.754; the relation-degree lookahead (the encoder
# sees only V_t and its frontier) raised every validation metric of a full run. On subgraphs grown
# with the learned relation prior, the same model reached 0.862, and the relation-path score π
# (``path_prior``) raised 3-hop Hit@1 from 0.796 to 0.828 (0.871 overall); with the prior read from
# question templates, 0.985 (3-hop 0.975), where neither the path-end score ρ (``path_end``, 0.987)
# nor width 32 (0.985) helped beyond the sample's noise. M = 4 trajectories per question instead
# of the paper's 8 gave 0.983 and trains about 1.5 times as many questions a second (the group-mean
# baseline still has three other trajectories to compare with); two training processes, each
# with half of every batch (``training.parallel``), train about 1.4 times as fast on two cores
# as one process (a step's fixed cost, ~30 ms of small ops, is paid by both). Cheaper models
# train faster but rank a little worse on the whole validation split (full runs, Hit@1 0.9871
# with these settings): two layers 0.9852; two layers with batches of 32, 0.9835 (1.5 times the
# questions a second); with frontier caps of 40/60/60 as well, 0.9834 (1.8 times). Two epochs,
# one of warm-up: the schedule the variants were measured with. The torch message-passing ops
# run with two threads on two cores (DGL's OpenMP runtime contends with torch's there). The deep
# profile trains without dropout: over two seeds, full runs without it matched or beat dropout
# 0.1 on every validation metric (Hit@1 0.9851 / 0.9871 against 0.9870 / 0.9848, Recall@20
# 0.8834 / 0.8835 against 0.8810 / 0.8798) and trained about 8% more questions a second (the
# Bernoulli masks cost more than the layers' products on the CPU). Graphs of one's own keep 0.1:
# untried there, where fewer questions may need it more. Edge directions (``edge_direction``): on
# MLPQ, where 15% of validation questions have a wrong answer reached by a gold path read the
# other way (successor / predecessor, north / south of), validation Hit@1 0.9236 -> 0.9267 and
# Hit@5 0.9678 -> 0.9712 over the same subgraphs (seed 1: 0.9233 -> 0.9249, 0.9678 -> 0.9731),
# and about 1.25 times the questions a second; MetaQA (directions follow from node types
# there) 0.9893 -> 0.9898; the same training speed (benchmarks/results/training-cpu-deep-1t-direction.md).
# The prior on every edge (``edge_prior``) stays off: on MLPQ's same subgraphs it raised validation
# Hit@1 0.9264 -> 0.9339 (seed 0) and 0.9277 -> 0.9305 (seed 1) with Hit@5 unchanged, and MetaQA's
# by 0.001, but MetaQA questions reworded unlike any training question lost 0.040 / 0.044 Hit@1 at
# one hop (two seeds, benchmarks/reworded_metaqa.py): where the prior misreads a wording, the
# policy now follows it.
CHOSEN_POLICY: dict[str, Any] = dict(expansion_sizes=(7, 7, 8), frontier_caps=(40, 80, 120), node_types=True,
                                     query_relations=True, rank_loss="listwise", lr=3e-3, lookahead=True,
                                     path_prior=True, edge_direction=True, num_trajectories=4, ops="torch",
                                     workers=2)
PROFILE_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("metaqa", "deep"): dict(CHOSEN_POLICY, k0=1, epochs=2, dropout=0.0),
}
# A graph of the user's own: the options that won on MetaQA's validation split, and epochs from
# the number of training questions (``auto_epochs``, applied by training.command) so that small
# question sets still see enough updates; training stops once three epochs in a row have not
# improved validation (a few thousand questions reach their best long before ~60,000 passes).
DATASET_DEFAULTS["generic"] = dict(_PRIME, **CHOSEN_POLICY, epochs=10, warmup_epochs=1, patience=3)
