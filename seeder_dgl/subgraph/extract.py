"""`seeder-dgl extract`: K-hop-with-filtering subgraphs of a question split, from the live graph.

Each query is seeded and expanded through Cypher exactly as at query time, labelled with its
gold answers, and written to the split's shard cache. A killed run resumes at the first shard
that is not on disk; a run with other settings refuses to mix with the cache it finds.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from loaders.kg import Query
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.export import GraphExport
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.seeding import seed
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_filter
from seeder_dgl.subgraph import cache
from seeder_dgl.subgraph.record import QuerySubgraph


@dataclass(frozen=True)
class ExtractionSettings:
    """What defines a subgraph; a cache built with other values is not reused."""

    seeds: int = 3
    """k0: dense seeds per query."""
    budgets: tuple[int, ...] = (50, 97)
    """b_h: nodes added at each hop; B = seeds + sum(budgets)."""
    exact_seeds: bool = False
    """Seed by an exact scan instead of the vector index (slower; for measuring the index)."""
    seeding: str = "dense"
    """dense, fulltext or hybrid (graphstore.seeding)."""

    @property
    def budget(self) -> int:
        return self.seeds + sum(self.budgets)


class SnapshotGraph:
    """LiveGraph's seeding and K-hop-with-filtering over an export of the live graph.

    One read of Neo4j, then the in-memory reference (tested equal to the Cypher statements):
    the fast path for extracting tens of thousands of training subgraphs. Seeding is exact here,
    where the live path searches the HNSW index.
    """

    def __init__(self, live: LiveGraph, export: GraphExport):
        self.info = live.info
        self._live = live
        self.node_emb = export.node_emb
        self.rel_emb = export.relation_emb
        keep = export.rel >= 0
        self.arrays = GraphArrays.from_arrays(export.num_nodes, export.src[keep], export.dst[keep], export.rel[keep])

    def check_ready(self) -> None:
        self._live.check_ready()

    def dense_seeds(self, embedding: np.ndarray, k: int, exact: bool = True) -> list[tuple[int, float]]:
        ids, sims = dense_topk(self.node_emb, embedding, k)
        return list(zip(ids.tolist(), sims.tolist()))

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = 50) -> list[dict]:
        return self._live.fulltext_hits(question, embedding, candidates)  # the full-text index lives in Neo4j

    def khop_filter(self, embedding: np.ndarray, seeds: list[tuple[int, float]], budgets: list[int]) -> QuerySubgraph:
        return khop_filter(self.arrays, self.node_emb, self.rel_emb, embedding, [s for s, _ in seeds], budgets,
                           seed_scores=[v for _, v in seeds])


def label_subgraph(sub: QuerySubgraph, query: Query) -> QuerySubgraph:
    answers = set(int(a) for a in query.answers)
    sub.query_id = int(query.id)
    sub.labels = np.isin(sub.node_ids, np.fromiter(answers, dtype=np.int64, count=len(answers)))
    sub.num_answers = len(answers)
    return sub


def extract_one(graph: LiveGraph | SnapshotGraph, question: str, embedding: np.ndarray,
                settings: ExtractionSettings) -> QuerySubgraph:
    seeds = seed(graph, question, embedding, settings.seeds, settings.seeding, exact=settings.exact_seeds)
    return graph.khop_filter(embedding, seeds, list(settings.budgets))


def extract_split(graph: LiveGraph | SnapshotGraph, queries: list[Query], query_emb: np.ndarray, folder: Path,
                  settings: ExtractionSettings, shard_size: int = 256, progress: bool = True,
                  overwrite: bool = False) -> dict:
    """Extract and cache every query's subgraph; returns a summary (counts, coverage, seconds)."""
    folder = Path(folder)
    if len(queries) != len(query_emb):
        raise SeederError(f"{len(queries)} queries but {len(query_emb)} query embeddings")
    wanted = {"dataset": graph.info.name, "settings": {**asdict(settings), "budgets": list(settings.budgets)},
              "num_queries": len(queries), "shard_size": shard_size,
              "num_shards": (len(queries) + shard_size - 1) // shard_size,
              "query_ids_head": [int(q.id) for q in queries[:5]]}
    manifest = folder / "manifest.json"
    if manifest.exists() and not overwrite:
        import json

        found = json.loads(manifest.read_text())
        if {k: found.get(k) for k in wanted} != wanted:
            raise SeederError(f"{folder} holds subgraphs extracted with other settings "
                              f"({found.get('settings')}): pass --overwrite to replace them")
    if overwrite:
        for old in folder.glob("shard-*.npz"):
            old.unlink()
    graph.check_ready()
    cache.write_manifest(folder, wanted)

    start = time.perf_counter()
    hits, sizes, done_before = [], [], 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[info]}"), TimeRemainingColumn())
    with Progress(*columns, disable=not progress) as bars:
        task = bars.add_task(f"subgraphs of {graph.info.name}", total=len(queries), info="")
        for shard in range(wanted["num_shards"]):
            lo, hi = shard * shard_size, min((shard + 1) * shard_size, len(queries))
            path = cache.shard_path(folder, shard)
            if path.exists():
                records, _ = cache.load_shard(path)  # resumed: count it, do not redo it
                done_before += len(records)
            else:
                records = [label_subgraph(extract_one(graph, queries[i].text, query_emb[i], settings), queries[i])
                           for i in range(lo, hi)]
                cache.save_shard(path, records, query_emb[lo:hi])
            hits.extend(bool(r.labels.any()) for r in records)
            sizes.extend(r.num_nodes for r in records)
            bars.update(task, completed=hi, info=f"Hit@any {np.mean(hits):.3f}")
    seconds = time.perf_counter() - start
    summary = {**wanted, "status": "complete", "seconds": round(seconds, 2), "resumed_queries": done_before,
               "subgraph_hit_any": float(np.mean(hits)) if hits else 0.0,
               "mean_nodes": float(np.mean(sizes)) if sizes else 0.0}
    cache.write_manifest(folder, summary)
    return summary
