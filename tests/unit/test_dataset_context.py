"""``DatasetContext``: a dataset's profile resolved once, and its paths as the module functions give them."""
from __future__ import annotations

import dataclasses

import pytest

from seeder_dgl.datasets import (
    DATASETS,
    TUNED,
    DatasetContext,
    dataset_dir,
    profile_flag,
    retrieval_profile,
    run_dir,
    runs_root,
    subgraph_dir,
    write_manifest,
)
from seeder_dgl.errors import SeederError


@pytest.fixture(autouse=True)
def folders(monkeypatch, tmp_path):
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SEEDER_RUNS", str(tmp_path / "runs"))
    return tmp_path


@pytest.mark.parametrize("dataset, profile", [("metaqa", None), ("metaqa", "paper"), ("prime", None), ("mykg", None)])
def test_the_context_resolves_the_profile_and_gives_the_module_functions_paths(dataset, profile):
    ds = DatasetContext.open(dataset, profile)
    assert ds.name == dataset and ds.retrieval == retrieval_profile(dataset, profile)
    assert ds.profile == (profile or ("deep" if dataset == "metaqa" else "paper"))
    assert ds.cache_dir == dataset_dir(dataset) and ds.manifest_path == dataset_dir(dataset) / "dataset.json"
    assert ds.export_dir == dataset_dir(dataset) / "export"
    assert ds.subgraph_dir("train") == subgraph_dir(dataset, ds.profile, "train")
    assert ds.run_dir() == run_dir(dataset, ds.profile)
    assert ds.run_dir("rerank") == run_dir(dataset, ds.profile, "rerank")
    assert ds.runs_dir == runs_root() / dataset and ds.profile_flag == profile_flag(ds.profile)
    assert ds.spec is DATASETS.get(dataset) and ds.builtin == (dataset in DATASETS)


def test_paths_follow_the_profile_and_another_cache_folder(folders):
    deep = DatasetContext.open("metaqa", cache=folders / "elsewhere")
    assert deep.subgraph_dir("val") == (folders / "elsewhere" / "metaqa" / "subgraphs" / "deep-val").resolve()
    assert deep.run_dir("no_aux").name == "deep-no_aux" and deep.profile_flag == " --profile deep"
    paper = DatasetContext.open("metaqa", "paper")
    assert paper.subgraph_dir("val").name == "val" and paper.run_dir().name == "full" and paper.profile_flag == ""


def test_a_tuned_dataset_of_your_own_defaults_to_its_tuned_settings():
    write_manifest("mykg", {"name": "mykg", "format": "files", "source": "/data/mykg",
                            "retrieval": {"seeds": 2, "budgets": [20, 30], "seeding": "fulltext"}})
    ds = DatasetContext.open("mykg")
    assert ds.profile == TUNED and ds.retrieval.budgets == (20, 30) and not ds.builtin
    assert ds.subgraph_dir("train").name == "tuned-train"


def test_bad_names_and_profiles_are_one_line_errors():
    with pytest.raises(SeederError, match="cannot name a dataset"):
        DatasetContext.open("../x")
    with pytest.raises(SeederError, match="no retrieval profile 'wide': choose one of paper, deep"):
        DatasetContext.open("metaqa", "wide")
    with pytest.raises(SeederError, match="seeder-dgl tune prime"):
        DatasetContext.open("prime", TUNED)
    with pytest.raises(dataclasses.FrozenInstanceError):  # one object for the whole command
        DatasetContext.open("prime").profile = "deep"


def test_only_a_graph_of_your_own_waits_for_tune_a_renamed_built_in_keeps_its_profiles():
    """`extract` runs `tune` first for a graph of your own with no settings yet; MetaQA stored under
    another name (`ingest metaqa --name x`) keeps MetaQA's deep profile, as it does under its own name."""
    from seeder_dgl.datasets import get_spec

    write_manifest("mykg", {"name": "mykg", "format": "files", "source": "/data/mykg"})
    write_manifest("metaqa2", {"name": "metaqa2", "format": "metaqa", "source": "/data/metaqa"})
    assert get_spec("mykg").untuned and DatasetContext.open("mykg").profile == "paper"
    copy = get_spec("metaqa2")
    assert not copy.untuned and not get_spec("metaqa").untuned
    assert DatasetContext.open("metaqa2").profile == "deep"
    assert DatasetContext.open("metaqa2").retrieval == retrieval_profile("metaqa")
    write_manifest("mykg", {"name": "mykg", "format": "files", "source": "/data/mykg",
                            "retrieval": {"seeds": 2, "budgets": [20, 30], "seeding": "fulltext"}})
    assert not get_spec("mykg").untuned
