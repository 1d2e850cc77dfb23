"""The trained retriever (``training.artifact``, ``inference.load_trained_retriever``): one file in the
run folder that holds what the policy was trained with, written atomically, read back equal, checked
against the graph and the policy beside it, and every problem a one-line error that says what to run."""
from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
import torch
from rich.console import Console

from seeder_dgl.datasets import DEFAULT_MODEL, RetrievalDefaults
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.live import DatasetInfo, prior_digest
from seeder_dgl.inference import load_trained_retriever
from seeder_dgl.retrieval.linking import FEATURES, EntityLinker
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.training.artifact import (
    ARTIFACT,
    FORMAT_VERSION,
    TrainedRetriever,
    from_extraction,
    read_trained_retriever,
    schema_fingerprint,
    write_trained_retriever,
)
from seeder_dgl.training.checkpoint import CheckpointError
from seeder_dgl.training.trainer import train
from tests.unit.test_checkpoint import _single_line
from tests.unit.test_trainer import synthetic_task, tiny_config

RELATIONS = ["r0", "r1", "r2", "r3"]


def _prior(seed: int = 0) -> RelationPrior:
    rng = np.random.default_rng(seed)
    return RelationPrior(rng.normal(size=(2, len(RELATIONS), 16)), rng.normal(size=(2, len(RELATIONS))), RELATIONS,
                         {"questions": 100})


def _linker(seed: int = 0) -> EntityLinker:
    rng = np.random.default_rng(seed)
    size = len(FEATURES)
    return EntityLinker(np.zeros(size), np.ones(size), rng.normal(size=size), 0.0, stats={"fitted": True})


def _info(**changes) -> DatasetInfo:
    """The record of a 16-dimensional dataset 'synthetic' with a fitted prior and linker."""
    fields = dict(name="synthetic", label="Synthetic", dimension=16, model=DEFAULT_MODEL, relation_names=RELATIONS,
                  relation_types=RELATIONS, relation_embeddings=np.zeros((4, 16), np.float32), num_nodes=400,
                  num_relationships=1600, status="complete", relation_prior=_prior().to_json(),
                  entity_linker=_linker().to_json(), identity="graph-1")
    fields.update(changes)
    return DatasetInfo(**fields)


def _grown(info: DatasetInfo, **settings) -> dict:
    """A train split's cache manifest: subgraphs grown with the record's prior and linker."""
    grown = {"seeds": 1, "budgets": [10, 20], "exact_seeds": True, "seeding": "fulltext",
             "relation_prior": RelationPrior.from_json(info.relation_prior).fingerprint,
             "linker": EntityLinker.from_json(info.entity_linker).fingerprint}
    grown.update(settings)
    return {"settings": {k: v for k, v in grown.items() if v is not None}}


def test_it_holds_what_the_subgraphs_were_grown_with_and_reads_back_equal(tmp_path):
    info = _info()
    trained = from_extraction(info, "deep", RetrievalDefaults(), _grown(info))
    assert (trained.seeds, trained.budgets, trained.seeding, trained.follows_prior) == (1, (10, 20), "fulltext", True)
    assert trained.relation_prior == info.relation_prior and trained.entity_linker == info.entity_linker  # as stored
    assert (trained.embedding_model, trained.dimension, trained.graph) == (DEFAULT_MODEL, 16, "graph-1")
    assert trained.schema == schema_fingerprint("Synthetic", RELATIONS) != schema_fingerprint("Synthetic", RELATIONS[::-1])
    assert trained.prior_digest == prior_digest(info.relation_prior) and trained.format_version == FORMAT_VERSION

    write_trained_retriever(tmp_path, trained)
    assert read_trained_retriever(tmp_path) == trained
    assert json.loads((tmp_path / ARTIFACT).read_text())["format"] == "seeder-dgl/retriever"
    assert read_trained_retriever(tmp_path / "elsewhere") is None  # a run folder from before: loaded as before


def test_it_keeps_only_the_parts_retrieval_reads(tmp_path):
    info = _info()
    dense = from_extraction(info, "paper", RetrievalDefaults(), _grown(info, seeding="dense", relation_prior=None,
                                                                       linker=None))
    assert (dense.relation_prior, dense.entity_linker, dense.follows_prior) == (None, None, False)
    hand_set = from_extraction(info, "deep", RetrievalDefaults(), _grown(info, linker=None))
    assert hand_set.entity_linker is None and hand_set.follows_prior  # grown with the hand-set linker
    # A cache without recorded settings: the profile's, and the record's prior when it follows one.
    legacy = from_extraction(info, "deep", RetrievalDefaults(seeds=2, budgets=(5, 6), relation_prior=True), None)
    assert (legacy.seeds, legacy.budgets, legacy.follows_prior) == (2, (5, 6), True)


def test_training_is_refused_when_the_record_changed_since_extract():
    info = _info()
    grown = _grown(info)
    refit = _info(relation_prior=_prior(seed=1).to_json())  # tune or extract --refit-prior since
    with pytest.raises(SeederError) as exc:
        from_extraction(refit, "deep", RetrievalDefaults(), grown)
    assert "relation prior" in _single_line(exc) and "seeder-dgl extract synthetic --profile deep --overwrite" in \
        str(exc.value)
    with pytest.raises(SeederError) as exc:
        from_extraction(_info(entity_linker=_linker(seed=1).to_json()), "deep", RetrievalDefaults(), grown)
    assert "entity linker" in _single_line(exc) and "--overwrite" in str(exc.value)
    # Relation types upserted since extract: the prior aligned to them is still the one grown with.
    more = _info(relation_types=RELATIONS + ["r4"])
    assert from_extraction(more, "deep", RetrievalDefaults(), grown).relation_types[-1] == "r4"


def test_writing_it_is_atomic(tmp_path, monkeypatch):
    trained = from_extraction(_info(), "deep", RetrievalDefaults(), _grown(_info()))
    write_trained_retriever(tmp_path, trained)

    def crash(src, dst):
        raise OSError("disk full")

    import seeder_dgl.fileio as fileio

    monkeypatch.setattr(fileio.os, "replace", crash)
    with pytest.raises(OSError):
        write_trained_retriever(tmp_path, dataclasses.replace(trained, seeds=7))
    monkeypatch.undo()
    assert read_trained_retriever(tmp_path) == trained  # the old file, whole
    assert [p.name for p in tmp_path.iterdir()] == [ARTIFACT]  # no temporary file left behind


def test_a_damaged_or_newer_file_is_a_one_line_error(tmp_path):
    path = tmp_path / ARTIFACT
    trained = from_extraction(_info(), "deep", RetrievalDefaults(), _grown(_info()))
    good = trained.to_dict()
    for text, says in (('{"format": "seeder-dgl/retr', "is damaged"),
                       (json.dumps({**good, "format_version": FORMAT_VERSION + 1}), "upgrade seeder-dgl"),
                       (json.dumps({k: v for k, v in good.items() if k != "seeds"}), "is damaged"),
                       (json.dumps({**good, "budgets": ["x"]}), "is damaged"),
                       (json.dumps({**good, "format_version": "x"}), "is damaged"),
                       (json.dumps({"format": "something else"}), "not a seeder-dgl trained retriever")):
        path.write_text(text)
        with pytest.raises(CheckpointError) as exc:
            read_trained_retriever(tmp_path)
        assert says in _single_line(exc) and str(path) in str(exc.value)
        assert "train" in str(exc.value) or "upgrade" in str(exc.value)


def test_it_refuses_a_graph_it_was_not_trained_on_in_one_line():
    trained = from_extraction(_info(), "deep", RetrievalDefaults(), _grown(_info()))
    where = "runs/synthetic/deep-full/retriever.json"
    trained.check_fits(_info(), where)
    trained.check_fits(_info(relation_types=RELATIONS + ["new_one"]), where)  # upserted: the unknown slot
    trained.check_fits(_info(model="all-MiniLM-L6-v2", identity=None), where)  # the same model; identity unknown
    for changes, says in ((dict(model="BAAI/bge-small-en-v1.5"), "BAAI/bge-small-en-v1.5"),
                          (dict(dimension=384), "ones of 384"),
                          (dict(identity="graph-2"), "another graph named 'synthetic'"),
                          (dict(label="Other"), "labelled Synthetic"),
                          (dict(relation_types=["r0", "r2", "r3"]), "r1 are gone"),
                          (dict(relation_types=["r1", "r0", "r2", "r3"]), "reordered"),
                          (dict(name="other"), "not 'other'")):
        with pytest.raises(CheckpointError) as exc:
            trained.check_fits(_info(**changes), where)
        assert says in _single_line(exc) and "seeder-dgl train" in str(exc.value), changes


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One short training run that writes its trained retriever beside best.pt."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    info = _info()
    trained = from_extraction(info, "deep", RetrievalDefaults(), _grown(info))
    out = tmp_path_factory.mktemp("run")
    train(tiny_config(epochs=1, batch_size=8), *synthetic_task(num_train=32, num_val=12, seed=2), out, progress=False,
          relation_types=RELATIONS, console=Console(file=io.StringIO()), retriever=trained,
          dataset_meta={"embedding_model": DEFAULT_MODEL, "dimension": 16,
                        "bound_to": {"graph": "graph-1", "relation_prior": trained.prior_digest}})
    yield out, info
    torch.set_num_threads(before)


def test_the_run_folder_loads_with_its_policy_and_what_it_was_trained_with(trained_run, tmp_path):
    out, info = trained_run
    assert (out / ARTIFACT).is_file() and (out / "best.pt").is_file()
    # The record's prior and linker changed since (tune): the run keeps its own.
    refit = _info(relation_prior=_prior(seed=5).to_json(), entity_linker=_linker(seed=5).to_json())
    loaded = load_trained_retriever(out, refit)
    assert loaded.settings.relation_prior.fingerprint == _prior().fingerprint
    assert loaded.settings.linker.fingerprint == _linker().fingerprint
    assert (loaded.settings.seeds, loaded.settings.budgets, loaded.settings.seeding) == (1, (10, 20), "fulltext")
    assert loaded.policy.dataset == "synthetic" and loaded.trained.data_fingerprint == loaded.policy.data_fingerprint
    # A relation type upserted since: the prior scores it as one it never saw.
    wider = load_trained_retriever(out, _info(relation_types=RELATIONS + ["r4"]))
    assert wider.settings.relation_prior.relation_types == RELATIONS + ["r4"]

    with pytest.raises(CheckpointError) as exc:
        load_trained_retriever(out, _info(identity="graph-2"))
    assert "another graph named" in _single_line(exc)
    with pytest.raises(CheckpointError) as exc:
        load_trained_retriever(tmp_path, info)
    assert "no trained retriever" in _single_line(exc) and "seeder-dgl train synthetic" in str(exc.value)


def test_a_policy_and_a_file_of_different_runs_are_refused(trained_run, tmp_path):
    out, info = trained_run
    (tmp_path / "best.pt").write_bytes((out / "best.pt").read_bytes())
    trained = read_trained_retriever(out)
    for other in (dataclasses.replace(trained, data_fingerprint="another-run"),
                  dataclasses.replace(trained, relation_prior=_prior(seed=3).to_json())):
        write_trained_retriever(tmp_path, other)
        with pytest.raises(CheckpointError) as exc:
            load_trained_retriever(tmp_path, info)
        assert "different training runs" in _single_line(exc) and "seeder-dgl train synthetic" in str(exc.value)
    write_trained_retriever(tmp_path, dataclasses.replace(trained, entity_linker="{oops"))
    with pytest.raises(SeederError) as exc:
        load_trained_retriever(tmp_path, info)
    assert "entity linker stored in" in _single_line(exc) and "train again" in str(exc.value)
