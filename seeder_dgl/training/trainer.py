"""The SeedER training loop, cleanrl-style: ``train`` reads top to bottom in one screen (step 4 is the
loop: batch → M sampled rollouts → L = L_RL + λ·L_rank → optimiser step → log); the named pieces it
calls are defined above it.

    result = train(cfg, train_records, train_q, val_records, val_q, node_emb, num_relations, out_dir)

1. Seeding: ``torch.manual_seed(cfg.seed)`` (weights, dropout), a numpy Generator for the batch
   order and a torch Generator for the Gumbel noise of the trajectories. On the CPU the run is
   deterministic (same seed → same weights and metrics); ``resume`` restores all three states.
2. Features: PCA (``cfg.pca_dim`` < d) fitted once on the node embedding matrix, applied to node
   and query embeddings, then L2 normalisation (``checkpoint.Preprocessing``, stored in the
   checkpoint so inference sees the same inputs).
3. Relations: the policy has ``num_relations + 1`` relation slots; the last one stands for relation
   types unknown at training time (a live graph gains new ones through upsert). So that slot is
   not left at its random initialisation, a small fraction of training edges
   (``UNKNOWN_RELATION_RATE``) is shown to the policy with that slot instead of its relation.
4. Optimisation: per epoch, shuffled batches of ``cfg.batch_size`` queries; the loss is
   ``training_objective`` (M sampled trajectories per query, group-baseline REINFORCE + λ·BPR,
   ablations included); AdamW; cosine learning-rate schedule with linear warm-up, stepped per
   batch; global gradient-norm clipping.
5. Validation after every epoch: the deterministic policy (top-c_t) on the validation subgraphs,
   ranked by the final scores, metrics against the gold answers (``subgraph_metrics``).
   ``best.pt`` keeps the epoch of best validation MRR; ``last.pt`` (every epoch, with
   optimiser, scheduler, RNG states and history) lets ``resume=True`` continue a killed run
   exactly from its last finished epoch. Both are written atomically (``run_state``: the resume
   state and what each epoch writes live there, beside the loop).
6. Run records beside them: config.json, metrics.json, history.csv, curves.png (``records``).

Processes and threads: with ``cfg.workers`` > 1 on the CPU, the process forks that many − 1 copies
of itself once the policy is built, or torchrun started several (``training.parallel``); each takes
its share of every batch and DistributedDataParallel sums the gradients in the backward pass (rank 0
runs this loop, the others follow it). Each CPU process then uses one thread; otherwise this loop
does not touch thread settings (``seeder_dgl.threads.configure_threads`` does).
"""
from __future__ import annotations

import math
import os
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from seeder_dgl.errors import SeederError
from seeder_dgl.metrics import DEFAULT_KS, batch_metrics
from seeder_dgl.model.ops import MessagePassingOps, TorchOps, select_ops
from seeder_dgl.model.policy import SeederPolicy
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training import parallel
from seeder_dgl.training import records as run_records
from seeder_dgl.training.artifact import TrainedRetriever
from seeder_dgl.training.checkpoint import (FeatureRows, Preprocessing, build_policy, config_to_dict,
                                            relation_text_table)
from seeder_dgl.training.config import TrainConfig
from seeder_dgl.training.ranking import EVAL_BATCH_SIZE, rank_subgraphs
from seeder_dgl.training.rollout import training_objective
from seeder_dgl.training.run_state import LoopState, RunWriter, data_fingerprint, resume_state

SELECTION_METRIC = "mrr"
TIE_BREAK = ("recall@20", 1e-3)
"""Epochs are chosen by validation MRR + 0.001 Recall@20: where the first answer is ranked is what a
user reads first. Recall@20 alone saturates early on small graphs (every answer among 20 picked
nodes by the third epoch) while Hit@1 still climbs for several epochs."""


def selection_score(val: dict) -> float:
    """Model selection on validation MRR, ties by Recall@20 (docs/method.md), never on test."""
    return float(val[SELECTION_METRIC]) + TIE_BREAK[1] * float(val.get(TIE_BREAK[0], 0.0))
UNKNOWN_RELATION_RATE = 0.01
"""Fraction of training edge entries whose relation is replaced by the unknown-relation slot."""
REPORTED = ("hit@1", "hit@5", "mrr", "recall@20", "hit@any", "recall@any")


@dataclass
class TrainResult:
    out_dir: Path
    best_path: Path
    last_path: Path
    best_epoch: int
    best_metrics: dict[str, float]
    """Validation metrics of the best epoch (the one in best.pt)."""
    final_metrics: dict[str, float]
    """Validation metrics of the last epoch."""
    initial_metrics: dict[str, float]
    """Validation metrics of the untrained policy."""
    history: list[dict[str, Any]]
    num_parameters: int
    device: str
    ops: str
    seconds: float
    """Wall time of this call."""
    resumed_from: int | None = None
    """The epoch a resumed run continued after (None: fresh run)."""
    skipped: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for the command's output."""
        best = "  ".join(f"{k} {self.best_metrics.get(k, 0.0):.4f}" for k in ("hit@1", "hit@5", "mrr", "recall@20"))
        start = self.initial_metrics.get(SELECTION_METRIC)
        before = f" (untrained {start:.4f})" if start is not None else ""
        return (f"best epoch {self.best_epoch}/{len(self.history)}: {best}{before} -> {self.best_path} "
                f"[{self.num_parameters:,} parameters, {self.device}/{self.ops}, {self.seconds:.0f} s]")


# ---------------------------------------------------------------------------------------------
# Metrics of rankings against the gold answers a record knows about
# ---------------------------------------------------------------------------------------------
def gold_answers(record: QuerySubgraph, unreachable_base: int) -> np.ndarray:
    """The gold answer ids of a record as ``batch_metrics`` needs them.

    A record knows its answers inside the subgraph (``labels``) and ``num_answers`` = |A(q)|,
    answers outside included. Those outside get placeholder ids ``unreachable_base + j`` that no
    ranking can contain, so Recall divides by |A(q)| and they count as missed.
    """
    inside = (np.asarray(record.node_ids, np.int64)[np.asarray(record.labels, bool)]
              if record.labels.shape[0] == record.num_nodes else np.zeros(0, np.int64))
    inside = np.unique(inside)
    outside = max(int(record.num_answers) - inside.shape[0], 0)
    return np.concatenate([inside, unreachable_base + np.arange(outside, dtype=np.int64)])


def subgraph_metrics(rankings: Sequence, records: Sequence[QuerySubgraph],
                     ks: Sequence[int] = DEFAULT_KS) -> dict[str, np.ndarray]:
    """Per-query metric arrays of ``rankings`` (ids or (id, score) pairs), one per record.

    Same conventions as ``seeder_dgl.metrics`` (Recall ÷ |A(q)|, MRR over the whole ranking,
    0 for queries without answers), with |A(q)| = ``record.num_answers``.
    """
    if len(rankings) != len(records):
        raise ValueError(f"{len(rankings)} rankings for {len(records)} records")
    top = [int(np.max(r.node_ids, initial=-1)) for r in records]
    for ranking in rankings:
        items = [it[0] if isinstance(it, (tuple, list)) else it for it in ranking]
        top.append(max(items, default=-1))
    base = max(top, default=-1) + 1
    return batch_metrics(list(rankings), [gold_answers(r, base) for r in records], ks)


def evaluate_rankings(rankings: Sequence, records: Sequence[QuerySubgraph],
                      ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Mean of every metric over the queries, plus ``num_queries`` (like ``metrics.aggregate``)."""
    per_query = subgraph_metrics(rankings, records, ks)
    out = {name: float(values.mean()) if values.size else 0.0 for name, values in per_query.items()}
    out["num_queries"] = float(len(records))
    return out


@torch.no_grad()
def predict(policy: SeederPolicy, prep: Preprocessing, records: Sequence[QuerySubgraph], query_features: np.ndarray,
            rows: FeatureRows, device: torch.device, ops: MessagePassingOps, mode: str = "expand",
            batch_size: int = EVAL_BATCH_SIZE) -> list[list[int]]:
    """Deterministic rankings (global ids of V_T by decreasing score) with inference's own loop."""
    return [ids for ids, _ in rank_subgraphs(policy, prep, records, rows, query_features, device, ops, mode,
                                             batch_size)]


# ---------------------------------------------------------------------------------------------
# Pieces of the loop
# ---------------------------------------------------------------------------------------------
def stop_early(cfg: TrainConfig, epoch: int, best_epoch: int) -> bool:
    """Whether ``cfg.patience`` epochs after the warm-up have passed without a better validation
    score than that of ``best_epoch``. A resumed run decides from the same two numbers."""
    return (cfg.patience is not None and epoch < cfg.epochs and epoch > cfg.warmup_epochs
            and epoch - max(best_epoch, cfg.warmup_epochs) >= cfg.patience)


class _SequentialLR(torch.optim.lr_scheduler.SequentialLR):
    """torch's ``SequentialLR``; before torch 2.3 it warns about its own ``step(0)`` call at each
    milestone (the epoch argument's deprecation), which says nothing to a user."""

    def step(self):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The epoch parameter", category=UserWarning)
            super().step()


def warmup_cosine(optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int
                  ) -> torch.optim.lr_scheduler.LRScheduler:
    """torch's schedulers for a linear warm-up to the full rate over ``warmup_steps`` optimiser steps
    ((step + 1) / warmup_steps), then a cosine decay to 0 at ``total_steps``."""
    schedulers = torch.optim.lr_scheduler
    total, warmup = max(int(total_steps), 1), max(int(warmup_steps), 0)
    decay = schedulers.CosineAnnealingLR(optimizer, T_max=max(total - warmup, 1))
    if warmup == 0:
        return decay
    rise = schedulers.LinearLR(optimizer, start_factor=1 / warmup, end_factor=1.0, total_iters=max(warmup - 1, 1))
    return _SequentialLR(optimizer, [rise, decay], milestones=[warmup])


def hide_unknown(batch, prep: Preprocessing, generator: torch.Generator, rate: float = UNKNOWN_RELATION_RATE):
    """Show a fraction ``rate`` of the batch's edges with the unknown-relation slot (and of its nodes
    with the unknown-type slot), so those slots learn what a live graph's new types should get."""
    if rate <= 0:
        return batch
    hide = torch.rand(batch.rel.shape, generator=generator, device=batch.device) < rate
    batch.rel = torch.where(hide, torch.full_like(batch.rel, prep.unknown_relation), batch.rel)
    if batch.node_type is not None:
        hide = torch.rand(batch.node_type.shape, generator=generator, device=batch.device) < rate
        batch.node_type = torch.where(hide, torch.full_like(batch.node_type, prep.unknown_type), batch.node_type)
    return batch


def minibatches(order: np.ndarray, batch_size: int):
    """One epoch's index batches, in the (shuffled) ``order``."""
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


class RunningStats:
    """An epoch's running means of the loss terms, reward and gradient norm (one host copy per step)."""

    KEYS = ("loss", "rl_loss", "bpr_loss", "reward")

    def __init__(self, epoch: int):
        self.epoch, self.sums, self.grad_norm, self.steps, self.seen = epoch, dict.fromkeys(self.KEYS, 0.0), 0.0, 0, 0
        self.started = time.perf_counter()

    @staticmethod
    def step_sums(objective, n: int) -> torch.Tensor:
        """[len(KEYS)]: the step's loss terms and mean reward, times its ``n`` questions (summed
        over the training processes before ``add``)."""
        return torch.stack([objective.loss.detach(), objective.rl_loss.detach(), objective.bpr_loss.detach(),
                            objective.reward.detach().mean()]).to(torch.float32) * n

    def add(self, sums: torch.Tensor, grad_norm: torch.Tensor, n: int) -> None:
        values = (sums / max(n, 1)).tolist() + [float(grad_norm)]
        if not math.isfinite(values[0]):
            raise SeederError(f"the loss became {values[0]} at epoch {self.epoch}, step {self.steps + 1}: "
                              "lower the learning rate (overrides lr) or check the embeddings")
        for key, value in zip(self.KEYS, values):
            self.sums[key] += value * n
        self.grad_norm += values[-1]
        self.steps += 1
        self.seen += n

    def text(self) -> str:
        if not self.seen:
            return ""
        return (f"loss {self.sums['loss'] / self.seen:.4f}  reward {self.sums['reward'] / self.seen:.3f}  "
                f"grad {self.grad_norm / max(self.steps, 1):.2f}")

    def row(self, lr: float, val: dict[str, float], val_seconds: float, train_seconds: float) -> dict[str, Any]:
        return {"epoch": self.epoch, **{k: v / self.seen for k, v in self.sums.items()},
                "grad_norm": self.grad_norm / self.steps, "lr": lr, "steps": self.steps,
                "train_seconds": train_seconds, "val_seconds": val_seconds, "seconds": train_seconds + val_seconds,
                "queries_per_s": self.seen / max(train_seconds, 1e-9), "val": val}


def epoch_line(row: dict[str, Any], epochs: int, improved: bool) -> str:
    val = row["val"]
    return (f"epoch {row['epoch']}/{epochs}  loss {row['loss']:.4f} (RL {row['rl_loss']:.4f}, rank "
            f"{row['bpr_loss']:.4f})  reward {row['reward']:.3f}  | val R@20 {val['recall@20']:.4f}  "
            f"H@1 {val['hit@1']:.4f}  H@5 {val['hit@5']:.4f}  MRR {val['mrr']:.4f}  | "
            f"{row['queries_per_s']:.1f} q/s, {row['seconds']:.1f} s" + ("  *best*" if improved else ""))


def adamw(params, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """torch's AdamW, fused where torch has a fused kernel for the parameters' device (the CPU since
    torch 2.4), else ``foreach``: the policy's ~80 small tensors make a per-tensor step cost about
    3.8 times the fused one (``benchmarks/bench_optimizer.py``)."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, ValueError):  # no fused kernel for this device in this torch
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)


class BatchObjective(torch.nn.Module):
    """The training objective of a batch as a module: what DDP wraps (it sums the gradients of the
    parameters of the module whose forward pass it ran). Returns the weighted loss and the
    ``rollout.Objective`` with its terms."""

    def __init__(self, policy: SeederPolicy, cfg: TrainConfig, ops: MessagePassingOps):
        super().__init__()
        self.policy, self.cfg, self.ops = policy, cfg, ops

    def forward(self, batch, generator: torch.Generator, weight: float = 1.0):
        objective = training_objective(self.policy, batch, self.cfg, ops=self.ops, generator=generator)
        return (objective.loss if weight == 1 else objective.loss * weight), objective


def check_inputs(train_records, train_query_emb, val_records, val_query_emb, dimension: int):
    """The non-empty training records and their query embeddings; one-line errors for unusable input."""
    for name, recs, q in (("training", train_records, train_query_emb), ("validation", val_records, val_query_emb)):
        if len(recs) != len(q):
            raise ValueError(f"{len(recs)} {name} records but {len(q)} query embeddings")
        if len(recs) and np.shape(q)[1] != dimension:
            raise SeederError(f"{name} query embeddings have {np.shape(q)[1]} dimensions, node embeddings "
                              f"{dimension}: extract the subgraphs again with the graph's embedding model")
    keep = [i for i, r in enumerate(train_records) if r.num_nodes > 0]
    if not keep:
        raise SeederError("no training subgraphs (or all are empty): run `seeder-dgl extract` for the train split")
    if not len(val_records):
        raise SeederError("no validation subgraphs: run `seeder-dgl extract <dataset> --split val` "
                          "(model selection needs them)")
    return [train_records[i] for i in keep], np.asarray(train_query_emb, np.float32)[keep]


def relation_names(relation_types: Sequence[str] | None, num_relations: int) -> list[str]:
    """The training relation vocabulary's names (placeholders where none were given): written into
    the checkpoint, so their number must be ``num_relations``."""
    names = list(relation_types) if relation_types is not None else [f"relation_{i}" for i in range(num_relations)]
    if len(names) != num_relations:
        raise ValueError(f"{len(names)} relation types for num_relations={num_relations}")
    return names


# ---------------------------------------------------------------------------------------------
# Set-up: seeding, message passing, features, the policy and its optimiser
# ---------------------------------------------------------------------------------------------
@contextmanager
def deterministic_on_cpu(device: torch.device) -> Iterator[None]:
    """Deterministic kernels for a CPU run's duration (same seed, same weights), then the caller's
    setting back: ``train`` is called from tests and notebooks that have their own."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def training_ops(cfg: TrainConfig, device: torch.device, console: Console) -> tuple[MessagePassingOps, int]:
    """The message passing and the number of training processes (several only on the CPU: GPUs
    take one process each, started by torchrun)."""
    ops = select_ops(device, cfg.ops)
    workers = cfg.workers if device.type == "cpu" else 1
    if workers > 1 and ops.name == "dgl":
        # DGL's OpenMP runtime does not survive a fork: a forked process whose parent had run DGL
        # kernels can hang in its first one. The pure-torch ops compute the same thing.
        ops = TorchOps()
        console.print(f"{workers} training processes: message passing with the pure-torch ops "
                      "(DGL's OpenMP runtime is not safe in forked processes)")
    return ops, workers


@dataclass
class Features:
    """The policy's inputs, computed once per run so every epoch (and every forked worker) shares
    them: the preprocessing, the node feature rows of all subgraphs, the preprocessed queries."""

    prep: Preprocessing
    rows: FeatureRows
    train_q: np.ndarray
    val_q: np.ndarray
    in_dim: int


def fit_features(cfg: TrainConfig, state: dict | None, node_emb: np.ndarray, node_types: np.ndarray | None,
                 node_type_names: Sequence[str] | None, num_relations: int, train_records: Sequence[QuerySubgraph],
                 train_query_emb: np.ndarray, val_records: Sequence[QuerySubgraph],
                 val_query_emb: np.ndarray) -> Features:
    """PCA fitted once on the node embeddings (a resumed run takes its checkpoint's, so its inputs
    do not move), applied to the nodes of every subgraph and to the queries."""
    if cfg.node_types and node_type_names is None:
        node_types, node_type_names = np.full(int(node_emb.shape[0]), -1, np.int64), []
    prep = (Preprocessing.from_state(state) if state is not None
            else Preprocessing.fit(node_emb, cfg.pca_dim, num_relations,
                                   list(node_type_names) if cfg.node_types else None))
    type_table = prep.type_table(node_types, node_type_names) if prep.node_type_names is not None else None
    rows = prep.node_rows(node_emb, list(train_records) + list(val_records), node_types=type_table)
    train_q, val_q = prep.features(train_query_emb), prep.features(np.asarray(val_query_emb, np.float32))
    return Features(prep, rows, train_q, val_q, prep.in_dim or int(node_emb.shape[1]))


def build_loop(cfg: TrainConfig, features: Features, num_relations: int, relation_emb: np.ndarray | None,
               device: torch.device, steps_per_epoch: int, state: dict | None) -> LoopState:
    """The policy, AdamW with the warm-up + cosine schedule (stepped per batch) and the run's two
    generators: what the loop changes and ``last.pt`` carries (``LoopState``), restored from
    ``state`` when resuming."""
    if cfg.relation_text and relation_emb is None:
        raise SeederError("relation_text is set but no relation-name embeddings were given")
    relation_text = relation_text_table(relation_emb, num_relations) if cfg.relation_text else None
    policy = build_policy(cfg, features.in_dim, num_relations, relation_text, features.prep.num_node_types).to(device)
    optimizer = adamw(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = warmup_cosine(optimizer, cfg.epochs * steps_per_epoch, cfg.warmup_epochs * steps_per_epoch)
    loop = LoopState(policy, optimizer, scheduler, np.random.default_rng(cfg.seed),
                     torch.Generator(device=device).manual_seed(cfg.seed + 1), device)
    if state is not None:
        loop.restore(state)
    return loop


def resuming_line(out_dir: Path, loop: LoopState, cfg: TrainConfig) -> str:
    return (f"resuming {out_dir / 'last.pt'} after epoch {loop.start_epoch}/{cfg.epochs} "
            f"(best {SELECTION_METRIC} {loop.best_metric:.4f} at epoch {loop.best_epoch})")


# ---------------------------------------------------------------------------------------------
# What every training process runs
# ---------------------------------------------------------------------------------------------
class Steps:
    """A training process's share of the work: the optimisation step of a batch and validation.
    Rank 0 calls them from ``train``'s loop; the other ranks run them when rank 0 says so
    (``follow``). Holds the process group and the objective (under DDP once joined), which
    ``joined`` releases in the order torch's teardown needs."""

    def __init__(self, cfg: TrainConfig, loop: LoopState, features: Features, train_records: Sequence[QuerySubgraph],
                 val_records: Sequence[QuerySubgraph], device: torch.device, ops: MessagePassingOps):
        self.cfg, self.loop, self.features, self.device, self.ops = cfg, loop, features, device, ops
        self.train_records, self.val_records = train_records, val_records
        self.edge_counts = np.asarray([r.src.shape[0] + r.num_nodes for r in train_records], np.float64)
        self.group = parallel.Group()
        self.objective: torch.nn.Module | None = BatchObjective(loop.policy, cfg, ops)

    def step(self, index: np.ndarray, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's share of the batch ``index``: loss, gradients (summed over the training
        processes by DDP), clipping, the optimiser and schedule steps. Returns the summed step sums
        (``RunningStats.step_sums``) and the gradient norm."""
        group, loop, features = self.group, self.loop, self.features
        mine = parallel.shard(index, group.rank, group.world, cost=self.edge_counts[index])
        # Each process weighs its share's mean loss by the share's size (times the world size, as
        # DDP averages): the summed gradients are those of the whole batch's mean loss. A process
        # without a share still runs one question, weighted 0: DDP needs every rank's backward.
        weight, counted = len(mine) / len(index) * group.world, len(mine)
        if not counted:
            mine, weight = index[:1], 0.0
        loop.optimizer.zero_grad(set_to_none=True)
        batch = features.prep.batch([self.train_records[i] for i in mine], features.rows, features.train_q[mine],
                                    self.device)
        batch = hide_unknown(batch, features.prep, generator)
        loss, objective = self.objective(batch, generator, weight)
        group.backward(loss)
        sums = group.sum_stats(RunningStats.step_sums(objective, counted).cpu())
        grad_norm = torch.nn.utils.clip_grad_norm_(loop.policy.parameters(), self.cfg.max_grad_norm)
        loop.optimizer.step()
        loop.scheduler.step()
        return sums, grad_norm

    def validate(self) -> tuple[dict[str, float], float]:
        """Every process ranks its share of the validation questions; rank 0 scores them all
        (metrics and seconds; the others get ``({}, 0.0)``)."""
        tick = time.perf_counter()
        features = self.features
        mine = parallel.shard(np.arange(len(self.val_records)), self.group.rank, self.group.world)
        rankings = predict(self.loop.policy, features.prep, [self.val_records[i] for i in mine], features.val_q[mine],
                           features.rows, self.device, self.ops, self.cfg.rollout_mode)
        rankings = self.group.gather(rankings)
        if self.group.rank != 0:
            return {}, 0.0
        return evaluate_rankings(rankings, self.val_records), time.perf_counter() - tick

    def validate_everywhere(self) -> tuple[dict[str, float], float]:
        """Rank 0: has every process validate its share (``validate``)."""
        self.group.command(parallel.VALIDATE)
        return self.validate()

    def follow(self, group: parallel.Group) -> None:
        """A worker (rank ≥ 1, forked or launched): runs rank 0's commands until told to stop."""
        self._join(group)
        while True:
            code, epoch, order = group.command()
            if code == parallel.STOP:
                return
            if code == parallel.VALIDATE:
                self.validate()
                continue
            seed = parallel.rank_seed(self.cfg.seed, epoch, group.rank)
            torch.manual_seed(seed)  # dropout
            generator = torch.Generator(device=self.device).manual_seed(seed)
            self.loop.policy.train()
            for index in minibatches(order, self.cfg.batch_size):
                self.step(index, generator)

    def _join(self, group: parallel.Group) -> None:
        """Every rank at the same point: DDP starts by broadcasting rank 0's weights, and launched
        processes (not copies of rank 0, as forked ones are) take its optimiser and schedule."""
        self.group = group
        self.objective = group.wrap(self.objective)
        if group.launcher == "torchrun":
            shared = group.share({"optimizer": self.loop.optimizer.state_dict(),
                                  "scheduler": self.loop.scheduler.state_dict()} if group.rank == 0 else None)
            if group.rank != 0:
                self.loop.optimizer.load_state_dict(shared["optimizer"])
                self.loop.scheduler.load_state_dict(shared["scheduler"])

    @contextmanager
    def joined(self, workers: int) -> Iterator[parallel.Group]:
        """The training processes for the body's duration (``parallel.start``: a worker follows rank
        0 inside it); on the way out rank 0 stops them, gracefully unless the body raised."""
        finished = False
        try:
            group = parallel.start(workers, self.follow, self.device)
            if group.rank == 0:
                self._join(group)
            yield group
            finished = True
        finally:
            # DDP's reducer goes before the process group: freed after it, the reducer would drop the
            # group's last reference while holding the GIL, and torch 2.2's gloo threads wait for the GIL
            # to finish their last work (a deadlock at exit)
            self.objective = None
            self.group.close(graceful=finished)


# ---------------------------------------------------------------------------------------------
# What the loop says and writes
# ---------------------------------------------------------------------------------------------
def progress_bars(console: Console, enabled: bool) -> Progress:
    """One bar per epoch's batches, with the running loss, reward and gradient norm."""
    columns = (TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn())
    return Progress(*columns, console=console, disable=not enabled)


def run_line(num_parameters: int, train_records: Sequence, val_records: Sequence, steps_per_epoch: int,
             device: torch.device, ops: MessagePassingOps, group: parallel.Group) -> str:
    """What is about to be trained, and where (printed once, before the untrained validation)."""
    return (f"policy: {num_parameters:,} trainable parameters; {len(train_records):,} training and "
            f"{len(val_records):,} validation queries; {steps_per_epoch} steps/epoch; device {device}, "
            f"ops {ops.name}, {torch.get_num_threads()} torch threads"
            + (f", {group.world} training processes" if group.parallel else ""))


def run_config(run: RunWriter, meta: dict, device: torch.device, ops: MessagePassingOps, workers: int,
               train_records: Sequence[QuerySubgraph], val_records: Sequence[QuerySubgraph], skipped: dict[str, int],
               resumed_from: int | None) -> dict[str, Any]:
    """``config.json``'s payload: how the run was set up, so its numbers can be read and redone."""
    cfg, num_relations, prep = run.cfg, len(run.relation_types), run.prep
    return {
        "config": config_to_dict(cfg), "dataset": meta, "seed": cfg.seed, "device": str(device), "ops": ops.name,
        "threads": {"torch": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
        "workers": workers,
        "num_parameters": run.num_parameters, "num_relations": num_relations, "relation_types": run.relation_types,
        "unknown_relation_slot": num_relations, "unknown_relation_rate": UNKNOWN_RELATION_RATE,
        "pca": None if prep.pca_components is None else {"dim": int(prep.pca_components.shape[0]),
                                                         "input_dim": run.dimension},
        "train": {"queries": len(train_records), **skipped,
                  "mean_nodes": float(np.mean([r.num_nodes for r in train_records]))},
        "val": {"queries": len(val_records), "mean_nodes": float(np.mean([r.num_nodes for r in val_records]))},
        "selection_metric": SELECTION_METRIC, "data_fingerprint": run.fingerprint,
        "resumed_from_epoch": resumed_from,
    }


def last_epoch(cfg: TrainConfig, loop: LoopState, resumed: bool, out_dir: Path, console: Console) -> int:
    """The last epoch to train: ``cfg.epochs``, or none past the resumed one if that run had
    already stopped early (same rule, same two numbers)."""
    if resumed and stop_early(cfg, loop.start_epoch, loop.best_epoch):
        console.print(f"{out_dir} had stopped early after epoch {loop.start_epoch} (patience {cfg.patience}): "
                      "nothing left to train")
        return loop.start_epoch
    return cfg.epochs


def stopping_line(cfg: TrainConfig, epoch: int, best_epoch: int) -> str:
    return (f"stopping after epoch {epoch}: validation {SELECTION_METRIC} has not improved for "
            f"{epoch - best_epoch} epochs (patience {cfg.patience}); best.pt is epoch {best_epoch}")


def train_result(loop: LoopState, run: RunWriter, cfg: TrainConfig, device: torch.device, ops: MessagePassingOps,
                 started: float, resumed: bool, skipped: dict[str, int]) -> TrainResult:
    """The run's outcome from its history (a resumed run's includes the epochs before it)."""
    if not loop.history:
        raise SeederError(f"{run.out_dir} holds no finished epoch and cfg.epochs is {cfg.epochs}: nothing was trained")
    best_row = next(r for r in loop.history if r["epoch"] == loop.best_epoch)
    return TrainResult(out_dir=run.out_dir, best_path=run.best_path, last_path=run.last_path,
                       best_epoch=loop.best_epoch, best_metrics=best_row["val"], final_metrics=loop.history[-1]["val"],
                       initial_metrics=loop.initial, history=loop.history, num_parameters=run.num_parameters,
                       device=str(device), ops=ops.name, seconds=time.perf_counter() - started,
                       resumed_from=loop.start_epoch if resumed else None, skipped=skipped)


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------
def train(cfg: TrainConfig, train_records: Sequence[QuerySubgraph], train_query_emb: np.ndarray,
          val_records: Sequence[QuerySubgraph], val_query_emb: np.ndarray, node_emb: np.ndarray,
          num_relations: int, out_dir: str | Path, *, resume: bool = False, progress: bool = True,
          relation_types: list[str] | None = None, dataset_meta: dict | None = None,
          relation_emb: np.ndarray | None = None, console: Console | None = None,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
          node_types: np.ndarray | None = None, node_type_names: Sequence[str] | None = None,
          retriever: TrainedRetriever | None = None) -> TrainResult | None:
    """Train the SeedER policy on cached query subgraphs; write checkpoints and run records to ``out_dir``.

    ``node_emb`` [N, d]: raw node embeddings indexed by global id (a memmap works);
    ``*_query_emb`` [Q, d]: raw query embeddings aligned with the records; ``num_relations``:
    the training relation vocabulary (ids ≥ it are "unknown"); ``relation_emb`` [R, d]:
    relation-name embeddings, needed only with ``cfg.relation_text``; ``dataset_meta``: recorded
    in config.json and the checkpoint (``embedding_model`` is checked when the policy is loaded).
    ``resume``: continue from ``out_dir/last.pt`` if it exists. ``on_epoch_end(row)`` is called
    after each epoch's checkpoints and records are written. ``node_types`` [N] / ``node_type_names``:
    each node's type as an index into the names (-1: none), used with ``cfg.node_types``.
    ``retriever``: what the subgraphs were grown with, written beside each best.pt (``training.artifact``).
    Under torchrun every process calls ``train``; rank 0 returns the result, the others None.
    """
    started, console, out_dir = time.perf_counter(), console or Console(), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta, dimension = dict(dataset_meta or {}), int(node_emb.shape[1])
    relation_types = relation_names(relation_types, num_relations)
    skipped = {"train_empty_subgraphs": sum(r.num_nodes == 0 for r in train_records)}
    train_records, train_query_emb = check_inputs(train_records, train_query_emb, val_records, val_query_emb, dimension)
    fingerprint = data_fingerprint(train_records, val_records)
    state = resume_state(out_dir, resume, cfg, dimension, num_relations, fingerprint, console)

    # 1. Seeding
    device = parallel.local_device(torch.device(cfg.resolve_device()))
    torch.manual_seed(cfg.seed)
    with deterministic_on_cpu(device):
        ops, workers = training_ops(cfg, device, console)
        # 2. Features: PCA fitted once on the node embeddings (or the checkpoint's, when resuming)
        features = fit_features(cfg, state, node_emb, node_types, node_type_names, num_relations,
                                train_records, train_query_emb, val_records, val_query_emb)
        # 3. Policy, optimiser, schedule; the loop's state (restored when resuming)
        steps_per_epoch = math.ceil(len(train_records) / cfg.batch_size)
        loop = build_loop(cfg, features, num_relations, relation_emb, device, steps_per_epoch, state)
        if state is not None:
            console.print(resuming_line(out_dir, loop, cfg))
        steps = Steps(cfg, loop, features, train_records, val_records, device, ops)
        with steps.joined(workers) as group:
            if group.rank != 0:  # a launched worker has followed rank 0's run to its end
                return None
            run = RunWriter(out_dir, cfg, features.prep, features.in_dim, dimension, relation_types,
                            meta.get("embedding_model"), run_records.count_parameters(loop.policy), fingerprint,
                            SELECTION_METRIC, f"{cfg.dataset} / {cfg.ablation} (seed {cfg.seed})",
                            bound_to=meta.get("bound_to"), retriever=retriever)
            console.print(run_line(run.num_parameters, train_records, val_records, steps_per_epoch, device, ops,
                                   group), soft_wrap=True)
            run_records.write_config(out_dir, run_config(run, meta, device, ops, group.world, train_records,
                                                         val_records, skipped, loop.start_epoch if state is not None else None))
            if state is None:
                loop.initial = steps.validate_everywhere()[0]
                console.print("untrained policy: " + "  ".join(f"{k} {loop.initial[k]:.4f}" for k in REPORTED),
                              soft_wrap=True)

            # 4. The loop: batch -> M sampled rollouts -> L = L_RL + λ L_rank -> step -> log, then validate
            with progress_bars(console, progress) as bars:
                for epoch in range(loop.start_epoch + 1, last_epoch(cfg, loop, state is not None, out_dir, console) + 1):
                    loop.policy.train()
                    stats = RunningStats(epoch)
                    task = bars.add_task("train", total=steps_per_epoch, epoch=f"{epoch}/{cfg.epochs}", stats="")
                    order = loop.np_rng.permutation(len(train_records))
                    group.command(parallel.TRAIN, epoch, order)
                    for index in minibatches(order, cfg.batch_size):
                        sums, grad_norm = steps.step(index, loop.gumbel)  # loss -> backward (summed) -> clip -> step
                        stats.add(sums, grad_norm, len(index))
                        bars.update(task, advance=1, stats=stats.text())
                    train_seconds = time.perf_counter() - stats.started
                    bars.remove_task(task)

                    # 5. Validation (split over the training processes), checkpoints, records
                    val, val_seconds = steps.validate_everywhere()
                    row = stats.row(loop.scheduler.get_last_lr()[0], val, val_seconds, train_seconds)
                    improved = run.end_epoch(loop, row, selection_score(val))
                    bars.console.print(epoch_line(row, cfg.epochs, improved), soft_wrap=True)
                    if on_epoch_end is not None:
                        on_epoch_end(row)
                    if stop_early(cfg, epoch, loop.best_epoch):
                        bars.console.print(stopping_line(cfg, epoch, loop.best_epoch), soft_wrap=True)
                        break
    return train_result(loop, run, cfg, device, ops, started, state is not None, skipped)
