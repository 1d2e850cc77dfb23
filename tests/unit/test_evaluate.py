"""evaluate(): every method on the same queries, per-query metrics, breakdowns, latency; method plans;
SeedER over extracted or in-memory subgraphs; question preparation (MetaQA-format files, no Neo4j)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from loaders.kg import QASet, Query
from seeder_dgl.errors import SeederError
from seeder_dgl.evaluation.command import load_questions, plan_methods, prepare_questions, sample_indices
from seeder_dgl.evaluation.evaluate import (
    BASELINES,
    build_baselines,
    cached_subgraphs,
    evaluate,
    find_ablations,
    group_index,
    resolve_methods,
)
from seeder_dgl.metrics import query_metrics
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_filter, unit_query
from seeder_dgl.retrieval.policy import PolicyRetriever
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.subgraph import cache
from tests.helpers.graphs import NameIndex, random_embeddings, random_kg

SEEDS, BUDGETS = 3, (8, 12)
SETTINGS = RetrievalSettings(seeds=SEEDS, budgets=BUDGETS)


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def world():
    """A random 120-node graph, unit embeddings, and 24 queries whose answers are built from the graph."""
    n, d = 120, 16
    arrays = GraphArrays.from_kg(random_kg("toy", n, 420, seed=7, num_relations=4))
    graph = MemoryGraph(arrays, random_embeddings(n, d, seed=7), random_embeddings(4, d, seed=8))
    rng = np.random.default_rng(7)
    queries, embs = [], []
    for i in range(24):
        anchor = int(rng.integers(0, n))
        q = _unit(graph.node_emb[anchor] + 0.05 * rng.normal(size=d))
        nbrs, _ = arrays.neighbors(anchor)
        hops = 1 + i % 3
        if i % 3 == 0:
            answers = [anchor]
        else:
            answers = sorted(set(nbrs[:3].tolist()) | {int(rng.integers(0, n))})
        if i == 5:
            answers = []  # scores 0 on everything
        queries.append(Query(id=1000 + i, text=f"q{i}", answers=answers, hops=hops,
                             qtype=("a_to_b" if i % 2 else "b_to_c")))
        embs.append(q)
    return graph, queries, np.stack(embs)


def _sleepy(i):
    time.sleep(0.002)
    return [(i, 1.0)]


def test_evaluate_shapes_metrics_and_latency(world):
    graph, queries, emb = world
    methods, info = build_baselines(graph, ["dense", "khop", "ppr"], SETTINGS)
    methods["empty"] = lambda i: []
    methods["sleepy"] = _sleepy
    result = evaluate(methods, queries, emb, k=20, depth=25, info=info, meta={"dataset": "toy"})
    assert list(result.methods) == ["dense", "khop", "ppr", "empty", "sleepy"]
    assert result.num_queries == len(queries) and result.depth == 25
    for name, mr in result.methods.items():
        assert len(mr.rankings) == len(queries)
        for metric in ("hit@1", "hit@5", "hit@20", "mrr", "recall@20", "recall@any", "hit@any", "size", "latency_ms"):
            assert mr.per_query[metric].shape == (len(queries),)
            assert metric in mr.summary
        assert mr.summary["num_queries"] == len(queries)
        assert np.all(mr.per_query["latency_ms"] >= 0)
    # Retriever objects were asked for `depth` nodes, so @any and size cover up to 25.
    assert max(len(r) for r in result.methods["dense"].rankings) == 25
    assert result.methods["khop"].info["budgets"] == list(BUDGETS)
    # Per-query numbers are metrics.query_metrics of the stored ranking.
    for name in ("dense", "khop", "ppr"):
        mr = result.methods[name]
        for i, q in enumerate(queries):
            expected = query_metrics(mr.rankings[i], q.answers)
            for metric, value in expected.items():
                assert mr.per_query[metric][i] == pytest.approx(value)
    # A method that returns nothing scores 0 everywhere; latency is measured per query.
    empty = result.methods["empty"].summary
    assert all(empty[m] == 0.0 for m in ("hit@1", "hit@20", "mrr", "recall@20", "hit@any", "recall@any", "size"))
    assert result.methods["sleepy"].per_query["latency_ms"].min() >= 2.0
    assert result.methods["sleepy"].summary["latency_p95_ms"] >= result.methods["sleepy"].summary["latency_p50_ms"]
    # The query without answers scores 0 even where a method would have "found" something.
    assert all(mr.per_query["hit@any"][5] == 0.0 for mr in result.methods.values())
    # A query built around its answer node finds it first by cosine.
    anchored = [i for i in range(len(queries)) if i % 3 == 0]
    assert result.methods["dense"].per_query["hit@1"][anchored].mean() >= 0.75


def test_breakdowns_are_consistent_with_the_overall_means(world):
    graph, queries, emb = world
    methods, _ = build_baselines(graph, ["dense", "khop"], SETTINGS)
    result = evaluate(methods, queries, emb, k=20)
    for mr in result.methods.values():
        assert set(mr.groups) == {"hops", "qtype"}
        assert list(mr.groups["hops"]) == ["1", "2", "3"]
        for attr, groups in mr.groups.items():
            assert sum(g["num_queries"] for g in groups.values()) == len(queries)
            for metric in ("hit@1", "mrr", "recall@20", "recall@any", "size", "latency_ms"):
                weighted = sum(g[metric] * g["num_queries"] for g in groups.values()) / len(queries)
                assert weighted == pytest.approx(mr.summary[metric])
        one_hop = [i for i, q in enumerate(queries) if q.hops == 1]
        assert mr.groups["hops"]["1"]["mrr"] == pytest.approx(mr.per_query["mrr"][one_hop].mean())


def test_no_breakdown_without_attributes_and_group_order():
    queries = [Query(id=i, text="", answers=[i]) for i in range(3)]
    result = evaluate({"id": lambda i: [(i, 1.0)], "bare": lambda i: [7, i]}, queries, np.ones((3, 4), np.float32),
                      k=5)
    assert result.methods["bare"].rankings[1] == [(7, 0.0), (1, -1.0)]  # bare ids: score -rank
    assert result.methods["bare"].summary["mrr"] == pytest.approx(0.5)
    mr = result.methods["id"]
    assert mr.groups == {}
    assert mr.summary["hit@1"] == 1.0 and mr.summary["mrr"] == 1.0 and mr.summary["recall@5"] == 1.0
    assert result.metrics[:3] == ["hit@1", "hit@5", "hit@20"]
    assert list(group_index([10, 2, None, 2, "x"])) == ["2", "10", "x"]


def test_errors_are_raised_or_recorded(world):
    _, queries, emb = world

    def broken(i):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        evaluate({"broken": broken}, queries, emb)
    result = evaluate({"broken": broken, "ok": lambda i: [(0, 1.0)]}, queries, emb, on_error="record")
    assert result.methods["broken"].error == "RuntimeError: boom"
    assert result.methods["broken"].summary["hit@any"] == 0.0
    assert result.methods["ok"].error is None
    with pytest.raises(ValueError):
        evaluate({"ok": lambda i: []}, queries, emb[:3])


def test_every_baseline_runs(world):
    graph, queries, emb = world
    methods, info = build_baselines(graph, list(BASELINES), SETTINGS)
    result = evaluate(methods, queries[:6], emb[:6], k=10)
    assert list(result.methods) == list(BASELINES)
    assert all(mr.error is None for mr in result.methods.values())
    assert all(len(r) <= 10 for mr in result.methods.values() for r in mr.rankings)
    assert info["ppr_mmr"]["lam"] == pytest.approx(0.78)


class FakePolicy:
    """LoadedPolicy's interface: rank(records, one [n_i, d] feature array per record, query_emb [B, d],
    k, node_types: one list of type names per record)."""

    def __init__(self):
        self.calls = []

    def rank(self, records, node_features, query_emb, k=20, node_types=None):
        out = []
        for rec, x, q, types in zip(records, node_features, query_emb, node_types):
            assert len(x) == len(types) == rec.num_nodes
            self.calls.append((int(rec.node_ids[0]), rec.num_nodes, rec.labels.shape[0]))
            s = np.asarray(x, np.float64) @ q
            order = np.argsort(-s, kind="stable")[:k]
            out.append([(int(rec.node_ids[i]), float(s[i])) for i in order])
        return out


def test_seeder_method_uses_cached_subgraphs_then_memory(world, tmp_path):
    graph, queries, emb = world
    first = queries[:4]
    records = []
    for q, e in zip(first[:2], emb[:2]):
        ids, sims = dense_topk(graph.node_emb, e, SEEDS)
        sub = khop_filter(graph.arrays, graph.node_emb, graph.rel_emb, e, ids, BUDGETS, seed_scores=sims,
                          query_id=q.id)
        sub.labels = np.isin(sub.node_ids, q.answers)
        records.append(sub)
    folder = tmp_path / "subgraphs" / "val"
    cache.save_shard(cache.shard_path(folder, 0), records, emb[:2])
    cache.write_manifest(folder, {"num_shards": 1, "settings": {"seeds": SEEDS, "budgets": list(BUDGETS)}})
    found, why = cached_subgraphs(folder, RetrievalSettings(seeds=SEEDS, budgets=BUDGETS))
    assert sorted(found) == [first[0].id, first[1].id], why
    assert cached_subgraphs(folder, RetrievalSettings(seeds=SEEDS, budgets=(5, 5)))[0] == {}
    assert cached_subgraphs(tmp_path / "nothing", RetrievalSettings(seeds=SEEDS, budgets=BUDGETS))[0] == {}
    # Subgraphs K-hop grew without a relation prior are not those of a profile that follows one.
    prior = RelationPrior(np.zeros((len(BUDGETS), graph.rel_emb.shape[0], emb.shape[1])),
                          np.zeros((len(BUDGETS), graph.rel_emb.shape[0])), ["r"] * graph.rel_emb.shape[0], {})
    missed, why = cached_subgraphs(folder, RetrievalSettings(seeds=SEEDS, budgets=BUDGETS, relation_prior=prior))
    assert missed == {} and "relation prior" in why

    policy = FakePolicy()
    expansions = {q.text: found[q.id] for q in first if q.id in found}
    method = PolicyRetriever(graph, SETTINGS, policy=policy, expansions=expansions)
    result = evaluate({"seeder": method}, first, emb[:4], k=10, depth=15)
    assert method.reused == 2
    assert [c[0] for c in policy.calls] == [int(dense_topk(graph.node_emb, e, 1)[0][0]) for e in emb[:4]]
    assert all(c[2] == 0 for c in policy.calls)  # gold labels never reach the policy
    assert all(c[1] == SEEDS + sum(BUDGETS) for c in policy.calls)
    assert all(len(r) == 15 for r in result.methods["seeder"].rankings)
    # A reused subgraph is the one the method would have built itself.
    for q, e in zip(first[:2], emb[:2]):
        seeds, sub = method.subgraph(q.text, e)
        fresh = PolicyRetriever(graph, SETTINGS, policy=policy).subgraph(q.text, e)
        assert sub.node_ids.tolist() == fresh[1].node_ids.tolist()
        assert [i for i, _ in seeds] == [i for i, _ in fresh[0]]


def test_resolve_and_plan_methods(tmp_path):
    assert resolve_methods(None, ["a", "b"]) == ["a", "b"]
    assert resolve_methods("b, a,b", ["a", "b"]) == ["b", "a"]
    with pytest.raises(SeederError, match="unknown method 'c': choose from a, b"):
        resolve_methods("a,c", ["a", "b"])

    runs = tmp_path / "runs" / "toy"
    plan = plan_methods("toy", None, None, runs_dir=runs)
    assert plan.names == list(BASELINES) and plan.checkpoints == {}
    assert plan.notes and "baselines only" in plan.notes[0]
    with pytest.raises(SeederError, match="needs a trained policy"):
        plan_methods("toy", "dense,seeder", None, runs_dir=runs)
    with pytest.raises(SeederError, match="no checkpoint at"):
        plan_methods("toy", None, tmp_path / "missing.pt", runs_dir=runs)

    for name in ("full", "no_aux", "rerank", "empty"):
        (runs / name).mkdir(parents=True)
        if name != "empty":
            (runs / name / "best.pt").write_bytes(b"x")
    assert list(find_ablations(runs)) == ["seeder-no_aux", "seeder-rerank"]
    plan = plan_methods("toy", None, None, runs_dir=runs)
    assert plan.names == [*BASELINES, "seeder", "seeder-no_aux", "seeder-rerank"]
    assert plan.checkpoints["seeder"] == runs / "full" / "best.pt"
    served = tmp_path / "elsewhere" / "best.pt"  # the run the record points to (`train --out`)
    served.parent.mkdir()
    served.write_bytes(b"x")
    assert plan_methods("toy", None, None, runs_dir=runs, served=served).checkpoints["seeder"] == served
    assert plan_methods("toy", None, runs / "no_aux" / "best.pt", runs_dir=runs,
                        served=served).checkpoints["seeder"] == runs / "no_aux" / "best.pt"  # --checkpoint wins
    plan = plan_methods("toy", "khop,seeder-rerank", runs / "no_aux" / "best.pt", runs_dir=runs)
    assert plan.names == ["khop", "seeder-rerank"]
    with pytest.raises(SeederError, match="seeder-no_aux"):  # the main checkpoint is not listed twice
        plan_methods("toy", "seeder-no_aux", runs / "no_aux" / "best.pt", runs_dir=runs)
    with pytest.raises(SeederError) as err:
        plan_methods("toy", "dense,bm25", None, runs_dir=runs)
    assert "\n" not in str(err.value) and "dense, khop, ppr, ppr_mmr, beam, pcst, seeder" in str(err.value)


def test_prepare_questions_drops_unanswered_and_limits():
    qa = QASet("toy", {i: Query(id=i, text=f"q{i}", answers=[] if i % 4 == 0 else [i]) for i in range(10)},
               {"val": list(range(10))}, unknown_names=["Nobody", "Nobody", "Ghost"])
    prepared = prepare_questions(qa, "val", limit=8)
    assert prepared.total == 8
    assert [q.id for q in prepared.queries] == [1, 2, 3, 5, 6, 7]
    assert prepared.dropped == [0, 4]
    summary = prepared.summary()
    assert summary["unknown_names"] == 3 and summary["unknown_distinct"] == 2
    assert summary["unknown_examples"] == ["Nobody", "Ghost"]
    lines = prepared.messages()
    assert len(lines) == 2 and "'Nobody', 'Ghost'" in lines[0] and "2 of 8 questions" in lines[1]
    with pytest.raises(SeederError, match="no question split 'test'"):
        prepare_questions(qa, "test")
    with pytest.raises(SeederError, match="--limit"):
        prepare_questions(qa, "val", limit=0)


def _write_metaqa(root: Path) -> Path:
    (root / "qa" / "2-hop").mkdir(parents=True)
    (root / "kb.txt").write_text("Alien|directed_by|Ridley Scott\nAlien|release_year|1979\n"
                                 "Blade Runner|directed_by|Ridley Scott\nBlade Runner|starred_actors|Harrison Ford\n")
    qa = root / "qa" / "2-hop" / "test.txt"
    qa.write_text("which movies share the director of [Alien]\tBlade Runner\n"
                  "what year was [Solaris] released\t1972\n"  # topic and answer unknown: dropped
                  "who starred in films by [Ridley Scott]\tHarrison Ford|Sigourney Weaver\n")
    (root / "qa" / "2-hop" / "test_qtype.txt").write_text("movie_to_director_to_movie\nmovie_to_year\n"
                                                          "director_to_movie_to_actor\n")
    return qa


def test_load_questions_from_a_metaqa_file_reports_unknown_names(tmp_path):
    qa_file = _write_metaqa(tmp_path / "metaqa")
    prepared = load_questions("metaqa", qa_file=qa_file, source=str(tmp_path / "metaqa"))
    assert prepared.label == "test" and prepared.total == 3
    assert [q.text for q in prepared.queries] == ["which movies share the director of Alien",
                                                  "who starred in films by Ridley Scott"]
    assert all(q.hops == 2 for q in prepared.queries)
    assert prepared.queries[1].qtype == "director_to_movie_to_actor"
    assert len(prepared.dropped) == 1
    assert set(prepared.unknown_distinct) == {"Solaris", "1972", "Sigourney Weaver"}
    text = " ".join(prepared.messages())
    assert "3 answer/topic names" in text and "1 of 3 questions" in text
    with pytest.raises(SeederError, match="is missing"):
        load_questions("metaqa", qa_file=tmp_path / "nowhere.txt", source=str(tmp_path / "metaqa"))


def test_sample_indices_is_fixed_and_sorted():
    a = sample_indices(100, 10)
    assert a.tolist() == sorted(a.tolist()) and len(set(a.tolist())) == 10
    assert np.array_equal(a, sample_indices(100, 10))
    assert sample_indices(5, 10).tolist() == [0, 1, 2, 3, 4]
    assert sample_indices(5, None).tolist() == [0, 1, 2, 3, 4]


def test_text_seeds_reach_every_method_of_an_evaluation(world):
    """A profile's full-text seeds (names read from Neo4j once per question) reach every graph
    method, SeedER included, through the backend's seeding."""
    graph, queries, emb = world
    chosen = {q.text: (int(dense_topk(graph.node_emb, e, 2)[0][1])) for q, e in zip(queries[:6], emb[:6])}
    index = NameIndex(graph, chosen)
    linked = MemoryGraph(graph.arrays, graph.node_emb, graph.rel_emb, live=index)
    linked.link_names([q.text for q in queries[:6]], emb[:6])
    settings = RetrievalSettings(seeds=1, budgets=BUDGETS, seeding="fulltext")
    methods, info = build_baselines(linked, ["khop", "ppr", "beam"], settings)
    assert info["khop"]["seeding"] == "fulltext" and info["khop"]["seeds"] == 1
    policy = FakePolicy()
    methods["seeder"] = PolicyRetriever(linked, settings, policy=policy)
    result = evaluate(methods, queries[:6], emb[:6], k=10)
    assert index.calls == 6  # once per question, not once per method
    assert [c[0] for c in policy.calls] == [chosen[q.text] for q in queries[:6]]  # the subgraphs' seeds
    for q, e, r in zip(queries[:6], emb[:6], result.methods["khop"].rankings):
        expected = khop_filter(graph.arrays, graph.node_emb, graph.rel_emb, e, [chosen[q.text]], BUDGETS,
                               seed_scores=[float(graph.node_emb[chosen[q.text]].astype(np.float64) @ unit_query(e))])
        assert {i for i, _ in r} <= set(expected.node_ids.tolist())


def test_ablations_follow_the_profile_of_each_run(tmp_path):
    import json

    runs = tmp_path / "runs" / "toy"
    for name, profile in (("full", None), ("no_aux", "paper"), ("deep-full", "deep"), ("deep-rerank", "deep")):
        (runs / name).mkdir(parents=True)
        (runs / name / "best.pt").write_bytes(b"x")
        if profile:
            (runs / name / "config.json").write_text(json.dumps({"config": {"profile": profile}}))
    assert list(find_ablations(runs)) == ["seeder-no_aux"]  # no profile recorded: a paper run
    assert list(find_ablations(runs, profile="deep")) == ["seeder-rerank"]
    plan = plan_methods("toy", None, None, runs_dir=runs, profile="deep")
    assert plan.checkpoints == {"seeder": runs / "deep-full" / "best.pt", "seeder-rerank": runs / "deep-rerank" / "best.pt"}
    with pytest.raises(SeederError, match="--profile mid"):
        plan_methods("toy", "seeder", None, runs_dir=runs, profile="mid")


def test_questions_are_grouped_by_whether_a_training_question_has_their_wording():
    """'seen': a training question has the same words once the topic is masked (whatever the case
    and punctuation); 'new': none has; unmarked questions are left out of the breakdown."""
    from types import SimpleNamespace

    from seeder_dgl.evaluation.evaluate import score_rankings
    from seeder_dgl.evaluation.typed import mark_wording

    names = {1: "Tom Hanks", 2: "Cast Away", 3: "Heat"}
    live = SimpleNamespace(describe=lambda ids: ([None] * len(ids), [names[i] for i in ids], [None] * len(ids)))
    graph = SimpleNamespace(live=live)
    train = [Query(1, "what films did Tom Hanks act in?", [2], topic=[1]),
             Query(2, "who directed Cast Away", [1], topic=[2])]
    queries = [Query(10, "What films did HEAT act in", [2], topic=[3]),      # seen: case and '?' aside
               Query(11, "which movies star Tom Hanks?", [2], topic=[1]),    # new wording
               Query(12, "who directed it", [1])]                            # no marked topic
    assert mark_wording(graph, queries, train) == 2
    assert [q.wording for q in queries] == ["seen", "new", None]
    _, _, groups = score_rankings([np.array([2]), np.array([5]), np.array([1])], queries, [1.0, 1.0, 1.0])
    assert {g: v["hit@1"] for g, v in groups["wording"].items()} == {"new": 0.0, "seen": 1.0}
    assert mark_wording(graph, queries, []) == 0
