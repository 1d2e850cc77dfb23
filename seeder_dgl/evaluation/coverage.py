"""Coverage: how often the seeds hold the question's topic entity, and how often the extracted
subgraph holds an answer — per hop count / question type, for each seeding mode and budget.

These two numbers cap everything after them: the policy can only choose inside the subgraph.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from loaders.kg import Query
from seeder_dgl.datasets import cache_root, get_spec
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.evaluation.command import default_results_dir
from seeder_dgl.graphstore.connection import open_driver
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.reporting import write_result
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings, seed_and_expand, stored_linker


@dataclass(frozen=True)
class CoverageSetting:
    mode: str
    seeds: int
    budgets: tuple[int, ...]
    relation_prior: object = field(default=None, compare=False, hash=False)
    """A fitted ``RelationPrior`` the K-hop follows, or None (sim(q, r), the paper's)."""
    linker: object = field(default=None, compare=False, hash=False)
    """The dataset's fitted ``EntityLinker`` for full-text and hybrid seeding, or None (hand-set)."""

    @property
    def name(self) -> str:
        prior = " +prior" if self.relation_prior is not None else ""
        return f"{self.mode} k0={self.seeds} b={'/'.join(map(str, self.budgets))}{prior}"

    @property
    def retrieval(self) -> RetrievalSettings:
        return RetrievalSettings(seeds=self.seeds, budgets=tuple(self.budgets), seeding=self.mode,
                                 relation_prior=self.relation_prior, linker=self.linker)


def coverage(graph, queries: list[Query], query_emb: np.ndarray, settings: list[CoverageSetting],
             group_by: str = "hops", progress: bool = True) -> list[dict]:
    """One row per (setting, group): topic@seeds, answer@seeds, subgraph Hit@any/Recall@any, nodes, ms."""
    rows = []
    with Progress(disable=not progress) as bars:
        for setting in settings:
            task = bars.add_task(setting.name, total=len(queries))
            groups: dict[str, list[dict]] = defaultdict(list)
            for q, emb in zip(queries, query_emb):
                t = time.perf_counter()
                seeds, sub = seed_and_expand(graph, q.text, emb, setting.retrieval)
                ms = (time.perf_counter() - t) * 1000
                seed_ids = {s for s, _ in seeds}
                answers = set(q.answers)
                inside = answers & set(sub.node_ids.tolist())
                record = {"topic": bool(set(q.topic) & seed_ids) if q.topic else None,
                          "answer_seed": bool(answers & seed_ids),
                          "hit": bool(inside), "recall": len(inside) / len(answers) if answers else 0.0,
                          "nodes": sub.num_nodes, "ms": ms}
                key = str(getattr(q, group_by) if getattr(q, group_by) is not None else "all")
                groups[key].append(record)
                groups["all"].append(record) if key != "all" else None
                bars.advance(task)
            for key in sorted(groups, key=lambda g: (g == "all", g)):
                recs = groups[key]
                topics = [r["topic"] for r in recs if r["topic"] is not None]
                rows.append({"setting": setting.name, "mode": setting.mode, "seeds": setting.seeds,
                             "budgets": list(setting.budgets), "relation_prior": setting.relation_prior is not None,
                             "group": key, "queries": len(recs),
                             "topic_in_seeds": float(np.mean(topics)) if topics else None,
                             "answer_in_seeds": float(np.mean([r["answer_seed"] for r in recs])),
                             "subgraph_hit_any": float(np.mean([r["hit"] for r in recs])),
                             "subgraph_recall_any": float(np.mean([r["recall"] for r in recs])),
                             "mean_nodes": float(np.mean([r["nodes"] for r in recs])),
                             "p50_ms": float(np.percentile([r["ms"] for r in recs], 50))})
    return rows


# Cheapest first: the paper's B = 150 over two hops for each seeding mode, then three hops in
# B = 500 (the budgets that won on MetaQA's validation split for 3-hop questions).
CANDIDATES = (
    CoverageSetting("dense", 3, (50, 97)),
    CoverageSetting("fulltext", 1, (50, 99)),
    CoverageSetting("hybrid", 3, (50, 97)),
    CoverageSetting("dense", 3, (15, 110, 372)),
    CoverageSetting("fulltext", 1, (15, 110, 374)),
    CoverageSetting("hybrid", 3, (15, 110, 372)),
)
"""The settings `tune` chooses among (and `eval --coverage` reports on a graph of one's own)."""

DEFAULT_SETTINGS = {
    # The paper's dense seeding at B=150, each seeding mode at that budget, then the 'deep'
    # profile chosen on the validation split: one full-text seed, three hops, B=500.
    "metaqa": [CoverageSetting("dense", 3, (50, 97)), CoverageSetting("fulltext", 1, (50, 99)),
               CoverageSetting("hybrid", 3, (50, 97)), CoverageSetting("dense", 3, (15, 110, 372)),
               CoverageSetting("hybrid", 3, (15, 110, 372)), CoverageSetting("fulltext", 1, (15, 110, 374))],
}


def run_coverage(dataset: str, *, split: str = "val", per_group: int = 300, settings: list[CoverageSetting] | None = None,
                 engine: str = "memory", source: str | None = None, out=None, seed_value: int = 0) -> list[dict]:
    """Coverage of seeds and subgraphs on a sample of ``per_group`` questions per hop count."""
    spec = get_spec(dataset)
    qa = spec.load_questions(source, None)
    queries = qa.split(split)
    rng = np.random.default_rng(seed_value)
    by_group: dict[str, list[Query]] = defaultdict(list)
    for q in queries:
        by_group[str(q.hops)].append(q)
    sample = []
    for key in sorted(by_group):
        group = by_group[key]
        pick = rng.choice(len(group), size=min(per_group, len(group)), replace=False)
        sample.extend(group[i] for i in sorted(pick))
    if not settings and not spec.builtin:
        settings = list(CANDIDATES)  # what `tune` chooses from
    settings = settings or DEFAULT_SETTINGS.get(dataset) or [CoverageSetting("dense", spec.retrieval.seeds,
                                                                             spec.retrieval.budgets)]
    with open_driver() as driver:
        live = LiveGraph(driver, dataset)
        live.check_ready()
        emb = dataset_encoder(live.info.model).encode([q.text for q in sample], show_progress=False)
        graph = live if engine == "cypher" else MemoryGraph.from_export(
            export_graph(driver, dataset, cache_root() / dataset / "export", progress=False), live)
        linker = stored_linker(live)
        rows = coverage(graph, sample, emb, [replace(s, linker=s.linker or linker) for s in settings])
    table = Table(title=f"coverage on {dataset} {split} ({engine} K-hop; {per_group} questions per hop)")
    columns = ("setting", "group", "queries", "topic_in_seeds", "answer_in_seeds", "subgraph_hit_any",
               "subgraph_recall_any", "mean_nodes", "p50_ms")
    for c in columns:
        table.add_column(c.replace("_", " "), justify="left" if c in ("setting", "group") else "right")
    for r in rows:
        table.add_row(*[f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns])
    Console().print(table)
    md = [f"# Seed and subgraph coverage: {dataset} {split}", "",
          f"Command: `seeder-dgl eval {dataset} --split {split} --coverage"
          + (f" --engine {engine}" if engine != "memory" else "") + f"` ({per_group} questions per hop, "
          f"seed {seed_value}; K-hop {engine}).", "",
          "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    md += ["| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns) + " |"
           for r in rows]
    name = f"coverage-{dataset}-{split}"
    if out is None and not spec.builtin:
        out = default_results_dir(dataset, "coverage")
    write_result(name, {"dataset": dataset, "split": split, "per_group": per_group, "engine": engine,
                        "rows": rows}, "\n".join(md), folder=Path(out) if out else None)
    return rows
