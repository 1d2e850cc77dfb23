"""`seeder-dgl extract`: K-hop-with-filtering subgraphs of a question split.

Each query is seeded and expanded by ``retrieval.pipeline.seed_and_expand`` (the pipeline
``query`` serves), over the live graph or its in-memory export, labelled with its gold answers,
and written to the split's shard cache. A killed run resumes at the first shard
that is not on disk; a run with other settings refuses to mix with the cache it finds.
"""
from __future__ import annotations

import difflib
import json
import random
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from loaders.kg import Query
from loaders.perturb import PARTIAL_NAMES_MIX, TYPED_MIX, typed_variant
from loaders.synonyms import WORD as SYNONYM_WORD, swap_synonyms, synonym_options
from seeder_dgl.datasets import DatasetContext, RetrievalDefaults, get_spec
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore import lease
from seeder_dgl.graphstore.connection import default_database, open_driver
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.fileio import atomic_write_text
from seeder_dgl.retrieval.link_training import FIT_HOPS, FoldPriors, fit_linking, topic_names
from seeder_dgl.retrieval.linking import EntityLinker, question_template
from seeder_dgl.retrieval.pipeline import (
    GraphBackend,
    MemoryGraph,
    RetrievalSettings,
    prefetch_linking,
    read_names,
    seed_and_expand,
    stored_linker,
    stored_relation_prior,
    with_relation_prior,
)
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.retrieval.seeding import check_mode
from seeder_dgl.subgraph import cache
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.validation import check_seeds


def label_subgraph(sub: QuerySubgraph, query: Query) -> QuerySubgraph:
    answers = set(int(a) for a in query.answers)
    sub.query_id = int(query.id)
    sub.labels = np.isin(sub.node_ids, np.fromiter(answers, dtype=np.int64, count=len(answers)))
    sub.num_answers = len(answers)
    return sub


def typed_queries(graph, queries: list[Query], share: float, seed: int = 0, mix=TYPED_MIX) -> list[Query]:
    """``queries`` with a seeded ``share`` of them typed as people do (``loaders.perturb.typed_variant``:
    lower case, a typo in the topic's name, no punctuation, random case), drawn per question id, so
    the same questions are typed the same way in every run."""

    live = getattr(graph, "live", None) or graph
    topics = sorted({int(t) for q in queries for t in q.topic})
    names: dict[int, str] = {}
    if topics and hasattr(live, "describe"):
        names = dict(zip(topics, live.describe(topics)[1]))
    out = []
    for q in queries:
        text, kind = typed_variant(q.text, str(q.id), share, seed, [names[t] for t in q.topic if t in names], mix)
        out.append(replace(q, text=text) if kind else q)
    return out


REWORD_MIN_QUESTIONS = 5
"""Where a dataset does not mark its questions' topics, a word is reworded only if at least this
many training questions use it: the questions' own words recur, most names' words do not."""


def reworded_queries(graph, queries: list[Query], share: float, word_share: float, seed: int = 0,
                     embed=None) -> list[Query]:
    """``queries`` with a seeded ``share`` of them reworded: each content word swapped, with
    probability ``word_share``, for a WordNet synonym no training question uses
    (``loaders.synonyms``; with ``embed``, one the encoder puts near the word), so the policy
    trains on wordings beyond the questions' templates as the relation prior does. The topic's
    name stays as written where the dataset marks it; drawn per question id, so the same questions
    are reworded the same way in every run."""
    if share <= 0 or word_share <= 0 or not queries:
        return list(queries)
    live = getattr(graph, "live", None) or graph
    names = topic_names(live, queries) if any(q.topic for q in queries) and hasattr(live, "describe") \
        else [[] for _ in queries]
    lowered = [q.text.lower() for q in queries]
    options = synonym_options(lowered, embed)
    counts = Counter(word for text in lowered for word in set(SYNONYM_WORD.findall(text)))
    frequent = {w: o for w, o in options.items() if counts[w] >= REWORD_MIN_QUESTIONS}
    out = []
    for q, text, found in zip(queries, lowered, names):
        rng = random.Random(f"reworded:{seed}:{q.id}")
        if rng.random() >= share:
            out.append(q)
            continue
        keep = [(m.start(), m.end()) for n in found if n for m in re.finditer(re.escape(n.lower()), text)]
        new = swap_synonyms(text, options if q.topic else frequent, word_share, rng, keep)
        out.append(replace(q, text=_recased(q.text, text, new)) if new != text else q)
    return out


def _recased(original: str, lowered: str, new: str) -> str:
    """``new`` (``lowered`` with words swapped) with the unswapped parts in ``original``'s case: a
    topic's name keeps its capitals."""
    if len(original) != len(lowered):  # lower() changed a length (rare letters): the lower-case text
        return new
    out = []
    for tag, a0, a1, b0, b1 in difflib.SequenceMatcher(None, lowered, new, autojunk=False).get_opcodes():
        out.append(original[a0:a1] if tag == "equal" else new[b0:b1])
    return "".join(out)


def fold_settings(settings: RetrievalSettings, fold_priors: FoldPriors) -> list[RetrievalSettings]:
    """``settings`` once per fold, K-hop (and the linker's relation features) reading that fold's prior."""
    out = []
    for prior in fold_priors.priors:
        linker = settings.linker
        if linker is not None and linker.prior is not None:
            linker = linker.with_prior(prior)
        out.append(replace(settings, relation_prior=prior, linker=linker))
    return out


def query_folds(graph, queries: list[Query], fold_priors: FoldPriors) -> list[int]:
    """Each query's wording fold: the one the fit gave it, else its template's (``wording_fold``)."""
    names = topic_names(graph, queries) if any(q.topic for q in queries) else [[] for _ in queries]
    return [fold_priors.fold(q.id, question_template(q.text, n) if n else None) for q, n in zip(queries, names)]


def extract_split(graph: GraphBackend, queries: list[Query], query_emb: np.ndarray, folder: Path,
                  settings: RetrievalSettings, shard_size: int = 256, progress: bool = True,
                  overwrite: bool = False, typed: float = 0.0, fold_priors: FoldPriors | None = None,
                  folds: list[int] | None = None, reworded: float = 0.0) -> dict:
    """Extract and cache every query's subgraph; returns a summary (counts, coverage, seconds).
    ``typed``: the share of ``queries`` typed as people do (``typed_queries``), ``reworded``: the share
    reworded with synonyms (``reworded_queries``), both recorded with the cache.
    ``fold_priors`` and ``folds`` (one per query): each query's K-hop reads the prior of its wording's
    fold instead of ``settings``' (training subgraphs, ``FoldPriors``)."""
    folder = Path(folder)
    if len(queries) != len(query_emb):
        raise SeederError(f"{len(queries)} queries but {len(query_emb)} query embeddings")
    wanted = {"dataset": graph.info.name, "settings": settings.describe(),
              "num_queries": len(queries), "shard_size": shard_size,
              "num_shards": (len(queries) + shard_size - 1) // shard_size,
              "query_ids_head": [int(q.id) for q in queries[:5]],
              "edge_directions": True}  # subgraphs cached before directions were kept lack them
    if typed:
        wanted["typed"] = typed
    if reworded:
        wanted["reworded"] = reworded
    per_fold = None
    if fold_priors is not None:
        if folds is None or len(folds) != len(queries):
            raise SeederError(f"{len(queries)} queries but {0 if folds is None else len(folds)} wording folds")
        wanted["prior_folds"] = fold_priors.folds
        per_fold = fold_settings(settings, fold_priors)
    manifest = folder / "manifest.json"
    if manifest.exists() and not overwrite:
        found = json.loads(manifest.read_text())
        keys = set(wanted) | {"typed", "reworded", "prior_folds"}  # a cache with them is not one without them
        if {k: found.get(k) for k in keys} != {k: wanted.get(k) for k in keys}:
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
    shards = [(k * shard_size, min((k + 1) * shard_size, len(queries))) for k in range(wanted["num_shards"])]
    todo = [k for k in range(len(shards)) if not cache.shard_path(folder, k).exists()]
    words = (settings.linker or EntityLinker.default()).name_query  # every fold's linker reads names alike

    def names_of(k):
        lo, hi = shards[k]
        if settings.seeding == "dense":
            return {}
        return read_names(graph, [q.text for q in queries[lo:hi]], query_emb[lo:hi], words)

    # The next shard's names are read from Neo4j while this one is expanded: the lookups wait on
    # the server's Lucene, the expansion on Python, so the two overlap on two cores.
    with Progress(*columns, disable=not progress) as bars, ThreadPoolExecutor(1, "seeder-next-shard") as ahead:
        task = bars.add_task(f"subgraphs of {graph.info.name}", total=len(queries), info="")
        coming = {todo[0]: ahead.submit(names_of, todo[0])} if todo else {}
        for shard, (lo, hi) in enumerate(shards):
            path = cache.shard_path(folder, shard)
            if shard not in coming:
                records, _ = cache.load_shard(path)  # resumed: count it, do not redo it
                done_before += len(records)
            else:
                names = coming.pop(shard).result()
                later = [k for k in todo if k > shard]
                if later:
                    coming[later[0]] = ahead.submit(names_of, later[0])
                records = [None] * (hi - lo)
                groups = [(settings, list(range(lo, hi)))] if per_fold is None else \
                    [(per_fold[k], [i for i in range(lo, hi) if folds[i] == k]) for k in range(len(per_fold))]
                for fold, members in groups:
                    if not members:
                        continue
                    batch = prefetch_linking(graph, [queries[i].text for i in members], query_emb[members], fold,
                                             names)
                    for i in members:
                        records[i - lo] = label_subgraph(seed_and_expand(batch, queries[i].text, query_emb[i], fold)[1],
                                                         queries[i])
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


FOLD_FILE = "prior-folds.json"
"""The dataset's cross-fitted relation priors (``FoldPriors``), in its cache folder."""


def load_fold_priors(path: Path, prior: RelationPrior | None, encoder, relation_types) -> FoldPriors | None:
    """The fold priors at ``path`` when they were cross-fitted with ``prior`` (by fingerprint), bound
    and aligned like it; None when there are none, they are damaged, or they belong to another prior."""
    if prior is None or not Path(path).is_file():
        return None
    try:
        found = FoldPriors.from_json(Path(path).read_text(encoding="utf-8"))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None  # refitted with the prior: nothing of the user's is lost
    if found.full != prior.fingerprint:
        return None
    found.priors = [p.bind_encoder(encoder).aligned(relation_types) for p in found.priors]
    return found


@dataclass(frozen=True)
class LinkerFit:
    """How a retrieval profile has the entity linker fitted and its training questions typed. One
    reading of the profile for ``extract`` and ``tune``: a linker ``tune`` stores is then one that
    ``extract`` finds fitted its way, and does not fit again."""

    typed: bool
    """Fitted on a typed variant of each training question too (``retrieval.link_training``)."""
    partial_names: bool
    """Names also linked by their last word; the typed variants then name people by their surname."""
    synonyms: float = 0.0
    """Share of words swapped for synonyms in the relation prior's reworded template copies."""

    @classmethod
    def of(cls, profile: RetrievalDefaults) -> "LinkerFit":
        return cls(typed=profile.typed_questions > 0, partial_names=profile.partial_names,
                   synonyms=profile.prior_synonyms)

    @property
    def mix(self):
        """The ``loaders.perturb`` mix the training questions are typed with."""
        return PARTIAL_NAMES_MIX if self.partial_names else TYPED_MIX


def prior_synonyms(prior: RelationPrior) -> float:
    """The share of words the prior's reworded template copies swapped (0 for a prior fitted without)."""
    return float(prior.stats.get("synonyms") or 0.0)


def ensure_linking(driver, graph, queries: list[Query], encoder, settings: RetrievalSettings, *, with_prior: bool,
                   fit: LinkerFit, refit: bool = False, max_questions: int = 5000,
                   progress: bool = True, folds: int = 0, fold_file: Path | None = None) -> RetrievalSettings:
    """``settings`` with the dataset's entity linker and (``with_prior``: K-hop follows it) relation
    prior: the ones stored in its record, else (or with ``refit``) both fitted the profile's way
    (``fit``) on up to ``max_questions`` of the training ``queries`` and stored there for every
    later command.

    ``graph`` is a ``MemoryGraph`` exported from the live dataset (the path labels walk its arrays).

    With ``folds`` > 1 (and ``with_prior``) the prior is also cross-fitted by wording into
    ``fold_file`` (``FoldPriors``); a stored prior without fold priors of its own is fitted again.
    A stored linker that links names otherwise than ``fit.partial_names`` is fitted again, and so are
    both where the stored prior's templates were reworded otherwise than ``fit.synonyms``.
    """

    prior = None if refit else stored_relation_prior(graph)
    linker = None if refit else stored_linker(graph, prior)  # one prior object: one template cache
    folds = folds if with_prior and fold_file is not None else 0
    if linker is not None and linker.partial_names != fit.partial_names:
        linker = None  # the profile links names otherwise: fit again
    if with_prior and prior is not None and prior_synonyms(prior) != fit.synonyms:
        prior = linker = None  # the profile rewords the prior's templates otherwise: fit again
    if linker is not None and (prior is not None or not with_prior):
        if folds < 2 or load_fold_priors(fold_file, prior, encoder, graph.info.relation_types) is not None:
            return replace(settings, linker=linker, relation_prior=prior if with_prior else None)
    lease.check_free(driver, graph.info.name, "extract --refit-prior", default_database())
    fitted = fit_linking(graph, queries, lambda texts: encoder.encode(texts, show_progress=False),
                         encode_tokens=encoder.encode_query_tokens, hops=max(len(settings.budgets), FIT_HOPS),
                         require_prior=with_prior, typed=fit.typed, max_questions=max_questions, progress=progress,
                         folds=folds, partial_names=fit.partial_names, synonyms=fit.synonyms)
    if fitted.fold_priors is not None:
        atomic_write_text(fold_file, fitted.fold_priors.to_json())  # before the record: never a record without its folds
    linker_text = fitted.linker.to_json()
    prior_text = fitted.prior.to_json() if fitted.prior is not None else None
    lease.write_record(driver, graph.info.name, "extract --refit-prior", "dataset/set_linking",
                       "storing the entity linker and relation prior", default_database(), linker=linker_text,
                       prior=prior_text)
    # Exactly what later commands read: the stored JSON, embedding templates as live queries do.
    prior = None
    if prior_text is not None:
        prior = RelationPrior.from_json(prior_text).bind_encoder(encoder).aligned(graph.info.relation_types)
    linker = EntityLinker.from_json(linker_text)
    if linker.relation_features:
        linker = linker.with_prior(prior)
    return replace(settings, linker=linker, relation_prior=prior if with_prior else None)


def extract_dataset(dataset: str, *, splits: list[str], source: str | None = None, seeds: int | None = None,
                    budgets: tuple[int, ...] | None = None, profile: str | None = None, seeding: str | None = None,
                    limit: int | None = None, sample: int | None = None, overwrite: bool = False,
                    engine: str = "cypher", questions: str | None = None, refit_prior: bool = False,
                    console) -> None:
    """`seeder-dgl extract`: the subgraphs of each of ``splits`` into the dataset's cache, with the
    profile's settings unless given; the entity linker and relation prior the dataset's record
    holds, fitted on its training questions first where it has none (or ``refit_prior``)."""
    spec = get_spec(dataset)
    ds = DatasetContext.open(dataset, profile)
    defaults = ds.retrieval
    settings = RetrievalSettings(seeds=defaults.seeds if seeds is None else check_seeds(seeds),
                                  budgets=budgets or defaults.budgets,
                                  seeding=check_mode(seeding or defaults.seeding))
    with console.status(f"Loading {dataset} questions..."):
        qa = spec.load_questions(questions or source, None)
    unknown = [s for s in splits if s not in qa.splits]
    if unknown:
        raise SeederError(f"{dataset} has no question split {unknown[0]!r}: choose from {', '.join(qa.splits)}")
    with open_driver() as driver:
        graph = LiveGraph(driver, dataset)
        encoder = dataset_encoder(graph.info.model)  # questions in the space of the nodes
        if engine == "memory":
            graph = MemoryGraph.from_export(export_graph(driver, dataset, ds.export_dir), graph)
            settings = replace(settings, exact_seeds=True)  # seeding in memory is an exact scan
        if defaults.relation_prior or settings.seeding != "dense":
            settings = linking_settings(driver, graph, ds, qa, encoder, settings, refit_prior, console)
        for name in splits:
            queries = qa.sample(name, sample)
            queries = queries[:limit] if limit else queries
            without = sum(1 for q in queries if not q.answers)
            queries = [q for q in queries if q.answers]  # nothing to learn from or score without an answer
            if without:
                console.print(f"{name}: {without:,} questions have no answer in the graph and are left out")
            if not queries:
                raise SeederError(f"{dataset} has no {name} question with an answer in the graph")
            typed = defaults.typed_questions if name == "train" else 0.0
            fold_priors = folds = None
            if name == "train" and defaults.prior_folds > 1 and settings.relation_prior is not None:
                fold_priors = load_fold_priors(ds.cache_dir / FOLD_FILE, settings.relation_prior, encoder,
                                               graph.info.relation_types)
                if fold_priors is None:
                    raise SeederError(f"{dataset}'s relation prior has no fold priors to extract training subgraphs "
                                      f"with: run `seeder-dgl extract {dataset} --refit-prior`")
                if fold_priors:
                    folds = query_folds(graph, queries, fold_priors)  # by each question as written
                else:
                    fold_priors = None  # too few wordings to cross-fit: the full prior
            reworded = defaults.reworded_questions * (defaults.prior_synonyms > 0) if name == "train" else 0.0
            if reworded:  # before typing: a reworded question may then be typed too
                queries = reworded_queries(graph, queries, reworded, defaults.prior_synonyms,
                                           embed=lambda texts: encoder.encode(texts, show_progress=False))
            if typed:
                queries = typed_queries(graph, queries, typed, mix=LinkerFit.of(defaults).mix)
            embs = encoder.encode([q.text for q in queries], show_progress=False)
            folder = ds.subgraph_dir(name)
            summary = extract_split(graph, queries, embs, folder, settings, overwrite=overwrite, typed=typed,
                                    fold_priors=fold_priors, folds=folds, reworded=reworded)
            console.print(f"{name}: {summary['num_queries']:,} subgraphs of ~{summary['mean_nodes']:.0f} nodes, "
                          f"Hit@any {summary['subgraph_hit_any']:.3f}, {summary['seconds']:.1f} s -> {folder}")


def linking_settings(driver, graph, ds, qa, encoder, settings: RetrievalSettings, refit: bool,
                     console) -> RetrievalSettings:
    """``settings`` with the dataset's entity linker and relation prior, fitted on its training
    questions when it has none (or ``refit``)."""
    wanted = ds.retrieval.relation_prior
    if "train" not in qa.splits:
        if wanted:
            raise SeederError(f"{ds.name}'s profile {ds.profile!r} learns which relations to follow from training "
                              "questions, and it has none: give questions a train split, or use --profile paper")
        console.print(f"[yellow]note:[/] {ds.name} has no training questions: names are linked by hand-set weights")
        return with_relation_prior(settings, graph, False)
    memory = graph if isinstance(graph, MemoryGraph) else MemoryGraph.from_export(
        export_graph(driver, ds.name, ds.export_dir), graph)
    settings = ensure_linking(driver, memory, qa.split("train"), encoder, settings, with_prior=wanted,
                              fit=LinkerFit.of(ds.retrieval), refit=refit, folds=ds.retrieval.prior_folds,
                              fold_file=ds.cache_dir / FOLD_FILE)
    linker = settings.linker
    console.print(f"entity linker (the dataset record's, fitted on {linker.stats.get('questions', '?')} training "
                  f"questions and {linker.stats.get('typed_variants', 0)} typed variants; topic among its "
                  f"candidates for {linker.stats.get('topic_in_candidates', 0):.3f})"
                  + ("; relation prior: K-hop follows it" if settings.relation_prior is not None else ""))
    return settings
