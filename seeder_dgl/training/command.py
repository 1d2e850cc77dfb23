"""`seeder-dgl train`, without typer: read the cached subgraphs and the graph's features, then train.

    run_training("prime")                      # runs/prime/full/{best,last}.pt + run records
    run_training("prime", resume=True)         # continue after the last finished epoch
    run_training("prime", ablation="no_aux", epochs=3, limit=200, overrides={"lr": 3e-4})

Inputs: the train/val splits cached by `seeder-dgl extract` (``<cache>/<dataset>/subgraphs/{train,val}``)
and the node embeddings + relation vocabulary exported from Neo4j (``load_features``; the export
is cached under ``<cache>/<dataset>/export`` per dataset version, so Neo4j is read once).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from seeder_dgl.datasets import (
    DatasetContext,
    cache_root,
    find_spec,
    model_label,
    resolve_profile,
    retrieval_profile,
    run_dir,
)
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.graphstore import lease
from seeder_dgl.graphstore.connection import default_database, open_driver
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.subgraph.cache import load_split
from seeder_dgl.threads import configure_threads
from seeder_dgl.training.artifact import from_extraction, run_pointer
from seeder_dgl.training.config import ABLATIONS, DATASET_DEFAULTS, TrainConfig, auto_epochs
from seeder_dgl.training.trainer import train
from seeder_dgl.validation import check_output_folder


@dataclass
class GraphFeatures:
    """What training needs from the graph: raw node embeddings and the relation vocabulary."""

    node_emb: np.ndarray
    """float32 [N, d], row = global node id."""
    relation_types: list[str]
    relation_emb: np.ndarray | None
    """[R, d] relation-name embeddings (only used with ``relation_text``)."""
    meta: dict[str, Any]
    """Recorded in config.json and the checkpoint: ``embedding_model``, ``dimension``, sizes."""
    node_type: np.ndarray | None = None
    """int64 [N]: index into ``node_type_names`` (-1: no node with that id)."""
    node_type_names: list[str] | None = None
    info: object | None = None
    """The dataset's record as read (``graphstore.live.DatasetInfo``; None: not read from Neo4j)."""


def load_features(dataset: str, cache_dir: Path | None = None, uses_prior: bool = True) -> GraphFeatures:
    """Node embeddings and relation types of ``dataset`` from Neo4j (through the cached export);
    ``uses_prior``: whether the profile's subgraphs were grown with the relation prior (recorded in
    ``meta["bound_to"]``, which the policy is then bound to)."""
    root = Path(cache_dir) if cache_dir else cache_root()
    with open_driver() as driver:
        info = LiveGraph(driver, dataset).info
        export = export_graph(driver, dataset, root / dataset / "export")
    meta = {"name": dataset, "embedding_model": model_label(info.model), "dimension": int(info.dimension),
            "num_nodes": int(export.num_nodes), "num_relationships": int(info.num_relationships),
            "num_relation_types": len(export.relation_types), "status": info.status,
            "bound_to": info.bound_to(uses_prior)}
    return GraphFeatures(export.node_emb, list(export.relation_types), export.relation_emb, meta,
                         export.node_type, list(export.node_type_names), info)


def _split_summary(folder: Path) -> dict[str, Any]:
    manifest = folder / "manifest.json"
    try:
        return json.loads(manifest.read_text())
    except (OSError, ValueError):
        return {}


def check_directions(records, dataset: str, folder: Path) -> None:
    """A one-line error when a cached subgraph lacks its edges' directions (extracted before they
    were kept): a policy with ``edge_direction`` would read every edge as of unknown direction."""
    if any(r.direction.shape[0] != r.src.shape[0] for r in records):
        raise SeederError(f"the subgraphs in {folder} were extracted without edge directions: "
                          f"run `seeder-dgl extract {dataset} --overwrite` again")


def build_config(dataset: str, *, epochs: int | None = None, device: str = "auto", seed: int = 0,
                 ablation: str = "full", overrides: dict | None = None, profile: str = "paper") -> TrainConfig:
    """The dataset's headline config (Prime's for datasets without a row), with the options applied."""
    if ablation not in ABLATIONS:
        raise SeederError(f"unknown ablation {ablation!r}: choose one of {', '.join(ABLATIONS)}")
    options: dict[str, Any] = dict(overrides or {})
    options.update(seed=seed, ablation=ablation, device=device)
    if epochs is not None:
        options["epochs"] = epochs

    base = defaults_row(dataset)

    retrieval_profile(dataset, profile)  # one-line error for a profile the dataset does not have
    try:
        cfg = TrainConfig.for_dataset(base, profile, **options)
    except (TypeError, ValueError) as exc:
        raise SeederError(f"bad training settings: {exc}") from exc
    if cfg.epochs < 1:
        raise SeederError(f"epochs must be at least 1, not {cfg.epochs}")
    return replace(cfg, dataset=dataset)


def defaults_row(dataset: str) -> str:
    """The ``DATASET_DEFAULTS`` row a dataset's policy starts from: its own, its spec's
    ``train_defaults`` (a graph of your own: 'generic'), else Prime's."""
    spec = find_spec(dataset)
    row = (spec.train_defaults or spec.name) if spec else dataset
    return row if row in DATASET_DEFAULTS else "prime"


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SeederError(f"--device {device}: no CUDA device is visible to torch here; use --device cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise SeederError(f"--device is auto, cpu or cuda[:N], not {device!r}")
    return device


def default_run_dir(dataset: str, ablation: str = "full", profile: str = "paper") -> Path:
    """``runs/<dataset>/<ablation>``; another profile's runs are ``runs/<dataset>/<profile>-<ablation>``."""
    return run_dir(dataset, profile, ablation)


def run_training(dataset: str, *, epochs: int | None = None, device: str = "auto", out: str | Path | None = None,
                 resume: bool = False, seed: int = 0, ablation: str = "full", limit: int | None = None,
                 cache_dir: str | Path | None = None, overrides: dict | None = None, progress: bool = True,
                 threads: int | None = None, profile: str | None = None):
    """Train SeedER on ``dataset``'s cached train/val subgraphs; returns ``trainer.TrainResult``.

    ``out``: run folder [default ``runs/<dataset>/<ablation>``]; ``limit``: only the first N queries
    of each split (quick runs); ``cache_dir``: instead of ``SEEDER_CACHE``; ``overrides``: any
    TrainConfig fields (``{"lr": 3e-4, "hidden_dim": 32}``); ``threads``: torch/OpenMP threads when
    ``OMP_NUM_THREADS`` is unset [default: cores, at most 4]; ``profile``: the retrieval profile
    whose subgraphs were extracted (``seeder-dgl extract --profile``), e.g. MetaQA's ``deep``
    [default: the dataset's, ``datasets.resolve_profile``].
    """
    check_dataset_name(dataset)
    if out:
        check_output_folder(out)  # before minutes of loading
    thread_info = configure_threads(threads)  # before DGL and the export are touched


    profile = resolve_profile(dataset, profile)

    cfg = build_config(dataset, epochs=epochs, device=resolve_device(device), seed=seed, ablation=ablation,
                       overrides=overrides, profile=profile)
    ds = DatasetContext.open(dataset, cfg.profile, cache=cache_dir)
    splits = {s: ds.subgraph_dir(s) for s in ("train", "val")}
    train_records, train_q = load_split(splits["train"])
    if epochs is None and defaults_row(dataset) == "generic":
        cfg = replace(cfg, epochs=auto_epochs(len(train_records)))
    val_records, val_q = load_split(splits["val"])
    if limit is not None:
        if limit < 1:
            raise SeederError(f"--limit must be at least 1, not {limit}")
        train_records, train_q = train_records[:limit], train_q[:limit]
        val_records, val_q = val_records[:limit], val_q[:limit]
    if cfg.edge_direction:
        for split, records in (("train", train_records), ("val", val_records)):
            check_directions(records, dataset, splits[split])
    features = load_features(dataset, ds.cache, uses_prior=ds.retrieval.relation_prior)
    extraction = {s: _split_summary(path) for s, path in splits.items()}
    retriever = bound_to = None
    if features.info is not None:  # what query will retrieve with: the record's, as the subgraphs were grown
        retriever = from_extraction(features.info, ds.profile, ds.retrieval, extraction["train"])
        bound_to = {"graph": features.info.identity, "relation_prior": retriever.prior_digest}
    meta = {**features.meta, "threads": thread_info, "limit": limit,
            "bound_to": bound_to or features.meta.get("bound_to"), "extraction": extraction}
    out_dir = check_output_folder(out) if out else ds.run_dir(ablation)
    result = train(cfg, train_records, train_q, val_records, val_q, features.node_emb, len(features.relation_types),
                   out_dir, resume=resume, progress=progress, relation_types=features.relation_types,
                   dataset_meta=meta, relation_emb=features.relation_emb, node_types=features.node_type,
                   node_type_names=features.node_type_names, retriever=retriever)
    if result is not None and retriever is not None and ablation == "full":
        point_record_at(dataset, ds.profile, out_dir)
    return result


def point_record_at(dataset: str, profile: str, out_dir: Path) -> None:
    """Make ``out_dir`` the dataset's active run for ``profile`` (``DatasetInfo.active_run``). Under
    the writer lease; while another command writes the dataset, a note says how to use the run instead."""
    try:
        with open_driver() as driver:
            lease.write_record(driver, dataset, "train", "dataset/set_active_run", "pointing the record at the run",
                               default_database(), run=run_pointer(out_dir), profile=profile)
    except SeederError as exc:
        Console(stderr=True).print(f"[yellow]note:[/] the record of {dataset} still points to its earlier run "
                                   f"({exc}): query this one with --checkpoint {out_dir / 'best.pt'}",
                                   soft_wrap=True, highlight=False)
