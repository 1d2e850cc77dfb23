"""LiveGraph against a fake driver: the states a real server is hard to catch in (an index still
populating, an ingest cut off half way, a server that fails mid-query) give one-line errors, each
statement reaches the driver with its values as parameters and in READ access mode, and K-hop
runs through seeder-dgl's procedures exactly when the server has them or SEEDER_KHOP says so."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from neo4j import READ_ACCESS, RoutingControl
from neo4j.exceptions import ServiceUnavailable

from seeder_dgl.errors import SeederError
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

    def run(self, text, params=None):
        params = params or {}
        self.driver.calls.append((text, copy.deepcopy(params)))  # as sent, before the caller moves on
        if self.driver.fail:
            raise ServiceUnavailable("connection lost")
        return self.driver.answer(text, params)


class FakeDriver:
    def __init__(self, meta=META, answer=None):
        self.meta, self.calls, self.fail = meta, [], False
        self.answer = answer or (lambda text, params: [])
        self.routing, self.session_configs = [], []

    def execute_query(self, text, **params):  # only the dataset record is read this way
        self.routing.append(params.get("routing_"))
        return SimpleNamespace(records=[{"meta": self.meta}] if self.meta else [])

    def session(self, database=None, **config):
        self.session_config = config
        self.session_configs.append(config)
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
    assert graph.khop_engine == "cypher"  # the server was asked, and has no procedures
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
        if "SHOW PROCEDURES" in text:
            return [FakeRecord({"names": []})]  # a server without seeder-dgl's procedures
        return [FakeRecord({"sources": [], "targets": [], "relations": []})]

    driver = FakeDriver(answer=answer)
    graph = LiveGraph(driver, "movies", hop_partitions=2)
    sub = graph.khop_filter(np.array([2.0, 0, 0, 0]), [(0, 1.0)], [2, 3])
    # Selected nodes are dropped; 1 and 3 tie at 0.30 and the smaller id goes first; then 2.
    assert sub.node_ids.tolist() == [0, 4, 5, 1, 3, 2] and sub.hop.tolist() == [0, 1, 1, 2, 2, 2]
    np.testing.assert_allclose(sub.score, [1.0, 0.5, 0.4, 0.30, 0.30, 0.25])
    assert sub.exact_score.dtype == np.float64 and sub.exact_score.tolist() == [1.0, 0.5, 0.4, 0.30, 0.30, 0.25]
    hops = [p for t, p in driver.calls if "$frontier" in t]
    assert sorted((p["partitions"], p["partition"]) for p in hops) == [(1, 0), (2, 0), (2, 1)]
    # Each partition is asked for as many more rows as there are selected nodes.
    assert [p["limit"] for p in hops] == [3, 6, 6]
    assert [f["id"] for f in hops[1]["frontier"]] == [4, 5] and hops[1]["frontier"][0]["similarity"] == 0.5
    assert all(p["embedding"] == pytest.approx([1.0, 0.0, 0.0, 0.0]) for p in hops)  # unit query, a parameter
    # id() is deliberate, and an older dataset record lacks properties newer statements read;
    # every statement only reads.
    assert driver.session_config == {"default_access_mode": READ_ACCESS,
                                     "notifications_disabled_classifications": ["DEPRECATION", "UNRECOGNIZED"]}


class FakeRecord(dict):
    """What the driver's Record offers LiveGraph: mapping access and items()."""


def _server_with_procedures(added: dict | None = None, installed=("seeder.khop", "seeder.exactSeeds", "seeder.nodeFeatures")):
    """A fake server that lists ``installed`` and answers seeder.khop with ``added`` (parallel lists)."""
    def answer(text, params):
        if "SHOW PROCEDURES" in text:
            return [FakeRecord({"names": list(installed)})]
        if "seeder.khop(" in text:
            return [FakeRecord(added)]
        if "seeder.exactSeeds(" in text:
            return [FakeRecord({"id": 7, "similarity": 0.9}), FakeRecord({"id": 3, "similarity": 0.8})]
        return [FakeRecord({"sources": [], "targets": [], "relations": []})]
    return FakeDriver(answer=answer)


def test_khop_runs_in_one_procedure_call_when_the_server_has_the_procedures(monkeypatch):
    monkeypatch.delenv("SEEDER_KHOP", raising=False)
    driver = _server_with_procedures({"ids": [4, 5, 1], "hops": [1, 1, 2], "similarities": [0.5, 0.4, 0.1],
                                      "scores": [0.5, 0.4, 0.3], "sources": [0, 1, 5],
                                      "targets": [4, 4, 5], "relations": ["DIRECTED_BY", "ADDED_LATER", "DIRECTED_BY"]})
    graph = LiveGraph(driver, "movies", hop_partitions=2)
    assert graph.khop_engine == "procedure"
    sub = graph.khop_filter(np.array([2.0, 0, 0, 0]), [(0, 1.0)], [2, 3, 0])
    assert sub.node_ids.tolist() == [0, 4, 5, 1] and sub.hop.tolist() == [0, 1, 1, 2]
    np.testing.assert_allclose(sub.score, [1.0, 0.5, 0.4, 0.3])
    assert sub.exact_score.dtype == np.float64 and sub.exact_score.tolist() == [1.0, 0.5, 0.4, 0.3]
    # The relationships came with the nodes, both directions, local positions; a type the model does
    # not know is left out, as on the Cypher path.
    assert sorted(zip(sub.src.tolist(), sub.dst.tolist(), sub.rel.tolist())) == [(0, 1, 0), (1, 0, 0), (2, 2, 0), (2, 2, 0)]
    (text, params), = [(t, p) for t, p in driver.calls if "seeder.khop(" in t]
    assert not any("$frontier" in t or "$ids" in t for t, _ in driver.calls)  # no hop, no edges through Cypher
    assert params["label"] == "Movies" and params["budgets"] == [2, 3, 0] and params["with_edges"] is True
    assert params["seeds"] == [{"id": 0, "similarity": 1.0}]
    assert params["embedding"] == pytest.approx([1.0, 0.0, 0.0, 0.0])
    assert params["relation_similarity"] == [{"DIRECTED_BY": pytest.approx(1.0)}] * 3  # one map per hop
    assert graph.dense_seeds(np.array([0, 1.0, 0, 0]), 2, exact=True) == [(7, 0.9), (3, 0.8)]
    assert any("seeder.exactSeeds(" in t for t, _ in driver.calls)


def test_exact_seeds_and_khop_go_to_the_server_as_one_statement(monkeypatch):
    """exact_seeds_khop_filter: one statement that seeds exactly and expands from those seeds in
    the server; the seeds come back with the subgraph and head it, hop 0."""
    monkeypatch.delenv("SEEDER_KHOP", raising=False)
    driver = _server_with_procedures({"seeds": [{"id": 7, "similarity": 0.9}, {"id": 3, "similarity": 0.8}],
                                      "ids": [4], "hops": [1], "similarities": [0.5], "scores": [0.5],
                                      "sources": [7], "targets": [4], "relations": ["DIRECTED_BY"]})
    graph = LiveGraph(driver, "movies")
    seeds, sub = graph.exact_seeds_khop_filter(np.array([2.0, 0, 0, 0]), 2, [1, 0])
    assert seeds == [(7, 0.9), (3, 0.8)]
    assert sub.node_ids.tolist() == [7, 3, 4] and sub.hop.tolist() == [0, 0, 1]
    assert sub.exact_score.tolist() == [0.9, 0.8, 0.5]
    assert sorted(zip(sub.src.tolist(), sub.dst.tolist())) == [(0, 2), (2, 0)]
    (text, params), = [(t, p) for t, p in driver.calls if "seeder." in t and "SHOW" not in t]
    assert "seeder.exactSeeds(" in text and "seeder.khop(" in text
    assert params["k"] == 2 and "seeds" not in params and params["budgets"] == [1, 0]


def test_the_server_is_asked_once_per_driver_and_every_read_runs_in_read_mode(monkeypatch):
    monkeypatch.delenv("SEEDER_KHOP", raising=False)
    driver = _server_with_procedures({"ids": [], "hops": [], "similarities": [], "scores": [], "sources": [],
                                      "targets": [], "relations": []})
    for _ in range(2):
        graph = LiveGraph(driver, "movies")
        for _ in range(3):
            graph.khop_filter(np.array([1.0, 0, 0, 0]), [(0, 1.0)], [2])
    assert sum("SHOW PROCEDURES" in t for t, _ in driver.calls) == 1
    assert driver.routing and set(driver.routing) == {RoutingControl.READ}
    assert all(c["default_access_mode"] == READ_ACCESS for c in driver.session_configs)


def test_a_server_with_some_of_the_procedures_gets_cypher(monkeypatch):
    monkeypatch.delenv("SEEDER_KHOP", raising=False)
    graph = LiveGraph(_server_with_procedures(installed=("seeder.khop", "seeder.other")), "movies")
    assert graph.khop_engine == "cypher"


def test_seeder_khop_forces_an_engine(monkeypatch):
    driver = _server_with_procedures()
    monkeypatch.setenv("SEEDER_KHOP", "cypher")
    assert LiveGraph(driver, "movies").khop_engine == "cypher"
    assert not any("SHOW PROCEDURES" in t for t, _ in driver.calls)  # not even asked
    monkeypatch.setenv("SEEDER_KHOP", "procedure")
    assert LiveGraph(driver, "movies").khop_engine == "procedure"
    assert LiveGraph(driver, "movies", khop="cypher").khop_engine == "cypher"  # the argument wins


def test_asking_for_the_procedures_where_there_are_none_says_how_to_install_them(monkeypatch):
    monkeypatch.setenv("SEEDER_KHOP", "procedure")
    graph = LiveGraph(FakeDriver(), "movies")
    with pytest.raises(SeederError, match="seeder-dgl neo4j plugin") as caught:
        graph.khop_filter(np.array([1.0, 0, 0, 0]), [(0, 1.0)], [2])
    assert "\n" not in str(caught.value) and "SEEDER_KHOP" in str(caught.value)
    monkeypatch.setenv("SEEDER_KHOP", "auto")
    assert LiveGraph(FakeDriver(), "movies").khop_engine == "cypher"
    monkeypatch.setenv("SEEDER_KHOP", "fastest")
    with pytest.raises(SeederError, match="SEEDER_KHOP must be one of auto, procedure, cypher, not 'fastest'"):
        LiveGraph(FakeDriver(), "movies")


def test_a_graph_adopted_in_place_is_read_through_its_own_names_on_both_engines(monkeypatch):
    """The record's store schema decides the property names in every statement and the procedures'
    config, and its relationship types travel as $types; nothing reads the user's ``id``."""
    from seeder_dgl.graphstore.schema import StoreSchema

    schema = StoreSchema.in_place_for("KG_films", "title", None, "uid", ["DIRECTED_BY"])
    meta = {**META, "label": "KG_films", "store_schema": schema.to_record()}
    empty = {"ids": [], "hops": [], "similarities": [], "scores": [], "sources": [], "targets": [], "relations": []}
    monkeypatch.setenv("SEEDER_KHOP", "procedure")
    driver = _server_with_procedures(empty)
    driver.meta = meta
    graph = LiveGraph(driver, "films")
    assert graph.schema == schema
    graph.khop_filter(np.array([1.0, 0, 0, 0]), [(0, 1.0)], [2])
    graph.dense_seeds(np.array([1.0, 0, 0, 0]), 2, exact=True)
    configs = [p["config"] for t, p in driver.calls if "seeder." in t and "SHOW" not in t]
    assert len(configs) == 2 and all(c == {"id": "KG_films_id", "embedding": "KG_films_embedding",
                                           "sketch": "KG_films_sketch", "sketch_error": "KG_films_sketch_error",
                                           "type": "KG_films_type", "name": "title", "types": ["DIRECTED_BY"]}
                                      for c in configs)

    monkeypatch.setenv("SEEDER_KHOP", "cypher")
    driver = FakeDriver(meta=meta, answer=lambda text, params: [FakeRecord(
        {"ids": [], "similarities": [], "scores": [], "sources": [], "targets": [], "relations": []})])
    LiveGraph(driver, "films").khop_filter(np.array([1.0, 0, 0, 0]), [(0, 1.0)], [2])
    hop, edges = [(t, p) for t, p in driver.calls]
    assert "MATCH (v:KG_films {KG_films_id: f.id})-[r]-(u:KG_films)" in hop[0] and "u.KG_films_embedding" in hop[0]
    assert ".id " not in hop[0] and hop[1]["types"] == ["DIRECTED_BY"] and edges[1]["types"] == ["DIRECTED_BY"]
    with pytest.raises(LiveGraphError, match="only partly adopted: run `seeder-dgl adopt films` again"):
        LiveGraph(FakeDriver(meta={**meta, "status": "ingesting"}), "films").check_ready()


def test_names_written_with_underscores_are_also_asked_word_by_word_where_the_words_index_is_online():
    """A dataset whose names join words with '_' (``NameQuery.joined``) asks its name-words index
    too, in the same statement, once that index is ONLINE; other datasets, and datasets from
    before the index, ask the name index alone (``$words`` is '')."""
    from seeder_dgl.graphstore.name_index import NameQuery

    hits = {"ids": [7], "names": ["Virginia_gubernatorial_election,_1993"], "text_scores": [3.0],
            "similarities": [0.5], "types": ["event"], "degrees": [[1]]}

    def server(state):
        def answer(text, params):
            if "SHOW INDEXES" in text:
                return [FakeRecord({"state": state, "populationPercent": 100.0})] if state else []
            return [FakeRecord(hits)]
        return answer

    question, q = "who won virginia gubernatorial election 1993", np.array([1.0, 0, 0, 0])
    for state, joined, words_asked in (("ONLINE", True, True), ("ONLINE", False, False),
                                       ("POPULATING", True, False), (None, True, False)):
        driver = FakeDriver(answer=server(state))
        found = LiveGraph(driver, "movies").fulltext_hits(question, q, words=NameQuery(joined=joined))
        assert [h["id"] for h in found] == [7]
        text, params = driver.calls[-1]
        assert params["words_index"] == "Movies_words" and bool(params["words"]) is words_asked, (state, joined)
        if words_asked:
            assert params["words"].split() == ["who", "won", "virginia~2", "gubernatorial~2", "election~2"]
            code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
            assert "virginia" not in code and "1993" not in code  # values travel as parameters
