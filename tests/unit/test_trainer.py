"""The training loop on small synthetic tasks (CPU, no Neo4j): it learns, it is deterministic, it resumes
exactly, its metrics divide by |A(q)|, and it leaves readable run records."""
from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch

from seeder_dgl.metrics import query_metrics
from seeder_dgl.errors import SeederError
from seeder_dgl.retrieval.memory import GraphArrays, attach_labels, khop_filter
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training.checkpoint import read_checkpoint
from seeder_dgl.training.config import TrainConfig
from seeder_dgl.training.trainer import (evaluate_rankings, selection_score, stop_early,
                                        subgraph_metrics, train, warmup_cosine)
from tests.helpers.graphs import random_embeddings, random_kg


def synthetic_task(num_train: int = 64, num_val: int = 24, seed: int = 0, dim: int = 16, num_nodes: int = 400,
                   num_edges: int = 1600, num_relations: int = 4, budgets=(15, 30)):
    """Random KG; ~20% of nodes carry a distinctive feature (a boost on coordinate 0) and are the
    answers of every query whose K-hop subgraph reaches them beyond the seeds. Every third query
    also has an answer outside its subgraph (Recall must count it as missed)."""
    rng = np.random.default_rng(seed)
    kg = random_kg("synthetic", num_nodes, num_edges, seed, num_relations=num_relations)
    graph = GraphArrays.from_kg(kg)
    node_emb = random_embeddings(num_nodes, dim, seed)
    special = rng.random(num_nodes) < 0.2
    node_emb[special, 0] += 1.5
    node_emb /= np.linalg.norm(node_emb, axis=1, keepdims=True)
    rel_emb = random_embeddings(num_relations, dim, seed + 1)
    records, queries = [], []
    for q in range(num_train + num_val):
        seeds = rng.choice(num_nodes, 3, replace=False)
        q_emb = rng.normal(size=dim).astype(np.float32)
        sub = khop_filter(graph, node_emb, rel_emb, q_emb, seeds, budgets, query_id=q)
        answers = [int(i) for i in sub.node_ids[(sub.hop > 0) & special[sub.node_ids]]]
        if q % 3 == 0:
            answers.append(int(np.setdiff1d(np.arange(num_nodes), sub.node_ids)[0]))
        records.append(attach_labels(sub, answers))
        queries.append(q_emb)
    queries = np.stack(queries)
    return (records[:num_train], queries[:num_train], records[num_train:], queries[num_train:], node_emb,
            num_relations)


def tiny_config(**overrides) -> TrainConfig:
    base = dict(dataset="synthetic", pca_dim=8, hidden_dim=16, num_layers=2, heads=4, dropout=0.1,
                expansion_sizes=(4, 6), frontier_caps=(10, 20), num_trajectories=4, batch_size=16, lr=3e-3,
                epochs=2, warmup_epochs=1, device="cpu")
    base.update(overrides)
    return TrainConfig(**base)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Small tensors: one thread is fastest and keeps timings stable on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def task():
    return synthetic_task()


@pytest.fixture(scope="module")
def small_task():
    return synthetic_task(num_train=32, num_val=12, seed=1)


class Interrupt(Exception):
    """Raised by ``interrupt_after_first_epoch`` once epoch 1's last.pt is written."""


def interrupt_after_first_epoch(cfg, args, out_dir) -> None:
    """Train ``cfg`` into ``out_dir`` and stop it after its first epoch, as a killed run would be."""
    def stop(row):
        raise Interrupt

    with pytest.raises(Interrupt):
        train(cfg, *args, out_dir, progress=False, on_epoch_end=stop)


def _numbers(history):
    """Per-epoch numbers that must reproduce (timings excluded)."""
    keep = ("loss", "rl_loss", "bpr_loss", "reward", "grad_norm", "lr", "val")
    return [{k: row[k] for k in keep} for row in history]


# ---------------------------------------------------------------------------------------------- metrics
def _record(node_ids, labels, num_answers) -> QuerySubgraph:
    n = len(node_ids)
    return QuerySubgraph(query_id=0, node_ids=np.asarray(node_ids, np.int64), hop=np.zeros(n, np.int8),
                         score=np.zeros(n, np.float32), src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64),
                         rel=np.zeros(0, np.int64), labels=np.asarray(labels, bool), num_answers=num_answers)


def test_subgraph_metrics_divide_by_all_answers():
    records = [
        _record([10, 11, 12, 13], [0, 1, 0, 1], 4),  # two answers inside, two outside the subgraph
        _record([20, 21, 22], [1, 0, 0], 1),
        _record([30, 31], [0, 0], 0),  # no answers: zeros
        _record([40, 41], [0, 0], 2),  # answers only outside
    ]
    rankings = [[12, 13, 10, 11], [(21, 0.9), (20, 0.5)], [30], [41, 40]]
    got = subgraph_metrics(rankings, records)
    # The same with explicit gold sets (answers outside named by ids nobody retrieves).
    gold = [[11, 13, 1000, 1001], [20], [], [2000, 2001]]
    for q, (ranking, answers) in enumerate(zip(rankings, gold)):
        expected = query_metrics(ranking, answers)
        for name, value in expected.items():
            assert got[name][q] == pytest.approx(value), (q, name)
    assert got["recall@20"][0] == pytest.approx(0.5) and got["mrr"][0] == pytest.approx(0.5)
    mean = evaluate_rankings(rankings, records)
    assert mean["num_queries"] == 4 and mean["hit@any"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        subgraph_metrics(rankings[:2], records)


def _rates(total: int, warmup: int, steps: int) -> list[float]:
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    schedule = warmup_cosine(optimizer, total, warmup)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"] / 2.0)
        optimizer.step()
        schedule.step()
    return rates


def test_warmup_cosine_schedule(recwarn):
    rates = _rates(total=10, warmup=2, steps=11)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]  # nothing printed in training
    assert rates[:2] == pytest.approx([0.5, 1.0])
    assert rates[2] == pytest.approx(1.0) and rates[7] == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 8)))
    assert rates[10] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(rates[1:], rates[2:]))  # no rise after the warm-up
    assert _rates(4, 8, 4)[3] == pytest.approx(0.5)  # warm-up longer than the run: linear throughout
    assert _rates(4, 0, 3) == pytest.approx([1.0, 0.5 * (1 + math.cos(math.pi / 4)), 0.5])  # no warm-up
    assert _rates(3, 1, 3) == pytest.approx([1.0, 1.0, 0.5])  # one warm-up step: the full rate at once


def test_a_last_pt_with_another_schedules_state_is_refused_in_one_line():
    from seeder_dgl.training.run_state import LoopState

    def loop():
        policy = torch.nn.Linear(2, 1)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=0.1)
        return LoopState(policy, optimizer, warmup_cosine(optimizer, 10, 2), np.random.default_rng(0),
                         torch.Generator().manual_seed(1), torch.device("cpu"))

    old = loop()
    lambda_state = torch.optim.lr_scheduler.LambdaLR(old.optimizer, lambda step: 1.0).state_dict()
    state = {"model": old.policy.state_dict(), "optimizer": old.optimizer.state_dict(), "scheduler": lambda_state}
    with pytest.raises(SeederError, match="without --resume"):
        loop().restore(state)


# ---------------------------------------------------------------------------------------------- training
def test_training_learns_and_writes_records(task, tmp_path):
    train_r, train_q, val_r, val_q, node_emb, num_rel = task
    cfg = tiny_config(epochs=5)
    result = train(cfg, train_r, train_q, val_r, val_q, node_emb, num_rel, tmp_path, progress=False,
                   dataset_meta={"embedding_model": "test-encoder", "dimension": 16})
    untrained, best = result.initial_metrics["recall@20"], result.best_metrics["recall@20"]
    assert best > untrained + 0.1, (untrained, [r["val"]["recall@20"] for r in result.history])
    assert result.best_metrics["mrr"] > result.initial_metrics["mrr"]
    # best.pt is the epoch of the best validation MRR (Recall@20 only breaks ties), the first such.
    assert result.best_epoch == max(result.history, key=lambda r: selection_score(r["val"]))["epoch"]
    assert result.history[-1]["reward"] > result.history[0]["reward"]

    # Checkpoints: best.pt holds the best epoch; both load weights-only.
    best_state = read_checkpoint(result.best_path)
    assert best_state["epoch"] == result.best_epoch
    assert best_state["metrics"]["recall@20"] == pytest.approx(best)
    assert best_state["pca_components"].shape == (8, 16) and best_state["num_relations"] == num_rel
    torch.load(result.last_path, weights_only=True)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))

    # Run records.
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["config"]["epochs"] == 5 and config["seed"] == 0 and config["num_parameters"] > 0
    assert config["dataset"]["embedding_model"] == "test-encoder"
    assert {"python", "torch", "numpy", "dgl", "neo4j", "sentence-transformers"} <= set(config["versions"])
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["best_epoch"] == result.best_epoch and len(metrics["epochs"]) == 5
    assert metrics["initial_validation"]["recall@20"] == pytest.approx(untrained)
    for key in ("loss", "rl_loss", "bpr_loss", "reward", "grad_norm", "seconds", "queries_per_s"):
        assert key in metrics["epochs"][0]
    for key in ("hit@1", "hit@5", "mrr", "recall@20", "hit@any", "recall@any"):
        assert key in metrics["epochs"][0]["val"]
    with (tmp_path / "history.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5 and float(rows[-1]["val_recall@20"]) == pytest.approx(result.final_metrics["recall@20"])
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_run_and_resume_is_exact(small_task, tmp_path):
    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    cfg = tiny_config(epochs=2, batch_size=8)
    args = (train_r, train_q, val_r, val_q, node_emb, num_rel)

    first = train(cfg, *args, tmp_path / "a", progress=False)
    second = train(cfg, *args, tmp_path / "b", progress=False)
    assert _numbers(first.history) == _numbers(second.history)
    weights_a = read_checkpoint(first.last_path)["model"]
    weights_b = read_checkpoint(second.last_path)["model"]
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)

    # Interrupted after epoch 1, then resumed.
    interrupt_after_first_epoch(cfg, args, tmp_path / "c")
    assert read_checkpoint(tmp_path / "c" / "last.pt", required=("epoch",))["epoch"] == 1
    resumed = train(cfg, *args, tmp_path / "c", progress=False, resume=True)
    assert resumed.resumed_from == 1
    assert _numbers(resumed.history) == _numbers(first.history)
    weights_c = read_checkpoint(resumed.last_path)["model"]
    assert all(torch.equal(weights_a[k], weights_c[k]) for k in weights_a)
    assert resumed.best_epoch == first.best_epoch and resumed.best_metrics == first.best_metrics
    metrics = json.loads((tmp_path / "c" / "metrics.json").read_text())
    assert [r["epoch"] for r in metrics["epochs"]] == [1, 2]

    # A finished run resumed again trains nothing more; other settings are refused.
    again = train(cfg, *args, tmp_path / "c", progress=False, resume=True)
    assert again.history == resumed.history
    with pytest.raises(SeederError, match="other settings"):
        train(tiny_config(epochs=2, batch_size=8, lr=1e-2), *args, tmp_path / "c", progress=False, resume=True)


def test_epochs_are_chosen_by_mrr_and_recall_only_breaks_ties():
    saturated = {"mrr": 0.76, "recall@20": 0.99}  # every answer among 20, the first one ranked low
    ranked = {"mrr": 0.85, "recall@20": 0.98}
    assert selection_score(ranked) > selection_score(saturated)
    assert selection_score({"mrr": 0.8, "recall@20": 0.9}) > selection_score({"mrr": 0.8, "recall@20": 0.8})


def test_stop_early_rule():
    cfg = tiny_config(epochs=10, warmup_epochs=2, patience=3)
    # Epochs inside the warm-up never stop a run, and the count starts after it.
    assert [stop_early(cfg, e, best_epoch=1) for e in range(1, 8)] == [False] * 4 + [True] * 3
    assert not stop_early(cfg, 6, best_epoch=4) and stop_early(cfg, 7, best_epoch=4)
    assert not stop_early(cfg, 10, best_epoch=1)  # the last epoch ends the run anyway
    assert not any(stop_early(tiny_config(epochs=10), e, 1) for e in range(1, 11))  # no patience: never
    with pytest.raises(ValueError, match="patience"):
        tiny_config(patience=0)


def test_training_stops_when_validation_stops_improving(small_task, tmp_path):
    """With a learning rate of zero nothing improves after the first epoch: patience 1 stops the
    run after the warm-up plus one epoch, best.pt holds the best epoch, and resuming trains nothing."""
    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    args = (train_r, train_q, val_r, val_q, node_emb, num_rel)
    cfg = tiny_config(epochs=6, warmup_epochs=1, batch_size=8, lr=0.0, patience=1)
    result = train(cfg, *args, tmp_path / "run", progress=False)
    assert [row["epoch"] for row in result.history] == [1, 2]
    assert result.best_epoch == 1
    assert read_checkpoint(result.last_path, required=("epoch",))["epoch"] == 2
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert [r["epoch"] for r in metrics["epochs"]] == [1, 2]
    again = train(cfg, *args, tmp_path / "run", progress=False, resume=True)
    assert again.history == result.history


def test_different_seed_differs(small_task, tmp_path):
    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    args = (train_r, train_q, val_r, val_q, node_emb, num_rel)
    a = train(tiny_config(epochs=1, seed=0), *args, tmp_path / "a", progress=False)
    b = train(tiny_config(epochs=1, seed=1), *args, tmp_path / "b", progress=False)
    assert _numbers(a.history) != _numbers(b.history)


def test_bad_inputs_are_one_line_errors(small_task, tmp_path):
    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    with pytest.raises(SeederError, match="no validation subgraphs"):
        train(tiny_config(), train_r, train_q, [], np.zeros((0, 16), np.float32), node_emb, num_rel, tmp_path,
              progress=False)
    with pytest.raises(SeederError, match="dimensions"):
        train(tiny_config(), train_r, train_q[:, :8], val_r, val_q, node_emb, num_rel, tmp_path, progress=False)


# ---------------------------------------------------------------------------------------------- command
def test_run_training_reads_the_cache(small_task, tmp_path, monkeypatch):
    """`seeder-dgl train` without Neo4j: cached shards + features from a stand-in for the export."""
    from seeder_dgl.subgraph.cache import save_shard, shard_path, write_manifest
    from seeder_dgl.training import command

    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    for split, recs, q in (("train", train_r, train_q), ("val", val_r, val_q)):
        folder = tmp_path / "cache" / "toy" / "subgraphs" / split
        save_shard(shard_path(folder, 0), recs, q)
        write_manifest(folder, {"num_shards": 1, "num_queries": len(recs)})
    seen = {}

    def fake_features(dataset, cache_dir=None, uses_prior=True):
        seen["args"] = (dataset, cache_dir)
        return command.GraphFeatures(node_emb, [f"r{i}" for i in range(num_rel)], None,
                                     {"name": dataset, "embedding_model": "test-encoder", "dimension": 16})

    monkeypatch.setattr(command, "load_features", fake_features)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's choice: left alone
    monkeypatch.setenv("SEEDER_RUNS", str(tmp_path / "runs"))
    overrides = dict(pca_dim=8, hidden_dim=16, num_layers=2, expansion_sizes=(4, 6), frontier_caps=(10, 20),
                     num_trajectories=2, batch_size=8)
    result = command.run_training("toy", epochs=1, device="cpu", limit=16, cache_dir=tmp_path / "cache",
                                  overrides=overrides, ablation="no_aux", progress=False)
    assert seen["args"] == ("toy", (tmp_path / "cache").resolve())
    assert result.out_dir == tmp_path / "runs" / "toy" / "no_aux" and result.best_path.exists()
    config = json.loads((result.out_dir / "config.json").read_text())
    assert config["config"]["ablation"] == "no_aux" and config["config"]["dataset"] == "toy"
    assert config["config"]["lr"] == 1e-3  # Prime's row for a dataset without its own
    assert config["train"]["queries"] == 16 and config["dataset"]["threads"]["set_by"] == "user"

    with pytest.raises(SeederError, match="unknown ablation"):
        command.run_training("toy", ablation="nope", cache_dir=tmp_path / "cache")
    with pytest.raises(SeederError, match="deep-train"):  # a profile trains on its own extraction
        command.run_training("metaqa", profile="deep", device="cpu", cache_dir=tmp_path / "cache")
    with pytest.raises(SeederError, match="no retrieval profile 'wide'"):
        command.run_training("metaqa", profile="wide", device="cpu", cache_dir=tmp_path / "cache")
    with pytest.raises(SeederError, match="TrainConfig fields"):
        command.build_config("toy", overrides={"learning_rate": 1.0})
    with pytest.raises(SeederError, match="extract"):
        command.run_training("other", device="cpu", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("ablation", ["rerank", "greedy_baseline", "single_trajectory", "no_baseline", "no_aux"])
def test_every_ablation_trains_and_ranks(small_task, tmp_path, ablation):
    from seeder_dgl.inference import load_policy

    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    cfg = tiny_config(epochs=1, batch_size=8, ablation=ablation, relation_text=ablation == "rerank")
    relation_emb = np.random.default_rng(0).normal(size=(num_rel, 16)).astype(np.float32)
    result = train(cfg, train_r[:16], train_q[:16], val_r[:6], val_q[:6], node_emb, num_rel, tmp_path,
                   progress=False, relation_emb=relation_emb)
    row = result.history[0]
    assert all(math.isfinite(row[k]) for k in ("loss", "rl_loss", "bpr_loss", "reward", "grad_norm"))
    loaded = load_policy(result.best_path)
    ranked = loaded.rank(val_r[:6], node_emb, val_q[:6], k=1000)
    assert evaluate_rankings([[i for i, _ in r] for r in ranked], val_r[:6]) == pytest.approx(result.best_metrics)
    if ablation == "rerank":  # scores the whole K-hop subgraph
        assert [len(r) for r in ranked] == [r.num_nodes for r in val_r[:6]] and loaded.cfg.relation_text


def test_profile_defaults_and_folders():
    from seeder_dgl.training import command
    from seeder_dgl.training.config import TrainConfig

    deep = command.build_config("metaqa", profile="deep", overrides={"lr": 5e-4})
    assert (deep.profile, deep.k0, deep.expansion_sizes, deep.frontier_caps) == ("deep", 1, (7, 7, 8), (40, 80, 120))
    assert deep.lr == 5e-4 and deep.epochs == 2 and deep.path_prior and deep.subgraph_prefix == "deep-"
    paper = TrainConfig.for_dataset("metaqa")
    assert (paper.profile, paper.expansion_sizes, paper.subgraph_prefix) == ("paper", (7, 10), "")
    assert command.default_run_dir("metaqa", "rerank", "deep").name == "deep-rerank"
    assert command.default_run_dir("metaqa").name == "full"


def test_typed_query_conditioned_policy_trains_deterministically_and_ranks_by_type(small_task, tmp_path):
    """node_types + query_relations + 'product' injection + listwise ranking: the run is repeatable,
    the checkpoint carries the type vocabulary, and types given as names or as a table rank alike."""
    from seeder_dgl.inference import load_policy

    train_r, train_q, val_r, val_q, node_emb, num_rel = small_task
    rng = np.random.default_rng(3)
    names = ["film", "person", "year"]
    codes = rng.integers(-1, len(names), node_emb.shape[0])  # -1: a node without a type
    cfg = tiny_config(epochs=1, batch_size=8, node_types=True, query_relations=True, query_injection="product",
                      rank_loss="listwise")
    args = (train_r[:32], train_q[:32], val_r[:8], val_q[:8], node_emb, num_rel)
    first = train(cfg, *args, tmp_path / "a", progress=False, node_types=codes, node_type_names=names)
    second = train(cfg, *args, tmp_path / "b", progress=False, node_types=codes, node_type_names=names)
    assert _numbers(first.history) == _numbers(second.history)

    loaded = load_policy(first.best_path)
    prep = loaded.preprocessing
    assert prep.node_type_names == names and prep.num_node_types == 4 and prep.unknown_type == 3
    assert loaded.policy.encoder.node_input.node_type.num_embeddings == 4
    assert loaded.policy.encoder.relations.film is not None
    table = prep.type_table(codes, names)
    assert table[codes == -1].tolist() == [3] * int((codes == -1).sum())
    by_table = loaded.rank(val_r[:8], node_emb, val_q[:8], k=1000, node_types=table)
    as_names = [[names[c] if c >= 0 else None for c in codes[r.node_ids]] for r in val_r[:8]]
    by_name = loaded.rank(val_r[:8], node_emb, val_q[:8], k=1000, node_types=as_names)
    assert [[i for i, _ in r] for r in by_table] == [[i for i, _ in r] for r in by_name]
    assert evaluate_rankings([[i for i, _ in r] for r in by_table], val_r[:8]) == pytest.approx(first.best_metrics)
    # Types change the scores; names the policy never saw share the unknown slot.
    untyped = loaded.rank(val_r[:8], node_emb, val_q[:8], k=1000)
    assert any(abs(a[1] - b[1]) > 1e-6 for x, y in zip(by_table, untyped) for a, b in zip(x, y))
    renamed = [["spaceship" if t is None else t for t in r] for r in as_names]
    assert loaded.rank(val_r[:8], node_emb, val_q[:8], k=1000, node_types=renamed) == by_name


def test_each_dataset_has_a_default_profile_and_metaqa_deep_carries_the_chosen_model():
    from seeder_dgl.datasets import resolve_profile, retrieval_profile
    from seeder_dgl.training import command

    assert resolve_profile("metaqa") == "deep" and resolve_profile("metaqa", "paper") == "paper"
    assert [resolve_profile(d) for d in ("prime", "mag", "amazon", "synthetic", "mykg")] == ["paper"] * 5
    assert retrieval_profile("metaqa") == retrieval_profile("metaqa", "deep")
    assert retrieval_profile("metaqa").seeding == "fulltext" and retrieval_profile("prime").seeding == "dense"
    deep = command.build_config("metaqa", profile="deep")
    assert (deep.node_types, deep.query_relations, deep.rank_loss, deep.lr, deep.lookahead, deep.patience,
            deep.dropout, deep.edge_direction, deep.edge_prior) == (True, True, "listwise", 3e-3, True, None, 0.0, True, False)
    assert command.build_config("metaqa", profile="deep", overrides={"dropout": 0.1}).dropout == 0.1  # train --dropout
    with pytest.raises(SeederError, match="dropout must be at least 0 and below 1"):
        command.build_config("metaqa", profile="deep", overrides={"dropout": 1.0})
    own = TrainConfig.for_dataset("generic")  # a graph of your own (its spec's train_defaults)
    assert (own.num_trajectories, own.patience, own.path_prior, own.edge_prior, own.dropout) == (4, 3, True, False, 0.1)
    # The paper's setting stays the paper's table, for MetaQA and for STaRK.
    for dataset in ("metaqa", "prime", "mag", "amazon"):
        paper = command.build_config(dataset, profile="paper")
        assert (paper.node_types, paper.query_relations, paper.rank_loss, paper.query_injection, paper.lookahead) == \
            (False, False, "bpr", "concat", False)
    assert command.build_config("amazon").lr == 3e-4 and command.build_config("prime").lr == 1e-3


def test_the_optimiser_is_torchs_adamw_fused_where_torch_has_a_cpu_kernel_and_steps_as_adamw():
    from seeder_dgl.training.trainer import adamw

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 3))

    ours, reference = model(), model()
    optimizer = adamw(ours.parameters(), lr=3e-2, weight_decay=0.1)
    plain = torch.optim.AdamW(reference.parameters(), lr=3e-2, weight_decay=0.1, foreach=False)
    has_cpu_kernel = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4)
    assert type(optimizer) is torch.optim.AdamW
    assert bool(optimizer.defaults.get("fused")) == has_cpu_kernel
    assert bool(optimizer.defaults.get("foreach")) == (not has_cpu_kernel)
    for step in range(30):
        x = torch.randn(9, 5, generator=torch.Generator().manual_seed(step))
        for m, opt in ((ours, optimizer), (reference, plain)):
            opt.zero_grad(set_to_none=True)
            m(x).pow(2).mean().backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
    for p, q in zip(ours.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ours[0].weight, model()[0].weight)
