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

from loaders.files import node_key, read_text
from loaders.kg import DataError, to_identifier, unique_identifiers
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import describe_neo4j_error
from seeder_dgl.graphstore.cypher import query, quiet
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.sketch import sketch_properties
from seeder_dgl.graphstore.writer import unit_vectors
from seeder_dgl.validation import MAX_NODE_ID, ValidationError, check_node_id, check_text

Encode = Callable[[list[str]], np.ndarray]


class UpsertError(SeederError):
    """An update row is malformed or refers to nodes that do not exist."""


@dataclass
class NodeRow:
    id: int | str
    """The node's id as the row gives it: for a dataset ingested from a node table, the id that table
    gives the node (``key``); else seeder-dgl's own id, a whole number (what ``query`` shows)."""
    name: str
    type: str
    text: str
    embedding: list[float] | None = None


@dataclass
class EdgeRow:
    source: int | str
    target: int | str
    relation: str


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    lines = read_text(Path(path)).splitlines()  # one-line errors for missing, binary or non-UTF-8 files
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


def _row_id(value, where: str, column: str) -> int | str:
    """An id as a row gives it: a whole number kept exact (JSON keeps big integers whole) or text;
    which of the two a dataset wants is known once its record is read (``upsert``)."""
    key = node_key(value, where, None, f"'{column}'")  # one-line errors: empty, boolean, fraction, list
    return int(key) if not isinstance(value, str) else key


def parse_nodes(rows: Iterable[dict]) -> list[NodeRow]:
    """Validated node rows: an id (a whole number, or text for a dataset with ids of its own),
    non-empty name and type, optional text."""
    nodes = []
    seen: dict[str, str] = {}
    for i, row in enumerate(rows):
        where = row.get("_where", f"node row {i + 1}")
        try:
            node_id = _row_id(row.get("id"), where, "id")
            name = check_text(row.get("name"), "'name'")
            node_type = check_text(row.get("type", "entity"), "'type'")
            text = check_text(row.get("text"), "'text'", required=False) or name
        except ValidationError as exc:
            raise UpsertError(f"{where}: {exc}") from None
        except DataError as exc:
            raise UpsertError(str(exc)) from None
        if str(node_id) in seen:
            raise UpsertError(f"{where}: id {node_id!r} is also in {seen[str(node_id)]}; one row per node")
        seen[str(node_id)] = where
        nodes.append(NodeRow(id=node_id, name=name, type=node_type, text=text, embedding=row.get("embedding")))
    return nodes


def parse_edges(rows: Iterable[dict]) -> list[EdgeRow]:
    edges = []
    for i, row in enumerate(rows):
        where = row.get("_where", f"edge row {i + 1}")
        try:
            edges.append(EdgeRow(_row_id(row.get("source"), where, "source"),
                                 _row_id(row.get("target"), where, "target"),
                                 check_text(row.get("relation"), "'relation'")))
        except ValidationError as exc:
            raise UpsertError(f"{where}: {exc}") from None
        except DataError as exc:
            raise UpsertError(str(exc)) from None
    return edges


class _Ids:
    """Every row's id as seeder-dgl's own, read in the upsert's transaction.

    A dataset ingested from a node table keeps the ids that table gave (``key``): rows name nodes by
    them, a new key gets the next free id, and a row never lands on another node because its key
    happens to equal that node's position. Any other dataset is addressed by seeder-dgl's ids."""

    def __init__(self, tx, label: str, dataset: str, nodes: list[NodeRow], edges: list[EdgeRow]):
        self.keyed = bool(tx.run(query("upsert/keyed", dataset=label)).single()["keyed"])
        self.of: dict[str, int] = {}
        if not self.keyed:
            for value in [n.id for n in nodes] + [i for e in edges for i in (e.source, e.target)]:
                try:
                    self.of[str(value)] = check_node_id(value, "'id'")
                except ValidationError:
                    raise UpsertError(
                        f"{dataset!r} numbers its nodes 0..n-1 itself (it was not ingested from a node table "
                        f"with ids of its own), so {value!r} names no node: use the ids `seeder-dgl query` "
                        "shows, whole numbers below 2^31") from None
            return
        keys = sorted({str(n.id) for n in nodes} | {str(i) for e in edges for i in (e.source, e.target)})
        found = tx.run(query("upsert/nodes_by_key", dataset=label), quiet({"keys": keys})).single()
        self.of = {str(k): int(i) for k, i in zip(found["keys"], found["ids"])}
        last = tx.run(query("upsert/next_id", dataset=label)).single()
        free = int(last["last"]) + 1 if last is not None else 0
        for n in nodes:  # in row order, so the same upsert numbers its new nodes the same way
            if str(n.id) not in self.of:
                self.of[str(n.id)] = free
                free += 1
        if free > MAX_NODE_ID:
            raise UpsertError(f"{dataset!r} has no free node ids left (at most 2^31 nodes)")

    def __call__(self, value) -> int:
        return self.of[str(value)]

    def key(self, value) -> str | None:
        return str(value) if self.keyed else None

    def missing(self, edges: list[EdgeRow]) -> list:
        return sorted({i for e in edges for i in (e.source, e.target) if str(i) not in self.of}, key=str)


def upsert(driver: Driver, dataset: str, nodes: list[NodeRow], edges: list[EdgeRow], encode: Encode,
           database: str | None = None) -> dict:
    """Write the nodes and edges in one transaction; returns the dataset's new counts."""
    graph = LiveGraph(driver, dataset, database)
    if graph.schema.in_place:
        # Its nodes and relationships are the user's: seeder-dgl writes none of them.
        raise UpsertError(f"{dataset!r} is your own graph adopted in place: change the graph itself in Neo4j "
                          f"(new relationships are followed at once), then run `seeder-dgl adopt {dataset}` to "
                          "embed new or changed nodes")
    info, dim = graph.info, graph.info.dimension

    need_text = [n for n in nodes if n.embedding is None]
    if need_text:
        vectors = encode([n.text for n in need_text])
        for n, v in zip(need_text, vectors):
            n.embedding = np.asarray(v, dtype=np.float32).tolist()
    for n in nodes:
        try:
            vec = np.asarray(n.embedding, dtype=np.float64)
        except (TypeError, ValueError):
            raise UpsertError(f"node {n.id}: the embedding is not a list of numbers") from None
        if vec.shape != (dim,) or not np.isfinite(vec).all():
            raise UpsertError(f"node {n.id}: embedding must be {dim} finite numbers (the dataset's model is "
                              f"{info.model}); leave it out to have it encoded")
        if not np.any(vec):
            raise UpsertError(f"node {n.id}: embedding is all zeros, so cosine is undefined for it; "
                              "leave it out to have it encoded")
        n.embedding = unit_vectors(vec)[0].tolist()

    # Relations the record did not know when read above, encoded before the transaction. Which of
    # them are new is decided inside it, on the record as it is then (another upsert may have
    # added some meanwhile).
    relation_vectors: dict[str, np.ndarray] = {}

    def encode_relations(names: list[str]) -> None:
        if names:
            vectors = np.asarray(encode([r.replace("_", " ") for r in names]), dtype=np.float32).reshape(-1, dim)
            relation_vectors.update(zip(names, vectors))

    encode_relations(sorted({e.relation for e in edges} - set(info.relation_names) - set(info.relation_types)))

    sketches = sketch_properties(np.asarray([n.embedding for n in nodes], dtype=np.float32)) if nodes else []
    added: list[str] = []

    def work(tx):
        current = tx.run(query("upsert/lock_record"), name=dataset).single()
        if current is None:
            raise UpsertError(f"dataset {dataset!r} was dropped during the upsert: nothing was changed")
        if current["busy_with"]:
            raise UpsertError(f"dataset {dataset!r} is being written by another command (`{current['busy_with']}`): "
                              "nothing was changed; upsert again once it is done")
        relation_names, relation_types = list(current["relation_names"]), list(current["relation_types"])
        relation_emb = np.asarray(current["relation_embeddings"] or [], dtype=np.float32).reshape(-1, dim)
        new_relations = sorted({e.relation for e in edges} - set(relation_names) - set(relation_types))
        encode_relations([r for r in new_relations if r not in relation_vectors])  # only if the record shrank
        if new_relations:
            relation_names += new_relations
            # numbered where a new name cleans to a type the dataset has ('directed by', 'directed_by')
            relation_types = unique_identifiers(relation_types + [to_identifier(r).upper() for r in new_relations])
            relation_emb = np.concatenate([relation_emb, np.stack([relation_vectors[r] for r in new_relations])])
        added[:] = new_relations  # a retried transaction reports what its last attempt added
        type_of = {**dict(zip(relation_names, relation_types)), **{t: t for t in relation_types}}

        # Node types keep the labels ingest gave them (two names that clean to one label are
        # numbered there); a new type gets a label no other type of the dataset has.
        type_names, labels = list(current["node_type_names"] or []), list(current["node_labels"] or [])
        label_of = dict(zip(type_names, labels)) if len(type_names) == len(labels) else {}
        for type_name in dict.fromkeys(n.type for n in nodes):
            if type_name not in label_of:
                label_of[type_name] = unique_identifiers(list(label_of.values()) + [to_identifier(type_name)])[-1]

        def label(type_name: str) -> str:
            return label_of.get(type_name) or to_identifier(type_name)

        ids = _Ids(tx, graph.label, dataset, nodes, edges)
        stored = tx.run(query("upsert/node_types", dataset=graph.label),
                        quiet({"ids": [ids(n.id) for n in nodes]})).single()
        old_type = dict(zip(stored["ids"], stored["types"]))
        relabel: dict[str, list[int]] = defaultdict(list)
        by_type: dict[str, list[dict]] = defaultdict(list)
        for n, sketch in zip(nodes, sketches):
            node_id = ids(n.id)
            before = old_type.get(node_id)
            if before is not None and label(str(before)) != label(n.type):
                relabel[label(str(before))].append(node_id)
            by_type[n.type].append({"id": node_id, "key": ids.key(n.id), "name": n.name, "text": n.text,
                                    "embedding": n.embedding, **sketch})
        for old_label, changed in relabel.items():
            tx.run(query("upsert/remove_type", dataset=graph.label, node_type=old_label), quiet({"ids": changed})).consume()
        for type_name, rows in by_type.items():
            tx.run(query("upsert/node", dataset=graph.label, node_type=label(type_name)),
                   quiet({"rows": rows, "type_name": type_name})).consume()
        # Edges may only join nodes the dataset holds once this upsert's nodes are written. A keyed
        # dataset knows that from resolving the user's ids; any other asks the graph.
        if ids.keyed:
            missing = ids.missing(edges)
        else:
            node_ids = sorted({ids(i) for e in edges for i in (e.source, e.target)})
            missing = tx.run(query("upsert/missing_ids", dataset=graph.label),
                             quiet({"ids": node_ids})).single()["missing"]
        if missing:
            raise UpsertError(f"edges refer to node ids {missing[:10]} that are not in {dataset!r}: "
                              "add those nodes in the same upsert")
        by_relation = defaultdict(list)
        for e in edges:
            by_relation[type_of[e.relation]].append([ids(e.source), ids(e.target)])
        for rel_type, rows in by_relation.items():
            tx.run(query("upsert/relationship", dataset=graph.label, rel_type=rel_type), quiet({"rows": rows})).consume()
        return tx.run(query("upsert/record", dataset=graph.label), quiet({
            "name": dataset, "relation_names": relation_names, "relation_types": relation_types,
            "relation_embeddings": relation_emb.reshape(-1).astype(float).tolist(),
            "node_type_names": list(label_of), "node_labels": list(label_of.values())})).single().data()

    try:
        with driver.session(database=database) as session:
            counts = session.execute_write(work)
    except (Neo4jError, DriverError, OSError) as exc:
        raise UpsertError(describe_neo4j_error(exc, "upsert failed, nothing was changed")) from exc
    return {"nodes_written": len(nodes), "edges_written": len(edges), "new_relations": list(added), **counts}
