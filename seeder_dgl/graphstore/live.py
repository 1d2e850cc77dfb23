"""Retrieval on the live graph: dense seeding and K-hop-with-filtering run as Cypher in Neo4j.

Whatever is in the database at query time is what gets retrieved: nodes and relationships
added after training (``seeder-dgl upsert``) are seen by the next query.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from neo4j import Driver
from neo4j.exceptions import DriverError, Neo4jError

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import ID_FUNCTION_SESSION, describe_neo4j_error
from seeder_dgl.graphstore.cypher import query, quiet, slots
from seeder_dgl.graphstore.sketch import query_sketch
from seeder_dgl.subgraph.record import QuerySubgraph


class LiveGraphError(SeederError):
    """The dataset is not there, not ready, or a query against it failed."""


@dataclass
class DatasetInfo:
    name: str
    label: str
    dimension: int
    model: str
    relation_names: list[str]
    relation_types: list[str]
    relation_embeddings: np.ndarray
    num_nodes: int
    num_relationships: int
    status: str


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm == 0, 1.0, norm)


def default_hop_partitions() -> int:
    """``SEEDER_HOP_PARTITIONS``, else 2: one K-hop hop runs as that many concurrent queries."""
    raw = os.environ.get("SEEDER_HOP_PARTITIONS", "2")
    try:
        value = int(raw)
    except ValueError:
        raise SeederError(f"SEEDER_HOP_PARTITIONS must be a whole number, not {raw!r}") from None
    if value < 1:
        raise SeederError(f"SEEDER_HOP_PARTITIONS must be at least 1, not {value}")
    return value


# Hops run side by side on these threads; shared by every LiveGraph (they only wait on sockets).
_HOP_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="seeder-hop")


class LiveGraph:
    """One ingested dataset in Neo4j, seen through the project's Cypher statements.

    ``hop_partitions``: each K-hop hop after the first is split into that many concurrent queries
    by internal node id (exact: see cypher/retrieval/khop_hop.cypher). Neo4j Community runs one
    query on one core, and scoring a hub's neighbourhood is the slow part of a query; 1 turns this off.
    """

    def __init__(self, driver: Driver, dataset: str, database: str | None = None,
                 hop_partitions: int | None = None):
        self.driver = driver
        self.database = database
        self.hop_partitions = default_hop_partitions() if hop_partitions is None else int(hop_partitions)
        if self.hop_partitions < 1:
            raise LiveGraphError(f"hop_partitions must be at least 1, not {self.hop_partitions}")
        self._set_info(self._load_info(dataset))

    def _set_info(self, info: DatasetInfo) -> None:
        self.info = info
        self.label = info.label
        self.index = f"{self.label}_embedding"
        self._relation_id = {t: i for i, t in enumerate(info.relation_types)}
        self._relation_unit = _unit(info.relation_embeddings.astype(np.float64))

    def refresh(self) -> bool:
        """Read the record again if upserts added relation types since it was read (one small
        query): a long-lived LiveGraph, as in ``serve``, then scores and returns their
        relationships like the others. Returns whether anything changed."""
        rows = self._run("dataset/relation_count", "reading the dataset record", name=self.info.name)
        if not rows:
            raise LiveGraphError(f"dataset {self.info.name!r} was dropped: ingest it again")
        if int(rows[0]["relations"] or 0) == len(self.info.relation_types):
            return False
        self._set_info(self._load_info(self.info.name))
        return True

    def _run(self, statement: str, what: str, **params) -> list:
        """The records of one read statement, as an auto-commit query in a short session.

        Retrieval only reads, and one query costs a few milliseconds, so the round trips count:
        ``driver.execute_query`` opens a managed transaction (BEGIN, RUN, COMMIT) with bookmark
        bookkeeping, about 1.4 ms more per statement here than one auto-commit RUN.
        """
        text = query(statement, **({"dataset": self.label} if "dataset" in slots(statement) else {}))
        try:
            with self.driver.session(database=self.database, **ID_FUNCTION_SESSION) as session:
                return list(session.run(text, quiet(params)))
        except (Neo4jError, DriverError, OSError) as exc:
            raise LiveGraphError(describe_neo4j_error(exc, what)) from exc

    def _lists(self, statement: str, what: str, **params) -> dict[str, list]:
        """The one row of parallel lists a columnar statement returns (collect() always gives one)."""
        # items(), not data(): data() walks every element of every list to make it JSON-like.
        return dict(self._run(statement, what, **params)[0].items())

    def _load_info(self, dataset: str) -> DatasetInfo:
        try:
            records = self.driver.execute_query(query("dataset/get"), name=dataset, database_=self.database).records
        except (Neo4jError, DriverError, OSError) as exc:
            raise LiveGraphError(describe_neo4j_error(exc, f"reading dataset {dataset!r}")) from exc
        if not records:
            known = [r["name"] for r in self.driver.execute_query(query("dataset/list"), database_=self.database).records]
            hint = f"ingested here: {', '.join(known)}" if known else "nothing is ingested yet"
            raise LiveGraphError(f"dataset {dataset!r} is not in Neo4j ({hint}): run `seeder-dgl ingest {dataset}`")
        m = records[0]["meta"]
        dim = int(m["dimension"])
        rel = np.asarray(m.get("relation_embeddings") or [], dtype=np.float32).reshape(-1, dim)
        return DatasetInfo(dataset, m["label"], dim, m["model"], list(m["relation_names"]),
                           list(m["relation_types"]), rel, int(m["num_nodes"]), int(m["num_relationships"]),
                           m.get("status", "unknown"))

    # ---- readiness --------------------------------------------------------------------------
    def check_ready(self) -> None:
        """One-line error unless the ingest finished and the vector index is ONLINE."""
        if self.info.status != "complete":
            raise LiveGraphError(f"dataset {self.info.name!r} is only partly ingested: run "
                                 f"`seeder-dgl ingest {self.info.name}` again to finish it")
        rows = self._run("schema/index_state", "reading the vector index state", name=self.index)
        if not rows:
            raise LiveGraphError(f"vector index {self.index} is missing: run `seeder-dgl ingest {self.info.name}`")
        state = rows[0]["state"]
        if state != "ONLINE":
            raise LiveGraphError(f"vector index {self.index} is {state} ({rows[0]['populationPercent']:.0f}% "
                                 "populated): wait for it to come ONLINE and ask again")

    def query_vector(self, embedding: np.ndarray) -> list[float]:
        embedding = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if embedding.shape[0] != self.info.dimension:
            raise LiveGraphError(f"query embedding has {embedding.shape[0]} dimensions but {self.info.name!r} was "
                                 f"ingested with {self.info.dimension} ({self.info.model}): encode with that model")
        if not np.isfinite(embedding).all() or not np.any(embedding):
            raise LiveGraphError("query embedding is zero or not finite")
        return _unit(embedding.astype(np.float64)).tolist()

    # ---- seeding ----------------------------------------------------------------------------
    def dense_seeds(self, embedding: np.ndarray, k: int, exact: bool = False,
                    candidates: int = 100) -> list[tuple[int, float]]:
        """Top-k nodes by cosine: the vector index (searched ``candidates`` wide), or an exact scan."""
        if k <= 0:
            return []
        vec = self.query_vector(embedding)
        if exact:
            rows = self._run("seeding/exact", "exact dense seeding", k=int(k), embedding=vec)
        else:
            rows = self._run("seeding/dense", "dense seeding", index=self.index, k=int(k),
                             candidates=int(max(k, candidates)), embedding=vec)
        return [(int(r["id"]), float(r["similarity"])) for r in rows]

    def relation_similarity(self, embedding: np.ndarray) -> dict[str, float]:
        """sim(q, r) for every relation type, computed here: relations are few."""
        sims = self._relation_unit @ np.asarray(self.query_vector(embedding))
        return {t: float(s) for t, s in zip(self.info.relation_types, sims)}

    # ---- K-hop-with-filtering ---------------------------------------------------------------
    def khop_filter(self, embedding: np.ndarray, seeds: list[tuple[int, float]], budgets: list[int],
                    with_edges: bool = True) -> QuerySubgraph:
        """Seeds plus, hop by hop, the best ``budgets[h]`` neighbours of the frontier (method.md step 3)."""
        vec = self.query_vector(embedding)
        rel_sim = self.relation_similarity(embedding)
        sketched = query_sketch(vec)
        ids = [s for s, _ in seeds]
        hops = [0] * len(ids)
        scores = [sim for _, sim in seeds]
        frontier = [{"id": s, "similarity": sim} for s, sim in seeds]
        for h, limit in enumerate(budgets, start=1):
            if not frontier or limit <= 0:
                break
            # The first hop starts from the few seeds; later frontiers reach hubs.
            parts = 1 if h == 1 else self.hop_partitions
            rows = self._hop(parts, f"K-hop expansion, hop {h}", set(ids), int(limit), frontier=frontier,
                             relation_similarity=rel_sim, embedding=vec, **sketched)
            frontier = [{"id": node, "similarity": sim} for node, sim, _ in rows]
            ids.extend(node for node, _, _ in rows)
            hops.extend([h] * len(rows))
            scores.extend(score for _, _, score in rows)
        node_ids = np.asarray(ids, dtype=np.int64)
        src, dst, rel = self.induced_edges(node_ids) if with_edges else (np.zeros(0, np.int64),) * 3
        return QuerySubgraph(query_id=-1, node_ids=node_ids, hop=np.asarray(hops, dtype=np.int8),
                             score=np.asarray(scores, dtype=np.float32), src=src, dst=dst, rel=rel)

    def _hop(self, partitions: int, what: str, selected: set[int], limit: int,
             **params) -> list[tuple[int, float, float]]:
        """One hop as ``partitions`` concurrent queries: the best ``limit`` (id, similarity, score)
        of the nodes not ``selected``, by score descending, then id.

        Each partition returns its best ``limit + len(selected)`` neighbours, selected or not: at
        most ``len(selected)`` of them are dropped, so the best ``limit`` others are among them.
        Partitions score disjoint sets of neighbours, each with all its frontier edges.
        """
        params["limit"] = limit + len(selected)
        if partitions == 1:
            parts = [self._lists("retrieval/khop_hop", what, partitions=1, partition=0, **params)]
        else:
            futures = [_HOP_POOL.submit(self._lists, "retrieval/khop_hop", what, partitions=partitions,
                                        partition=p, **params) for p in range(partitions)]
            parts = [f.result() for f in futures]
        rows = [(int(i), float(sim), float(score)) for part in parts
                for i, sim, score in zip(part["ids"], part["similarities"], part["scores"]) if int(i) not in selected]
        rows.sort(key=lambda r: (-r[2], r[0]))
        return rows[:limit]

    def induced_edges(self, node_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local (src, dst, relation id) of every stored relationship among ``node_ids``, both directions."""
        if len(node_ids) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        edges = self._lists("retrieval/induced_edges", "reading the subgraph's relationships",
                            ids=[int(i) for i in node_ids])
        local = {int(n): i for i, n in enumerate(node_ids)}
        src, dst, rel = [], [], []
        for source, target, relation in zip(edges["sources"], edges["targets"], edges["relations"]):
            rid = self._relation_id.get(relation)
            if rid is None:  # a relation type added after ingest and unknown to the model: skip it
                continue
            src.append(local[int(source)])
            dst.append(local[int(target)])
            rel.append(rid)
        s, d, t = (np.asarray(x, dtype=np.int64) for x in (src, dst, rel))
        return np.concatenate([s, d]), np.concatenate([d, s]), np.concatenate([t, t])

    def _per_node(self, statement: str, what: str, node_ids) -> tuple[dict[str, list], list[int]]:
        """A per-node columnar statement's lists, and the row of each id given (in that order);
        a one-line error when a node is gone (deleted while the query ran)."""
        ids = [int(i) for i in node_ids]
        found = self._lists(statement, what, ids=ids)
        row_of = {int(node): row for row, node in enumerate(found["ids"])}
        missing = [i for i in ids if i not in row_of]
        if missing:
            raise LiveGraphError(f"nodes {missing[:5]} disappeared from {self.info.name!r} during the query: ask again")
        return found, [row_of[i] for i in ids]

    def node_features(self, node_ids) -> tuple[np.ndarray, list[str], list[str]]:
        """Embeddings [n, d] (rows in the order given), types and names of the nodes."""
        found, rows = self._per_node("retrieval/node_features", "reading node features", node_ids)
        emb = np.asarray([found["embeddings"][r] for r in rows], dtype=np.float32).reshape(len(rows), self.info.dimension)
        return emb, [found["types"][r] for r in rows], [found["names"][r] for r in rows]

    def describe(self, node_ids) -> tuple[list[str], list[str], list[str]]:
        """Types, names and texts of the nodes (in the order given), without their embeddings."""
        found, rows = self._per_node("retrieval/node_descriptions", "reading node descriptions", node_ids)
        return ([found["types"][r] for r in rows], [found["names"][r] for r in rows],
                [found["texts"][r] or "" for r in rows])

    def triples(self, node_ids) -> list[tuple[str, str, str]]:
        """(head name, relation, tail name) of every stored relationship among the nodes."""
        return [(h, r, t) for _, h, r, _, t in self.edges(node_ids)]

    def edges(self, node_ids) -> list[tuple[int, str, str, int, str]]:
        """(head id, head name, relation, tail id, tail name) of every stored relationship among the
        nodes, ordered by head id, relation and tail id (names alone may repeat: ids tell nodes apart)."""
        ids = [int(i) for i in node_ids]
        if not ids:
            return []
        t = self._lists("retrieval/triples", "reading the retrieved triples", ids=ids)
        order = sorted(range(len(t["sources"])), key=lambda i: (t["sources"][i], t["relations"][i], t["targets"][i]))
        return [(int(t["sources"][i]), t["source_names"][i], t["relations"][i].lower(), int(t["targets"][i]),
                 t["target_names"][i]) for i in order]

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = 50) -> list[dict]:
        """Nodes whose names match the question's words: id, name, Lucene score and cos(q, v)."""
        from seeder_dgl.graphstore.seeding import lucene_query

        lucene = lucene_query(question)
        if not lucene:
            return []
        hits = self._lists("seeding/fulltext", "full-text seeding", index=f"{self.label}_name", lucene=lucene,
                           candidates=int(candidates), embedding=self.query_vector(embedding))
        return [{"id": int(i), "name": name, "text_score": float(text), "similarity": float(sim)}
                for i, name, text, sim in zip(hits["ids"], hits["names"], hits["text_scores"], hits["similarities"])]
