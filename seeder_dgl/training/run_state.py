"""What a training run keeps besides the loop: the state a resumed run restores, and what each
epoch writes (``best.pt``, ``last.pt``, ``retriever.json`` and the run records).

``last.pt`` holds the model, optimiser, scheduler, the three random generators (torch, the numpy
batch order, the Gumbel noise), the history and the best epoch so far, so ``resume=True``
continues a killed run exactly after its last finished epoch. ``best.pt`` holds what inference
needs. Both are written atomically, and a resume refuses a run trained with other settings,
other embeddings or other subgraphs.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from seeder_dgl.errors import SeederError
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training import records as run_records
from seeder_dgl.training.artifact import TrainedRetriever, write_trained_retriever
from seeder_dgl.training.checkpoint import (FORMAT, FORMAT_VERSION, Preprocessing, config_to_dict, read_checkpoint,
                                            save_checkpoint)
from seeder_dgl.training.config import TrainConfig

RESUMABLE_CHANGES = ("epochs", "patience", "device", "ops", "workers")
"""Config fields that may differ when resuming (the schedule then follows the new epoch count)."""
RESUME_KEYS = ("model", "config", "optimizer", "scheduler", "rng", "epoch")


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


def read_resumable(path: Path, cfg: TrainConfig, dimension: int, num_relations: int, fingerprint: str) -> dict:
    """``last.pt`` of an interrupted run, after checking it was trained the way this run will be."""
    state = read_checkpoint(path, required=RESUME_KEYS)
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
    return state


def resume_state(out_dir: Path, resume: bool, cfg: TrainConfig, dimension: int, num_relations: int,
                 fingerprint: str, console) -> dict | None:
    """What ``train(resume=...)`` continues from: ``out_dir/last.pt`` (checked by ``read_resumable``)
    when asked to resume and it exists, else None (a fresh run; said on ``console`` when a resume
    was asked for, so a mistyped folder does not pass unnoticed)."""
    if resume and (out_dir / "last.pt").exists():
        return read_resumable(out_dir / "last.pt", cfg, dimension, num_relations, fingerprint)
    if resume:
        console.print(f"[yellow]nothing to resume in {out_dir} (no last.pt): starting a fresh run")
    return None


@dataclass
class LoopState:
    """Everything the loop changes as it runs, and that ``last.pt`` carries to a resumed run."""

    policy: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    np_rng: np.random.Generator
    """Order of the training batches."""
    gumbel: torch.Generator
    """Gumbel noise of the sampled trajectories and the hidden relations."""
    device: torch.device
    history: list[dict[str, Any]] = field(default_factory=list)
    best_metric: float = -math.inf
    best_epoch: int = 0
    start_epoch: int = 0
    """The last finished epoch before this call (0: a fresh run)."""
    initial: dict[str, float] = field(default_factory=dict)
    """Validation metrics of the untrained policy."""

    def restore(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        try:
            self.scheduler.load_state_dict(state["scheduler"])
        except (KeyError, TypeError, ValueError, IndexError):  # another schedule's state (an older release's)
            raise SeederError("last.pt holds a learning-rate schedule this version does not read: "
                              "train again without --resume (best.pt is kept)") from None
        restore_rng(state["rng"], self.np_rng, self.gumbel, self.device)
        self.history = list(state["history"])
        self.best_metric, self.best_epoch = float(state["best_metric"]), int(state["best_epoch"])
        self.start_epoch, self.initial = int(state["epoch"]), dict(state.get("initial_validation") or {})

    def resume_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "rng": rng_state(self.np_rng, self.gumbel, self.device), "history": self.history,
                "best_metric": self.best_metric, "best_epoch": self.best_epoch, "initial_validation": self.initial}


@dataclass
class RunWriter:
    """Writes a run's checkpoints and records into ``out_dir`` at the end of every epoch."""

    out_dir: Path
    cfg: TrainConfig
    prep: Preprocessing
    in_dim: int
    dimension: int
    relation_types: list[str]
    embedding_model: str | None
    num_parameters: int
    fingerprint: str
    selection_metric: str
    title: str
    bound_to: dict | None = None
    """The dataset's graph identity and relation prior the run was trained with (``DatasetInfo.bound_to``)."""
    retriever: TrainedRetriever | None = None
    """What the subgraphs were grown with, written as ``retriever.json`` with each best.pt (None: not written)."""

    @property
    def best_path(self) -> Path:
        return self.out_dir / "best.pt"

    @property
    def last_path(self) -> Path:
        return self.out_dir / "last.pt"

    def checkpoint(self, policy: torch.nn.Module, epoch: int, metrics: dict[str, float]) -> dict[str, Any]:
        """What inference needs (best.pt); last.pt adds the loop's state."""
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "model": policy.state_dict(),
            "config": config_to_dict(self.cfg), "in_dim": self.in_dim, "dimension": self.dimension,
            **self.prep.to_state(), "relation_types": self.relation_types, "dataset": self.cfg.dataset,
            "embedding_model": self.embedding_model, "epoch": epoch, "metrics": metrics,
            "num_parameters": self.num_parameters, "data_fingerprint": self.fingerprint,
            "bound_to": dict(self.bound_to or {}),
        }

    def end_epoch(self, loop: LoopState, row: dict[str, Any], score: float) -> bool:
        """Record ``row``; save best.pt when ``score`` beats the best so far, and last.pt always.
        Returns whether this epoch is the new best."""
        epoch, val = row["epoch"], row["val"]
        loop.history.append(row)
        improved = score > loop.best_metric
        if improved:
            loop.best_metric, loop.best_epoch = score, epoch
            if self.retriever is not None:  # first: best.pt and it are checked to be one run's
                write_trained_retriever(self.out_dir, replace(self.retriever, data_fingerprint=self.fingerprint))
            save_checkpoint(self.best_path, self.checkpoint(loop.policy, epoch, val))
        save_checkpoint(self.last_path, {**self.checkpoint(loop.policy, epoch, val), **loop.resume_state()})
        run_records.write_run_records(self.out_dir, loop.history, best_epoch=loop.best_epoch,
                                      selection_metric=self.selection_metric, initial_validation=loop.initial,
                                      extra={"num_parameters": self.num_parameters}, title=self.title)
        return improved
