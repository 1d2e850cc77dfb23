"""The SeedER training loop, cleanrl-style: one function, read top to bottom.

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
   ``best.pt`` keeps the epoch of best validation Recall@20; ``last.pt`` (every epoch, with
   optimiser, scheduler, RNG states and history) lets ``resume=True`` continue a killed run
   exactly from its last finished epoch. Both are written atomically.
6. Run records beside them: config.json, metrics.json, history.csv, curves.png (``records``).

Threads: this loop does not touch thread settings; ``seeder_dgl.threads.configure_threads`` does.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from seeder_dgl.errors import SeederError
from seeder_dgl.evaluation.metrics import DEFAULT_KS, batch_metrics
from seeder_dgl.inference import EVAL_BATCH_SIZE, rank_subgraphs
from seeder_dgl.model.ops import MessagePassingOps, select_ops
from seeder_dgl.model.policy import SeederPolicy
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training import records as run_records
from seeder_dgl.training.checkpoint import (FORMAT, FORMAT_VERSION, FeatureRows, Preprocessing, build_policy,
                                            config_to_dict, read_checkpoint, relation_text_table, save_checkpoint)
from seeder_dgl.training.config import TrainConfig
from seeder_dgl.training.rollout import training_objective

SELECTION_METRIC = "recall@20"
TIE_BREAK = ("mrr", 1e-3)
"""Epochs are chosen by Recall@20 + 0.001 MRR: on a small graph Recall@20 saturates early (every
answer among 20 picked nodes), and the ranking keeps improving after that."""


def selection_score(val: dict) -> float:
    return float(val[SELECTION_METRIC]) + TIE_BREAK[1] * float(val.get(TIE_BREAK[0], 0.0))
"""Model selection on validation Recall@20 (method.md), never on test."""
UNKNOWN_RELATION_RATE = 0.01
"""Fraction of training edge entries whose relation is replaced by the unknown-relation slot."""
REPORTED = ("hit@1", "hit@5", "mrr", "recall@20", "hit@any", "recall@any")
RESUMABLE_CHANGES = ("epochs", "device", "ops")
"""Config fields that may differ when resuming (the schedule then follows the new epoch count)."""


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

    Same conventions as ``evaluation.metrics`` (Recall ÷ |A(q)|, MRR over the whole ranking,
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
class WarmupCosine:
    """Learning-rate factor per optimiser step: linear warm-up to 1, then cosine decay to 0."""

    def __init__(self, total_steps: int, warmup_steps: int):
        self.total, self.warmup = max(int(total_steps), 1), max(int(warmup_steps), 0)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.total <= self.warmup:
            return 1.0
        progress = min((step - self.warmup) / (self.total - self.warmup), 1.0)
        return 0.5 * (1.0 + math.cos(math.pi * progress))


def data_fingerprint(train_records: Sequence[QuerySubgraph], val_records: Sequence[QuerySubgraph]) -> str:
    """Identifies the splits a run trained on (a resumed run must see the same data)."""
    h = hashlib.sha1()
    for name, recs in (("train", train_records), ("val", val_records)):
        h.update(name.encode())
        h.update(np.asarray([r.query_id for r in recs], np.int64).tobytes())
        h.update(np.asarray([r.num_nodes for r in recs], np.int64).tobytes())
    return h.hexdigest()[:16]


def rng_state(np_rng: np.random.Generator, gumbel: torch.Generator, device: torch.device) -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np_rng.bit_generator.state, "gumbel": gumbel.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, Any], np_rng: np.random.Generator, gumbel: torch.Generator,
                device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    np_rng.bit_generator.state = state["numpy"]
    gumbel.set_state(state["gumbel"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _check_resumable(state: dict, cfg: TrainConfig, dimension: int, num_relations: int, fingerprint: str,
                     path: Path) -> None:
    saved, now = state["config"], config_to_dict(cfg)
    changed = sorted(k for k in set(saved) | set(now) if k not in RESUMABLE_CHANGES and saved.get(k) != now.get(k))
    if changed:
        diff = ", ".join(f"{k}={saved.get(k)!r}→{now.get(k)!r}" for k in changed[:4])
        raise SeederError(f"cannot resume {path}: it was trained with other settings ({diff}); "
                          "resume with the same settings or start a fresh run elsewhere (--out)")
    if int(state["dimension"]) != dimension or int(state["num_relations"]) != num_relations:
        raise SeederError(f"cannot resume {path}: it was trained on {state['dimension']}-d embeddings and "
                          f"{state['num_relations']} relations, now {dimension} and {num_relations}")
    if state.get("data_fingerprint") not in (None, fingerprint):
        raise SeederError(f"cannot resume {path}: the train/val subgraphs changed since it was saved; "
                          "start a fresh run (without --resume)")


def _stats(sums: dict[str, float], count: int) -> str:
    if not count:
        return ""
    return (f"loss {sums['loss'] / count:.4f}  reward {sums['reward'] / count:.3f}  "
            f"grad {sums['grad_norm'] / max(sums['steps'], 1):.2f}")


# ---------------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------------
def train(cfg: TrainConfig, train_records: Sequence[QuerySubgraph], train_query_emb: np.ndarray,
          val_records: Sequence[QuerySubgraph], val_query_emb: np.ndarray, node_emb: np.ndarray,
          num_relations: int, out_dir: str | Path, *, resume: bool = False, progress: bool = True,
          relation_types: list[str] | None = None, dataset_meta: dict | None = None,
          relation_emb: np.ndarray | None = None, console: Console | None = None,
          on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
          node_types: np.ndarray | None = None, node_type_names: Sequence[str] | None = None) -> TrainResult:
    """Train the SeedER policy on cached query subgraphs; write checkpoints and run records to ``out_dir``.

    ``node_emb`` [N, d]: raw node embeddings indexed by global id (a memmap works);
    ``*_query_emb`` [Q, d]: raw query embeddings aligned with the records; ``num_relations``:
    the training relation vocabulary (ids ≥ it are "unknown"); ``relation_emb`` [R, d]:
    relation-name embeddings, needed only with ``cfg.relation_text``; ``dataset_meta``: recorded
    in config.json and the checkpoint (``embedding_model`` is checked when the policy is loaded).
    ``resume``: continue from ``out_dir/last.pt`` if it exists. ``on_epoch_end(row)`` is called
    after each epoch's checkpoints and records are written. ``node_types`` [N] / ``node_type_names``:
    each node's type as an index into the names (-1: none), used with ``cfg.node_types``.
    """
    started = time.perf_counter()
    console = console or Console()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    best_path, last_path = out_dir / "best.pt", out_dir / "last.pt"
    meta = dict(dataset_meta or {})
    dimension = int(node_emb.shape[1])
    if relation_types is None:
        relation_types = [f"relation_{i}" for i in range(num_relations)]
    relation_types = list(relation_types)
    if len(relation_types) != num_relations:
        raise ValueError(f"{len(relation_types)} relation types for num_relations={num_relations}")
    for name, recs, q in (("training", train_records, train_query_emb), ("validation", val_records, val_query_emb)):
        if len(recs) != len(q):
            raise ValueError(f"{len(recs)} {name} records but {len(q)} query embeddings")
        if len(recs) and np.shape(q)[1] != dimension:
            raise SeederError(f"{name} query embeddings have {np.shape(q)[1]} dimensions, node embeddings "
                              f"{dimension}: extract the subgraphs again with the graph's embedding model")
    skipped = {"train_empty_subgraphs": sum(r.num_nodes == 0 for r in train_records)}
    train_keep = [i for i, r in enumerate(train_records) if r.num_nodes > 0]
    if not train_keep:
        raise SeederError("no training subgraphs (or all are empty): run `seeder-dgl extract` for the train split")
    if not len(val_records):
        raise SeederError("no validation subgraphs: run `seeder-dgl extract <dataset> --split val` "
                          "(model selection needs them)")
    train_records = [train_records[i] for i in train_keep]
    train_query_emb = np.asarray(train_query_emb, np.float32)[train_keep]
    fingerprint = data_fingerprint(train_records, val_records)

    state = None
    if resume and last_path.exists():
        state = read_checkpoint(last_path, required=("model", "config", "optimizer", "scheduler", "rng", "epoch"))
        _check_resumable(state, cfg, dimension, num_relations, fingerprint, last_path)
    elif resume:
        console.print(f"[yellow]nothing to resume in {out_dir} (no last.pt): starting a fresh run")

    # 1. Seeding ---------------------------------------------------------------------------------
    device = torch.device(cfg.resolve_device())
    torch.manual_seed(cfg.seed)
    np_rng = np.random.default_rng(cfg.seed)
    gumbel = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    deterministic = (torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled())
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True, warn_only=True)
    ops = select_ops(device, cfg.ops)

    try:
        # 2. Features: PCA fitted once on the node embeddings (or the checkpoint's, when resuming).
        if cfg.node_types and node_type_names is None:
            node_types, node_type_names = np.full(int(node_emb.shape[0]), -1, np.int64), []
        prep = (Preprocessing.from_state(state) if state is not None
                else Preprocessing.fit(node_emb, cfg.pca_dim, num_relations,
                                       list(node_type_names) if cfg.node_types else None))
        all_records = list(train_records) + list(val_records)
        type_table = prep.type_table(node_types, node_type_names) if prep.node_type_names is not None else None
        rows = prep.node_rows(node_emb, all_records, node_types=type_table)
        train_q = prep.features(train_query_emb)
        val_q = prep.features(np.asarray(val_query_emb, np.float32))
        in_dim = prep.in_dim or dimension

        # 3. Policy, optimiser, schedule ----------------------------------------------------------
        relation_text = None
        if cfg.relation_text:
            if relation_emb is None:
                raise SeederError("relation_text is set but no relation-name embeddings were given")
            relation_text = relation_text_table(relation_emb, num_relations)
        policy = build_policy(cfg, in_dim, num_relations, relation_text, prep.num_node_types).to(device)
        num_parameters = run_records.count_parameters(policy)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        steps_per_epoch = math.ceil(len(train_records) / cfg.batch_size)
        schedule = WarmupCosine(cfg.epochs * steps_per_epoch, cfg.warmup_epochs * steps_per_epoch)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        mode = cfg.rollout_mode

        history: list[dict[str, Any]] = []
        best_metric, best_epoch, start_epoch, initial = -math.inf, 0, 0, {}
        if state is not None:
            policy.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            restore_rng(state["rng"], np_rng, gumbel, device)
            history = list(state["history"])
            best_metric, best_epoch = float(state["best_metric"]), int(state["best_epoch"])
            start_epoch, initial = int(state["epoch"]), dict(state.get("initial_validation") or {})
            console.print(f"resuming {last_path} after epoch {start_epoch}/{cfg.epochs} "
                          f"(best {SELECTION_METRIC} {best_metric:.4f} at epoch {best_epoch})")
        console.print(f"policy: {num_parameters:,} trainable parameters; {len(train_records):,} training and "
                      f"{len(val_records):,} validation queries; {steps_per_epoch} steps/epoch; device {device}, "
                      f"ops {ops.name}, {torch.get_num_threads()} torch threads", soft_wrap=True)

        def checkpoint_state(epoch: int, metrics: dict[str, float]) -> dict[str, Any]:
            """What inference needs (best.pt); last.pt adds the training state."""
            return {
                "format": FORMAT, "format_version": FORMAT_VERSION, "model": policy.state_dict(),
                "config": config_to_dict(cfg), "in_dim": in_dim, "dimension": dimension,
                **prep.to_state(), "relation_types": relation_types, "dataset": cfg.dataset,
                "embedding_model": meta.get("embedding_model"), "epoch": epoch, "metrics": metrics,
                "num_parameters": num_parameters, "data_fingerprint": fingerprint,
            }

        run_info = {
            "config": config_to_dict(cfg), "dataset": meta, "seed": cfg.seed, "device": str(device), "ops": ops.name,
            "threads": {"torch": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
            "num_parameters": num_parameters, "num_relations": num_relations, "relation_types": relation_types,
            "unknown_relation_slot": num_relations, "unknown_relation_rate": UNKNOWN_RELATION_RATE,
            "pca": None if prep.pca_components is None else {"dim": int(prep.pca_components.shape[0]),
                                                             "input_dim": dimension},
            "train": {"queries": len(train_records), **skipped,
                      "mean_nodes": float(np.mean([r.num_nodes for r in train_records]))},
            "val": {"queries": len(val_records), "mean_nodes": float(np.mean([r.num_nodes for r in val_records]))},
            "selection_metric": SELECTION_METRIC, "data_fingerprint": fingerprint,
            "resumed_from_epoch": start_epoch if state is not None else None,
        }
        run_records.write_config(out_dir, run_info)

        def evaluate() -> dict[str, float]:
            rankings = predict(policy, prep, val_records, val_q, rows, device, ops, mode)
            return evaluate_rankings(rankings, val_records)

        if state is None:
            initial = evaluate()
            console.print("untrained policy: " + "  ".join(f"{k} {initial[k]:.4f}" for k in REPORTED), soft_wrap=True)

        columns = (TextColumn("[bold]epoch {task.fields[epoch]}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TimeRemainingColumn())
        title = f"{cfg.dataset} / {cfg.ablation} (seed {cfg.seed})"
        with Progress(*columns, console=console, disable=not progress) as bars:
            for epoch in range(start_epoch + 1, cfg.epochs + 1):
                # 4. One epoch of optimisation --------------------------------------------------
                policy.train()
                task = bars.add_task("train", total=steps_per_epoch, epoch=f"{epoch}/{cfg.epochs}", stats="")
                sums = dict(loss=0.0, rl_loss=0.0, bpr_loss=0.0, reward=0.0, grad_norm=0.0, steps=0)
                seen, tick = 0, time.perf_counter()
                order = np_rng.permutation(len(train_records))
                for start in range(0, len(order), cfg.batch_size):
                    index = order[start:start + cfg.batch_size]
                    batch = prep.batch([train_records[i] for i in index], rows, train_q[index], device)
                    if UNKNOWN_RELATION_RATE > 0:
                        hide = torch.rand(batch.rel.shape, generator=gumbel, device=device) < UNKNOWN_RELATION_RATE
                        batch.rel = torch.where(hide, torch.full_like(batch.rel, prep.unknown_relation), batch.rel)
                        if batch.node_type is not None:  # the unknown-type slot learns the same way
                            hide = torch.rand(batch.node_type.shape, generator=gumbel, device=device) < UNKNOWN_RELATION_RATE
                            batch.node_type = torch.where(hide, torch.full_like(batch.node_type, prep.unknown_type),
                                                          batch.node_type)
                    objective = training_objective(policy, batch, cfg, ops=ops, generator=gumbel)
                    optimizer.zero_grad(set_to_none=True)
                    objective.loss.backward()
                    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                    scheduler.step()

                    # One device→host copy per step for the running statistics.
                    loss, rl_loss, bpr_loss, reward, norm = torch.stack([
                        objective.loss.detach(), objective.rl_loss.detach(), objective.bpr_loss.detach(),
                        objective.reward.detach().mean(), grad_norm.detach().to(objective.loss.dtype)]).tolist()
                    if not math.isfinite(loss):
                        raise SeederError(f"the loss became {loss} at epoch {epoch}, step {sums['steps'] + 1}: "
                                          "lower the learning rate (overrides lr) or check the embeddings")
                    n = len(index)
                    seen += n
                    sums["loss"] += loss * n
                    sums["rl_loss"] += rl_loss * n
                    sums["bpr_loss"] += bpr_loss * n
                    sums["reward"] += reward * n
                    sums["grad_norm"] += norm
                    sums["steps"] += 1
                    bars.update(task, advance=1, stats=_stats(sums, seen))
                train_seconds = time.perf_counter() - tick
                bars.remove_task(task)

                # 5. Validation, checkpoints, records -------------------------------------------
                tick = time.perf_counter()
                val = evaluate()
                val_seconds = time.perf_counter() - tick
                row = {
                    "epoch": epoch, "loss": sums["loss"] / seen, "rl_loss": sums["rl_loss"] / seen,
                    "bpr_loss": sums["bpr_loss"] / seen, "reward": sums["reward"] / seen,
                    "grad_norm": sums["grad_norm"] / sums["steps"], "lr": scheduler.get_last_lr()[0],
                    "steps": sums["steps"], "train_seconds": train_seconds, "val_seconds": val_seconds,
                    "seconds": train_seconds + val_seconds, "queries_per_s": seen / max(train_seconds, 1e-9),
                    "val": val,
                }
                history.append(row)
                improved = selection_score(val) > best_metric
                if improved:
                    best_metric, best_epoch = selection_score(val), epoch
                    save_checkpoint(best_path, checkpoint_state(epoch, val))
                save_checkpoint(last_path, {
                    **checkpoint_state(epoch, val), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": rng_state(np_rng, gumbel, device),
                    "history": history, "best_metric": best_metric, "best_epoch": best_epoch,
                    "initial_validation": initial,
                })
                run_records.write_run_records(out_dir, history, best_epoch=best_epoch,
                                              selection_metric=SELECTION_METRIC, initial_validation=initial,
                                              extra={"num_parameters": num_parameters}, title=title)
                bars.console.print(
                    f"epoch {epoch}/{cfg.epochs}  loss {row['loss']:.4f} (RL {row['rl_loss']:.4f}, rank "
                    f"{row['bpr_loss']:.4f})  reward {row['reward']:.3f}  | val R@20 {val['recall@20']:.4f}  "
                    f"H@1 {val['hit@1']:.4f}  H@5 {val['hit@5']:.4f}  MRR {val['mrr']:.4f}  | "
                    f"{row['queries_per_s']:.1f} q/s, {row['seconds']:.1f} s" + ("  *best*" if improved else ""),
                    soft_wrap=True)
                if on_epoch_end is not None:
                    on_epoch_end(row)
    finally:
        torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])

    if not history:
        raise SeederError(f"{out_dir} holds no finished epoch and cfg.epochs is {cfg.epochs}: nothing was trained")
    best_row = next(r for r in history if r["epoch"] == best_epoch)
    return TrainResult(out_dir=out_dir, best_path=best_path, last_path=last_path, best_epoch=best_epoch,
                       best_metrics=best_row["val"], final_metrics=history[-1]["val"], initial_metrics=initial,
                       history=history, num_parameters=num_parameters, device=str(device), ops=ops.name,
                       seconds=time.perf_counter() - started,
                       resumed_from=start_epoch if state is not None else None, skipped=skipped)
