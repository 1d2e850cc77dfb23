"""Inference: load a trained policy and rank query subgraphs with it.

One ranking loop (``training.ranking.rank_subgraphs``) serves the API, ``query``, ``eval`` and the validation of
the training loop, so what a run reports on validation is what a loaded checkpoint serves.
``load_policy`` checks that a checkpoint fits the graph it will rank (dataset, embedding model,
dimension) and turns every problem into a one-line ``CheckpointError``; ``load_trained_retriever``
loads a run folder's trained retriever (``training.artifact``: the settings, relation prior and
linker the policy was trained with) with its policy, checked the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from seeder_dgl.datasets import model_label
from seeder_dgl.model.ops import select_ops
from seeder_dgl.model.policy import SeederPolicy
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.retrieval.linking import EntityLinker
from seeder_dgl.retrieval.pipeline import RetrievalSettings, parse_stored, ready_linker, ready_prior
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.training.artifact import TrainedRetriever, artifact_path, read_trained_retriever
from seeder_dgl.training.checkpoint import (
    RELATION_TEXT_KEY,
    CheckpointError,
    Preprocessing,
    build_policy,
    config_from_dict,
    one_line,
    read_checkpoint,
)
from seeder_dgl.training.config import TrainConfig
from seeder_dgl.training.ranking import rank_subgraphs


@dataclass
class LoadedPolicy:
    """A trained policy in eval mode, with what it needs to rank new subgraphs."""

    policy: SeederPolicy
    cfg: TrainConfig
    preprocessing: Preprocessing
    relation_types: list[str]
    """The training relation vocabulary: relation id i is ``relation_types[i]``."""
    dataset: str
    embedding_model: str | None
    dimension: int
    """Dimension of the raw node/query embeddings (before PCA)."""
    device: torch.device
    epoch: int = 0
    metrics: dict | None = None
    """Validation metrics of the saved epoch."""
    path: Path | None = None
    bound_to: dict | None = None
    """The graph identity and relation-prior digest the run recorded (``DatasetInfo.bound_to``)."""
    data_fingerprint: str | None = None
    """The run's train/val subgraphs (``run_state.data_fingerprint``)."""

    @property
    def num_relations(self) -> int:
        return self.preprocessing.num_relations

    @property
    def pca(self) -> tuple[np.ndarray, np.ndarray] | None:
        p = self.preprocessing
        return None if p.pca_components is None else (p.pca_mean, p.pca_components)

    @torch.inference_mode()
    def rank(self, records: list[QuerySubgraph], node_features: np.ndarray | Sequence[np.ndarray] | Callable,
             query_emb: np.ndarray, k: int = 20, mode: str | None = None,
             batch_size: int = 64, node_types=None) -> list[list[tuple[int, float]]]:
        """Per record, up to ``k`` distinct ``(global node id, score)`` by decreasing score.

        ``node_features``: the [N, d] embedding matrix, one [n_i, d] array per record (rows aligned
        with ``node_ids``, e.g. read from Neo4j at query time), or a callable ``ids -> [len, d]``.
        ``query_emb``: [len(records), d] raw query embeddings. ``mode``: 'expand' or 'rerank';
        None uses the checkpoint's (the 'rerank' ablation was trained without expansion).
        Relation ids outside the training vocabulary use the unknown-relation slot. ``node_types``:
        one sequence of type names per record, or an array of type ids by global id
        (``Preprocessing.type_table``); None: every type unknown (a policy trained with types ranks
        worse without them).
        """
        if k <= 0:
            raise ValueError(f"k must be at least 1, not {k}")
        query_emb = np.asarray(query_emb, dtype=np.float32).reshape(len(records), -1) if records else query_emb
        if not records:
            return []
        if query_emb.shape[1] != self.dimension:
            raise CheckpointError(f"query embeddings have {query_emb.shape[1]} dimensions but the checkpoint was "
                                  f"trained on {self.dimension} ({self.embedding_model or 'unknown model'}): "
                                  "encode queries with the model the graph was ingested with")
        if not callable(node_features):
            widths = ({np.shape(a)[-1] for a in node_features if np.size(a)}
                      if isinstance(node_features, (list, tuple)) else {np.shape(node_features)[-1]})
            if widths - {self.dimension}:
                raise CheckpointError(f"node embeddings have {sorted(widths - {self.dimension})[0]} dimensions but "
                                      f"the checkpoint was trained on {self.dimension} "
                                      f"({self.embedding_model or 'unknown model'}): rank with the graph it was "
                                      "trained on, or retrain")
        mode = mode or self.cfg.rollout_mode
        prep = self.preprocessing
        rows = prep.node_rows(node_features, records, node_types=node_types)
        query = prep.features(query_emb)
        ops = select_ops(self.device, self.cfg.ops)
        out: list[list[tuple[int, float]]] = []
        for node_ids, node_scores in rank_subgraphs(self.policy, prep, records, rows, query, self.device, ops, mode,
                                                    batch_size):
            seen: set[int] = set()
            ranked = []
            for node, score in zip(node_ids, node_scores):
                if node not in seen:
                    seen.add(node)
                    ranked.append((int(node), float(score)))
            out.append(ranked[:k])
        return out


def _same_model(a: str | None, b: str | None) -> bool:
    return model_label(a) == model_label(b)


def _check_bound(path: Path, state: dict, dataset: str, now: dict) -> None:
    trained = state.get("bound_to") or {}
    again = (f"extract and train again (`seeder-dgl extract {dataset} --overwrite`, then `seeder-dgl train "
             f"{dataset}`), or pass --checkpoint")
    if trained.get("graph") and now.get("graph") and trained["graph"] != now["graph"]:
        raise CheckpointError(f"checkpoint {path} was trained on another graph named {dataset!r} (the dataset was "
                              f"dropped and ingested or adopted again since): {again}")
    if trained.get("relation_prior") != now.get("relation_prior") and "relation_prior" in trained and \
            "relation_prior" in now:
        change = ("has none now" if not now["relation_prior"] else
                  "has a new one (fitted by tune or extract --refit-prior since)")
        raise CheckpointError(f"checkpoint {path} was trained on subgraphs grown with {dataset!r}'s relation prior, "
                              f"and the dataset {change}: {again}")


def load_policy(path: str | Path, *, dataset: str | None = None, embedding_model: str | None = None,
                dimension: int | None = None, device: str | torch.device = "cpu",
                bound_to: dict | None = None) -> LoadedPolicy:
    """Load a checkpoint for inference, checking it fits the graph it will rank.

    ``dataset`` / ``embedding_model`` / ``dimension``: what the caller's graph has (None: not
    checked). A checkpoint trained without a recorded embedding model skips that check.
    ``bound_to``: the dataset's graph identity and relation prior now (``DatasetInfo.bound_to``);
    a policy trained on another graph of the same name, or with another prior, is refused
    (checkpoints from before these were recorded, and values unknown on either side, pass).
    """
    path = Path(path)
    state = read_checkpoint(path)
    trained_on = (f"{state['embedding_model'] or 'unrecorded-model'} embeddings, "
                  f"{state['dimension']} dimensions")
    if dataset is not None and state["dataset"] != dataset:
        raise CheckpointError(f"checkpoint {path} was trained on dataset {state['dataset']!r}, not {dataset!r}: "
                              f"train one with `seeder-dgl train {dataset}` or pass a {dataset} checkpoint")
    if embedding_model is not None and state["embedding_model"] and not _same_model(state["embedding_model"],
                                                                                     embedding_model):
        raise CheckpointError(f"checkpoint {path} was trained on {trained_on}, but the graph uses "
                              f"{embedding_model}: retrain on this graph (`seeder-dgl train "
                              f"{dataset or state['dataset']}`) or re-ingest it with {state['embedding_model']}")
    if dimension is not None and int(dimension) != int(state["dimension"]):
        raise CheckpointError(f"checkpoint {path} was trained on {trained_on}, but the graph's embeddings have "
                              f"{dimension} dimensions: retrain on this graph (`seeder-dgl train "
                              f"{dataset or state['dataset']}`) or re-ingest it with {state['embedding_model']}")
    _check_bound(path, state, dataset or state["dataset"], bound_to or {})
    if isinstance(device, str) and device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    try:
        cfg = config_from_dict(state["config"])
        prep = Preprocessing.from_state(state)
        model_state = state["model"]
        relation_text = model_state.get(RELATION_TEXT_KEY)
        policy = build_policy(cfg, int(state["in_dim"]), prep.num_relations,
                              torch.zeros_like(relation_text) if relation_text is not None else None,
                              prep.num_node_types)
        policy.load_state_dict(model_state)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {path} does not fit this seeder-dgl's policy "
                              f"({exc.__class__.__name__}: {one_line(exc, 100)}): train again") from exc
    policy.to(device).eval()
    return LoadedPolicy(policy=policy, cfg=cfg, preprocessing=prep, relation_types=list(state["relation_types"]),
                        dataset=state["dataset"], embedding_model=state["embedding_model"],
                        dimension=int(state["dimension"]), device=device, epoch=int(state.get("epoch", 0)),
                        metrics=state.get("metrics"), path=path, bound_to=state.get("bound_to"),
                        data_fingerprint=state.get("data_fingerprint"))


@dataclass
class LoadedRetriever:
    """A trained retriever (``training.artifact``) with its policy, ready for one graph."""

    trained: TrainedRetriever
    policy: LoadedPolicy
    settings: RetrievalSettings
    """Its seeds, budgets, seeding, relation prior and entity linker, ready for the graph."""


def load_trained_retriever(run_dir: str | Path, info, *, checkpoint: str | None = None,
                           device: str | torch.device = "cpu") -> LoadedRetriever:
    """The trained retriever of ``run_dir`` (``retriever.json``) and its policy (``checkpoint``, a file of
    the folder; default the one it names), for the graph ``info`` describes (``DatasetInfo``).

    One-line ``CheckpointError`` when the folder holds none, when it or the policy cannot be read or
    belong to another graph, encoder, dimension or schema (``TrainedRetriever.check_fits``), or when
    the policy was saved by another run than the file.
    """
    run_dir = Path(run_dir)
    trained = read_trained_retriever(run_dir)
    where = artifact_path(run_dir)
    if trained is None:
        raise CheckpointError(f"no trained retriever at {where}: run `seeder-dgl train {info.name}`")
    trained.check_fits(info, where)
    policy = load_policy(run_dir / (checkpoint or trained.checkpoint), dataset=trained.dataset,
                         embedding_model=info.model, dimension=info.dimension, device=device,
                         bound_to={"graph": info.identity})
    saved = policy.bound_to or {}
    if (trained.data_fingerprint not in (None, policy.data_fingerprint)
            or ("relation_prior" in saved and saved["relation_prior"] != trained.prior_digest)):
        raise CheckpointError(f"{policy.path} and {where} were written by different training runs: train again "
                              f"(`seeder-dgl train {trained.dataset}`; --resume finishes an interrupted run)")
    fix = f"train again (`seeder-dgl train {trained.dataset}`)"
    prior = parse_stored(trained.relation_prior, RelationPrior.from_json, "relation prior", f"in {where}", fix)
    prior = None if prior is None else ready_prior(prior, info)
    linker = parse_stored(trained.entity_linker, EntityLinker.from_json, "entity linker", f"in {where}", fix)
    settings = RetrievalSettings(seeds=trained.seeds, budgets=trained.budgets, seeding=trained.seeding,
                                 relation_prior=prior if trained.follows_prior else None,
                                 linker=ready_linker(linker, prior))
    return LoadedRetriever(trained, policy, settings)
