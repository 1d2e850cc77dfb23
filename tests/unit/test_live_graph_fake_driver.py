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

    def session(self, database=None, **config):
        self.session_config = config
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
    # What each partition answers for each hop: (ids, similarities, scores). Partitions score
    # disjoint neighbours; selected nodes come back too (the caller drops them).
    answers = {
        ((0,), 0): ([4, 0, 5], [0.5, 1.0, 0.4], [0.5, 0.9, 0.4]),  # hop 1, one partition; 0 is the seed
        ((4, 5), 0): ([5, 3, 2], [0.4, 0.2, 0.3], [0.6, 0.30, 0.25]),  # 5 was selected in hop 1
        ((4, 5), 1): ([1, 9], [0.1, 0.1], [0.30, 0.1]),
    }

    def answer(text, params):
        if "$frontier" in text:
            frontier = tuple(f["id"] for f in params["frontier"])
            ids, sims, scores = answers[(frontier, params["partition"])]
            return [FakeRecord({"ids": ids, "similarities": sims, "scores": scores})]
        return [FakeRecord({"sources": [], "targets": [], "relations": []})]

    driver = FakeDriver(answer=answer)
    graph = LiveGraph(driver, "movies", hop_partitions=2)
    sub = graph.khop_filter(np.array([2.0, 0, 0, 0]), [(0, 1.0)], [2, 3])
    # Selected nodes are dropped; 1 and 3 tie at 0.30 and the smaller id goes first; then 2.
    assert sub.node_ids.tolist() == [0, 4, 5, 1, 3, 2] and sub.hop.tolist() == [0, 1, 1, 2, 2, 2]
    np.testing.assert_allclose(sub.score, [1.0, 0.5, 0.4, 0.30, 0.30, 0.25])
    hops = [p for t, p in driver.calls if "$frontier" in t]
    assert sorted((p["partitions"], p["partition"]) for p in hops) == [(1, 0), (2, 0), (2, 1)]
    # Each partition is asked for as many more rows as there are selected nodes.
    assert [p["limit"] for p in hops] == [3, 6, 6]
    assert [f["id"] for f in hops[1]["frontier"]] == [4, 5] and hops[1]["frontier"][0]["similarity"] == 0.5
    assert all(p["embedding"] == pytest.approx([1.0, 0.0, 0.0, 0.0]) for p in hops)  # unit query, a parameter
    assert driver.session_config == {"notifications_disabled_categories": ["DEPRECATION"]}  # id() is deliberate


class FakeRecord(dict):
    """What the driver's Record offers LiveGraph: mapping access and items()."""
