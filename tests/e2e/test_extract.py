"""`extract`: subgraphs of a question split from the live graph into the shard cache."""
from __future__ import annotations

import json

import numpy as np
import pytest

from loaders.kg import Query
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.writer import GraphWriter
from seeder_dgl.subgraph import cache
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings
from seeder_dgl.retrieval.extract import extract_split
from seeder_dgl.retrieval.link_training import FoldPriors
from seeder_dgl.retrieval.relation_prior import RelationPrior
from tests.helpers.graphs import random_embeddings, random_kg


@pytest.fixture
def graph(neo4j_driver, dataset_label):
    kg = random_kg(dataset_label, 600, 2400, seed=31)
    emb = random_embeddings(600, seed=31)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, random_embeddings(4, seed=32), "m", progress=False)
    yield LiveGraph(neo4j_driver, dataset_label), emb
    writer.reset()


def _queries(n: int, emb: np.ndarray):
    rng = np.random.default_rng(4)
    answers = rng.integers(0, emb.shape[0], size=(n, 2))
    queries = [Query(id=100 + i, text=f"question {i}", answers=[int(a) for a in answers[i]]) for i in range(n)]
    q = emb[answers[:, 0]] + 0.3 * random_embeddings(n, seed=5)  # near one answer
    return queries, q / np.linalg.norm(q, axis=1, keepdims=True)


def test_cypher_and_memory_engines_give_the_same_subgraphs(graph, neo4j_driver, dataset_label, tmp_path):
    live, emb = graph
    queries, q = _queries(20, emb)
    settings = RetrievalSettings(seeds=3, budgets=(8, 12), exact_seeds=True)
    extract_split(live, queries, q, tmp_path / "cypher", settings, shard_size=6, progress=False)
    snapshot = MemoryGraph.from_export(export_graph(neo4j_driver, dataset_label, tmp_path / "export", progress=False),
                                      live)
    summary = extract_split(snapshot, queries, q, tmp_path / "memory", settings, shard_size=6, progress=False)
    a, qa = cache.load_split(tmp_path / "cypher")
    b, qb = cache.load_split(tmp_path / "memory")
    assert [r.query_id for r in a] == [r.query_id for r in b] == [q.id for q in queries]
    for x, y in zip(a, b):
        assert x.node_ids.tolist() == y.node_ids.tolist()
        np.testing.assert_allclose(x.score, y.score, atol=1e-5)
        assert sorted(zip(x.src.tolist(), x.dst.tolist(), x.rel.tolist())) == \
            sorted(zip(y.src.tolist(), y.dst.tolist(), y.rel.tolist()))
        assert x.labels.sum() == len(set(queries[[qq.id for qq in queries].index(x.query_id)].answers)
                                     & set(x.node_ids.tolist()))
    np.testing.assert_allclose(qa, qb)
    assert summary["num_queries"] == 20 and summary["num_shards"] == 4
    assert 0 <= summary["subgraph_hit_any"] <= 1


def test_a_partial_split_resumes_and_other_settings_are_refused(graph, tmp_path):
    live, emb = graph
    queries, q = _queries(12, emb)
    settings = RetrievalSettings(seeds=2, budgets=(5,))
    folder = tmp_path / "split"
    extract_split(live, queries, q, folder, settings, shard_size=4, progress=False)
    first = cache.load_split(folder)[0]
    cache.shard_path(folder, 1).unlink()  # as if killed before the second shard was written
    summary = extract_split(live, queries, q, folder, settings, shard_size=4, progress=False)
    assert summary["resumed_queries"] == 8
    again = cache.load_split(folder)[0]
    assert [r.node_ids.tolist() for r in again] == [r.node_ids.tolist() for r in first]
    with pytest.raises(SeederError, match="other settings"):
        extract_split(live, queries, q, folder, RetrievalSettings(seeds=2, budgets=(6,)), shard_size=4,
                      progress=False)
    with pytest.raises(SeederError, match="other settings"):  # reworded questions are other questions
        extract_split(live, queries, q, folder, settings, shard_size=4, progress=False, reworded=0.3)
    assert all(r.direction.shape == r.src.shape for r in again)
    # A cache written before edge directions were kept (no such manifest key) is not resumed.
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["edge_directions"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SeederError, match="other settings.*--overwrite"):
        extract_split(live, queries, q, folder, settings, shard_size=4, progress=False)
    cache.shard_path(folder, 0).write_bytes(b"not a zip")
    with pytest.raises(cache.CacheError, match="damaged"):
        cache.load_split(folder)


def test_each_training_subgraph_reads_the_prior_of_its_wordings_fold(graph, tmp_path):
    live, emb = graph
    queries, q = _queries(12, emb)
    types = list(live.info.relation_types)
    rng = np.random.default_rng(3)
    full, *folded = [RelationPrior(rng.normal(size=(2, len(types), q.shape[1])), rng.normal(size=(2, len(types))),
                                   types, {}) for _ in range(3)]
    fold_priors = FoldPriors(folded, {}, full.fingerprint)
    folds = [i % 3 % 2 for i in range(len(queries))]
    settings = RetrievalSettings(seeds=2, budgets=(5, 5), relation_prior=full)
    summary = extract_split(live, queries, q, tmp_path / "folds", settings, shard_size=5, progress=False,
                            fold_priors=fold_priors, folds=folds)
    assert summary["prior_folds"] == 2 and summary["num_queries"] == 12
    records, _ = cache.load_split(tmp_path / "folds")
    assert [r.query_id for r in records] == [x.id for x in queries]  # in order, whatever the folds
    for record, k, vector in zip(records, folds, q):
        np.testing.assert_allclose(record.relation_scores, folded[k].scores(vector, hops=2), atol=1e-6)
        assert not np.allclose(record.relation_scores, full.scores(vector, hops=2), atol=1e-3)
    with pytest.raises(SeederError, match="other settings"):  # the same settings without folds
        extract_split(live, queries, q, tmp_path / "folds", settings, shard_size=5, progress=False)
    with pytest.raises(SeederError, match="wording folds"):
        extract_split(live, queries, q, tmp_path / "more", settings, progress=False, fold_priors=fold_priors,
                      folds=folds[:3])


class FixedEncoder:
    """Gives the API the question vectors of the test instead of a model's."""

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def encode_queries(self, texts):
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32)


def _export(neo4j_driver, dataset_label, live, tmp_path) -> MemoryGraph:
    return MemoryGraph.from_export(export_graph(neo4j_driver, dataset_label, tmp_path / "export", progress=False), live)


def _same_ranking(served, measured, atol=1e-5):
    assert [i for i, _ in served] == [i for i, _ in measured]
    np.testing.assert_allclose([s for _, s in served], [s for _, s in measured], atol=atol)


def test_live_dense_seeds_are_the_exact_ones_where_the_server_has_the_procedures(graph, neo4j_driver, dataset_label,
                                                                                  seeder_procedures, monkeypatch):
    """The API's dense seeds by default: an exact scan where the server has seeder-dgl's procedures
    (the seeds extract computed for training, here those of the in-memory scan), the vector index
    where K-hop runs in Cypher (whose exact scan would read every node); past
    EXACT_SEEDING_MAX_NODES the procedure scores exactly only SEED_CANDIDATES preselected nodes;
    exact_seeds overrides."""
    import seeder_dgl.api
    from seeder_dgl.api import Retriever
    from seeder_dgl.retrieval.memory import dense_topk

    _, emb = graph
    queries, q = _queries(6, emb)
    encoder = FixedEncoder({query.text: vector for query, vector in zip(queries, q)})
    with Retriever(dataset_label, method="khop", seeds=3, budgets=(8, 12), seeding="dense", driver=neo4j_driver,
                   encoder=encoder) as api:
        assert api.exact_seeds is True
        for query, vector in zip(queries, q):
            served = api.retrieve(query.text, k=15)
            assert sorted(n.id for n in served.nodes if n.seed) == sorted(dense_topk(emb, vector, 3)[0].tolist())
        assert api.seed_candidates == 0
    monkeypatch.setattr(seeder_dgl.api, "EXACT_SEEDING_MAX_NODES", len(emb) - 1)
    for candidates in (len(emb), 4):
        monkeypatch.setattr(seeder_dgl.api, "SEED_CANDIDATES", candidates)
        with Retriever(dataset_label, method="khop", seeds=3, budgets=(8, 12), seeding="dense",
                       driver=neo4j_driver, encoder=encoder) as api:
            assert api.exact_seeds is True and api.seed_candidates == candidates
            for query, vector in zip(queries, q):
                seeds = {n.id: n.score for n in api.retrieve(query.text, k=15).nodes if n.seed}
                unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
                exact = {int(i): float(unit[i] @ (vector / np.linalg.norm(vector))) for i in seeds}
                np.testing.assert_allclose([seeds[i] for i in exact], list(exact.values()), atol=1e-6)
                if candidates == len(emb):  # every node a candidate: the full exact scan
                    assert sorted(seeds) == sorted(dense_topk(emb, vector, 3)[0].tolist())
    monkeypatch.setattr(seeder_dgl.api, "EXACT_SEEDING_MAX_NODES", len(emb))
    with Retriever(dataset_label, method="khop", seeding="dense", driver=neo4j_driver, encoder=encoder) as api:
        assert api.exact_seeds is True and api.seed_candidates == 0
    monkeypatch.setenv("SEEDER_KHOP", "cypher")
    with Retriever(dataset_label, method="khop", seeding="dense", driver=neo4j_driver, encoder=encoder) as api:
        assert api.exact_seeds is False
    with Retriever(dataset_label, method="khop", seeding="dense", driver=neo4j_driver, encoder=encoder,
                   exact_seeds=True) as api:
        assert api.exact_seeds is True


def test_query_serves_what_eval_measures(graph, neo4j_driver, dataset_label, tmp_path):
    """The API's K-hop and PPR answers on the live graph (Neo4j) equal eval's K-hop and PPR rows
    on the export (in memory) for the same question and settings: same nodes in the same order,
    same scores."""
    from seeder_dgl.api import Retriever
    from seeder_dgl.evaluation.evaluate import build_baselines

    live, emb = graph
    queries, q = _queries(8, emb)
    memory = _export(neo4j_driver, dataset_label, live, tmp_path)
    settings = RetrievalSettings(seeds=3, budgets=(8, 12), exact_seeds=True)
    measured, _ = build_baselines(memory, ["khop", "ppr"], settings)
    encoder = FixedEncoder({query.text: vector for query, vector in zip(queries, q)})
    with Retriever(dataset_label, method="khop", seeds=3, budgets=(8, 12), exact_seeds=True, seeding="dense",
                   driver=neo4j_driver, encoder=encoder) as api:
        for query, vector in zip(queries, q):
            served = api.retrieve(query.text, k=15)
            khop = measured["khop"].search(query.text, vector, 15)
            _same_ranking([(n.id, n.score) for n in served.nodes], khop.ranking)
            ppr = api.retrieve(query.text, k=15, method="ppr")
            expected = measured["ppr"].search(query.text, vector, 15)
            _same_ranking([(n.id, n.score) for n in ppr.nodes], expected.ranking)
            assert ppr.subgraph_size == expected.considered
            # PPR restarts at the seeds K-hop expands
            assert {n.id for n in ppr.nodes if n.seed} <= {i for i, _ in expected.seeds}
            assert {i for i, _ in expected.seeds} == {n.id for n in served.nodes if n.seed}


class SessionCounter:
    """The test server's sync driver, counting the sessions and queries opened through it."""

    def __init__(self, driver):
        self.driver, self.opened = driver, 0

    def session(self, **config):
        self.opened += 1
        return self.driver.session(**config)

    def execute_query(self, *args, **kwargs):
        self.opened += 1
        return self.driver.execute_query(*args, **kwargs)

    def verify_connectivity(self, **config):
        return self.driver.verify_connectivity(**config)


@pytest.mark.parametrize("method", ["khop", "ppr"])
def test_aretrieve_answers_as_retrieve_with_every_read_on_the_async_driver(graph, neo4j_driver, neo4j_target,
                                                                        dataset_label, khop_engine, method,
                                                                        monkeypatch):
    """``aretrieve`` calls run at once on one event loop, as ``serve`` runs them: each answers as
    ``retrieve`` does, every one of their Neo4j reads goes through the async driver (none through
    the sync one), and once its connections are open no thread is started for them; with K-hop in
    Cypher, a hop's partitions are read side by side on the loop."""
    import asyncio
    import threading

    from neo4j import AsyncGraphDatabase

    from seeder_dgl.api import Retriever

    monkeypatch.setenv("SEEDER_KHOP", khop_engine)
    _, emb = graph
    queries, q = _queries(8, emb)
    encoder = FixedEncoder({query.text: vector for query, vector in zip(queries, q)})
    sync = SessionCounter(neo4j_driver)

    async def run():
        async_driver = AsyncGraphDatabase.driver(neo4j_target.uri, auth=(neo4j_target.user, neo4j_target.password))
        try:
            with Retriever(dataset_label, method=method, seeds=3, budgets=(8, 12), seeding="dense", driver=sync,
                           encoder=encoder, async_driver=async_driver) as api:
                expected = [api.retrieve(query.text, k=15) for query in queries]
                before_sync = sync.opened
                await asyncio.gather(*(api.aretrieve(query.text, k=15) for query in queries))  # opens connections
                threads = {t.name for t in threading.enumerate()}
                got = await asyncio.gather(*(api.aretrieve(query.text, k=15) for query in queries))
                batch = await api.aretrieve_many([query.text for query in queries[:3]], k=15)
                return expected, got, batch, sync.opened - before_sync, \
                    {t.name for t in threading.enumerate()} - threads, api.graph.driver.async_statements
        finally:
            await async_driver.close()

    expected, got, batch, sync_reads, new_threads, async_reads = asyncio.run(run())
    for want, have in zip(expected, got + batch):
        _same_ranking([(n.id, n.score) for n in have.nodes], [(n.id, n.score) for n in want.nodes])
        assert have.subgraph_size == want.subgraph_size and have.triples() == want.triples()
    # Opening a connection resolves its address on the loop's executor (asyncio's getaddrinfo);
    # once the pool holds them, requests start no thread at all.
    assert sync_reads == 0 and new_threads == set(), new_threads
    # seeds and K-hop (one statement with the procedures, which also reads the count of relation
    # types), the count where nothing read it, the nodes with their edges: each on the async driver
    assert async_reads >= 2 * (2 if (khop_engine, method) == ("procedure", "khop") else 3) * len(queries)


def test_every_method_ranks_the_live_graph_as_the_export(graph, neo4j_driver, dataset_label, tmp_path):
    """Each retriever class gives the same ranking on LiveGraph as on MemoryGraph, including
    neighbourhoods cut to their most similar nodes (a small ``max_nodes``) and beam's weighted hops."""
    from seeder_dgl.retrieval.baselines import BeamRetriever, PCSTRetriever, PPRMMRRetriever, PPRRetriever
    from seeder_dgl.retrieval.methods import BASELINES, make_retriever
    from seeder_dgl.retrieval.neighbourhood import live_ego_graph

    live, emb = graph
    queries, q = _queries(6, emb)
    memory = _export(neo4j_driver, dataset_label, live, tmp_path)
    settings = RetrievalSettings(seeds=3, budgets=(8, 12), exact_seeds=True)
    pairs = [(make_retriever(name, live, settings), make_retriever(name, memory, settings)) for name in BASELINES]
    pairs += [(cls(live, settings, max_nodes=40), cls(memory, settings, max_nodes=40))
              for cls in (PPRRetriever, PPRMMRRetriever, PCSTRetriever)]
    pairs.append((BeamRetriever(live, settings, beam_width=5), BeamRetriever(memory, settings, beam_width=5)))
    for query, vector in zip(queries, q):
        seeds = memory.dense_seeds(vector, 3)
        on_live, in_memory = live_ego_graph(live, vector, seeds, 2, 40), memory.ego_graph(vector, seeds, 2, 40)
        assert on_live.node_ids.tolist() == in_memory.node_ids.tolist()
        assert on_live.hop.tolist() == in_memory.hop.tolist()
        np.testing.assert_allclose(on_live.sim, in_memory.sim, atol=1e-5)
        assert (on_live.src.tolist(), on_live.dst.tolist(), on_live.rel.tolist()) == \
            (in_memory.src.tolist(), in_memory.dst.tolist(), in_memory.rel.tolist())
        np.testing.assert_allclose(on_live.relation_sim, in_memory.relation_sim, atol=1e-9)
        for on_live_method, in_memory_method in pairs:
            served = on_live_method.search(query.text, vector, 30)
            measured = in_memory_method.search(query.text, vector, 30)
            _same_ranking(served.seeds, measured.seeds)
            _same_ranking(served.ranking, measured.ranking)


def test_query_serves_what_eval_measures_with_a_trained_policy(graph, neo4j_driver, dataset_label, tmp_path):
    """The same with SeedER: a policy trained on this graph ranks the API's live subgraph (node
    features read from Neo4j) exactly as eval's PolicyRetriever ranks the in-memory one."""
    from seeder_dgl.api import Retriever
    from seeder_dgl.inference import load_policy
    from seeder_dgl.retrieval.policy import PolicyRetriever
    from seeder_dgl.training.config import TrainConfig
    from seeder_dgl.training.trainer import train

    live, emb = graph
    memory = MemoryGraph.from_export(export_graph(neo4j_driver, dataset_label, tmp_path / "export", progress=False),
                                     live)
    queries, q = _queries(40, emb)
    settings = RetrievalSettings(seeds=3, budgets=(8, 12), exact_seeds=True)
    extract_split(memory, queries, q, tmp_path / "subgraphs", settings, progress=False)
    records, query_emb = cache.load_split(tmp_path / "subgraphs")
    cfg = TrainConfig(dataset=dataset_label, pca_dim=8, hidden_dim=16, num_layers=2, expansion_sizes=(4, 6),
                      frontier_caps=(10, 20), num_trajectories=4, epochs=1, warmup_epochs=0, device="cpu")
    result = train(cfg, records[:30], query_emb[:30], records[30:], query_emb[30:], memory.node_emb,
                   len(live.info.relation_types), tmp_path / "run", progress=False,
                   relation_types=live.info.relation_types, dataset_meta={"embedding_model": "m"})
    policy = load_policy(result.best_path, dataset=dataset_label, embedding_model="m", dimension=16)
    measured = PolicyRetriever(memory, settings, policy=policy)
    encoder = FixedEncoder({query.text: vector for query, vector in zip(queries, q)})
    with Retriever(dataset_label, method="seeder", checkpoint=result.best_path, seeds=3, budgets=(8, 12),
                   exact_seeds=True, seeding="dense", driver=neo4j_driver, encoder=encoder) as api:
        for i, query in enumerate(queries[:10]):
            served = api.retrieve(query.text, k=15)
            expected = measured.search(query.text, q[i], 15).ranking
            assert [n.id for n in served.nodes] == [node for node, _ in expected]
            np.testing.assert_allclose([n.score for n in served.nodes], [s for _, s in expected], atol=1e-4)
