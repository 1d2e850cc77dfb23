"""One retrieval pipeline over two graph backends.

"Seed, then K-hop-with-filtering" is written once (``seed_and_expand``) and runs over any
``GraphBackend``:

* ``graphstore.live.LiveGraph`` — the dataset as it is in Neo4j now (Cypher); what ``query``,
  the API and the server use;
* ``MemoryGraph`` — an export of that dataset as arrays, with the in-memory reference K-hop
  (``retrieval.memory``, tested equal to the Cypher statements) and exact dense seeding; what
  ``extract``, ``eval`` and coverage use to process tens of thousands of questions. The full-text
  index, names and triples are read from the live graph it was exported from, when it has one.

Every retrieval method (``retrieval.base.GraphRetriever``) reads a graph only through this
protocol, so the same class ranks the same nodes on both backends.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.name_index import CANDIDATES, NameQuery
from seeder_dgl.retrieval.linking import EntityLinker, Mentions, mention_table
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, directed_induced_edges, khop_select
from seeder_dgl.retrieval.neighbourhood import EgoGraph, Neighbours, memory_best_neighbours, memory_ego_graph
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.retrieval.seeding import seed_linked
from seeder_dgl.settings import settings as environment
from seeder_dgl.subgraph.record import QuerySubgraph

Seeds = list[tuple[int, float]]
"""(node id, cos(q, v)) per seed, best first."""


class GraphBackend(Protocol):
    """What retrieval needs from a graph. The neighbourhoods PPR, PCST and beam search rank come
    from ``retrieval.neighbourhood.ego_graph`` / ``best_neighbours`` on any backend."""

    def check_ready(self) -> None:
        """Raise a one-line error when the dataset cannot be queried (missing, half-ingested)."""

    def dense_seeds(self, embedding: np.ndarray, k: int, exact: bool = False) -> Seeds:
        """The ``k`` nodes most similar to the question embedding."""

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = CANDIDATES,
                      words: NameQuery = NameQuery()) -> list[dict]:
        """Nodes whose names match the question's words, within a typo (as ``words`` puts them):
        dicts with id, name, text_score, similarity, type and degrees (per relation type)."""

    def khop_filter(self, embedding: np.ndarray, seeds: Seeds, budgets: list[int],
                    relation_scores: np.ndarray | None = None, with_features: bool = False) -> QuerySubgraph:
        """K-hop-with-filtering from ``seeds``: the best ``budgets[h]`` new nodes at hop h+1;
        ``relation_scores`` [hops, R] replace sim(q, r) hop by hop (a ``RelationPrior``);
        ``with_features``: a backend that can read the nodes' features with them (seeder-dgl's
        procedures) sets ``QuerySubgraph.features``."""

    def node_features(self, node_ids) -> tuple[np.ndarray, list, list]:
        """Embeddings [n, d] (rows in the order given), types and names of the nodes (SeedER, MMR)."""


@dataclass(frozen=True)
class RetrievalSettings:
    """How a question becomes a subgraph; subgraphs cached with other values are not reused."""

    seeds: int = 3
    """k0: seeds per question."""
    budgets: tuple[int, ...] = (50, 97)
    """b_h: nodes added at each hop; B = seeds + sum(budgets)."""
    exact_seeds: bool = False
    """Dense seeds by an exact scan instead of the vector index (live graphs; memory is always exact)."""
    seeding: str = "dense"
    """dense, fulltext or hybrid (retrieval.seeding)."""
    relation_prior: RelationPrior | None = None
    """The dataset's learned relation prior (``retrieval.relation_prior``): it replaces sim(q, r) in
    the K-hop score hop by hop; None: the paper's sim(q, r)."""
    linker: EntityLinker | None = None
    """The dataset's learned entity linker (``retrieval.linking``) for full-text and hybrid seeding;
    None: the hand-set one."""

    @property
    def budget(self) -> int:
        return self.seeds + sum(self.budgets)

    def describe(self) -> dict:
        """The settings as JSON values (cache manifests): the prior by its fingerprint, and only when
        there is one, so caches extracted without a prior keep their manifests' form."""
        out = {"seeds": self.seeds, "budgets": list(self.budgets), "exact_seeds": self.exact_seeds,
               "seeding": self.seeding}
        if self.relation_prior is not None:
            out["relation_prior"] = self.relation_prior.fingerprint
        if self.linker is not None and self.seeding != "dense":
            out["linker"] = self.linker.fingerprint
        return out

    def relation_scores(self, embedding: np.ndarray, question: str = "", names: Sequence[str] = (),
                        first_relations: np.ndarray | None = None) -> np.ndarray | None:
        """[hops, R] relation terms of the K-hop score for ``question`` (embedding ``embedding``, its
        linked seeds named ``names`` with the relation types ``first_relations``, None where not
        known), or None (sim(q, r))."""
        if self.relation_prior is None:
            return None
        return self.relation_prior.question_scores(question, embedding, names, hops=len(self.budgets),
                                                   first_relations=first_relations)

    def set_answer_types(self, sub: QuerySubgraph, embedding: np.ndarray, question: str = "",
                         names: Sequence[str] = ()) -> None:
        """Give ``sub`` the relation prior's answer types for ``question`` (its linked seeds named
        ``names``), when the prior has an answer-type head; the ranking multiplies them in."""
        prior = self.relation_prior
        if prior is None or prior.answer_type_weight is None:
            return
        sub.answer_types = prior.question_answer_types(question, embedding, names).astype(np.float32)
        sub.answer_type_names = tuple(prior.answer_type_names)


def parse_stored(text: str | None, parse, what: str, where: str, fix: str):
    """JSON kept as text ``where`` (a dataset's record, a trained retriever's file), parsed; None when
    there is none, a one-line error saying to ``fix`` it when it cannot be read."""
    if not text:
        return None
    try:
        return parse(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise SeederError(f"the {what} stored {where} is damaged ({exc}): {fix}") from None


def _stored(info, attribute: str, parse, what: str):
    """The JSON the dataset record keeps under ``attribute``, parsed (``parse_stored``)."""
    return parse_stored(getattr(info, attribute, None), parse, what, f"for {info.name!r}",
                        f"fit it again with `seeder-dgl extract {info.name} --refit-prior`")


def ready_prior(prior: RelationPrior, info) -> RelationPrior:
    """``prior`` as K-hop reads it on the dataset ``info`` describes: a template prior bound to the
    dataset's encoder, its columns in the dataset's current relation order."""
    if prior.reads_templates:
        prior = prior.bind_encoder(dataset_encoder(info.model))
    return prior.aligned(info.relation_types)


def ready_linker(linker: EntityLinker | None, prior: RelationPrior | None) -> EntityLinker | None:
    """``linker`` with the relation prior its features read, when they read one (None when it
    needs one and there is none)."""
    if linker is None or not linker.relation_features:
        return linker
    return linker.with_prior(prior) if prior is not None else None


def stored_relation_prior(graph) -> RelationPrior | None:
    """The relation prior fitted for ``graph``'s dataset (stored in its Neo4j record), ready for it
    (``ready_prior``); None when none was fitted."""
    info = graph.info
    prior = _stored(info, "relation_prior", RelationPrior.from_json, "relation prior")
    return None if prior is None else ready_prior(prior, info)


def stored_linker(graph, prior: RelationPrior | None = None) -> EntityLinker | None:
    """The entity linker fitted for ``graph``'s dataset (stored in its Neo4j record), with the
    stored relation prior its features read (``prior`` when given: the one K-hop reads too, so a
    question's template is embedded once); None when none was fitted (or it needs a prior and
    none is stored)."""
    linker = _stored(graph.info, "entity_linker", EntityLinker.from_json, "entity linker")
    if linker is None or not linker.relation_features:
        return linker
    return ready_linker(linker, prior if prior is not None else stored_relation_prior(graph))


def with_relation_prior(settings: RetrievalSettings, graph, wanted: bool, required: bool = True) -> RetrievalSettings:
    """``settings`` with the dataset's stored relation prior when its profile asks for one, and its
    stored entity linker when it seeds by names.

    No prior fitted yet (``extract`` fits it): a one-line error when ``required`` (a trained policy
    learned on subgraphs grown with it), else the paper's sim(q, r) (K-hop and the baselines right
    after ingest). No linker fitted: the hand-set one.
    """
    linking = settings.seeding != "dense" and settings.linker is None
    prior = stored_relation_prior(graph) if wanted or linking else None
    if linking:
        settings = replace(settings, linker=stored_linker(graph, prior))
    if not wanted:
        return settings
    if prior is None and not required:
        return settings
    if prior is None:
        name = graph.info.name
        raise SeederError(f"{name!r} follows a learned relation prior in this profile and none is fitted yet: "
                          f"run `seeder-dgl extract {name}` (it fits one on the training questions)")
    return replace(settings, relation_prior=prior)


def seed_and_expand(graph: GraphBackend, question: str, embedding: np.ndarray,
                    settings: RetrievalSettings, with_features: bool = False) -> tuple[Seeds, QuerySubgraph]:
    """The seeds of ``question`` and the K-hop-with-filtering subgraph grown from them (with the
    nodes' features where the backend reads them in the same call and ``with_features``)."""
    combined = getattr(graph, "exact_seeds_khop_filter", None)
    if settings.seeding == "dense" and settings.exact_seeds and combined is not None:
        # Exact dense seeds do not depend on the relation prior: seeding and K-hop go in one call.
        scores, names = settings.relation_scores(embedding, question, []), None
        seeds, sub = combined(embedding, settings.seeds, list(settings.budgets), relation_scores=scores,
                              with_features=with_features)
    else:
        seeds, names, relations = seed_linked(graph, question, embedding, settings.seeds, settings.seeding,
                                              exact=settings.exact_seeds, linker=settings.linker)
        scores = settings.relation_scores(embedding, question, names, relations)
        sub = graph.khop_filter(embedding, seeds, list(settings.budgets), relation_scores=scores,
                                with_features=with_features)
    if scores is not None:
        sub.relation_scores = scores.astype(np.float32)  # the policy's path feature reads them
    settings.set_answer_types(sub, embedding, question, [] if names is None else names)
    return seeds, sub


class PrefetchedNames:
    """A backend whose full-text hits for a batch of questions were read up front
    (``prefetch_linking``); everything else is the wrapped backend's."""

    def __init__(self, graph, hits: dict, mentions: dict | None = None):
        self._graph = graph
        self._hits = hits
        self._mentions = mentions or {}

    def __getattr__(self, name: str):
        return getattr(self._graph, name)

    def mention_table(self, question: str, hits: list[dict], linker: EntityLinker) -> Mentions | None:
        """The question's ``mention_table`` for ``linker``, made when the batch was prepared, as a copy
        the linker may fill in; None when it was made for other hits or another linker's words."""
        made = self._mentions.get((question, linker.name_query, linker.partial_names))
        if made is None or made[0] is not hits or made[1] is not linker.word_rates:
            return None
        return replace(made[2], features=made[2].features.copy())

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = CANDIDATES,
                      words: NameQuery = NameQuery()) -> list[dict]:
        found = self._hits.get((question, int(candidates), words))
        if found is not None and np.array_equal(found[0], embedding):
            return found[1]
        return self._graph.fulltext_hits(question, embedding, candidates, words)


NameHits = dict
"""(question, candidates, NameQuery) -> (embedding, full-text hits): names read ahead (``read_names``)."""


def read_names(graph: GraphBackend, questions: Sequence[str], embeddings: np.ndarray, words: NameQuery,
               candidates: int = CANDIDATES, readers: int | None = None,
               advance: Callable[[int], None] | None = None) -> NameHits:
    """The full-text hits of each distinct question, read by up to ``readers`` lookups at once
    (default ``SEEDER_NAME_READERS``); ``advance(n)`` is told of each finished question.

    A lookup waits on Neo4j's Lucene (fuzzy terms cost most of it: 20-30 ms for a question about
    a DBpedia title), so one at a time left a core idle: on MLPQ, 2 readers read 1.5 times as
    many questions a second as one, 4 twice as many (2 cores). The hits are the ones each question
    gets alone, whatever the order they finish in."""
    todo = {}
    for q, e in zip(questions, embeddings):
        todo.setdefault((q, int(candidates), words), e)  # a question asked twice is read once
    readers = max(1, min(environment().name_readers if readers is None else int(readers), len(todo)))

    def read(key):
        hits = graph.fulltext_hits(key[0], todo[key], key[1], key[2])
        if advance is not None:
            advance(1)
        return key, (np.array(todo[key], copy=True), hits)

    if readers <= 1:
        return dict(map(read, todo))
    with ThreadPoolExecutor(readers, thread_name_prefix="seeder-names") as pool:
        return dict(pool.map(read, todo))


def prefetch_linking(graph: GraphBackend, questions: Sequence[str], embeddings: np.ndarray,
                     settings: RetrievalSettings, hits: NameHits | None = None) -> GraphBackend:
    """``graph`` ready to ``seed_and_expand`` a batch of questions: their full-text hits read now
    (``read_names``; ``hits``: read ahead already, as ``extract`` does for its next shard while
    it expands this one), and the templates the linker will embed (each question with its
    best-matched name masked) embedded now in one batch, which the relation prior's template
    cache keeps. The relation prior reads
    the same template whenever the seed linked is that name, so it finds it there too; a template
    of other seeds is embedded when its question is expanded. One template at a time, the encoder
    took three quarters of ``extract`` (MetaQA, profiled); a second pass linking every question to
    batch the prior's templates as well saved less than the linking cost (``bench_extract.py``).
    The subgraphs are the ones each question alone gets (``tests/unit/test_prefetch_linking.py``),
    up to the last float bits of the relation terms: a batch pads its templates to one length."""
    if settings.seeding == "dense" or not len(questions):
        return graph
    linker = settings.linker or EntityLinker.default()
    words = linker.name_query
    hits = dict(hits or {})
    missing = [i for i, q in enumerate(questions) if (q, CANDIDATES, words) not in hits]
    if missing:
        hits.update(read_names(graph, [questions[i] for i in missing], np.asarray(embeddings)[missing], words))
    prior = linker.prior or settings.relation_prior  # one prior, one encoder: the dataset's (ensure_linking)
    mentions: dict = {}  # the linker reads each question's table again: made once (3 ms a MetaQA question)
    if prior is not None and prior.reads_templates and prior.bound:
        for q in dict.fromkeys(questions):
            found = hits.get((q, CANDIDATES, words))
            if found is not None:
                mentions[(q, words, linker.partial_names)] = (
                    found[1], linker.word_rates, mention_table(q, found[1], linker.word_rates,
                                                               partial=linker.partial_names))
        templates = {m.template() for _, _, m in mentions.values()} - {None}
        if templates:
            prior.features(sorted(templates))
    return PrefetchedNames(graph, hits, mentions)


@dataclass
class MemoryGraph:
    """A dataset as arrays (an export of the live graph, or arrays built in a test)."""

    arrays: GraphArrays
    node_emb: np.ndarray
    """float32 [N, d] (the dataset's node embeddings, unit length)."""
    rel_emb: np.ndarray
    """float32 [R, d] (relation-name embeddings)."""
    node_type: np.ndarray | None = None
    """int64 [N]: index into ``node_type_names`` (-1: no node with that id); None: types unknown."""
    node_type_names: list[str] | None = None
    live: object | None = None
    """The LiveGraph this was exported from: its full-text index serves text seeding."""
    _linked: dict = field(default_factory=dict, init=False, repr=False)
    """(question, candidates, NameQuery) -> (embedding, full-text hits) read by ``link_names``."""

    @classmethod
    def from_export(cls, export, live=None) -> "MemoryGraph":
        """From ``graphstore.export.GraphExport`` (relationships of unknown type are left out)."""
        keep = np.asarray(export.rel) >= 0
        arrays = GraphArrays.from_arrays(export.num_nodes, export.src[keep], export.dst[keep], export.rel[keep])
        return cls(arrays, export.node_emb, np.asarray(export.relation_emb, dtype=np.float32),
                   np.asarray(export.node_type, dtype=np.int64), list(export.node_type_names), live)

    @property
    def info(self):
        if self.live is None:
            raise SeederError("this in-memory graph was not exported from a live dataset")
        return self.live.info

    def check_ready(self) -> None:
        if self.live is not None:
            self.live.check_ready()

    def dense_seeds(self, embedding: np.ndarray, k: int, exact: bool = True) -> Seeds:
        ids, sims = dense_topk(self.node_emb, embedding, k)
        return list(zip(ids.tolist(), sims.tolist()))

    def fulltext_hits(self, question: str, embedding: np.ndarray, candidates: int = CANDIDATES,
                      words: NameQuery = NameQuery()) -> list[dict]:
        found = self._linked.get((question, int(candidates), words))
        if found is not None and np.array_equal(found[0], embedding):
            return found[1]
        if self.live is None:
            raise SeederError("full-text seeding needs the live graph's name index: "
                              "build the in-memory graph with MemoryGraph.from_export(export, live)")
        return self.live.fulltext_hits(question, embedding, candidates, words)

    def link_names(self, questions: Sequence[str], embeddings: np.ndarray, candidates: int = CANDIDATES,
                   words: NameQuery = NameQuery(),
                   progress: bool = False) -> None:
        """Read the full-text hits of every question from the live name index now, and keep them.

        ``eval`` runs several methods on the same questions: with this, each question costs one
        Neo4j query instead of one per method, and no method's latency includes it (as none
        includes embedding the question). Hits are reused only for the same embedding, since they
        carry cos(q, v).
        """
        with Progress(TextColumn("full-text names in Neo4j"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=Console(stderr=True), disable=not progress, transient=True) as bars:
            task = bars.add_task("names", total=len(set(questions)))
            self._linked.update(read_names(self, questions, embeddings, words, candidates,
                                           advance=lambda n: bars.advance(task, n)))

    def khop_filter(self, embedding: np.ndarray, seeds: Seeds, budgets: Sequence[int],
                    relation_scores: np.ndarray | None = None, query_id: int = -1,
                    with_features: bool = False) -> QuerySubgraph:
        # with_features: node_features is a lookup in the arrays here, so nothing is read ahead.
        sel = khop_select(self.arrays, self.node_emb, self.rel_emb, embedding, [s for s, _ in seeds], list(budgets),
                          seed_scores=[v for _, v in seeds], relation_scores=relation_scores)
        src, dst, rel, direction = directed_induced_edges(self.arrays, sel.node_ids)
        return QuerySubgraph(query_id=query_id, node_ids=sel.node_ids, hop=sel.hop, score=sel.score.astype(np.float32),
                             src=src, dst=dst, rel=rel, direction=direction, exact_score=sel.score)

    def ego_graph(self, embedding: np.ndarray, seeds: Seeds, hops: int = 2, max_nodes: int = 2000) -> EgoGraph:
        return memory_ego_graph(self.arrays, self.node_emb, self.rel_emb, embedding, seeds, hops, max_nodes)

    def best_neighbours(self, embedding: np.ndarray, frontier: Seeds, exclude: Sequence[int], limit: int,
                        node_weight: float = 1.0, relation_weight: float = 0.0) -> Neighbours:
        return memory_best_neighbours(self.arrays, self.node_emb, self.rel_emb, embedding, frontier, exclude, limit,
                                      node_weight, relation_weight)

    def node_features(self, node_ids) -> tuple[np.ndarray, list, list]:
        """Embeddings [n, d] and type names of the nodes (None where unknown); names are not
        exported, so they are empty strings."""
        ids = np.asarray(node_ids, dtype=np.int64).reshape(-1)
        if self.node_type is None:
            types = [None] * ids.shape[0]
        else:
            names = self.node_type_names or []
            types = [names[t] if 0 <= t < len(names) else None for t in self.node_type[ids].tolist()]
        return np.asarray(self.node_emb[ids], dtype=np.float32), types, [""] * ids.shape[0]

    def type_table(self, policy) -> np.ndarray | None:
        """Type ids of every node in ``policy``'s (``LoadedPolicy``) type vocabulary, or None."""
        prep = getattr(policy, "preprocessing", None)
        if prep is None or prep.node_type_names is None or self.node_type is None:
            return None
        return prep.type_table(self.node_type, self.node_type_names or [])
