"""Write a knowledge graph, its node texts and embeddings into Neo4j, idempotently and resumably.

Layout in Neo4j, per dataset ``name``:
- nodes ``(:<Dataset>:<Type> {id, name, text, type, embedding, sketch, sketch_error})``
  — ``<Dataset>`` is the label the record owns (``dataset_label(name)``), ``embedding`` a float32 unit vector
  (``db.create.setNodeVectorProperty``), ``sketch*`` its int8 sketch for K-hop (``sketch.py``);
- relationships ``(a)-[:<RELATION>]->(b)``: each undirected (pair, relation) once, directed as
  the first triple that names it in the source; retrieval reads them in both directions;
- a uniqueness constraint on ``id``, a cosine vector index ``<Dataset>_embedding`` and a
  full-text index ``<Dataset>_name`` on names;
- one ``(:SeederDataset {name})`` record: counts, model, dimension, relation names and their
  embeddings (for sim(q, r)), and the resume counters.

A graph adopted in place (``graphstore.adopt``) has a record too, with its ``store_schema``
(``graphstore.schema``): its nodes are the user's, so ``reset`` and ``drop`` take off only what
seeder-dgl added to them and delete nothing.

Each batch commits in one transaction together with its resume counter, so a killed ingest
restarts exactly after the last committed batch; a finished one is left as it is.
"""
from __future__ import annotations

import hashlib
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from neo4j import Driver, ManagedTransaction
from neo4j.exceptions import DriverError, Neo4jError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from loaders.kg import KnowledgeGraph, is_identifier, to_identifier
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.graphstore import lease as lease_module
from seeder_dgl.graphstore.connection import ID_FUNCTION_SESSION, default_database, describe_neo4j_error
from seeder_dgl.graphstore.cypher import query, quiet
from seeder_dgl.graphstore.schema import StoreSchema
from seeder_dgl.graphstore.sketch import sketch_properties

NODE_BATCH = 5_000
EF_CONSTRUCTION = 100  # Neo4j's default HNSW build width (cypher/schema/vector_index.cypher)
INDEX_POLL_SECONDS = 0.5
"""How often an ingest reads the state of an index it waits for."""
RELATIONSHIP_BATCH = 20_000


class IngestError(SeederError):
    """The data cannot be ingested as given, or the database failed part way."""


def dataset_label(name: str) -> str:
    """The label a new dataset's nodes carry: ``KG_`` + its exact name ('metaqa' -> 'KG_metaqa').

    One name, one label: names differing only in case get different labels, and a name with
    characters a label cannot hold ('my-kg') keeps a hash of the exact name ('KG_my_kg_1a2b3c4d').
    The dataset record stores the label it owns; datasets ingested before this rule keep theirs.
    """
    check_dataset_name(name)
    if is_identifier(name):
        return f"KG_{name}"
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:8]
    return f"KG_{to_identifier(name)[:48]}_{digest}"


@dataclass
class IngestSummary:
    dataset: str
    nodes: int
    relationships: int
    duplicates_removed: int
    dimension: int
    model: str
    seconds: float = 0.0
    node_seconds: float = 0.0
    relationship_seconds: float = 0.0
    index_seconds: float = 0.0
    resumed: bool = False
    skipped: bool = False
    """True when the dataset was already complete with the same data: nothing was re-ingested
    (``extra["sketched"]`` says how many nodes of an older ingest got their sketch)."""
    extra: dict = field(default_factory=dict)

    @property
    def nodes_per_second(self) -> float:
        return self.nodes / self.node_seconds if self.node_seconds else 0.0

    @property
    def relationships_per_second(self) -> float:
        return self.relationships / self.relationship_seconds if self.relationship_seconds else 0.0


def undirected_unique(src: np.ndarray, dst: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Indices of the first triple of every distinct (unordered pair, relation), in a stable order
    (by relation, then source id) that a resumed ingest reproduces exactly. Self loops are kept once."""
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    order = np.lexsort((np.arange(src.shape[0]), hi, lo, rel))  # last key sorts first
    keys = np.stack([rel[order], lo[order], hi[order]], axis=1)
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = np.any(keys[1:] != keys[:-1], axis=1)
    kept = order[first]
    # Final write order: relation, then source id, then target id (locality for the id index).
    return kept[np.lexsort((dst[kept], src[kept], rel[kept]))]


def fingerprint(kg: KnowledgeGraph, node_emb: np.ndarray, model: str) -> str:
    """Identifies the data of an ingest, so a resume never mixes two different inputs."""
    h = hashlib.sha1()
    h.update(f"{kg.name}|{kg.num_nodes}|{kg.num_edges}|{model}|{node_emb.shape}".encode())
    for arr in (kg.edge_src, kg.edge_dst, kg.edge_rel, kg.node_type):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(node_emb, dtype=np.float32).tobytes())
    h.update("\x00".join(kg.node_names).encode("utf-8", "replace"))
    return h.hexdigest()


def check_embeddings(matrix: np.ndarray, rows: int, what: str) -> np.ndarray:
    """float32 [rows, d] with finite values, or a one-line IngestError naming the bad row."""
    if matrix.ndim != 2 or matrix.shape[0] != rows:
        raise IngestError(f"{what} embeddings have shape {tuple(matrix.shape)}, expected ({rows}, d): "
                          "re-encode them for this graph")
    bad = ~np.isfinite(matrix).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise IngestError(f"{what} embedding of row {first} has NaN or infinite values "
                          f"({int(bad.sum())} rows in all): fix the input or re-encode")
    zero = np.flatnonzero(np.linalg.norm(matrix, axis=1) == 0)
    if zero.size:
        raise IngestError(f"{what} embedding of row {int(zero[0])} is all zeros: cosine is undefined for it")
    return unit_vectors(matrix)


# Stored vectors are unit length: retrieval computes cosine from Neo4j's cheaper Euclidean
# similarity (cypher/retrieval/khop_hop.cypher), exact only for unit vectors.
UNIT_TOLERANCE = 1e-6


def unit_vectors(matrix: np.ndarray) -> np.ndarray:
    """float32 rows scaled to unit length; rows already unit within float32 rounding stay bit-identical."""
    out = np.array(matrix, dtype=np.float32, order="C", ndmin=2)
    norms = np.linalg.norm(out.astype(np.float64), axis=1)
    off = np.flatnonzero(np.abs(norms - 1.0) > UNIT_TOLERANCE)
    if off.size:
        out[off] = (out[off].astype(np.float64) / norms[off, None]).astype(np.float32)
    return out


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), disable=not enabled)


class GraphWriter:
    """Writes one dataset; see the module docstring for the layout."""

    schema: StoreSchema | None = None
    """What the dataset's nodes hold under which names (``graphstore.schema``); set once the
    record is read (statements run before that, reading the record, have no slots)."""

    lease: lease_module.Lease | None = None
    """The dataset's writer lease while ``ingest``, ``reset``, ``drop`` or an adoption runs
    (``graphstore.lease``); None between them."""

    def __init__(self, driver: Driver, dataset: str, database: str | None = None,
                 node_batch: int = NODE_BATCH, relationship_batch: int = RELATIONSHIP_BATCH):
        self.driver = driver
        self.dataset = dataset
        self.database = database if database is not None else default_database()
        self._read_record()
        self.node_batch = node_batch
        self.relationship_batch = relationship_batch

    @contextmanager
    def writing(self, command: str):
        """Hold the dataset's writer lease for the block (re-entrant: ``ingest`` resets inside it).
        The record is read again inside: another writer may have changed it before we held it."""
        if self.lease is not None:
            yield
            return
        with lease_module.held(self.driver, self.dataset, command, self.database) as lease:
            self.lease = lease
            try:
                self._read_record()
                yield
            finally:
                self.lease = None

    def _read_record(self) -> None:
        """The dataset's label and property names, as its record says now (a new one when it has none)."""
        existing = self.record()
        self.label = self._owned_label(existing)
        self.schema = StoreSchema.from_record(existing) if existing else StoreSchema.ingested(self.label)

    def _progress(self, tx: ManagedTransaction, nodes_done: int | None, relationships_done: int | None) -> None:
        """Advance the resume counters with the batch, fenced by the lease: raising rolls the batch back."""
        row = tx.run(query("dataset/progress"), name=self.dataset, nodes_done=nodes_done,
                     relationships_done=relationships_done, owner=self.lease.owner if self.lease else None,
                     ttl=lease_module.TTL_SECONDS).single()
        if row is None:
            raise lease_module.DatasetBusy(f"the writer lease of {self.dataset!r} was taken over by another command "
                                           "during this batch, which is rolled back: run the command again once "
                                           "the other one is done")

    # ---- small helpers --------------------------------------------------------------------
    def run(self, statement: str, what: str, identifiers: dict | None = None, **params):
        """One statement with the dataset's label and property names in its slots (``identifiers``
        adds or overrides some)."""
        names = {**(self.schema.identifiers() if self.schema else {}), **(identifiers or {})}
        try:
            return self.driver.execute_query(query(statement, **names), database_=self.database, **quiet(params))
        except (Neo4jError, DriverError, OSError) as exc:
            raise IngestError(describe_neo4j_error(exc, what)) from exc

    def batched(self, statement: str, what: str, **params) -> int:
        """A statement that commits its own batches (``CALL { ... } IN TRANSACTIONS``, so outside a
        managed transaction) and returns how many nodes or relationships it handled (``done``)."""
        try:
            with self.driver.session(database=self.database) as session:
                return int(session.run(query(statement, **self.schema.identifiers()), **params).single()["done"])
        except (Neo4jError, DriverError, OSError) as exc:
            raise IngestError(describe_neo4j_error(exc, what) + "; run the same command again to finish it") from exc

    def _owned_label(self, existing: dict | None) -> str:
        """The record's label when the dataset exists (older ingests keep theirs), else a new one
        that no other dataset's record owns."""
        if existing is not None and existing.get("label"):
            return str(existing["label"])
        label = dataset_label(self.dataset)
        owner = self.run("dataset/label_owner", "checking the dataset label", name=self.dataset, label=label).records
        if owner:
            raise IngestError(f"label {label} already belongs to dataset {owner[0]['name']!r}: choose another name")
        return label

    def refuse_foreign_nodes(self) -> None:
        """A one-line refusal when nodes carry the label of a dataset that has no record yet: they
        are not seeder-dgl's (the record is written before the first node and removed after the last).
        ``ingest`` checks it before writing; the CLI also before minutes of encoding."""
        if self.record() is not None:
            return
        found = int(self.run("dataset/label_nodes", "checking the dataset label").records[0]["nodes"])
        if found:
            raise IngestError(f"{found:,} nodes already carry the label {self.label} and no seeder-dgl dataset owns "
                              f"them: they are not seeder-dgl's to write to or drop; ingest under another name "
                              f"(--name), or use them in place with `seeder-dgl adopt`")

    def record(self) -> dict | None:
        records = self.run("dataset/get", "reading the dataset record", name=self.dataset).records
        return dict(records[0]["meta"]) if records else None

    def reset(self, progress: bool = False, forget: bool = True, drop_constraint: bool = False) -> int:
        with self.writing("reset"):
            return self._reset(progress, forget, drop_constraint)

    def _reset(self, progress: bool = False, forget: bool = True, drop_constraint: bool = False) -> int:
        """Remove what seeder-dgl wrote for the dataset, then its record (``forget``). Returns the
        number of nodes deleted (ingested) or released (adopted in place).

        Ingested: its relationships and nodes are deleted. Adopted in place: the nodes are the
        user's, so only seeder-dgl's label and properties come off them (``adopt/release``); no
        user property, label, node or relationship is touched. Either way the work commits every
        ``relationship_batch`` nodes or relationships, so the server's transaction memory stays
        flat, and the indexes go too. The id constraint goes with ``drop_constraint``, and always
        for an in-place dataset: what comes after a reset may keep its ids in another property
        (an adoption in place after a copy, or the reverse), and ``IF NOT EXISTS`` would then keep
        the old constraint instead of creating the right one.

        The record is marked 'deleting' first and removed last: a reset cut off half way leaves a
        record that owns the label and says so, and the next ingest, adopt or drop finishes it.
        """
        self.run("dataset/mark_deleting", "marking the dataset record", name=self.dataset)
        # Indexes first: taking properties off nodes that an index covers costs an index update each.
        for statement in ("schema/drop_vector_index", "schema/drop_fulltext_index", "schema/drop_words_index"):
            self.run(statement, "dropping the dataset's indexes")
        statements = (("adopt/release",) if self.schema.in_place else
                      ("dataset/delete_relationships", "dataset/delete_nodes"))
        # keep=None: adopt/release takes seeder-dgl's label and properties off every node
        done = {statement: self.batched(statement, "removing the old dataset", batch=self.relationship_batch,
                                        keep=None)
                for statement in statements}
        if drop_constraint or self.schema.in_place:
            self.run("schema/drop_id_constraint", "dropping the id constraint")
        if forget:
            self.run("dataset/delete_record", "deleting the dataset record", name=self.dataset)
        return done[statements[-1]]

    def drop(self) -> int:
        """Remove everything seeder-dgl wrote for this dataset: its nodes and relationships (ingested)
        or its label and properties on the user's nodes (adopted in place), indexes, the id
        constraint and the record. Returns the number of nodes deleted or released."""
        with self.writing("drop"):
            done = self._reset(drop_constraint=True)
        lease_module.cleanup(self.driver, self.database)
        return done

    # ---- the ingest -------------------------------------------------------------------------
    def ingest(self, kg: KnowledgeGraph, node_emb: np.ndarray, rel_emb: np.ndarray, model: str,
               *, progress: bool = True, reset: bool = False, quantization: bool = False,
               ef_construction: int = EF_CONSTRUCTION) -> IngestSummary:
        """Write the graph under the dataset's writer lease (a second writer is refused in one line).
        A dataset already ingested from exactly these data, with nothing left to do, is found by
        reads alone and takes no lease: an upsert racing that re-run is not refused."""
        start = time.perf_counter()
        try:
            kg.validate()
        except ValueError as exc:
            raise IngestError(f"{exc}: fix the source files") from exc
        node_emb = check_embeddings(node_emb, kg.num_nodes, "node")
        rel_emb = check_embeddings(rel_emb, len(kg.relation_names), "relation")
        if not 1 <= int(ef_construction) <= 3200:
            raise IngestError(f"ef_construction must be between 1 and 3200 (Neo4j's range), not {ef_construction}")
        if rel_emb.shape[1] != node_emb.shape[1]:
            raise IngestError(f"relation embeddings have dimension {rel_emb.shape[1]} but node embeddings "
                              f"{node_emb.shape[1]}: encode both with the same model")
        digest = fingerprint(kg, node_emb, model)
        if not reset:
            unchanged = self._unchanged(int(node_emb.shape[1]), digest, model, start)
            if unchanged is not None:
                return unchanged
        with self.writing("ingest"):
            return self._ingest(kg, node_emb, rel_emb, model, digest, start, progress=progress, reset=reset,
                                quantization=quantization, ef_construction=ef_construction)

    def _unchanged(self, dim: int, digest: str, model: str, start: float) -> IngestSummary | None:
        """The summary of a complete dataset ingested from data of fingerprint ``digest``, its three
        indexes online and every node sketched; None where anything is to be done."""
        existing = self.record()
        if existing is None or existing.get("status") != "complete" or self.schema.in_place:
            return None
        if existing.get("dimension") != dim or existing.get("fingerprint") != digest:
            return None
        for index in (f"{self.label}_embedding", f"{self.label}_name", f"{self.label}_words"):
            rows = self.run("schema/index_state", f"reading the state of index {index}", name=index).records
            if not rows or rows[0]["state"] != "ONLINE":
                return None
        if self.run("ingest/unsketched", "reading nodes without a sketch", limit=1).records[0]["ids"]:
            return None
        return IngestSummary(self.dataset, existing["num_nodes"], existing["num_relationships"],
                             existing.get("duplicates_removed", 0), dim, model,
                             seconds=time.perf_counter() - start, skipped=True, extra={"sketched": 0})

    def _ingest(self, kg: KnowledgeGraph, node_emb: np.ndarray, rel_emb: np.ndarray, model: str, digest: str,
                start: float, *, progress: bool = True, reset: bool = False, quantization: bool = False,
                ef_construction: int = EF_CONSTRUCTION) -> IngestSummary:
        """The ingest proper, on inputs ``ingest`` checked (``digest``: their fingerprint)."""
        dim = int(node_emb.shape[1])
        keep = undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel)
        duplicates = kg.num_edges - int(keep.shape[0])
        labels, rel_types = kg.node_labels(), kg.relation_types()

        existing = self.record()
        if existing is not None and (reset or existing.get("status") == "deleting"):
            # Only what a record owns is reset (nodes under the label without one are not seeder-dgl's);
            # this also finishes a reset that was cut off. The record is gone after it.
            self.reset()
            self.schema = StoreSchema.ingested(self.label)
            existing = None
        if self.schema.in_place:
            raise IngestError(f"dataset {self.dataset!r} is a graph adopted in place: run `seeder-dgl adopt "
                              f"{self.dataset}` again to take in changes, or ingest with --reset to replace it")
        if existing is not None:
            if existing.get("dimension") not in (None, dim):
                raise IngestError(
                    f"dataset {self.dataset!r} in Neo4j has {existing['dimension']}-d embeddings but these are "
                    f"{dim}-d: use the same model ({existing.get('model')}) or re-ingest with --reset"
                )
            if existing.get("fingerprint") not in (None, digest):
                raise IngestError(
                    f"dataset {self.dataset!r} in Neo4j was ingested from different data or another model: "
                    "re-ingest with --reset to replace it"
                )
            if existing.get("status") == "complete":
                # An index dropped by hand comes back; else a no-op.
                self.create_indexes(dim, quantization, ef_construction, progress)
                sketched = self.add_missing_sketches(progress)  # a dataset from before sketches gets them
                return IngestSummary(self.dataset, existing["num_nodes"], existing["num_relationships"],
                                     existing.get("duplicates_removed", 0), dim, model,
                                     seconds=time.perf_counter() - start, skipped=True,
                                     extra={"sketched": sketched})

        if existing is None:
            self.refuse_foreign_nodes()
        self.run("schema/node_id_constraint", "creating the id constraint")
        meta = {
            "label": self.label, "model": model, "dimension": dim, "fingerprint": digest,
            "num_nodes": kg.num_nodes, "num_relationships": int(keep.shape[0]),
            "num_source_edges": kg.num_edges, "duplicates_removed": duplicates,
            "node_type_names": list(kg.node_type_names), "node_labels": labels,
            "relation_names": list(kg.relation_names), "relation_types": rel_types,
            "relation_embeddings": rel_emb.reshape(-1).astype(float).tolist(),
        }
        state = dict(self.run("dataset/begin", "opening the ingest record", name=self.dataset, meta=meta)
                     .records[0]["meta"])
        nodes_done, rels_done = int(state["nodes_done"]), int(state["relationships_done"])
        summary = IngestSummary(self.dataset, kg.num_nodes, int(keep.shape[0]), duplicates, dim, model,
                                resumed=bool(nodes_done or rels_done))

        try:
            with _progress(progress) as bars:
                t0 = time.perf_counter()
                self._write_nodes(kg, node_emb, labels, nodes_done, bars)
                summary.node_seconds = time.perf_counter() - t0
                t0 = time.perf_counter()
                self._write_relationships(kg, keep, rel_types, rels_done, bars)
                summary.relationship_seconds = time.perf_counter() - t0
            # Indexes last: populated while relationships were still being written (tried at
            # Prime scale), the HNSW build took the second core and halved the relationship rate.
            t0 = time.perf_counter()
            self.create_indexes(dim, quantization, ef_construction, progress)
            summary.index_seconds = time.perf_counter() - t0
            if summary.resumed:  # batches written by a version without sketches, before this run
                summary.extra["sketched"] = self.add_missing_sketches(progress)
        except (Neo4jError, DriverError, OSError) as exc:
            raise IngestError(describe_neo4j_error(exc, "ingest stopped") +
                              "; committed batches are kept: run the same command again to resume") from exc
        summary.seconds = time.perf_counter() - start
        self.run("dataset/finish", "closing the ingest record", name=self.dataset, summary={
            "seconds": round(summary.seconds, 3), "nodes_done": kg.num_nodes,
            "relationships_done": int(keep.shape[0])})
        return summary

    def _write_nodes(self, kg, node_emb, labels, done, bars) -> None:
        n = kg.num_nodes
        task = bars.add_task(f"nodes of {self.dataset}", total=n, completed=done, rate="")
        node_type = np.asarray(kg.node_type)
        t0, written = time.perf_counter(), 0
        for lo in range(done, n, self.node_batch):
            hi = min(lo + self.node_batch, n)
            groups = []
            for t in np.unique(node_type[lo:hi]):
                ids = lo + np.flatnonzero(node_type[lo:hi] == t)
                rows = [{"id": int(i), "name": kg.node_names[i], "text": kg.node_texts[i],
                         "key": kg.node_keys[i] if kg.node_keys is not None else None,
                         "embedding": node_emb[i].tolist(), **sketch}
                        for i, sketch in zip(ids, sketch_properties(node_emb[ids]))]
                groups.append((query("ingest/nodes", dataset=self.label, node_type=labels[t]),
                               kg.node_type_names[t], rows))

            def work(tx: ManagedTransaction, groups=groups, hi=hi):
                for statement, type_name, rows in groups:
                    tx.run(statement, quiet({"rows": rows, "type_name": type_name})).consume()
                self._progress(tx, hi, None)

            with self.driver.session(database=self.database) as session:
                session.execute_write(work)
            written += hi - lo
            bars.update(task, completed=hi, rate=f"{written / (time.perf_counter() - t0):,.0f} nodes/s")

    def _write_relationships(self, kg, keep, rel_types, done, bars) -> None:
        total = int(keep.shape[0])
        task = bars.add_task(f"relationships of {self.dataset}", total=total, completed=done, rate="")
        src, dst, rel = kg.edge_src[keep], kg.edge_dst[keep], kg.edge_rel[keep]
        key = self._node_keys(kg.num_nodes)
        src, dst = key[src], key[dst]
        # Batches never straddle two relation types: the type is spliced into the statement.
        boundaries = np.flatnonzero(np.diff(rel)) + 1
        starts = np.concatenate([[0], boundaries])
        ends = np.concatenate([boundaries, [total]])
        t0, written = time.perf_counter(), 0
        with self.driver.session(database=self.database, **ID_FUNCTION_SESSION) as session:
            for seg_lo, seg_hi in zip(starts, ends):
                statement = query("ingest/relationships", dataset=self.label, rel_type=rel_types[rel[seg_lo]])
                for lo in range(max(int(seg_lo), done), int(seg_hi), self.relationship_batch):
                    hi = min(lo + self.relationship_batch, int(seg_hi))
                    rows = np.stack([src[lo:hi], dst[lo:hi]], axis=1).tolist()

                    def work(tx: ManagedTransaction, rows=rows, hi=hi):
                        written = tx.run(statement, quiet({"rows": rows})).single()["written"]
                        if written != len(rows):  # raising rolls the batch back
                            raise IngestError(f"{len(rows) - written} relationships of batch ending at "
                                              f"{hi} lost a node while being written (was {self.dataset!r} "
                                              "changed during the ingest?): run the ingest again")
                        self._progress(tx, None, hi)

                    session.execute_write(work)
                    written += hi - lo
                    bars.update(task, completed=hi,
                                rate=f"{written / (time.perf_counter() - t0):,.0f} rels/s")

    def add_missing_sketches(self, progress: bool = False) -> int:
        """Give every node that has an embedding but no sketch its sketch, computed from the stored
        embedding (so nodes changed since the ingest get theirs right). Returns how many were written."""
        done = 0
        with _progress(progress) as bars:
            task = bars.add_task(f"sketches of {self.dataset}", total=None, rate="")
            while True:
                page = self.run("ingest/unsketched", "reading nodes without a sketch",
                                limit=self.node_batch).records[0]
                if not page["ids"]:
                    if done:
                        self.run("dataset/sketches_changed", "recording the new sketches", name=self.dataset)
                    return done
                emb = np.asarray(page["embeddings"], dtype=np.float32)
                rows = [{"id": int(i), **props} for i, props in zip(page["ids"], sketch_properties(emb))]
                self.run("ingest/sketches", "writing sketches", rows=rows)
                done += len(rows)
                bars.update(task, completed=done, rate=f"{done:,} nodes")

    def _node_keys(self, num_nodes: int) -> np.ndarray:
        """Internal node id of every dataset id (-1 where none), for this run's relationship batches."""
        try:
            with self.driver.session(database=self.database, **ID_FUNCTION_SESSION) as session:
                page = session.run(query("ingest/node_keys", dataset=self.label)).single()
        except (Neo4jError, DriverError, OSError) as exc:
            raise IngestError(describe_neo4j_error(exc, "reading the node keys") +
                              "; committed batches are kept: run the same command again to resume") from exc
        ids, keys = np.asarray(page["ids"], dtype=np.int64), np.asarray(page["keys"], dtype=np.int64)
        inside = (ids >= 0) & (ids < num_nodes)
        key = np.full(num_nodes, -1, dtype=np.int64)
        key[ids[inside]] = keys[inside]
        missing = np.flatnonzero(key < 0)
        if missing.size:
            raise IngestError(f"{missing.size} nodes of {self.dataset!r} are missing (first id {missing[0]}), "
                              "so their relationships cannot be written: run the ingest again with --reset")
        return key

    def create_indexes(self, dim: int, quantization: bool, ef_construction: int = EF_CONSTRUCTION,
                       progress: bool = False) -> None:
        """Create the vector and both full-text indexes (if missing) and wait until all are ONLINE."""
        self.run("schema/vector_index", "creating the vector index",
                 dimensions=dim, quantization=quantization, ef_construction=int(ef_construction))
        self.run("schema/fulltext_index", "creating the full-text index")
        self.run("schema/words_index", "creating the name-words index")
        with _progress(progress) as bars:
            for index in (f"{self.label}_embedding", f"{self.label}_name", f"{self.label}_words"):
                self.wait_for_index(index, bars)

    def wait_for_index(self, name: str, bars: Progress | None = None, timeout: float = 3600.0,
                       poll: float = INDEX_POLL_SECONDS) -> None:
        """Poll the index's state until it is ONLINE. Polling, not ``db.awaitIndex``: a blocking
        server call holds the connection, so Ctrl-C would wait for the whole build (minutes at
        Prime scale) while the driver resets it; between polls an interrupt stops at once, and the
        build goes on in the server (the next ingest waits for it again)."""
        task = bars.add_task(f"index {name}", total=100, rate="") if bars is not None else None
        deadline = time.monotonic() + timeout
        while True:
            rows = self.run("schema/index_state", f"reading the state of index {name}", name=name).records
            if not rows:
                raise IngestError(f"index {name} does not exist: run the same command again to create it")
            state, percent = rows[0]["state"], float(rows[0]["populationPercent"] or 0.0)
            if task is not None:
                bars.update(task, completed=100.0 if state == "ONLINE" else percent)
            if state == "ONLINE":
                return
            if state == "FAILED":
                raise IngestError(f"index {name} failed to build: see the server's log, drop the dataset "
                                  "(`seeder-dgl drop`) and ingest it again")
            if time.monotonic() > deadline:
                raise IngestError(f"index {name} is still {state} ({percent:.0f}%) after {timeout:.0f} s: "
                                  "run the same command again to keep waiting")
            if self.lease is not None:  # no batch commits while the index builds: keep the lease
                lease_module.renew(self.driver, self.lease)
            time.sleep(poll)
