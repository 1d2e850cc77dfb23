"""Retrieval on the live graph: dense seeding and K-hop-with-filtering run in Neo4j.

Whatever is in the database at query time is what gets retrieved: nodes and relationships
added after training (``seeder-dgl upsert``) are seen by the next query. K-hop, exact seeding and
node features run in seeder-dgl's procedures when the server has them (``graphstore.procedures``,
one call for all hops), else as Cypher statements (one query per hop); both select the same nodes. Every
statement here only reads, and runs in READ access mode, so a cluster may route it to a reader.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
from neo4j import READ_ACCESS, Driver, RoutingControl
from neo4j.exceptions import DriverError, Neo4jError

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import ID_FUNCTION_SESSION, default_database, describe_neo4j_error
from seeder_dgl.graphstore.cypher import degree_counts, query, quiet
from seeder_dgl.graphstore.procedures import khop_engine, khop_setting
from seeder_dgl.graphstore.schema import StoreSchema
from seeder_dgl.graphstore.sketch import query_sketch
from seeder_dgl.graphstore.name_index import CANDIDATES, NameQuery
from seeder_dgl.settings import settings
from seeder_dgl.subgraph.record import BACKWARD, FORWARD, QuerySubgraph


class DatasetGone(SeederError):
    """The dataset was dropped while a long-lived reader (``serve``, a ``Retriever``) had it open."""


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
    relation_prior: str | None = None
    """The learned relation prior stored in the record (JSON; ``retrieval.relation_prior``), or None."""
    entity_linker: str | None = None
    """The learned entity linker stored in the record (JSON; ``retrieval.linking``), or None."""
    schema: StoreSchema | None = None
    """Property names and relationship types of the dataset (``graphstore.schema``); None: the
    ingested layout under ``label``."""
    identity: str | None = None
    """Which graph this record is: the ingest's fingerprint of the data and model, else (a graph
    adopted in place) when the record was created. Upserts keep it; a drop and a new ingest or
    adoption under the same name change it (a policy trained before is then refused)."""
    active_run: str | None = None
    """The run folder whose trained retriever ``query``, ``serve`` and ``eval`` use (set by ``train``;
    relative to the runs folder when inside it), or None: the profile's own run folder."""
    active_run_profile: str | None = None
    """The retrieval profile ``active_run`` was trained with (other profiles use their own folders)."""

    def __post_init__(self):
        if self.schema is None:
            self.schema = StoreSchema.ingested(self.label)

    def bound_to(self, uses_prior: bool) -> dict[str, str | None]:
        """What a policy trained on this dataset depends on and records (``inference.load_policy``):
        the graph's identity and, where the retrieval settings use it (``uses_prior``), the
        relation prior its subgraphs are grown with (a digest of the stored prior)."""
        prior = prior_digest(self.relation_prior) if uses_prior else None
        return {"graph": self.identity, "relation_prior": prior}


def prior_digest(text: str | None) -> str | None:
    """The digest of a stored relation prior's JSON that a checkpoint's ``bound_to`` records (None: none)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16] if text else None


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm == 0, 1.0, norm)


def default_hop_partitions() -> int:
    """``SEEDER_HOP_PARTITIONS``, else 2: one K-hop hop runs as that many concurrent queries."""
    return settings().hop_partitions


# Hops run side by side on these threads; shared by every LiveGraph (they only wait on sockets).
_HOP_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="seeder-hop")


class LiveGraph:
    """One ingested dataset in Neo4j, seen through the project's Cypher statements.

    ``khop``: ``procedure``, ``cypher`` or ``auto`` (the default, from ``SEEDER_KHOP``): run K-hop,
    exact seeding and node features in seeder-dgl's procedures, as Cypher statements, or in the
    procedures when the server has them (asked once per driver, on first use).
    ``hop_partitions`` (Cypher only): each K-hop hop after the first is split into that many
    concurrent queries by internal node id (exact: see cypher/retrieval/khop_hop.cypher). Neo4j
    Community runs one query on one core, and scoring a hub's neighbourhood is the slow part of a
    query; 1 turns this off.
    ``procedure_options``: settings passed to the procedures beside the dataset's property names
    (their ``config`` map): ``adjacency`` (default true: walk the server's in-memory copy of the
    relationships while no write has changed them), ``adjacency_wait`` (default false: when there
    is no valid copy, read one before this call instead of in the background), ``node_copy`` and
    ``node_copy_wait`` (the same for the server's copy of the nodes' ids, embeddings, types and
    names, which survivors of the bounds are scored from on that walk), ``seed_index`` and
    ``simd``: the result is the same either way; they exist for benchmarks and tests. And
    ``candidates`` (default 0): exact dense seeding scores only the ~that many nodes a 1-bit scan of
    the dataset's sketches finds nearest (``api.SEED_CANDIDATES``, for datasets of millions of nodes).
    """

    def __init__(self, driver: Driver, dataset: str, database: str | None = None,
                 hop_partitions: int | None = None, khop: str | None = None,
                 procedure_options: dict | None = None):
        self.driver = driver
        self.database = database if database is not None else default_database()
        self.procedure_options = dict(procedure_options or {})
        #: What the last K-hop through the procedure walked: "copy" (the server's in-memory copy
        #: of the relationships), "store", or None (none ran yet, or the Cypher path ran).
        self.last_walked: str | None = None
        #: Where that K-hop's exact scores and features came from: "copy" (the server's in-memory
        #: copy of the nodes' ids, embeddings, types and names) or "store".
        self.last_scored: str | None = None
        #: How many K-hop statements have read the record's relation-type count on the way
        #: (``relation_reads``), and the count the latest of them read (None: no record).
        self._relation_reads = 0
        self._relation_count: int | None = None
        self.hop_partitions = default_hop_partitions() if hop_partitions is None else int(hop_partitions)
        if self.hop_partitions < 1:
            raise LiveGraphError(f"hop_partitions must be at least 1, not {self.hop_partitions}")
        self.khop_setting = khop_setting(khop)
        self._set_info(self._load_info(dataset))

    @property
    def khop_engine(self) -> str:
        """``procedure`` or ``cypher``: what runs K-hop, exact seeding and node features for this graph."""
        return khop_engine(self.driver, self.database, self.khop_setting)

    def _set_info(self, info: DatasetInfo) -> None:
        self.info = info
        self.label = info.label
        self.schema = info.schema
        self.index = f"{self.label}_embedding"
        self._relation_id = {t: i for i, t in enumerate(info.relation_types)}
        # Statements may also splice the per-type degree list of a node (seeding/fulltext).
        self._identifiers = {**self.schema.identifiers(), "degrees": degree_counts("node", info.relation_types)}
        self._relation_unit = _unit(info.relation_embeddings.astype(np.float64))

    @property
    def relation_reads(self) -> int:
        """A mark to give ``refresh(since=...)``: statements that read the relation-type count after it."""
        return self._relation_reads

    def _saw_relation_count(self, count) -> None:
        self._relation_count = None if count is None else int(count)
        self._relation_reads += 1

    def refresh(self, since: int | None = None) -> bool:
        """Read the record again if upserts added relation types since it was read: a long-lived
        LiveGraph, as in ``serve``, then scores and returns their relationships like the others.
        Returns whether anything changed.

        The count of types is one small query. With ``since`` (``relation_reads`` taken before a
        retrieval), a K-hop statement that read it along the way after that mark answers instead,
        with no round trip of its own: the count it saw is as new as one read before the retrieval.
        """
        count = self._relation_count if since is not None and self._relation_reads > since else None
        if count is None:  # not read along the way, or the record was missing then: ask now
            rows = self._run("dataset/relation_count", "reading the dataset record", name=self.info.name)
            if not rows:
                raise DatasetGone(f"dataset {self.info.name!r} was dropped: ingest it again")
            count = int(rows[0]["relations"] or 0)
        if count == len(self.info.relation_types):
            return False
        self._set_info(self._load_info(self.info.name))
        return True

    def _run(self, statement: str, what: str, **params) -> list:
        """The records of one read statement, as an auto-commit query in a short READ session.

        Retrieval only reads, and one query costs a few milliseconds, so the round trips count:
        ``driver.execute_query`` opens a managed transaction (BEGIN, RUN, COMMIT) with bookmark
        bookkeeping, about 1.4 ms more per statement here than one auto-commit RUN.
        """
        text = query(statement, **self._identifiers)
        try:
            with self.driver.session(database=self.database, default_access_mode=READ_ACCESS,
                                     **ID_FUNCTION_SESSION) as session:
                return list(session.run(text, quiet(params)))
        except (Neo4jError, DriverError, OSError) as exc:
            raise LiveGraphError(describe_neo4j_error(exc, what)) from exc

    def _lists(self, statement: str, what: str, **params) -> dict[str, list]:
        """The one row of parallel lists a columnar statement returns (collect() always gives one)."""
        # items(), not data(): data() walks every element of every list to make it JSON-like.
        return dict(self._run(statement, what, **params)[0].items())

    def _load_info(self, dataset: str) -> DatasetInfo:
        try:
            records = self.driver.execute_query(query("dataset/get"), name=dataset, database_=self.database,
                                                routing_=RoutingControl.READ).records
        except (Neo4jError, DriverError, OSError) as exc:
            raise LiveGraphError(describe_neo4j_error(exc, f"reading dataset {dataset!r}")) from exc
        if not records:
            known = [r["name"] for r in self.driver.execute_query(query("dataset/list"), database_=self.database,
                                                                  routing_=RoutingControl.READ).records]
            hint = f"ingested here: {', '.join(known)}" if known else "nothing is ingested yet"
            raise LiveGraphError(f"dataset {dataset!r} is not in Neo4j ({hint}): run `seeder-dgl ingest {dataset}`")
        m = records[0]["meta"]
        dim = int(m["dimension"])
        rel = np.asarray(m.get("relation_embeddings") or [], dtype=np.float32).reshape(-1, dim)
        return DatasetInfo(dataset, m["label"], dim, m["model"], list(m["relation_names"]),
                           list(m["relation_types"]), rel, int(m["num_nodes"]), int(m["num_relationships"]),
                           m.get("status", "unknown"), relation_prior=m.get("relation_prior"),
                           entity_linker=m.get("entity_linker"), schema=StoreSchema.from_record(m),
                           identity=m.get("fingerprint") or (f"record of {m['started_at']}" if m.get("started_at")
                                                             else None),
                           active_run=m.get("active_run"), active_run_profile=m.get("active_run_profile"))

    # ---- readiness --------------------------------------------------------------------------
    def check_ready(self) -> None:
        """One-line error unless the ingest finished and the vector index is ONLINE."""
        if self.info.status != "complete":
            command = "adopt" if self.schema.in_place else "ingest"
            raise LiveGraphError(f"dataset {self.info.name!r} is only partly {command}ed: run "
                                 f"`seeder-dgl {command} {self.info.name}` again to finish it")
        rows = self._run("schema/index_state", "reading the vector index state", name=self.index)
        if not rows:
            raise LiveGraphError(f"vector index {self.index} is missing: run `seeder-dgl ingest {self.info.name}`")
        state = rows[0]["state"]
        if state != "ONLINE":
            raise LiveGraphError(f"vector index {self.index} is {state} ({rows[0]['populationPercent']:.0f}% "
                                 "populated): wait for it to come ONLINE and ask again")

    @cached_property
    def words_index_online(self) -> bool:
        """Whether the dataset has its name-words index, ONLINE (``schema/words_index.cypher``).
        Datasets ingested or adopted before it existed have none until ``ingest``/``adopt`` runs
        again; their names are then found through the name index alone, as before."""
        rows = self._run("schema/index_state", "reading the name-words index state", name=f"{self.label}_words")
        return bool(rows) and rows[0]["state"] == "ONLINE"

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
        """Top-k nodes by cosine: the vector index (searched ``candidates`` wide), or an exact scan
        (in float64 in the procedure, in float32 in Cypher)."""
        if k <= 0:
            return []
        vec = self.query_vector(embedding)
        if exact and self.khop_engine == "procedure":
            rows = self._run("procedure/exact_seeds", "exact dense seeding", label=self.label, k=int(k), embedding=vec,
                             config=self._procedure_config(), name=self.info.name)
        elif exact:
            rows = self._run("seeding/exact", "exact dense seeding", k=int(k), embedding=vec)
        else:
            rows = self._run("seeding/dense", "dense seeding", index=self.index, k=int(k),
                             candidates=int(max(k, candidates)), embedding=vec)
        return [(int(r["id"]), float(r["similarity"])) for r in rows]

    def _procedure_config(self) -> dict:
        return {**self.schema.procedure_config(), **self.procedure_options}

    def relation_similarity(self, embedding: np.ndarray) -> dict[str, float]:
        """sim(q, r) for every relation type, computed here: relations are few."""
        sims = self._relation_unit @ np.asarray(self.query_vector(embedding))
        return {t: float(s) for t, s in zip(self.info.relation_types, sims)}

    # ---- K-hop-with-filtering ---------------------------------------------------------------
    def khop_filter(self, embedding: np.ndarray, seeds: list[tuple[int, float]], budgets: list[int],
                    with_edges: bool = True, relation_scores: np.ndarray | None = None,
                    with_features: bool = False) -> QuerySubgraph:
        """Seeds plus, hop by hop, the best ``budgets[h]`` neighbours of the frontier (docs/method.md, K-hop-with-filtering).

        ``relation_scores`` [hops, R] (a learned relation prior's, columns in the record's relation
        order) replace sim(q, r) hop by hop. ``with_features``: through the procedure, the nodes'
        embeddings, types and names come back in the same call (``QuerySubgraph.features``), read
        with their scores; through Cypher they are left to ``node_features``.
        """
        return self._khop(embedding, seeds, budgets, with_edges, relation_scores, with_features)[1]

    def exact_seeds_khop_filter(self, embedding: np.ndarray, k: int, budgets: list[int],
                                with_edges: bool = True, relation_scores: np.ndarray | None = None,
                                with_features: bool = False) -> tuple[list[tuple[int, float]], QuerySubgraph]:
        """``dense_seeds(embedding, k, exact=True)`` and ``khop_filter`` from those seeds: through the
        procedure in one statement (one round trip, the embedding sent once), elsewhere as two calls."""
        if self.khop_engine != "procedure" or k <= 0:
            seeds = self.dense_seeds(embedding, k, exact=True)
            return seeds, self.khop_filter(embedding, seeds, budgets, with_edges, relation_scores, with_features)
        return self._khop(embedding, None, budgets, with_edges, relation_scores, with_features, k=int(k))

    def _khop(self, embedding: np.ndarray, seeds: list[tuple[int, float]] | None, budgets: list[int],
              with_edges: bool, relation_scores: np.ndarray | None, with_features: bool,
              k: int = 0) -> tuple[list[tuple[int, float]], QuerySubgraph]:
        """The seeds and ``khop_filter``'s subgraph from them: ``seeds`` as given, or (``seeds`` None,
        procedure only) the exact top ``k``, found in the same statement."""
        vec = self.query_vector(embedding)
        budgets = [int(b) for b in budgets]
        if relation_scores is None:
            rel_sim = [self.relation_similarity(embedding)] * len(budgets)
        else:
            rel_sim = [{t: float(v) for t, v in zip(self.info.relation_types, row)}
                       for row in np.asarray(relation_scores, dtype=np.float64)[:len(budgets)]]
        if self.khop_engine == "procedure":
            added, edges = self._expand_in_procedure(vec, seeds, budgets, rel_sim, with_edges, with_features, k)
            if seeds is None:
                # seeder.exactSeeds's order (best first, ties by smaller id), whatever order collect() kept.
                seeds = sorted(((int(s["id"]), float(s["similarity"])) for s in edges["seeds"]),
                               key=lambda s: (-s[1], s[0]))
        else:
            added, edges = self._expand_in_cypher(vec, seeds, budgets, rel_sim), None
        node_ids = np.asarray([s for s, _ in seeds] + [node for node, _, _ in added], dtype=np.int64)
        hops = [0] * len(seeds) + [h for _, h, _ in added]
        # Neo4j returns doubles: kept as float64 so that rankings by score are not decided by rounding.
        scores = np.asarray([sim for _, sim in seeds] + [score for _, _, score in added], dtype=np.float64)
        if not with_edges:
            src, dst, rel = (np.zeros(0, np.int64),) * 3
            direction = np.zeros(0, np.int8)
        else:
            src, dst, rel, direction = (self.directed_induced_edges(node_ids) if edges is None
                                        else self._local_edges(node_ids, edges))
        features = self._features_of(node_ids, edges) if with_features and edges is not None else None
        return seeds, QuerySubgraph(query_id=-1, node_ids=node_ids, hop=np.asarray(hops, dtype=np.int8),
                                    score=scores.astype(np.float32), src=src, dst=dst, rel=rel,
                                    direction=direction, exact_score=scores, features=features)

    def _features_of(self, node_ids: np.ndarray, found: dict) -> tuple | None:
        """``node_features`` of ``node_ids`` from what seeder.khop returned with them; None when a
        node is not among them (a seed gone since seeding: ``node_features`` then says so)."""
        row_of = {int(node): row for row, node in enumerate(found["featureIds"])}
        rows = [row_of.get(int(i)) for i in node_ids]
        if None in rows:
            return None
        emb = np.frombuffer(found["embeddings"], dtype="<f4").reshape(-1, self.info.dimension)[rows]
        return (emb.astype(np.float32, copy=False), [found["types"][r] for r in rows],
                [found["names"][r] for r in rows])

    def _expand_in_procedure(self, vec: list[float], seeds: list[tuple[int, float]] | None, budgets: list[int],
                             rel_sim: list[dict[str, float]], with_edges: bool,
                             with_features: bool = False, k: int = 0) -> tuple[list[tuple[int, int, float]], dict]:
        """(id, hop, score) of the nodes every hop adds, and the relationships among all selected
        nodes (``sources``, ``targets``, ``relations``), from one call of seeder.khop; with
        ``with_features`` also the selected nodes' ``featureIds``, ``embeddings``, ``types`` and ``names``.
        ``seeds`` None: from the exact top ``k`` in the same statement (also returned, as ``seeds``)."""
        config = self._procedure_config()
        if with_features:
            config["features"] = True
        common = dict(label=self.label, embedding=vec, budgets=budgets, relation_similarity=rel_sim,
                      with_edges=with_edges, config=config, name=self.info.name)
        if seeds is None:
            added = self._lists("procedure/exact_seeds_khop", "exact dense seeding and K-hop expansion", k=k,
                                **common)
        else:
            added = self._lists("procedure/khop", "K-hop expansion",
                                seeds=[{"id": s, "similarity": sim} for s, sim in seeds], **common)
        self.last_walked = added.get("walked")
        self.last_scored = added.get("scored")
        self._saw_relation_count(added.get("relation_count"))
        rows = [(int(i), int(h), float(score)) for i, h, score in zip(added["ids"], added["hops"], added["scores"])]
        return rows, added

    def _expand_in_cypher(self, vec: list[float], seeds: list[tuple[int, float]], budgets: list[int],
                          rel_sim: list[dict[str, float]]) -> list[tuple[int, int, float]]:
        """(id, hop, score) of the nodes every hop adds, one cypher/retrieval/khop_hop.cypher per hop
        (``rel_sim``: the relation terms of each hop)."""
        sketched = query_sketch(vec)
        selected = {s for s, _ in seeds}
        frontier = [{"id": s, "similarity": sim} for s, sim in seeds]
        added: list[tuple[int, int, float]] = []
        for h, limit in enumerate(budgets, start=1):
            if not frontier or limit <= 0:
                break
            # The first hop starts from the few seeds; later frontiers reach hubs.
            parts = 1 if h == 1 else self.hop_partitions
            rows = self.hop_neighbours(parts, f"K-hop expansion, hop {h}", selected, limit, frontier=frontier,
                             relation_similarity=rel_sim[h - 1], embedding=vec, **sketched)
            frontier = [{"id": node, "similarity": sim} for node, sim, _ in rows]
            selected.update(node for node, _, _ in rows)
            added.extend((node, h, score) for node, _, score in rows)
        return added

    def hop_neighbours(self, partitions: int, what: str, selected: set[int], limit: int,
                       **params) -> list[tuple[int, float, float]]:
        """One hop as ``partitions`` concurrent queries: the best ``limit`` (id, similarity, score)
        of the nodes not ``selected``, by score descending, then id.

        Each partition returns its best ``limit + len(selected)`` neighbours, selected or not: at
        most ``len(selected)`` of them are dropped, so the best ``limit`` others are among them.
        Partitions score disjoint sets of neighbours, each with all its frontier edges.
        """
        params["limit"] = limit + len(selected)
        params["types"] = self.schema.types
        if partitions == 1:
            parts = [self._lists("retrieval/khop_hop", what, partitions=1, partition=0, **params)]
        else:
            calls = [partial(self._lists, "retrieval/khop_hop", what, partitions=partitions, partition=p, **params)
                     for p in range(partitions)]
            run_concurrently = getattr(self.driver, "run_concurrently", None)  # AsyncReads: on the event loop
            parts = (run_concurrently(calls, _HOP_POOL) if run_concurrently is not None
                     else [f.result() for f in [_HOP_POOL.submit(call) for call in calls]])
        rows = [(int(i), float(sim), float(score)) for part in parts
                for i, sim, score in zip(part["ids"], part["similarities"], part["scores"]) if int(i) not in selected]
        rows.sort(key=lambda r: (-r[2], r[0]))
        return rows[:limit]

    def induced_edges(self, node_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Local (src, dst, relation id) of every stored relationship among ``node_ids``, both directions."""
        return self.directed_induced_edges(node_ids)[:3]

    def directed_induced_edges(self, node_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``induced_edges`` and each edge's direction (int8 ``FORWARD``: stored src -> dst, ``BACKWARD``:
        stored dst -> src)."""
        if len(node_ids) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, np.zeros(0, dtype=np.int8)
        return self._local_edges(node_ids, self._lists("retrieval/induced_edges", "reading the subgraph's relationships",
                                                       ids=[int(i) for i in node_ids], types=self.schema.types))

    def _local_edges(self, node_ids: np.ndarray, edges: dict[str, list]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``edges`` (lists of source ids, target ids and relation types, each stored relationship
        once, as stored) as local (src, dst, relation id, direction), both directions."""
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
        direction = np.repeat(np.asarray([FORWARD, BACKWARD], dtype=np.int8), len(s))
        return np.concatenate([s, d]), np.concatenate([d, s]), np.concatenate([t, t]), direction

    def _per_node(self, statement: str, what: str, node_ids, **params) -> tuple[dict[str, list], list[int]]:
        """A per-node columnar statement's lists, and the row of each id given (in that order);
        a one-line error when a node is gone (deleted while the query ran)."""
        ids = [int(i) for i in node_ids]
        found = self._lists(statement, what, ids=ids, **params)
        row_of = {int(node): row for row, node in enumerate(found["ids"])}
        missing = [i for i in ids if i not in row_of]
        if missing:
            raise LiveGraphError(f"nodes {missing[:5]} disappeared from {self.info.name!r} during the query: ask again")
        return found, [row_of[i] for i in ids]

    def node_features(self, node_ids) -> tuple[np.ndarray, list[str], list[str]]:
        """Embeddings [n, d] (rows in the order given), types and names of the nodes.

        The procedure sends the embeddings as float32 bytes: as float lists each number crosses
        the wire as a float64 and becomes a Python float in the driver, the most of this query's time."""
        what, dim = "reading node features", self.info.dimension
        if self.khop_engine == "procedure":
            found, rows = self._per_node("procedure/node_features", what, node_ids, label=self.label,
                                         config=self.schema.procedure_config())
            emb = np.frombuffer(found["embeddings"], dtype="<f4").reshape(-1, dim)[rows].astype(np.float32, copy=False)
        else:
            found, rows = self._per_node("retrieval/node_features", what, node_ids)
            emb = np.asarray([found["embeddings"][r] for r in rows], dtype=np.float32).reshape(len(rows), dim)
        return emb, [found["types"][r] for r in rows], [found["names"][r] for r in rows]

    def describe(self, node_ids) -> tuple[list[str], list[str], list[str]]:
        """Types, names and texts of the nodes (in the order given), without their embeddings."""
        return self.describe_with_keys(node_ids)[:3]

    def describe_with_keys(self, node_ids) -> tuple[list[str], list[str], list[str], list[str | None]]:
        """``describe``, and each node's id as its source gave it (the node table's id, an adopted
        graph's id property; None where there is none)."""
        found, rows = self._per_node("retrieval/node_descriptions", "reading node descriptions", node_ids)
        return self._described(found, rows)

    @staticmethod
    def _described(found: dict[str, list], rows: list[int]):
        return ([found["types"][r] for r in rows], [found["names"][r] for r in rows],
                [found["texts"][r] or "" for r in rows], [found["keys"][r] or None for r in rows])

    def describe_with_edges(self, node_ids) -> tuple[tuple[list[str], list[str], list[str], list[str | None]],
                                                      list[tuple[int, str, str, int, str]]]:
        """``describe_with_keys`` and ``edges`` of the same nodes in one round trip (what a live query
        returns about its answer)."""
        if not len(node_ids):
            return ([], [], [], []), []
        found, rows = self._per_node("retrieval/nodes_and_triples", "reading the retrieved nodes and triples",
                                     node_ids, types=self.schema.types)
        return self._described(found, rows), self._edge_rows(found)

    def find_nodes(self, node_ids) -> list[tuple[int, str, str, str]]:
        """(id, type, name, text) of those of ``node_ids`` the dataset holds, in the order given
        (unlike ``describe``, ids it does not hold are left out instead of being an error)."""
        ids = list(dict.fromkeys(int(i) for i in node_ids))
        if not ids:
            return []
        found = self._lists("retrieval/node_descriptions", "reading node descriptions", ids=ids)
        row_of = {int(node): row for row, node in enumerate(found["ids"])}
        return [(i, found["types"][row_of[i]], found["names"][row_of[i]], found["texts"][row_of[i]] or "")
                for i in ids if i in row_of]

    def node_types(self) -> dict[str, int]:
        """Node type -> how many nodes of the dataset have it, most first (one scan of the label)."""
        found = self._lists("retrieval/node_types", "counting the node types")
        return dict(zip(found["types"], (int(c) for c in found["counts"])))

    def triples(self, node_ids) -> list[tuple[str, str, str]]:
        """(head name, relation, tail name) of every stored relationship among the nodes."""
        return [(h, r, t) for _, h, r, _, t in self.edges(node_ids)]

    def edges(self, node_ids) -> list[tuple[int, str, str, int, str]]:
        """(head id, head name, relation, tail id, tail name) of every stored relationship among the
        nodes, ordered by head id, relation and tail id (names alone may repeat: ids tell nodes apart)."""
        ids = [int(i) for i in node_ids]
        if not ids:
            return []
        return self._edge_rows(self._lists("retrieval/triples", "reading the retrieved triples", ids=ids,
                                           types=self.schema.types))

    @staticmethod
    def _edge_rows(t: dict[str, list]) -> list[tuple[int, str, str, int, str]]:
        order = sorted(range(len(t["sources"])), key=lambda i: (t["sources"][i], t["relations"][i], t["targets"][i]))
        return [(int(t["sources"][i]), t["source_names"][i], t["relations"][i].lower(), int(t["targets"][i]),
                 t["target_names"][i]) for i in order]

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = CANDIDATES,
                      words: NameQuery = NameQuery()) -> list[dict]:
        """Nodes whose names match the question's words, within a typo (as ``words`` puts them,
        ``retrieval.linking.NameQuery``): id, name, Lucene score, cos(q, v), type, and
        relationships per relation type (``info.relation_types``)."""
        lucene = words.lucene(question)
        if not lucene:
            return []
        name_words = words.words(question) if words.joined and self.words_index_online else ""
        hits = self._lists("seeding/fulltext", "full-text seeding", index=f"{self.label}_name", lucene=lucene,
                           words_index=f"{self.label}_words", words=name_words, candidates=int(candidates),
                           embedding=self.query_vector(embedding))
        return [{"id": int(i), "name": name, "text_score": float(text), "similarity": float(sim), "type": kind,
                 "degrees": self._degrees(degrees)}
                for i, name, text, sim, kind, degrees in zip(hits["ids"], hits["names"], hits["text_scores"],
                                                            hits["similarities"], hits["types"], hits["degrees"])]

    def _degrees(self, found: list) -> list[int]:
        """One count per relation type (``info.relation_types``) from what ``degree_counts`` read:
        the counts themselves, or the names of the types a node has (1 each)."""
        if not found or not isinstance(found[0], str):
            return list(found)
        out = [0] * len(self._relation_id)
        for name in found:
            if name in self._relation_id:
                out[self._relation_id[name]] = 1
        return out
