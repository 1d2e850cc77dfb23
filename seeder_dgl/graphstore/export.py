"""Read a dataset back out of Neo4j into arrays: node embeddings, types and relationships.

Training gathers node features from these arrays, and the in-memory reference retrievers run
over them; both then see what the database holds, including live updates, not the source files.
The export is cached on disk per dataset and refreshed when the dataset record changes.
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from neo4j import Driver
from rich.progress import Progress

from seeder_dgl.fileio import atomic_write_bytes
from seeder_dgl.graphstore.cypher import query
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.schema import StoreSchema

ID_RANGE = 20_000


@dataclass
class GraphExport:
    num_nodes: int
    """1 + the largest node id; ids with no node have a zero embedding and type -1."""
    node_emb: np.ndarray
    """float32 [num_nodes, d]."""
    node_type: np.ndarray
    """int64 [num_nodes]: index into ``node_type_names`` (-1 where no node has that id)."""
    node_type_names: list[str]
    src: np.ndarray
    dst: np.ndarray
    rel: np.ndarray
    """int64 [E]: index into ``relation_types``."""
    relation_types: list[str]
    relation_emb: np.ndarray


def _version(graph: LiveGraph, driver: Driver, database: str | None) -> str:
    meta = driver.execute_query(query("dataset/get"), name=graph.info.name, database_=database).records[0]["meta"]
    key = json.dumps({k: str(meta.get(k)) for k in ("fingerprint", "updated_at", "finished_at", "num_nodes",
                                                    "num_relationships")}, sort_keys=True)
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def id_ranges(driver: Driver, schema: StoreSchema, database: str | None = None) -> tuple[int, list[tuple[int, int]]]:
    """1 + the largest node id of a dataset, and the [lo, hi) id ranges of ``ID_RANGE`` that cover it:
    statements read a dataset page by page with a range seek on the id index."""
    top = driver.execute_query(query("export/max_id", **schema.identifiers()), database_=database).records[0]
    n = int(top["max_id"]) + 1 if top["max_id"] is not None else 0
    return n, [(lo, min(lo + ID_RANGE, n)) for lo in range(0, n, ID_RANGE)]


def export_graph(driver: Driver, dataset: str, cache_dir: Path | None = None, database: str | None = None,
                 progress: bool = True) -> GraphExport:
    graph = LiveGraph(driver, dataset, database)
    database = graph.database  # NEO4J_DATABASE when none is given
    version = _version(graph, driver, database)
    # A graph adopted in place changes whenever its owner changes it, with no record to tell: its
    # export is read afresh every time, never from a cache that could be stale.
    cached = cache_dir is not None and not graph.schema.in_place
    path = Path(cache_dir) / f"export-{version}.npz" if cached else None
    if path is not None and path.exists():
        with np.load(path, allow_pickle=False) as z:
            # .tolist(): plain str, not numpy.str_ (checkpoints are loaded with weights_only=True)
            return GraphExport(int(z["num_nodes"]), z["node_emb"], z["node_type"], z["node_type_names"].tolist(),
                               z["src"], z["dst"], z["rel"], z["relation_types"].tolist(), z["relation_emb"])
    schema = graph.schema
    n, ranges = id_ranges(driver, schema, database)
    emb = np.zeros((n, graph.info.dimension), dtype=np.float32)
    node_type = np.full(n, -1, dtype=np.int64)
    type_index: dict[str, int] = {}
    rel_index = {t: i for i, t in enumerate(graph.info.relation_types)}
    src, dst, rel = [], [], []
    with Progress(disable=not progress) as bars:
        task = bars.add_task(f"export {dataset}", total=max(n, 1))
        for lo, hi in ranges:
            nodes = driver.execute_query(query("export/nodes", **schema.identifiers()), lo=lo, hi=hi,
                                         database_=database).records[0]
            if nodes["ids"]:
                ids = np.asarray(nodes["ids"], dtype=np.int64)
                emb[ids] = np.asarray(nodes["embeddings"], dtype=np.float32)
                node_type[ids] = [type_index.setdefault(t, len(type_index)) for t in nodes["types"]]
            rels = driver.execute_query(query("export/relationships", **schema.identifiers()), lo=lo, hi=hi,
                                        types=schema.types, database_=database).records[0]
            src.append(np.asarray(rels["sources"], dtype=np.int64))
            dst.append(np.asarray(rels["targets"], dtype=np.int64))
            rel.append(np.asarray([rel_index.get(t, -1) for t in rels["relations"]], dtype=np.int64))
            bars.update(task, completed=hi)
    src, dst, rel = (np.concatenate(x) if x else np.zeros(0, np.int64) for x in (src, dst, rel))
    out = GraphExport(n, emb, node_type, list(type_index), src, dst, rel, list(graph.info.relation_types),
                      graph.info.relation_embeddings)
    if path is not None:
        buffer = io.BytesIO()
        np.savez(buffer, num_nodes=n, node_emb=emb, node_type=node_type,
                 node_type_names=np.asarray(out.node_type_names, dtype=str), src=out.src, dst=out.dst,
                 rel=out.rel, relation_types=np.asarray(out.relation_types, dtype=str),
                 relation_emb=out.relation_emb)
        atomic_write_bytes(path, buffer.getvalue())
    return out


def export_names(driver: Driver, dataset: str, database: str | None = None) -> tuple[list[int], list[str], list[str]]:
    """Every node's id, name and source id ('' where it has none), read from Neo4j: question files
    are matched to the dataset's own graph as it is now, never to another dataset's."""
    graph = LiveGraph(driver, dataset, database)
    database = graph.database
    ids: list[int] = []
    names: list[str] = []
    keys: list[str] = []
    for lo, hi in id_ranges(driver, graph.schema, database)[1]:
        page = driver.execute_query(query("export/names", **graph.schema.identifiers()), lo=lo, hi=hi,
                                    database_=database).records[0]
        ids += page["ids"]
        names += [str(x) if x is not None else "" for x in page["names"]]
        keys += page["keys"]
    return ids, names, keys
