"""Checkpoints: atomic saving, one-line errors for every way loading can go wrong, and ranking with a
loaded policy (PCA, per-record features, unknown relation types)."""
from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from rich.console import Console

from seeder_dgl.datasets import DEFAULT_MODEL
from seeder_dgl.model.ops import select_ops
from seeder_dgl.training import checkpoint as ckpt
from seeder_dgl.inference import load_policy
from seeder_dgl.training.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from seeder_dgl.training.trainer import predict, train
from tests.unit.test_trainer import synthetic_task, tiny_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One short training run (1 epoch) whose checkpoints the tests load."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    task = synthetic_task(num_train=32, num_val=12, seed=2)
    out = tmp_path_factory.mktemp("run")
    result = train(tiny_config(epochs=1, batch_size=8), *task, out, progress=False,
                   relation_types=["r0", "r1", "r2", "r3"], console=Console(file=io.StringIO()),
                   dataset_meta={"embedding_model": DEFAULT_MODEL, "dimension": 16,
                                 "bound_to": {"graph": "fingerprint-1", "relation_prior": "prior-1"}})
    yield result, task
    torch.set_num_threads(before)


def _single_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message and message
    return message


# ---------------------------------------------------------------------------------------------- saving
def test_save_checkpoint_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "x.pt"
    save_checkpoint(path, {"a": torch.ones(3)})
    assert torch.equal(torch.load(path, weights_only=True)["a"], torch.ones(3))

    def crash(src, dst):
        raise OSError("disk full")

    import seeder_dgl.fileio as fileio

    monkeypatch.setattr(fileio.os, "replace", crash)  # the rename of the atomic write fails
    with pytest.raises(OSError):
        save_checkpoint(path, {"a": torch.zeros(3)})
    monkeypatch.undo()
    assert torch.equal(torch.load(path, weights_only=True)["a"], torch.ones(3))  # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["x.pt"]  # no temporary file left behind


# ---------------------------------------------------------------------------------------------- errors
def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError) as exc:
        load_policy(tmp_path / "nope.pt")
    assert "no checkpoint at" in _single_line(exc)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_damaged_file(run, tmp_path, damage):
    data = run[0].best_path.read_bytes()
    bad = {"truncated": data[: len(data) // 2], "garbage": b"not a checkpoint at all" * 10, "empty": b""}[damage]
    path = tmp_path / "bad.pt"
    path.write_bytes(bad)
    with pytest.raises(CheckpointError) as exc:
        load_policy(path)
    assert "damaged" in _single_line(exc)


def test_foreign_and_incomplete_files(run, tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError) as exc:
        load_policy(tmp_path / "foreign.pt")
    assert "not a seeder-dgl policy checkpoint" in _single_line(exc)

    state = read_checkpoint(run[0].best_path)
    del state["pca_mean"]
    torch.save(state, tmp_path / "incomplete.pt")
    with pytest.raises(CheckpointError) as exc:
        load_policy(tmp_path / "incomplete.pt")
    assert "missing pca_mean" in _single_line(exc)

    state = read_checkpoint(run[0].best_path)
    state["model"] = {k: v[..., :1] for k, v in state["model"].items()}  # wrong shapes
    torch.save(state, tmp_path / "shapes.pt")
    with pytest.raises(CheckpointError) as exc:
        load_policy(tmp_path / "shapes.pt")
    _single_line(exc)


def test_pickled_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this must never run",))

    torch.save({"format": ckpt.FORMAT, "evil": Payload()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError) as exc:
        load_policy(tmp_path / "evil.pt")
    assert "damaged" in _single_line(exc)


def test_checkpoint_for_another_graph(run):
    path = run[0].best_path
    with pytest.raises(CheckpointError) as exc:
        load_policy(path, dataset="prime")
    message = _single_line(exc)
    assert "'synthetic'" in message and "seeder-dgl train prime" in message
    with pytest.raises(CheckpointError) as exc:
        load_policy(path, dataset="synthetic", embedding_model="BAAI/bge-small-en-v1.5")
    message = _single_line(exc)
    assert DEFAULT_MODEL in message and "bge-small" in message
    with pytest.raises(CheckpointError) as exc:
        load_policy(path, dataset="synthetic", dimension=384)
    assert "384" in _single_line(exc) and "16 dimensions" in str(exc.value)
    # The default model under its other names, and the right dimension, are accepted.
    for name in ("all-MiniLM-L6-v2", DEFAULT_MODEL, None):
        load_policy(path, dataset="synthetic", embedding_model=name, dimension=16)


def test_a_policy_is_bound_to_the_graph_and_prior_it_was_trained_on(run, tmp_path):
    path = run[0].best_path
    assert read_checkpoint(path)["bound_to"] == {"graph": "fingerprint-1", "relation_prior": "prior-1"}
    load_policy(path, dataset="synthetic", bound_to={"graph": "fingerprint-1", "relation_prior": "prior-1"})
    with pytest.raises(CheckpointError) as exc:  # dropped and ingested again under the same name
        load_policy(path, dataset="synthetic", bound_to={"graph": "fingerprint-2", "relation_prior": "prior-1"})
    assert "another graph named 'synthetic'" in _single_line(exc) and "seeder-dgl train synthetic" in str(exc.value)
    for prior, says in (("prior-2", "has a new one"), (None, "has none now")):  # tune / --refit-prior since
        with pytest.raises(CheckpointError) as exc:
            load_policy(path, dataset="synthetic", bound_to={"graph": "fingerprint-1", "relation_prior": prior})
        assert says in _single_line(exc) and "extract synthetic --overwrite" in str(exc.value)
    # What is unknown on either side passes: a record without an identity, a checkpoint from before.
    load_policy(path, dataset="synthetic", bound_to={"graph": None, "relation_prior": "prior-1"})
    load_policy(path, dataset="synthetic")
    older = read_checkpoint(path)
    older.pop("bound_to")
    save_checkpoint(tmp_path / "older.pt", older)
    load_policy(tmp_path / "older.pt", dataset="synthetic", bound_to={"graph": "x", "relation_prior": "y"})


# ---------------------------------------------------------------------------------------------- ranking
def same_ranking(got, want, tol=1e-5) -> bool:
    """Rankings equal by ids, scores equal within ``tol`` (batches of other sizes sum in other orders)."""
    return len(got) == len(want) and all(
        [i for i, _ in g] == [i for i, _ in w] and np.allclose([s for _, s in g], [s for _, s in w], atol=tol)
        for g, w in zip(got, want))


def test_loaded_policy_ranks_like_training(run):
    result, (_, _, val_r, val_q, node_emb, num_rel) = run
    loaded = load_policy(result.best_path, dataset="synthetic", dimension=16)
    assert not loaded.policy.training and loaded.num_relations == num_rel == 4
    assert loaded.relation_types == ["r0", "r1", "r2", "r3"] and loaded.embedding_model == DEFAULT_MODEL
    mean, components = loaded.pca
    assert mean.shape == (16,) and components.shape == (8, 16)

    k = 5
    ranked = loaded.rank(val_r, node_emb, val_q, k=k)
    assert len(ranked) == len(val_r)
    for record, items in zip(val_r, ranked):
        ids = [i for i, _ in items]
        scores = [s for _, s in items]
        assert 0 < len(ids) <= k and len(set(ids)) == len(ids)
        assert set(ids) <= set(record.node_ids.tolist())
        assert scores == sorted(scores, reverse=True)

    # Same rankings from per-record feature arrays (live queries) and from a callable.
    per_record = [node_emb[r.node_ids] for r in val_r]
    assert same_ranking(loaded.rank(val_r, per_record, val_q, k=k), ranked)
    assert same_ranking(loaded.rank(val_r, lambda ids: node_emb[ids], val_q, k=k), ranked)
    # And the trainer's validation rankings agree (same preprocessing, same deterministic policy).
    prep = loaded.preprocessing
    full = predict(loaded.policy, prep, val_r, prep.features(val_q), prep.node_rows(node_emb, val_r),
                   loaded.device, select_ops("cpu"))
    assert [[i for i, _ in items] for items in loaded.rank(val_r, node_emb, val_q, k=100)] == full
    assert loaded.rank([], node_emb, val_q[:0]) == []
    empty = dataclasses.replace(val_r[0], node_ids=np.zeros(0, np.int64), hop=np.zeros(0, np.int8),
                                score=np.zeros(0, np.float32), src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64),
                                rel=np.zeros(0, np.int64), labels=np.zeros(0, bool))
    assert same_ranking(loaded.rank([empty, val_r[0]], [np.zeros((0, 16), np.float32), per_record[0]],
                                    val_q[[0, 0]], k=k), [[], ranked[0]])
    assert loaded.rank([empty], [np.zeros((0, 16), np.float32)], val_q[:1]) == [[]]
    with pytest.raises(CheckpointError, match="query embeddings have 8 dimensions"):
        loaded.rank(val_r[:1], node_emb, np.zeros((1, 8), np.float32))
    with pytest.raises(CheckpointError, match="node embeddings have 8 dimensions"):
        loaded.rank(val_r[:1], [per_record[0][:, :8]], val_q[:1])


def test_unknown_relation_types_use_the_reserved_slot(run):
    result, (_, _, val_r, val_q, node_emb, num_rel) = run
    loaded = load_policy(result.best_path)
    record = val_r[0]
    # Relation types added after training (ids >= num_relations) and unknown ids (-1).
    novel = dataclasses.replace(record, rel=np.where(np.arange(record.rel.size) % 3 == 0,
                                                     num_rel + 2, record.rel))
    novel.rel[1::7] = -1
    as_slot = dataclasses.replace(record, rel=np.where((novel.rel < 0) | (novel.rel >= num_rel), num_rel,
                                                       novel.rel))
    got = loaded.rank([novel], node_emb, val_q[:1], k=20)
    assert got == loaded.rank([as_slot], node_emb, val_q[:1], k=20)
    batch = loaded.preprocessing.batch([novel], loaded.preprocessing.node_rows(node_emb, [novel]),
                                       loaded.preprocessing.features(val_q[:1]))
    assert int(batch.rel.max()) == num_rel and int(batch.rel.min()) >= 0
    assert loaded.policy.encoder.relations.table.num_embeddings == num_rel + 1


@pytest.mark.parametrize("ids", [np.array([0, 2, 3, 7, 8]), np.array([5, 40_000_000, 40_000_001, 90_000_000, 90_000_003])],
                         ids=["dense ids: a lookup table", "sparse ids: binary search"])
def test_feature_rows_find_rows_by_global_id_and_refuse_unknown_ids(ids):
    """FeatureRows answers node_features[node_ids] with the prepared rows, in the order asked and
    with repeats, whether it looks ids up in a table or by binary search; an id it was not
    prepared for (between, beyond or below the known ids) is a KeyError, never another row."""
    rows = np.arange(len(ids) * 3, dtype=np.float32).reshape(len(ids), 3)
    table = ckpt.FeatureRows(ids, rows, types=np.arange(len(ids)) + 10)
    ask = np.array([ids[3], ids[0], ids[3], ids[4]])
    np.testing.assert_array_equal(table[ask], rows[[3, 0, 3, 4]])
    np.testing.assert_array_equal(table.type_rows[ask], [13, 10, 13, 14])
    assert table[np.zeros(0, np.int64)].shape == (0, 3)
    for missing in (ids[0] + 1, ids[-1] + 1, -1):
        with pytest.raises(KeyError):
            table[np.array([ids[1], missing])]
