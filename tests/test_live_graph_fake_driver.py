"""LiveGraph against a fake driver: the states a real server is hard to catch in (an index still
populating, an ingest cut off half way, a server that fails mid-query) give one-line errors, and
each statement reaches the driver with its values as parameters."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from neo4j.exceptions import ServiceUnavailable

from seeder_dgl.graphstore.live import LiveGraph, LiveGraphError

META = {"label": "Movies", "dimension": 4, "model": "test-model", "relation_names": ["directed by"],
        "relation_types": ["DIRECTED_BY"], "relation_embeddings": [1.0, 0.0, 0.0, 0.0], "num_nodes": 3,
        "num_relationships": 2, "status": "complete"}


class FakeSession:
    def __init__(self, driver):
        self.driver = driver

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, text, params):
        self.driver.calls.append((text, copy.deepcopy(params)))  # as sent, before the caller moves on
        if self.driver.fail:
            raise ServiceUnavailable("connection lost")
        return self.driver.answer(text, params)


class FakeDriver:
    def __init__(self, meta=META, answer=None):
        self.meta, self.calls, self.fail = meta, [], False
        self.answer = answer or (lambda text, params: [])

    def execute_query(self, text, **params):  # only the dataset record is read this way
        return SimpleNamespace(records=[{"meta": self.meta}] if self.meta else [])

    def session(self, database=None):
        return FakeSession(self)


def test_an_index_that_is_still_populating_is_a_one_line_error():
    driver = FakeDriver(answer=lambda text, params: [{"state": "POPULATING", "populationPercent": 42.0}])
    with pytest.raises(LiveGraphError, match=r"Movies_embedding is POPULATING \(42% populated\): wait"):
        LiveGraph(driver, "movies").check_ready()


def test_a_half_ingested_dataset_asks_for_the_ingest_to_be_finished():
    with pytest.raises(LiveGraphError, match="only partly ingested: run `seeder-dgl ingest movies` again"):
        LiveGraph(FakeDriver(meta={**META, "status": "ingesting"}), "movies").check_ready()


def test_a_server_that_fails_mid_query_is_a_one_line_error():
    driver = FakeDriver()
    graph = LiveGraph(driver, "movies", hop_partitions=2)
    driver.fail = True
    with pytest.raises(LiveGraphError) as caught:
        graph.khop_filter(np.array([1.0, 0, 0, 0]), [(0, 1.0)], [2, 2])
    assert "\n" not in str(caught.value) and "K-hop expansion, hop 1" in str(caught.value)


def test_partitions_are_merged_by_score_then_id_and_values_travel_as_parameters():
    parts = {0: {"ids": [4, 2], "similarities": [0.1, 0.5], "scores": [0.30, 0.25]},
             1: {"ids": [3, 1], "similarities": [0.2, 0.4], "scores": [0.30, 0.27]}}

    def answer(text, params):
        if "$frontier" in text:  # a K-hop hop: this partition's rows, less what is already selected
            part = parts[params["partition"]]
            keep = [i for i, node in enumerate(part["ids"]) if node not in params["selected"]]
            return [FakeRecord({key: [values[i] for i in keep] for key, values in part.items()})]
        return [FakeRecord({"sources": [], "targets": [], "relations": []})]

    driver = FakeDriver(answer=answer)
    graph = LiveGraph(driver, "movies", hop_partitions=2)
    sub = graph.khop_filter(np.array([2.0, 0, 0, 0]), [(0, 1.0)], [1, 3])
    # Hop 1 runs unpartitioned (partition 0 answers: 4 beats 2); hop 2 merges both partitions by
    # score, ties to the smaller id: 3 (0.30), 1 (0.27), 2 (0.25).
    assert sub.node_ids.tolist() == [0, 4, 3, 1, 2] and sub.hop.tolist() == [0, 1, 2, 2, 2]
    hops = [p for t, p in driver.calls if "$frontier" in t]
    assert [(p["partitions"], p["partition"]) for p in hops] == [(1, 0), (2, 0), (2, 1)]
    assert all(p["selected"] == [0, 4] for p in hops[1:])
    assert all(p["embedding"] == pytest.approx([1.0, 0.0, 0.0, 0.0]) for p in hops)  # unit query, a parameter


class FakeRecord(dict):
    """What the driver's Record offers LiveGraph: mapping access and items()."""
