"""Use a graph already in Neo4j in place (``seeder-dgl adopt``): the user's nodes and
relationships are what retrieval reads, so it sees the database as it is now.

What is written, and only on the nodes that carry the user's label (``--label``):

- seeder-dgl's own label ``KG_<name>`` (``writer.dataset_label``; the record owns it);
- properties named with that label as a prefix (``graphstore.schema.OWNED_IN_PLACE``):
  ``<label>_id`` (an integer 0..n-1, what every retrieval structure indexes by), ``_embedding``
  (a unit float32 vector: the user's ``--embedding-property`` where usable, else the node's text
  encoded), ``_sketch`` and ``_sketch_error`` (K-hop's int8 sketch), ``_type`` and ``_digest``
  (a hash of what the embedding was made from);
- a uniqueness constraint on ``<label>_id``, a vector index on ``<label>_embedding`` and a
  full-text index on the user's name property, all three for the seeder label only;
- the dataset record (``(:SeederDataset {name})``), with its ``store_schema``.

Nothing else is ever SET, REMOVEd or DELETEd: no user property, label, node or relationship.
Names and texts are read from the user's properties at query time (``graphstore.schema``);
relationships are the user's own, traversed where they are (``--relationship-types`` limits
which), so one the user adds between adopted nodes is followed by the next query.

Adopting again brings the dataset up to date: nodes that gained the user label get the next ids,
nodes whose text, type or given embedding changed are embedded again, and nodes that lost the
user label lose seeder-dgl's label and properties. Every batch commits on its own, and what is
still to do is read from the graph itself (nodes without an id, digests that differ), so a killed
run continues where it stopped. ``drop`` (``GraphWriter.reset``) takes everything off again.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
from neo4j import Driver
from neo4j.exceptions import DriverError, Neo4jError

from loaders.files import DEFAULT_TYPE
from loaders.kg import is_identifier
from seeder_dgl.graphstore.connection import describe_neo4j_error
from seeder_dgl.graphstore.cypher import query, quiet
from seeder_dgl.graphstore.schema import StoreSchema
from seeder_dgl.graphstore.sketch import sketch_properties
from seeder_dgl.graphstore.writer import EF_CONSTRUCTION, NODE_BATCH, GraphWriter, IngestError, unit_vectors

ADOPT_BATCH = 1_000
"""Nodes read, embedded and written per transaction."""


class AdoptError(IngestError):
    """The graph cannot be adopted as asked."""


@dataclass(frozen=True)
class AdoptSource:
    """Where the user's graph is: its label, the properties to read, the relationship types to follow."""

    label: str
    id_property: str
    name_property: str
    text_property: str | None = None
    embedding_property: str | None = None
    type_property: str | None = None
    relationship_types: tuple[str, ...] | None = None

    def __post_init__(self):
        named = [("--label", self.label), ("--id-property", self.id_property),
                 ("--name-property", self.name_property), ("--text-property", self.text_property),
                 ("--embedding-property", self.embedding_property), ("--type-property", self.type_property)]
        named += [("--relationship-types", t) for t in self.relationship_types or ()]
        for option, value in named:
            # Retrieval statements read the name, text and id properties by name (validated slots).
            if value is not None and not is_identifier(value):
                raise AdoptError(f"{option} {value!r} is not a plain Neo4j name (letters, digits, '_'; a letter first)")
        if self.relationship_types is not None and not self.relationship_types:
            raise AdoptError("--relationship-types names no type: leave it out to follow every type")

    def properties(self) -> dict:
        """The property names as parameters of the adopt statements (read with ``n[$name]``)."""
        return {"id": self.id_property, "name": self.name_property, "text": self.text_property,
                "embedding": self.embedding_property, "type": self.type_property}

    def to_record(self) -> str:
        fields = asdict(self)
        fields["relationship_types"] = list(self.relationship_types) if self.relationship_types else None
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_record(cls, text: str) -> "AdoptSource":
        fields = json.loads(text)
        types = fields.pop("relationship_types", None)
        return cls(**fields, relationship_types=tuple(types) if types else None)


@dataclass
class AdoptSummary:
    dataset: str
    label: str
    nodes: int
    relationships: int
    relation_types: int
    dimension: int
    model: str
    added: int = 0
    """Nodes that got seeder-dgl's label and id in this run."""
    reembedded: int = 0
    """Adopted nodes embedded again because their text, type or given embedding changed."""
    released: int = 0
    """Nodes that lost the user label, so seeder-dgl's label and properties came off them."""
    seconds: float = 0.0
    created: bool = False
    """True when this run adopted the graph for the first time (or anew after --reset)."""


@dataclass
class _NodeInput:
    key: str
    """The node's element id (read and used within one batch)."""
    user_id: str
    """The user's id of the node, for messages."""
    id: int
    text: str
    type: str
    given: np.ndarray | None
    digest: str


def _text(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _given_vector(value) -> np.ndarray | None:
    """A usable embedding from the user's property: a list of finite numbers, not all zero; else
    None (the node is encoded instead)."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    try:
        vec = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if vec.ndim != 1 or not np.isfinite(vec).all() or not np.any(vec):
        return None
    return vec


class InPlaceAdopter:
    """Adopts one user graph in place under the dataset name ``dataset``."""

    def __init__(self, driver: Driver, dataset: str, database: str | None = None, batch: int = ADOPT_BATCH):
        self.driver = driver
        self.dataset = dataset
        self.database = database
        self.batch = batch
        self.writer = GraphWriter(driver, dataset, database, node_batch=NODE_BATCH)

    # ---- the record and its checks ---------------------------------------------------------
    def stored_source(self) -> AdoptSource | None:
        """The source of an earlier in-place adoption of this name, or None."""
        record = self.writer.record()
        if record is None or not self.writer.schema.in_place or not record.get("adopted_from"):
            return None
        return AdoptSource.from_record(record["adopted_from"])

    def _run(self, statement: str, what: str, source: AdoptSource | None = None, **params):
        names = dict(self.writer.schema.identifiers())
        if source is not None:
            names["label"] = source.label
        try:
            return self.driver.execute_query(query(statement, **names), database_=self.database,
                                             **quiet(params)).records
        except (Neo4jError, DriverError, OSError) as exc:
            raise AdoptError(describe_neo4j_error(exc, what) + "; run the same command again to continue") from exc

    def check_source(self, source: AdoptSource, dimension: int) -> None:
        """One-line errors for a label no node has, a property no node has, ids that repeat, and given
        embeddings of another length than the model's vectors: before anything is written."""
        counts = self._run("adopt/count", "counting the nodes to adopt", source, **source.properties())[0]
        label = source.label
        if counts["nodes"] == 0:
            raise AdoptError(f"no node in Neo4j has the label {label!r}: check --label (labels are case-sensitive)")
        if counts["with_id"] < counts["nodes"]:
            raise AdoptError(f"{counts['nodes'] - counts['with_id']:,} of {counts['nodes']:,} :{label} nodes have no "
                             f"property {source.id_property!r}: --id-property must name a property every node has")
        for option, key in (("--name-property", "name"), ("--text-property", "text"),
                            ("--embedding-property", "embedding"), ("--type-property", "type")):
            if source.properties()[key] is not None and counts[f"with_{key}"] == 0:
                raise AdoptError(f"no :{label} node has the property {source.properties()[key]!r} ({option})")
        if counts["distinct_ids"] < counts["with_id"]:
            raise AdoptError(f"{counts['with_id'] - counts['distinct_ids']:,} :{label} nodes share an "
                             f"{source.id_property!r} value with another: --id-property must be unique")
        other = sorted(int(s) for s in counts["embedding_sizes"] if int(s) != dimension)
        if other:
            raise AdoptError(f"{source.embedding_property!r} holds lists of {other[0]} numbers but the model gives "
                             f"{dimension}-d vectors: pass the --model that made them, or leave --embedding-property out")

    # ---- the adoption -----------------------------------------------------------------------
    def adopt(self, source: AdoptSource, encode: Callable[[list[str]], np.ndarray],
              encode_relations: Callable[[list[str]], np.ndarray], model: str, dimension: int, *,
              reset: bool = False, quantization: bool = False, ef_construction: int = EF_CONSTRUCTION,
              progress: Callable[[str], None] | None = None) -> AdoptSummary:
        """Adopt (or refresh) the graph in place, under the dataset's writer lease."""
        with self.writer.writing("adopt"):
            return self._adopt(source, encode, encode_relations, model, dimension, reset=reset,
                               quantization=quantization, ef_construction=ef_construction, progress=progress)

    def _adopt(self, source: AdoptSource, encode: Callable[[list[str]], np.ndarray],
               encode_relations: Callable[[list[str]], np.ndarray], model: str, dimension: int, *,
               reset: bool = False, quantization: bool = False, ef_construction: int = EF_CONSTRUCTION,
               progress: Callable[[str], None] | None = None) -> AdoptSummary:
        start = time.perf_counter()
        say = progress or (lambda _line: None)
        writer = self.writer
        record = writer.record()
        if record is not None and (reset or record.get("status") == "deleting"):
            # A copy is deleted, an earlier in-place adoption taken off the user's nodes; the id
            # constraint goes too (a copy's is on another property than this adoption's).
            writer.reset(drop_constraint=True)
            record = None
        if record is not None and not writer.schema.in_place:
            raise AdoptError(f"dataset {self.dataset!r} is a copy of a graph in Neo4j (ingested, or adopted by an "
                             "older seeder-dgl): adopt with --reset to delete the copy and use your graph in place")
        if record is not None:
            stored = self.stored_source()
            if stored is not None and stored != source:
                raise AdoptError(f"dataset {self.dataset!r} was adopted from :{stored.label} with other options "
                                 f"({_differences(stored, source)}): adopt with --reset to adopt it anew")
            if record.get("model") not in (None, model):
                raise AdoptError(f"dataset {self.dataset!r} was embedded with {record['model']}, not {model}: pass "
                                 "that --model, or adopt with --reset to embed it anew")
        self.check_source(source, int(dimension))
        schema = StoreSchema.in_place_for(writer.label, source.name_property, source.text_property,
                                          source.id_property, list(source.relationship_types or []) or None)
        writer.schema = schema
        if record is None:
            taken = self._run("ingest/count_nodes", "checking the dataset label")[0]["nodes"]
            if taken:
                raise AdoptError(f"{taken:,} nodes already carry the label {writer.label}, which seeder-dgl would "
                                 f"add for {self.dataset!r}: choose another dataset name")
        clashes = self._run("adopt/clashes", "checking for clashing properties", source)[0]["clashes"]
        if clashes:
            raise AdoptError(f"{clashes:,} :{source.label} nodes already have a property named like seeder-dgl's own "
                             f"({', '.join(schema.owned_properties())}) without being adopted: choose another "
                             "dataset name, so that nothing of yours is overwritten")

        summary = AdoptSummary(self.dataset, writer.label, 0, 0, 0, int(dimension), model, created=record is None)
        writer.run("schema/node_id_constraint", "creating the id constraint")
        writer.run("dataset/begin", "opening the dataset record", name=self.dataset, meta={
            "label": writer.label, "model": model, "dimension": int(dimension), "store_schema": schema.to_record(),
            "adopted_from": source.to_record(), "relation_names": (record or {}).get("relation_names") or [],
            "relation_types": (record or {}).get("relation_types") or [],
            "relation_embeddings": (record or {}).get("relation_embeddings") or [],
            "num_nodes": (record or {}).get("num_nodes") or 0,
            "num_relationships": (record or {}).get("num_relationships") or 0})

        summary.released = self._release_departed(source)
        if summary.released:
            say(f"{summary.released:,} nodes lost the label {source.label}: seeder-dgl's label and properties "
                "came off them")
        owned = {r["label"] for r in self._run("dataset/list", "listing the datasets") if r["label"]}
        summary.reembedded = self._refresh_adopted(source, owned, encode, dimension, summary, say)
        summary.added = self._add_new(source, owned, encode, dimension, summary, say)
        names, types, emb, counts = self._relations(record, encode_relations)
        summary.relation_types, summary.relationships = len(types), counts
        writer.create_indexes(int(dimension), quantization, ef_construction, progress=False)
        if summary.added or summary.released:  # the id index's statistics changed (see the statement)
            writer.run("schema/prepare_for_replanning", "refreshing the index statistics", seconds=300)
        summary.nodes = int(self._run("ingest/count_nodes", "counting the adopted nodes")[0]["nodes"])
        summary.seconds = time.perf_counter() - start
        writer.run("dataset/finish", "closing the dataset record", name=self.dataset, summary={
            "num_nodes": summary.nodes, "num_relationships": summary.relationships, "relation_names": names,
            "relation_types": types, "relation_embeddings": emb, "seconds": round(summary.seconds, 3)})
        return summary

    def _release_departed(self, source: AdoptSource) -> int:
        """Take seeder-dgl's label and properties off adopted nodes that no longer carry the user label."""
        return self.writer.batched("adopt/release", "releasing nodes that left the graph", batch=self.batch,
                                   keep=source.label)

    @staticmethod
    def _inputs(page: list[dict], ids: list[int], source: AdoptSource, owned: set[str]) -> list[_NodeInput]:
        """What each node's embedding is made from: its text (else its name, else its id), its type
        (the type property, else its first other label, else 'entity'; as ``ingest`` types rows
        without one), and a given embedding."""
        out = []
        for node, node_id in zip(page, ids):
            name = _text(node["name"]) or _text(node["user_id"])
            text = _text(node["text"]) or name
            if _text(node["type"]):
                type_name = _text(node["type"])
            else:
                others = sorted(label for label in node["labels"] if label != source.label and label not in owned)
                type_name = others[0] if others else DEFAULT_TYPE
            given = _given_vector(node["embedding"])
            digest = hashlib.sha1(json.dumps([text, type_name, None if given is None else given.tolist()])
                                  .encode("utf-8")).hexdigest()
            out.append(_NodeInput(node["key"], _text(node["user_id"]), node_id, text, type_name, given, digest))
        return out

    def _write(self, nodes: list[_NodeInput], encode, dimension: int, source: AdoptSource) -> None:
        """Embed ``nodes`` (given embeddings where usable) and write seeder-dgl's properties on them,
        in one transaction."""
        if not nodes:
            return
        emb = np.zeros((len(nodes), dimension), dtype=np.float32)
        missing = [i for i, n in enumerate(nodes) if n.given is None]
        for i, n in enumerate(nodes):
            if n.given is not None:
                if n.given.shape[0] != dimension:
                    raise AdoptError(f"node {n.user_id!r}: its {source.embedding_property!r} has {n.given.shape[0]} numbers "
                                     f"but the model gives {dimension}-d vectors: pass the --model that made them, "
                                     "or leave --embedding-property out")
                emb[i] = n.given
        if missing:
            emb[missing] = encode([nodes[i].text for i in missing])
        emb = unit_vectors(emb)
        rows = [{"key": n.key, "id": n.id, "type": n.type, "digest": n.digest, "embedding": emb[i].tolist(), **sketch}
                for i, (n, sketch) in enumerate(zip(nodes, sketch_properties(emb)))]
        self._run("adopt/write", "writing seeder-dgl's properties", source, rows=rows,
                  embedding_property=self.writer.schema.embedding)

    def _add_new(self, source: AdoptSource, owned: set[str], encode, dimension: int, summary: AdoptSummary,
                 say) -> int:
        """Nodes with the user label and no seeder-dgl id yet: ids after the largest one, batch by batch."""
        top = self._run("export/max_id", "reading the largest id")[0]["max_id"]
        next_id = int(top) + 1 if top is not None else 0
        added = 0
        while True:
            page = self._run("adopt/unadopted", "reading the nodes to adopt", source, limit=self.batch,
                             **source.properties())[0]["nodes"]
            if not page:
                return added
            ids = list(range(next_id, next_id + len(page)))
            self._write(self._inputs(page, ids, source, owned), encode, dimension, source)
            next_id += len(ids)
            added += len(ids)
            say(f"adopted {added:,} nodes")

    def _refresh_adopted(self, source: AdoptSource, owned: set[str], encode, dimension: int, summary: AdoptSummary,
                         say) -> int:
        """Adopted nodes whose text, type or given embedding changed since they were embedded: again."""
        top = self._run("export/max_id", "reading the largest id")[0]["max_id"]
        changed = 0
        for lo in range(0, int(top) + 1 if top is not None else 0, self.batch):
            page = self._run("adopt/adopted", "reading the adopted nodes", source, lo=lo, hi=lo + self.batch,
                             **source.properties())[0]["nodes"]
            nodes = self._inputs(page, [int(node["id"]) for node in page], source, owned)
            stale = [n for n, node in zip(nodes, page) if n.digest != node["digest"]]
            self._write(stale, encode, dimension, source)
            changed += len(stale)
        if changed:
            say(f"embedded {changed:,} changed nodes again")
        return changed

    def _relations(self, record: dict | None, encode_relations) -> tuple[list[str], list[str], list[float], int]:
        """The relationship types among adopted nodes: the record's order kept (a trained policy's
        relation ids and a fitted prior refer to it), new types appended; their embeddings; and
        how many relationships there are."""
        rows = self._run("adopt/relation_types", "reading the relationship types", types=self.writer.schema.types)
        found = {r["type"]: int(r["relationships"]) for r in rows}
        types = list((record or {}).get("relation_types") or [])
        types += sorted(t for t in found if t not in types)
        emb = encode_relations(types) if types else np.zeros((0, 0), dtype=np.float32)
        return types, types, unit_vectors(emb).reshape(-1).astype(float).tolist() if types else [], sum(found.values())


def _differences(stored: AdoptSource, given: AdoptSource) -> str:
    old, new = asdict(stored), asdict(given)
    return ", ".join(f"{k.replace('_', '-')} {old[k]!r} then, {new[k]!r} now" for k in old if old[k] != new[k])
