"""Live updates: add or change nodes and relationships of an ingested dataset.

The next query sees them: seeding reads the vector index (updated by Neo4j on commit) and
K-hop-with-filtering reads relationships as stored. A relation type the dataset has not seen
gets its embedding (for sim(q, r)) and joins the dataset record; the trained model maps it to
its "unknown relation" slot.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from neo4j import Driver
from neo4j.exceptions import DriverError, Neo4jError

from loaders.kg import to_identifier
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import describe_neo4j_error
from seeder_dgl.graphstore.cypher import query, quiet
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.sketch import sketch_properties
from seeder_dgl.graphstore.writer import unit_vectors

Encode = Callable[[list[str]], np.ndarray]


class UpsertError(SeederError):
    """An update row is malformed or refers to nodes that do not exist."""


@dataclass
class NodeRow:
    id: int
    name: str
    type: str
    text: str
    embedding: list[float] | None = None


@dataclass
class EdgeRow:
    source: int
    target: int
    relation: str


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise UpsertError(f"cannot read {path}: {exc.strerror}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UpsertError(f"{path}:{number}: not JSON ({exc.msg}): one object per line") from exc
        if not isinstance(row, dict):
            raise UpsertError(f"{path}:{number}: expected a JSON object")
        rows.append(row | {"_where": f"{path}:{number}"})
    return rows


def parse_nodes(rows: Iterable[dict]) -> list[NodeRow]:
    nodes = []
    for i, row in enumerate(rows):
        where = row.get("_where", f"node row {i + 1}")
        try:
            node = NodeRow(id=int(row["id"]), name=str(row["name"]), type=str(row.get("type", "entity")),
                           text=str(row.get("text") or row["name"]), embedding=row.get("embedding"))
        except (KeyError, TypeError, ValueError) as exc:
            raise UpsertError(f"{where}: a node needs an integer 'id' and a 'name' ({exc})") from exc
        nodes.append(node)
    return nodes


def parse_edges(rows: Iterable[dict]) -> list[EdgeRow]:
    edges = []
    for i, row in enumerate(rows):
        where = row.get("_where", f"edge row {i + 1}")
        try:
            edges.append(EdgeRow(int(row["source"]), int(row["target"]), str(row["relation"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise UpsertError(f"{where}: an edge needs integer 'source', 'target' and a 'relation' ({exc})") from exc
    return edges


def upsert(driver: Driver, dataset: str, nodes: list[NodeRow], edges: list[EdgeRow], encode: Encode,
           database: str | None = None) -> dict:
    """Write the nodes and edges in one transaction; returns the dataset's new counts."""
    graph = LiveGraph(driver, dataset, database)
    info, dim = graph.info, graph.info.dimension

    need_text = [n for n in nodes if n.embedding is None]
    if need_text:
        vectors = encode([n.text for n in need_text])
        for n, v in zip(need_text, vectors):
            n.embedding = np.asarray(v, dtype=np.float32).tolist()
    for n in nodes:
        vec = np.asarray(n.embedding, dtype=np.float64)
        if vec.shape != (dim,) or not np.isfinite(vec).all():
            raise UpsertError(f"node {n.id}: embedding must be {dim} finite numbers (the dataset's model is "
                              f"{info.model}); leave it out to have it encoded")
        if not np.any(vec):
            raise UpsertError(f"node {n.id}: embedding is all zeros, so cosine is undefined for it; "
                              "leave it out to have it encoded")
        n.embedding = unit_vectors(vec)[0].tolist()

    relation_names, relation_types = list(info.relation_names), list(info.relation_types)
    relation_emb = info.relation_embeddings
    new_relations = sorted({e.relation for e in edges} - set(relation_names) - set(relation_types))
    if new_relations:
        relation_names += new_relations
        relation_types += [to_identifier(r).upper() for r in new_relations]
        relation_emb = np.concatenate([relation_emb, np.asarray(encode([r.replace("_", " ") for r in new_relations]),
                                                                dtype=np.float32).reshape(-1, dim)])
    type_of = {**dict(zip(relation_names, relation_types)), **{t: t for t in relation_types}}

    by_type: dict[str, list[dict]] = defaultdict(list)
    for n in nodes:
        by_type[n.type].append({"id": n.id, "name": n.name, "text": n.text, "embedding": n.embedding,
                                **sketch_properties(np.asarray(n.embedding, dtype=np.float32))[0]})
    by_relation: dict[str, list[list[int]]] = defaultdict(list)
    for e in edges:
        by_relation[type_of[e.relation]].append([e.source, e.target])

    def work(tx):
        for type_name, rows in by_type.items():
            tx.run(query("upsert/node", dataset=graph.label, node_type=to_identifier(type_name)),
                   quiet({"rows": rows, "type_name": type_name})).consume()
        ids = sorted({i for e in edges for i in (e.source, e.target)})
        missing = tx.run(query("upsert/missing_ids", dataset=graph.label), quiet({"ids": ids})).single()["missing"]
        if missing:
            raise UpsertError(f"edges refer to node ids {missing[:10]} that are not in {dataset!r}: "
                              "add those nodes in the same upsert")
        for rel_type, rows in by_relation.items():
            tx.run(query("upsert/relationship", dataset=graph.label, rel_type=rel_type), quiet({"rows": rows})).consume()
        return tx.run(query("upsert/record", dataset=graph.label), quiet({
            "name": dataset, "relation_names": relation_names, "relation_types": relation_types,
            "relation_embeddings": relation_emb.reshape(-1).astype(float).tolist()})).single().data()

    try:
        with driver.session(database=database) as session:
            counts = session.execute_write(work)
    except (Neo4jError, DriverError, OSError) as exc:
        raise UpsertError(describe_neo4j_error(exc, "upsert failed, nothing was changed")) from exc
    return {"nodes_written": len(nodes), "edges_written": len(edges), "new_relations": new_relations, **counts}
