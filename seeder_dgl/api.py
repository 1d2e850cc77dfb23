"""The Python API: retrieve from a live Neo4j graph with one call.

    from seeder_dgl import Retriever
    with Retriever("metaqa") as retriever:
        result = retriever.retrieve("who directed the movies written by Kazuo Ishiguro", k=20)
        for node in result.nodes: print(node.id, node.type, node.name, node.score)
        print("\n".join(result.triples()))

Every call embeds the question, seeds and expands on the database as it is now (Cypher), and
ranks with the chosen method: the ``retrieval.base.GraphRetriever`` class ``eval`` measures on the
export, here on the live graph. New nodes and relationships (``upsert``) are seen at once.

From asyncio code, ``await retriever.aretrieve(question)`` (or ``aretrieve_many``) runs the same
retrieval with every Neo4j read awaited on the driver's async API (``graphstore.async_reads``):
many questions at once with no thread per request, as ``serve`` answers them.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from loaders.kg import is_identifier
from seeder_dgl.datasets import DatasetContext
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.graphstore.async_reads import AsyncReads, greenlet_spawn, run_blocking
from seeder_dgl.graphstore.connection import open_async_driver, open_driver
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.inference import load_policy, load_trained_retriever
from seeder_dgl.retrieval.methods import make_retriever
from seeder_dgl.retrieval.pipeline import RetrievalSettings, with_relation_prior
from seeder_dgl.retrieval.seeding import check_mode
from seeder_dgl.threads import configure_threads
from seeder_dgl.training.artifact import active_run_dir, artifact_path
from seeder_dgl.validation import check_budgets, check_k, check_question, check_seeds

METHODS = ("seeder", "dense", "khop", "ppr")


@dataclass
class RetrievedNode:
    id: int
    type: str
    name: str
    score: float
    seed: bool = False
    """One of the seeds the expansion started from (always False for ``dense``, which expands nothing)."""
    text: str = ""
    """The node's text as ingested (a description, or its name when it has none)."""
    key: str | None = None
    """The node's id in the user's own data (the node table's id, an adopted graph's id property),
    which ``upsert`` addresses it by; None for a dataset without ids of its own (then ``id``)."""


@dataclass
class Retrieval:
    question: str
    method: str
    nodes: list[RetrievedNode]
    seconds: float
    """Seeding, expansion and ranking on the live graph (the question's embedding excluded)."""
    subgraph_size: int
    _edges: list[tuple[int, str, str, int, str]] = field(default_factory=list, repr=False)
    """(head id, head name, relation, tail id, tail name) among the retrieved nodes."""
    label: str | None = field(default=None, repr=False)
    """The dataset's node label in Neo4j (``KG_<name>``, ``Metaqa``), for ``to_cypher``."""
    id_property: str = field(default="id", repr=False)
    """The property holding the dataset's node ids (``KG_<name>_id`` for a graph adopted in place)."""

    def triples(self) -> list[str]:
        """The relationships among the retrieved nodes as 'head -[relation]-> tail' lines."""
        return [f"{h} -[{r}]-> {t}" for _, h, r, _, t in self._edges]

    def to_cypher(self) -> str:
        """A read-only Cypher statement that draws the retrieved nodes and the relationships among
        them in Neo4j Browser or Bloom (see ``subgraph_cypher``)."""
        if not self.label:
            raise SeederError("this retrieval does not know its dataset's Neo4j label: "
                              "use a Retrieval returned by Retriever.retrieve")
        return subgraph_cypher(self.label, [n.id for n in self.nodes], self.id_property)

    def to_dict(self) -> dict:
        return {"question": self.question, "method": self.method, "seconds": round(self.seconds, 4),
                "subgraph_size": self.subgraph_size,
                "nodes": [vars(n) for n in self.nodes],
                "triples": [{"head": h, "relation": r, "tail": t, "head_id": hi, "tail_id": ti}
                            for hi, h, r, ti, t in self._edges]}


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def subgraph_cypher(label: str, node_ids, id_property: str = "id") -> str:
    """A parameter-free, read-only Cypher statement that returns the nodes ``node_ids`` of the
    dataset labelled ``label`` and every relationship among them, as rows ``n, r, m`` that Neo4j
    Browser or Bloom draw as a graph (a node without relationships comes back with ``r, m`` null).

    Every statement the project runs itself sends its values as ``$parameters`` (``cypher/``). This
    one is printed for a person to paste, so it has to stand alone and its values are written into
    it. Only two kinds of value go in, and both are checked first: the label must pass the same
    identifier check as every label spliced into ``cypher/`` statements (and is backtick-quoted as
    well), and each id must be a 64-bit integer, written as a number.
    """
    for name in (label, id_property):
        if not is_identifier(name):
            raise SeederError(f"{name!r} is not a dataset label or property that can be written into Cypher "
                              "(letters, digits and '_', starting with a letter)")
    ids = []
    for node_id in node_ids:
        if isinstance(node_id, (bool, np.bool_)) or not isinstance(node_id, (int, np.integer)):
            raise SeederError(f"node id {node_id!r} is not an integer: only integer ids are written into Cypher")
        if not _INT64[0] <= int(node_id) <= _INT64[1]:
            raise SeederError(f"node id {node_id} does not fit Neo4j's 64-bit integers")
        ids.append(int(node_id))
    quoted = f"`{label}`"  # quoted too, though a label that passed the check needs no quoting
    id_list = "[" + ", ".join(str(i) for i in ids) + "]"
    return (f"// {len(ids)} retrieved nodes of {quoted} and the relationships among them (read-only)\n"
            f"MATCH (n:{quoted})\n"
            f"WHERE n.{id_property} IN {id_list}\n"
            f"OPTIONAL MATCH (n)-[r]->(m:{quoted})\n"
            f"WHERE m.{id_property} IN {id_list}\n"
            "RETURN n, r, m")


EXACT_SEEDING_MAX_NODES = 500_000
"""Largest dataset a Retriever seeds by a full exact scan by default. The procedure's scan reads
every node's 384-byte sketch: 6 ms for Prime's 129k nodes, 60 ms for MAG's 1.87M (benchmarks/README.md)."""

SEED_CANDIDATES = 10_000
"""Past ``EXACT_SEEDING_MAX_NODES``, the procedure scores exactly only the ~this many nodes a scan of
one sign bit a dimension finds nearest (config ``candidates`` of seeder.exactSeeds): at MAG scale
(1.87M random vectors, the hardest case) the exact top 3 for about 0.99 of queries, against 0.60
for the vector index's, and faster than either."""


class _RankOffTheLoop:
    """A loaded policy whose ``rank`` runs through ``run_blocking``: on the CPU pool under
    ``aretrieve``, directly otherwise."""

    def __init__(self, policy):
        self._policy = policy

    def rank(self, *args, **kwargs):
        return run_blocking(self._policy.rank, *args, **kwargs)


class Retriever:
    """Retrieval on one ingested dataset of a live Neo4j graph.

    ``exact_seeds``: dense seeds by an exact scan (True) or the vector index (False); None, the
    default, scans exactly where the server has seeder-dgl's procedures (past
    ``EXACT_SEEDING_MAX_NODES`` nodes exactly among ``SEED_CANDIDATES`` preselected ones), and uses
    the index elsewhere. ``database``: the Neo4j database holding the dataset [default:
    ``NEO4J_DATABASE``, else the server's default].

    ``driver``: a ``neo4j.Driver`` of yours, or a ``graphstore.async_reads.AsyncReads`` shared by
    several Retrievers [default: one opened from ``NEO4J_URI`` and closed by ``close``].
    ``async_driver``: the ``neo4j.AsyncDriver`` ``aretrieve`` reads through [default: one opened
    per event loop where this Retriever opened its driver; with a driver of yours and no async
    one, ``aretrieve`` runs ``retrieve`` on a worker thread].
    """

    def __init__(self, dataset: str, *, method: str = "seeder", checkpoint: str | Path | None = None,
                 seeds: int | None = None, budgets: tuple[int, ...] | None = None, driver=None,
                 encoder=None, exact_seeds: bool | None = None, profile: str | None = None,
                 seeding: str | None = None, database: str | None = None, async_driver=None):
        check_dataset_name(dataset)
        self._check_method(method)
        seeds = check_seeds(seeds) if seeds is not None else None  # before any connection is opened
        budgets = check_budgets(budgets) if budgets is not None else None
        self.dataset = dataset
        self.method = method
        self._own_driver = driver is None
        self.driver = driver or open_driver()
        #: Where aretrieve reads: None means on a worker thread (a sync driver of the caller's only).
        if isinstance(self.driver, AsyncReads):  # serve's: one for all its datasets
            self._reads = self.driver
        elif async_driver is not None or self._own_driver:
            self._reads = AsyncReads(self.driver, async_driver if async_driver is not None else open_async_driver)
        else:
            self._reads = None
        try:
            self.graph = LiveGraph(self._reads or self.driver, dataset, database)
            self.graph.check_ready()
        except SeederError:
            self.close()
            raise
        context = DatasetContext.open(dataset, profile)
        defaults = context.retrieval
        self.seeds = seeds or defaults.seeds
        self.budgets = tuple(budgets or defaults.budgets)
        self.seeding = check_mode(seeding or defaults.seeding)
        # Dense seeds: exact where the server has seeder-dgl's procedures (a scan of the kept
        # sketches, as fast as the vector index up to Prime's size), so that live seeds are the ones
        # extract gave the policy in training; elsewhere the vector index (Cypher's exact scan reads
        # every node). Past EXACT_SEEDING_MAX_NODES the full scan costs more than the rest of a
        # query, and the procedure scores a preselection exactly instead.
        #: Past EXACT_SEEDING_MAX_NODES the procedure preselects this many nodes before its exact
        #: scoring (0: every node is scored; see SEED_CANDIDATES).
        self.seed_candidates = 0
        if exact_seeds is None:
            exact_seeds = self.graph.khop_engine == "procedure"
            if exact_seeds and self.graph.info.num_nodes > EXACT_SEEDING_MAX_NODES:
                self.seed_candidates = SEED_CANDIDATES
                self.graph.procedure_options["candidates"] = SEED_CANDIDATES
        self.exact_seeds = exact_seeds
        try:  # the learned relation prior its profile follows and the entity linker, from the dataset's record
            learned = with_relation_prior(RetrievalSettings(seeding=self.seeding), self.graph, defaults.relation_prior,
                                          required=False)
        except SeederError:
            self.close()
            raise
        self.relation_prior, self.linker = learned.relation_prior, learned.linker
        # A profile with a prior and none fitted: K-hop and the baselines use sim(q, r); SeedER refuses
        # (its policy learned on subgraphs grown with the prior).
        self._prior_missing = defaults.relation_prior and self.relation_prior is None
        self._encoder = encoder
        self.context = context
        self.profile = context.profile
        # seeds, budgets, seeding, relation_prior and linker above: the profile's and the record's,
        # what the baselines use. SeedER's come with its policy, but for what the caller chose here.
        self._chosen = {"seeds": seeds, "budgets": tuple(budgets) if budgets else None,
                        "seeding": self.seeding if seeding else None}
        self._checkpoint_path = (Path(checkpoint) if checkpoint else
                                 active_run_dir(context, self.graph.info) / "best.pt")
        self._policy = None
        #: The trained retriever the policy came with (``inference.LoadedRetriever``); None: a run
        #: folder from before they were written (the profile's settings and the record's prior).
        self._trained = None
        #: SeedER's settings, built once with the policy: its trained retriever's, with this
        #: Retriever's exact_seeds and the seeds, budgets and seeding the caller chose; None
        #: until a policy with a trained retriever is loaded.
        self._trained_settings: RetrievalSettings | None = None

    @property
    def settings(self) -> RetrievalSettings:
        """How this retriever turns a question into a subgraph for its method (``settings_for``)."""
        return self.settings_for(self.method)

    def settings_for(self, method: str) -> RetrievalSettings:
        """How ``method`` turns a question into a subgraph (the pipeline ``extract`` and ``eval`` use):
        SeedER's as its policy was trained (its trained retriever), the others' from the profile and
        the dataset's record; seeds, budgets and seeding given to this Retriever apply to all."""
        if method == "seeder" and self.policy is not None and self._trained_settings is not None:
            return self._trained_settings
        return RetrievalSettings(seeds=self.seeds, budgets=tuple(self.budgets), exact_seeds=self.exact_seeds,
                                 seeding=self.seeding, relation_prior=self.relation_prior, linker=self.linker)

    @staticmethod
    def _check_method(method: str) -> None:
        if method not in METHODS:
            raise SeederError(f"unknown method {method!r}: choose one of {', '.join(METHODS)}")

    # ---- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        if self._own_driver and self.driver is not None:
            self.driver.close()
            self.driver = None

    async def aclose_reads(self) -> None:
        """Close the async driver this Retriever opened for the running event loop, if any (the
        Retriever goes on; ``aretrieve`` opens another when called again)."""
        if self._reads is not None and self._reads.opened:
            await self._reads.aclose()

    async def aclose(self) -> None:
        """``close``, and the async driver this Retriever opened for the running event loop."""
        await self.aclose_reads()
        self.close()

    async def __aenter__(self) -> "Retriever":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    def __enter__(self) -> "Retriever":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- pieces -------------------------------------------------------------------------------
    @property
    def encoder(self):
        if self._encoder is None:
            self._encoder = dataset_encoder(self.graph.info.model)
        return self._encoder

    @property
    def policy(self):
        if self._policy is None:
            configure_threads()  # unless the user chose: one OpenMP thread per pool on few cores

            path, info = self._checkpoint_path, self.graph.info
            if path.exists() and artifact_path(path.parent).is_file():  # with what it was trained with
                self._trained = load_trained_retriever(path.parent, info, checkpoint=path.name)
                chosen = {k: v for k, v in self._chosen.items() if v is not None}
                self._trained_settings = replace(self._trained.settings, exact_seeds=self.exact_seeds, **chosen)
                self._policy = self._trained.policy
                return self._policy
            # A run folder from before trained retrievers: the profile's settings and the record's
            # prior, refused when the prior changed since (``inference.load_policy``).
            if self._prior_missing:
                with_relation_prior(self.settings_for("khop"), self.graph, True)  # raises the one-line error
            if not path.exists():
                raise SeederError(f"no trained checkpoint at {path}: run `seeder-dgl train "
                                  f"{self.dataset}{self.context.profile_flag}`, pass --checkpoint, or use "
                                  "--method khop")
            self._policy = load_policy(path, dataset=self.dataset, embedding_model=info.model,
                                       dimension=info.dimension, bound_to=info.bound_to(self.relation_prior is not None))
        return self._policy

    def embed(self, question: str) -> np.ndarray:
        return self.embed_many([question])[0]

    def embed_many(self, questions: list[str]) -> np.ndarray:
        """The questions' embeddings [n, d], encoded in one batch. Questions are kept in the
        encoder's in-memory LRU (``TextEncoder.encode_queries``), never in the on-disk cache that
        holds node texts; an encoder of your own without that method is called with ``encode``."""
        texts = [check_question(q) for q in questions]  # at most MAX_QUESTION_CHARS each
        encode_queries = getattr(self.encoder, "encode_queries", None)
        if encode_queries is not None:
            return encode_queries(texts)
        return self.encoder.encode(texts, show_progress=False)

    # ---- retrieval ----------------------------------------------------------------------------
    def retrieve(self, question: str, k: int = 20, method: str | None = None) -> Retrieval:
        return self.retrieve_many([question], k=k, method=method)[0]

    def retrieve_many(self, questions: list[str], k: int = 20, method: str | None = None) -> list[Retrieval]:
        """One Retrieval per question; every question is checked before any work, and all are
        embedded in one encoder batch (what a server answering several questions at once needs)."""
        if isinstance(questions, str):
            raise SeederError("retrieve_many takes a list of questions; use retrieve for one question")
        method = method or self.method
        self._check_method(method)
        k = check_k(k)
        embeddings = run_blocking(self.embed_many, questions)  # not timed: the first call also loads the encoder
        return [self._retrieve(question, q, k, method) for question, q in zip(questions, embeddings)]

    async def aretrieve(self, question: str, k: int = 20, method: str | None = None) -> Retrieval:
        """``retrieve`` for asyncio code: the event loop runs other tasks while Neo4j answers."""
        return (await self.aretrieve_many([question], k=k, method=method))[0]

    async def aretrieve_many(self, questions: list[str], k: int = 20, method: str | None = None) -> list[Retrieval]:
        """``retrieve_many`` for asyncio code. The same pipeline runs in a greenlet on the calling
        thread, and each of its Neo4j reads is awaited on the async driver, so concurrent calls
        interleave at their reads (no thread per call). The encoder and the policy compute on a
        pool of one thread per core (``graphstore.async_reads.run_blocking``), not on the loop."""
        if self._reads is None:
            return await asyncio.to_thread(self.retrieve_many, questions, k, method)
        return await greenlet_spawn(self.retrieve_many, questions, k, method)

    def _retrieve(self, question: str, q: np.ndarray, k: int, method: str) -> Retrieval:
        start = time.perf_counter()
        policy = _RankOffTheLoop(self.policy) if method == "seeder" else None

        def search():
            return make_retriever(method, self.graph, self.settings_for(method), policy=policy).search(question, q, k)

        # Relation types upserted since this Retriever opened: K-hop through the procedures reads
        # their count on the way, so the check costs a round trip only where nothing read it; in
        # the rare call that finds new ones, the retrieval runs again with them.
        mark = self.graph.relation_reads
        try:
            found = search()
        except SeederError:
            self.graph.refresh()  # a dataset dropped meanwhile says so, not what failed because of it
            raise
        if self.graph.refresh(since=mark):
            found = search()
        nodes, triples = self._describe(found.ranking, {i for i, _ in found.seeds})
        return Retrieval(question, method, nodes, time.perf_counter() - start, found.considered, triples,
                         label=self.graph.label, id_property=self.graph.schema.id)

    def _describe(self, ranked: list[tuple[int, float]], seeds: set[int]) -> tuple[list[RetrievedNode], list]:
        """The ranked nodes described, and the relationships among them (one round trip)."""
        if not ranked:
            return [], []
        (types, names, texts, keys), triples = self.graph.describe_with_edges([i for i, _ in ranked])
        return [RetrievedNode(i, t, n, float(s), i in seeds, x, k)
                for (i, s), t, n, x, k in zip(ranked, types, names, texts, keys)], triples
