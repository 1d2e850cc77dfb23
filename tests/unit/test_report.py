"""report (JSON, Markdown, STaRK predictions), plots (budget sweep, k-hop growth, PNGs) and run_eval
end to end with Neo4j, the encoder and the checkpoint loader replaced by in-memory stand-ins."""
from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from loaders.kg import Query
from seeder_dgl.errors import SeederError
from seeder_dgl.evaluation import plots, report
from seeder_dgl.evaluation.evaluate import build_baselines, evaluate
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings
from seeder_dgl.metrics import batch_metrics
from seeder_dgl.retrieval.baselines import KHopRetriever
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk
from tests.helpers.graphs import random_embeddings, random_kg

PNG = b"\x89PNG\r\n\x1a\n"


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def world():
    kg = random_kg("toy", 150, 500, seed=3, num_relations=3)
    graph = MemoryGraph(GraphArrays.from_kg(kg), random_embeddings(150, 12, seed=1), random_embeddings(3, 12, seed=2))
    rng = np.random.default_rng(3)
    queries = [Query(id=500 + i, text=f"q{i}", answers=sorted(set(rng.integers(0, 150, 1 + i % 3).tolist())),
                     hops=1 + i % 2, qtype=f"type{i % 2}") for i in range(16)]
    return graph, queries, random_embeddings(16, 12, seed=4)


@pytest.fixture(scope="module")
def result(world):
    graph, queries, emb = world
    methods, info = build_baselines(graph, ["dense", "khop"], RetrievalSettings(seeds=3, budgets=(10, 20)))
    methods["nothing"] = lambda i: []
    return evaluate(methods, queries, emb, k=20, depth=30, info=info,
                    meta={"dataset": "toy", "split": "val", "questions": {"dropped_no_answers": 2}})


def test_save_writes_json_markdown_and_stark_predictions(result, tmp_path):
    paths = report.save(result, tmp_path / "out", per_query=True)
    data = json.loads(paths["json"].read_text())
    assert data["k"] == 20 and data["depth"] == 30 and data["num_queries"] == 16
    assert set(data["methods"]) == {"dense", "khop", "nothing"}
    summary = data["methods"]["khop"]["summary"]
    for key in ("hit@1", "hit@5", "hit@20", "mrr", "recall@20", "hit@any", "recall@any", "size", "latency_ms",
                "num_queries"):
        assert key in summary
    assert summary["mrr"] == pytest.approx(result.methods["khop"].summary["mrr"])
    assert set(data["methods"]["dense"]["groups"]) == {"hops", "qtype"}
    assert data["methods"]["khop"]["info"]["budgets"] == [10, 20]
    assert data["queries"]["id"] == result.query_ids
    assert data["per_query"]["dense"]["ids"][0] == result.methods["dense"].ids[0].tolist()
    assert data["per_query"]["dense"]["scores"][0] == pytest.approx(result.methods["dense"].scores[0].tolist())
    assert len(data["per_query"]["khop"]["metrics"]["mrr"]) == 16

    md = paths["markdown"].read_text()
    assert md.startswith("# Retrieval evaluation: toy val")
    assert "| method | Hit@1 | Hit@5 | Hit@20 | MRR | Recall@20 | Hit@any | Recall@any | size | ms/query |" in md
    assert "## By hops" in md and "## By qtype" in md and "2 questions without a mapped answer" in md
    assert sum(line.startswith("| khop |") for line in md.splitlines()) == 1

    pred = json.loads((tmp_path / "out" / "predictions" / "dense.json").read_text())
    assert set(pred) == {str(q) for q in result.query_ids}
    first = pred[str(result.query_ids[0])]
    ranking = result.methods["dense"].rankings[0]
    assert list(first) == [str(i) for i, _ in ranking]  # ranking order kept
    assert {int(k): v for k, v in first.items()} == {i: pytest.approx(s) for i, s in ranking}
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "predictions" / "khop.csv").read_text())))
    assert [int(r["query_id"]) for r in rows] == result.query_ids
    assert json.loads(rows[0]["pred_rank"]) == [i for i, _ in result.methods["khop"].rankings[0]]
    empty = json.loads((tmp_path / "out" / "predictions" / "nothing.json").read_text())
    assert all(v == {} for v in empty.values())
    # Atomic writes leave no temporary files behind.
    assert not [p for p in (tmp_path / "out").rglob("*") if p.name.endswith(".tmp")]


def test_results_json_without_per_query_is_small(result, tmp_path):
    paths = report.save(result, tmp_path, per_query=False, predictions=False)
    data = json.loads(paths["json"].read_text())
    assert "per_query" not in data and "predictions" not in paths


def test_render_prints_the_tables(result):
    console = Console(file=io.StringIO(), width=200, record=True)
    report.render(result, console)
    text = console.export_text()
    assert "toy val: 16 queries, k=20, @any over the top 30" in text
    for needle in ("dense", "khop", "nothing", "H@1", "R@20", "MRR", "ms", "by hops", "by qtype"):
        assert needle in text


def test_scale_budgets():
    assert plots.scale_budgets((50, 97), 3, 150) == (50, 97)
    for total in (5, 10, 20, 50, 100, 300, 500):
        b = plots.scale_budgets((50, 97), 3, total)
        assert sum(b) == total - 3 and all(x > 0 for x in b)
    assert plots.scale_budgets((50, 97), 3, 3) == ()
    assert plots.scale_budgets((50, 97), 10, 4) == ()
    assert plots.scale_budgets((1, 100, 100), 3, 5) == (2,)  # hop 1 would get 0: later hops folded back
    assert sum(plots.scale_budgets((30, 60, 60), 3, 200)) == 197


def test_khop_growth_matches_breadth_first_search(world):
    graph, _, emb = world
    growth = plots.khop_growth(graph.arrays, graph.node_emb, emb, seeds=3, hops=3)
    adj = {v: set(graph.arrays.neighbors(v)[0].tolist()) for v in range(graph.arrays.num_nodes)}
    sizes = []
    for q in emb:
        ball = set(dense_topk(graph.node_emb, q, 3)[0].tolist())
        row = []
        for _ in range(3):
            ball |= {u for v in ball for u in adj[v]}
            row.append(len(ball))
        sizes.append(row)
    sizes = np.asarray(sizes)
    assert growth["hops"] == [1, 2, 3] and growth["num_queries"] == 16
    assert growth["mean"] == pytest.approx(sizes.mean(axis=0).tolist())
    assert growth["max"] == sizes.max(axis=0).tolist()
    assert growth["mean"][0] <= growth["mean"][1] <= growth["mean"][2] <= graph.arrays.num_nodes


def test_budget_sweep_matches_the_retrievers(world):
    graph, queries, emb = world
    sweep = plots.budget_sweep(graph.arrays, graph.node_emb, graph.rel_emb, queries, emb, seeds=3,
                               budgets=(10, 20), sweep=(50, 5, 33))
    assert sweep["budgets"] == [5, 33, 50]
    assert sweep["khop_budgets"]["33"] == [10, 20]
    answers = [q.answers for q in queries]
    dense = batch_metrics([dense_topk(graph.node_emb, q, 50)[0] for q in emb], answers)
    assert sweep["dense"]["recall@any"][2] == pytest.approx(dense["recall@any"].mean())
    khop = KHopRetriever(graph, RetrievalSettings(seeds=3, budgets=(10, 20)))
    ref = batch_metrics([khop.search(q.text, e, 33).ranking for q, e in zip(queries, emb)], answers)
    for metric in ("hit@any", "recall@any", "mrr", "size"):
        assert sweep["khop"][metric][1] == pytest.approx(ref[metric].mean())
    assert sweep["khop"]["size"][0] <= 5 and sweep["dense"]["size"][0] == 5
    # More budget never loses coverage for dense (nested sets).
    assert sweep["dense"]["hit@any"] == sorted(sweep["dense"]["hit@any"])


def test_save_figures_writes_pngs_and_data(world, tmp_path):
    graph, queries, emb = world
    growth = plots.khop_growth(graph.arrays, graph.node_emb, emb[:4])
    sweep = plots.budget_sweep(graph.arrays, graph.node_emb, graph.rel_emb, queries[:4], emb[:4], seeds=3,
                               budgets=(10, 20), sweep=(10, 20, 50))
    paths = plots.save_figures(tmp_path, growth, sweep, title="toy")
    for name in ("khop_growth", "budget_sweep", "expansion"):
        assert paths[name].read_bytes()[:8] == PNG
    data = json.loads(paths["data"].read_text())
    assert data["growth"]["hops"] == [1, 2, 3] and data["sweep"]["budgets"] == [10, 20, 50]


# ---------------------------------------------------------------------------------------------
# run_eval without Neo4j: driver, live graph, export, encoder and checkpoint loader stubbed
# ---------------------------------------------------------------------------------------------
class HashEncoder:
    """Deterministic unit vectors from text (stands in for the sentence encoder)."""

    dim = 16

    def __init__(self, model=None, *args, **kwargs):
        self.model = model

    def encode(self, texts, **kwargs):
        rows = [np.random.default_rng(int.from_bytes(hashlib.sha1(t.encode()).digest()[:8], "little"))
                .normal(size=self.dim) for t in texts]
        return _unit(np.asarray(rows).reshape(len(texts), self.dim))


class FakePolicy:
    def __init__(self, path):
        self.path = path

    def rank(self, records, node_features, query_emb, k=20, node_types=None):
        return [[(int(i), float(-j)) for j, i in enumerate(r.node_ids[:k])] for r in records]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """Stub Neo4j and the encoder; the graph is whatever KnowledgeGraph ``state['kg']`` holds."""
    from seeder_dgl.graphstore import connection, export, live

    state: dict = {"loaded": []}
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SEEDER_RUNS", str(tmp_path / "runs"))

    class FakeLive:
        def __init__(self, driver, dataset, database=None):
            kg = state["kg"]
            self.driver = driver
            self.info = types.SimpleNamespace(model="fake-model", dimension=HashEncoder.dim, name=dataset,
                                              bound_to=lambda uses_prior: {"graph": None, "relation_prior": None},
                                              active_run=None)

        def check_ready(self):
            pass

        def describe(self, ids):  # names for the wording breakdown, as LiveGraph.describe gives them
            kg = state["kg"]
            return ([kg.node_type_names[kg.node_type[i]] for i in ids], [kg.node_names[i] for i in ids],
                    [kg.node_texts[i] for i in ids])

    def fake_export(driver, dataset, cache_dir=None, database=None, progress=True):
        kg = state["kg"]
        enc = HashEncoder()
        return export.GraphExport(kg.num_nodes, enc.encode(kg.node_texts), kg.node_type, kg.node_type_names,
                                  kg.edge_src, kg.edge_dst, kg.edge_rel, kg.relation_types(),
                                  enc.encode(kg.relation_names))

    def load_policy(path, dataset, embedding_model, dimension, bound_to=None):
        state["loaded"].append((Path(path).parent.name, dataset, embedding_model, dimension))
        if Path(path).parent.name == "broken":
            raise RuntimeError("checkpoint from another model")
        return FakePolicy(path)

    from seeder_dgl.evaluation import command

    for module in (connection, command):  # where it is defined and where `eval` reads it
        monkeypatch.setattr(module, "open_driver", lambda *a, **k: contextlib.nullcontext(object()))
    for module in (live, command):
        monkeypatch.setattr(module, "LiveGraph", FakeLive)
    for module in (export, command):
        monkeypatch.setattr(module, "export_graph", fake_export)
    monkeypatch.setattr("seeder_dgl.embeddings.TextEncoder", HashEncoder)
    inference_module = types.ModuleType("seeder_dgl.inference")
    inference_module.load_policy = load_policy
    inference_module.load_trained_retriever = None  # these run folders hold no trained retriever
    monkeypatch.setitem(sys.modules, "seeder_dgl.inference", inference_module)
    return state


def test_run_eval_on_a_split_with_checkpoints_and_sweep(offline, tmp_path):
    from loaders.synthetic import relation_tracing
    from seeder_dgl.evaluation.command import run_eval

    offline["kg"] = relation_tracing(seed=0)[0]
    runs = tmp_path / "runs" / "synthetic"
    for name in ("full", "no_aux", "broken"):
        (runs / name).mkdir(parents=True)
        (runs / name / "best.pt").write_bytes(b"x")
    console = Console(file=io.StringIO(), width=200, record=True)
    out = tmp_path / "eval"
    result = run_eval("synthetic", split="val", limit=12, out=out, sweep=True, sweep_budgets=(10, 50, 150),
                      sweep_queries=6, progress=False, console=console)
    text = console.export_text()
    assert list(result.methods) == ["dense", "khop", "ppr", "ppr_mmr", "beam", "pcst", "seeder", "seeder-no_aux"]
    assert "skipped seeder-broken" in text
    assert ("full", "synthetic", "fake-model", 16) in offline["loaded"]
    assert result.depth == 3 + 30 + 60 + 60  # the synthetic K-hop budget B
    seeder = result.methods["seeder"]
    assert seeder.error is None and seeder.info["cached_subgraphs"] == 0
    # FakePolicy returns the whole in-memory K-hop subgraph: K-hop's own node set, ranked otherwise.
    assert [sorted(i for i, _ in r) for r in seeder.rankings] == [sorted(i for i, _ in r)
                                                                 for r in result.methods["khop"].rankings]
    # The fake policy ranks the K-hop subgraph in selection order: same node set as K-hop itself.
    khop = result.methods["khop"]
    assert seeder.summary["recall@any"] == pytest.approx(khop.summary["recall@any"])
    for name in ("results.json", "results.md", "expansion.png", "budget_sweep.png", "khop_growth.png",
                 "sweep.json", "predictions/seeder.json", "predictions/seeder-no_aux.csv"):
        assert (out / name).is_file(), name
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["dataset"] == "synthetic" and data["meta"]["budgets"] == [30, 60, 60]
    assert data["meta"]["sweep"]["queries"] == 6
    assert data["meta"]["command"].startswith("seeder-dgl eval synthetic --split val --limit 12")
    assert data["methods"]["seeder"]["groups"]["hops"]

    with pytest.raises(SeederError, match="unknown method 'bm25'"):
        run_eval("synthetic", methods="dense,bm25", out=out, progress=False, console=console)
    with pytest.raises(RuntimeError, match="another model"):  # asked for by name: its failure is not hidden
        run_eval("synthetic", methods="seeder-broken", limit=3, out=out, progress=False, console=console)


def test_run_eval_uses_cached_subgraphs(offline, tmp_path):
    from loaders.synthetic import relation_tracing
    from seeder_dgl.evaluation.command import run_eval
    from seeder_dgl.retrieval.memory import khop_filter
    from seeder_dgl.subgraph import cache

    kg, qa = relation_tracing(seed=0)
    offline["kg"] = kg
    (tmp_path / "runs" / "synthetic" / "full").mkdir(parents=True)
    ckpt = tmp_path / "runs" / "synthetic" / "full" / "best.pt"
    ckpt.write_bytes(b"x")
    queries = qa.split("val")[:5]
    enc = HashEncoder()
    node_emb, rel_emb = enc.encode(kg.node_texts), enc.encode(kg.relation_names)
    arrays = GraphArrays.from_kg(kg)
    q_emb = enc.encode([q.text for q in queries])
    records = []
    for q, e in zip(queries[:3], q_emb):
        ids, sims = dense_topk(node_emb, e, 3)
        records.append(khop_filter(arrays, node_emb, rel_emb, e, ids, [30, 60, 60], seed_scores=sims, query_id=q.id))
    folder = tmp_path / "cache" / "synthetic" / "subgraphs" / "val"
    cache.save_shard(cache.shard_path(folder, 0), records, q_emb[:3])
    cache.write_manifest(folder, {"num_shards": 1, "settings": {"seeds": 3, "budgets": [30, 60, 60]}})
    result = run_eval("synthetic", split="val", limit=5, methods="khop,seeder", checkpoint=ckpt, k=10,
                      out=tmp_path / "eval", progress=False, console=Console(file=io.StringIO()))
    assert result.methods["seeder"].info["cached_subgraphs"] == 3
    assert "from the extract cache" in result.methods["seeder"].info["note"]
    assert [r[0][0] for r in result.methods["seeder"].rankings[:3]] == [int(r.node_ids[0]) for r in records]


def test_run_eval_qa_file_reports_unknown_names(offline, tmp_path):
    from loaders.metaqa import load_metaqa_kb
    from seeder_dgl.evaluation.command import run_eval

    root = tmp_path / "metaqa"
    (root / "qa").mkdir(parents=True)
    (root / "kb.txt").write_text("Alien|directed_by|Ridley Scott\nBlade Runner|directed_by|Ridley Scott\n"
                                 "Blade Runner|starred_actors|Harrison Ford\nAlien|release_year|1979\n")
    qa_file = root / "qa" / "mine.txt"
    qa_file.write_text("who directed [Alien]\tRidley Scott\n"
                       "what did [Nobody] direct\tUnknown Film\n"
                       "who acted in films by [Ridley Scott]\tHarrison Ford|Ghost Actor\n")
    offline["kg"] = load_metaqa_kb(root / "kb.txt")[0]
    console = Console(file=io.StringIO(), width=250, record=True)
    result = run_eval("metaqa", qa_file=str(qa_file), source=str(root), methods="dense,khop", k=5, profile="paper",
                      out=tmp_path / "eval", progress=False, console=console)
    text = console.export_text()
    assert "3 answer/topic names in the questions match no node" in text
    assert "'Nobody'" in text and "1 of 3 questions have no answer" in text
    assert result.num_queries == 2 and result.meta["split"] == "mine"
    q = result.meta["questions"]
    assert q["unknown_names"] == 3 and q["dropped_no_answers"] == 1
    assert set(q["unknown_examples"]) == {"Nobody", "Unknown Film", "Ghost Actor"}
    md = (tmp_path / "eval" / "results.md").read_text()
    assert "1 questions without a mapped answer left out" in md and "3 answer/topic names" in md
