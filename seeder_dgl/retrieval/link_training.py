"""Fitting a dataset's entity linker and relation prior on its training questions, together.

Both learn from the same thing: which node a training question is about (its topic) and which
relations lead from there to its answers. The topic is the one the dataset marks (MetaQA's
[brackets], a ``topic`` column) or else the candidate whose relation paths explain the answers
best (``seed_paths``' F1), among the ones the question names best. The steps:

1. each question and a typed variant of it (``loaders.perturb``: lower case, a typo in the
   topic's name, no punctuation, random case) are embedded and their candidates read from the
   name index;
2. the topic and its span in each question are found, and from the spans which words are the
   question's own rather than names' (``word_rates``);
3. the relation prior is fitted on the templates (the topic's span masked) of both variants, with
   the relation paths from the topic as labels;
4. the linker is fitted on both variants' candidates, with the prior's hop-1 expectations among
   its features.

So the same linker and prior serve questions as written and as typed.
"""
from __future__ import annotations

import json
import random
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from loaders.kg import Query
from loaders.perturb import PARTIAL_NAMES_MIX, TYPED_MIX, perturb
from loaders.synonyms import synonym_copies
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.name_index import CANDIDATES, NameQuery
from seeder_dgl.retrieval.linking import (
    EntityLinker,
    JOINED_NAME,
    LINKER_STEPS,
    MASKED,
    PLACEHOLDER,
    LinkExample,
    Mentions,
    add_relation_features,
    fit_linker,
    mention_table,
    question_template,
    word_rates,
    wording_key,
)
from seeder_dgl.retrieval.pipeline import read_names
from seeder_dgl.retrieval.relation_prior import (
    TEMPLATE_PRIOR_STEPS,
    TOKEN_PRIOR_STEPS,
    RelationPrior,
    answer_mask,
    answer_type_rows,
    fit_answer_types,
    fit_relation_prior,
    fit_token_prior,
    path_relations,
    seed_paths,
    topic_positions,
)
from seeder_dgl.retrieval.spelling import TemplateWords
from seeder_dgl.threads import available_cores

PATH_CANDIDATES = 4
"""Candidates per question whose relation paths are searched when the dataset marks no topic."""
MIN_LINK_QUESTIONS = 20
"""Training questions with a known topic needed to fit a linker."""
PRIOR_QUESTIONS = 20000
"""Training questions the relation prior reads at most (``fit_linking``). Its reading of wordings it
has not seen is what the fit's sample size buys: on MLPQ, 5,000 of its 12,691 training templates read
the validation questions' second hop right for 0.831, all of them for 0.869 (0.620 against 0.692
where no training question has the validation question's wording)."""


MIN_FOLD_TEMPLATES = 20
"""Training templates a fold prior needs (as the full prior does)."""


def wording_fold(template: str, folds: int) -> int:
    """The fold of a question's wording: its template (topic masked) with only its letters and
    digits, hashed. Questions worded alike fall in one fold, typed variants with their question."""
    return zlib.crc32(wording_key(template, ()).encode("utf-8")) % folds


@dataclass
class FoldPriors:
    """Relation priors cross-fitted by wording, for the policy's training subgraphs.

    ``priors[k]`` was fitted like the dataset's prior (``full``, its fingerprint) on the training
    templates of every fold but ``k``; a training question in fold ``k`` is extracted with it. So
    the relation terms the policy learns from are read from wordings the prior has not seen, as
    the questions it will be asked are, and the policy learns how far to trust them instead of
    learning that they are always right (on its training questions the full prior all but is).
    ``fold_of``: the fold of every training question the fit read (by its id); ``wording_fold``
    for the others. No ``priors``: the questions had too few wordings to cross-fit (every fold
    needs some, and the others ``MIN_FOLD_TEMPLATES``), and the full prior serves."""

    priors: list[RelationPrior]
    fold_of: dict[int, int]
    full: str

    @property
    def folds(self) -> int:
        return len(self.priors)

    def __bool__(self) -> bool:
        return bool(self.priors)

    def fold(self, query_id: int, template: str | None) -> int:
        found = self.fold_of.get(int(query_id))
        if found is not None:
            return found
        return wording_fold(template, self.folds) if template else int(query_id) % self.folds

    def to_json(self) -> str:
        return json.dumps({"full": self.full, "fold_of": [[int(k), int(v)] for k, v in sorted(self.fold_of.items())],
                           "priors": [p.to_json() for p in self.priors]})

    @classmethod
    def from_json(cls, text: str) -> "FoldPriors":
        raw = json.loads(text)
        priors = [RelationPrior.from_json(p) for p in raw["priors"]]
        fold_of = {int(k): int(v) for k, v in raw["fold_of"]}
        if len(priors) == 1 or any(not 0 <= v < len(priors) for v in fold_of.values()):
            raise ValueError(f"{len(priors)} fold priors for folds {sorted(set(fold_of.values()))}")
        return cls(priors, fold_of, str(raw["full"]))


@dataclass
class LinkingFit:
    """What ``fit_linking`` fitted, and how."""

    linker: EntityLinker
    prior: RelationPrior | None
    stats: dict = field(default_factory=dict)
    fold_priors: FoldPriors | None = None
    """With ``fit_linking(folds=K)``: the prior cross-fitted by wording (``FoldPriors``)."""


@dataclass
class _Variant:
    query: Query
    text: str
    kind: str
    hits: list[dict] = field(default_factory=list)
    topic: list[int] = field(default_factory=list)
    topic_span: tuple[int, int] | None = None
    """Where the question names its topic (the best-matched topic candidate's span)."""
    mentions: Mentions | None = None

    def gold(self) -> np.ndarray:
        return np.isin(np.asarray([h["id"] for h in self.mentions.hits], dtype=np.int64), self.topic)

    def span_text(self) -> str | None:
        return None if self.topic_span is None else self.text[self.topic_span[0]:self.topic_span[1]]


def _bars(progress: bool):
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    disable=not progress, transient=True)


def find_topic(graph, variant: _Variant, hops: int, partial: bool = False) -> None:
    """The topic of a question: the node(s) the dataset marks, else the candidates (the
    ``PATH_CANDIDATES`` best by lexical match) whose relation paths explain the answers best;
    and its span, where the question names it."""
    m = mention_table(variant.text, variant.hits, keep=None, partial=partial)
    ids = [int(h["id"]) for h in m.hits]
    if variant.query.topic:
        variant.topic = sorted(int(t) for t in variant.query.topic)
    elif ids:
        is_answer = answer_mask(graph.arrays.num_nodes, variant.query.answers)
        scored: dict[int, float] = {}
        for node in ids[:PATH_CANDIDATES]:
            if node not in scored:
                scored[node] = seed_paths(graph.arrays, node, is_answer, int(is_answer.sum()), hops)[0]
        best = max(scored.values())
        if best > 0:
            variant.topic = sorted(n for n, f1 in scored.items() if f1 >= best - 1e-12)
    _set_topic_span(variant, m)


def _set_topic_span(variant: _Variant, m: Mentions) -> None:
    """The span of the first (best-matched) candidate that is the topic."""
    for hit, span in zip(m.hits, m.spans):
        if int(hit["id"]) in variant.topic and span != (0, 0):
            variant.topic_span = span
            return


FIT_HOPS = 3
"""Fewest hops a topic's relation paths are followed when fitting: the deepest setting ``tune``
tries, so the linker and prior fitted by ``tune`` and by ``extract --refit-prior`` are the same
whichever setting was chosen (a prior of more hops serves a shallower expansion)."""


def fit_linking(graph, queries: Sequence[Query], encode: Callable[[list[str]], np.ndarray], *, hops: int,
                encode_tokens: Callable[[list[str]], tuple[np.ndarray, list[np.ndarray], list]] | None = None,
                require_prior: bool = False, typed: bool = True, max_questions: int = 5000,
                max_prior_questions: int = PRIOR_QUESTIONS, seed: int = 0, progress: bool = True,
                folds: int = 0, partial_names: bool = False, synonyms: float = 0.0) -> LinkingFit:
    """Fit the relation prior for ``hops`` hops and the linker on up to ``max_questions`` of the
    training ``queries`` and, with ``typed``, a typed variant of each. The prior also reads up to
    ``max_prior_questions`` in all where the dataset marks the topic (``_marked_rows``).

    Where too few questions reach an answer from their topic to fit a prior, the linker is fitted
    without the relation features, unless ``require_prior`` (then a one-line error). ``graph`` is a
    ``retrieval.pipeline.MemoryGraph`` exported from the live dataset: candidates come from its name
    index, relation paths from its arrays. ``encode``: the dataset's encoder for questions and
    templates (``TextEncoder.encode``). With ``encode_tokens`` (``TextEncoder.encode_query_tokens``)
    the prior reads the templates' tokens too (``fit_token_prior``), else their embeddings only.
    The prior is returned bound to them, and the linker with it.

    With ``folds`` > 1 the prior is also cross-fitted by wording (``FoldPriors``), and the linker's
    relation features of each training question are read from the fold prior that did not see its
    wording, as they will be for questions worded some other way.

    With ``partial_names`` names are also matched by their last word (``mention_table(partial=True)``)
    and the typed variants are drawn from ``PARTIAL_NAMES_MIX`` (a person named by the surname).

    With ``synonyms`` > 0 the prior also reads a copy of each template with that share of its words
    swapped for WordNet synonyms that no template uses and ``encode`` puts near the word
    (``loaders.synonyms.synonym_copies``).
    """
    mix = PARTIAL_NAMES_MIX if partial_names else TYPED_MIX
    queries = [q for q in queries if q.answers]
    every = queries
    if len(queries) > max_questions:
        pick = np.sort(np.random.default_rng(seed).choice(len(queries), size=max_questions, replace=False))
        queries = [queries[i] for i in pick]
    clean = [_Variant(q, q.text, "") for q in queries]
    _read_hits(graph, clean, encode, "candidates of the training questions", progress)
    with _bars(progress) as bars:
        task = bars.add_task("topics of the training questions", total=len(clean))
        for v in clean:
            find_topic(graph, v, hops, partial_names)
            bars.advance(task)
    with_topic = [v for v in clean if v.topic]
    if len(with_topic) < MIN_LINK_QUESTIONS:
        raise SeederError(f"only {len(with_topic)} of {len(clean)} training questions have a topic entity whose "
                          f"relations reach an answer within {hops} hops: too few to learn linking from")
    # Which words are the questions' own: then the candidates as retrieval reads them, those
    # words asked of the name index exactly (EntityLinker.plain_words).
    rates = word_rates([v.text for v in clean], [v.topic_span for v in clean])
    names = [str(h.get("name") or "") for v in clean for h in v.hits]
    joined = round(sum(1 for n in names if JOINED_NAME.search(n)) / max(len(names), 1), 4)
    words = EntityLinker(np.zeros(0), np.ones(0), np.zeros(0), 0.0, word_rates=rates,
                         stats={"joined_names": joined}).name_query
    variants = list(clean)
    if typed:
        for v in clean:
            rng = random.Random(f"typed:{seed}:{v.query.id}")
            kind = rng.choice(mix)
            span = v.span_text()
            text = perturb(v.text, kind, rng, [span] if span else ())
            if text != v.text:
                variants.append(_Variant(v.query, text, kind, topic=v.topic))
    _read_hits(graph, variants, encode, "candidates as retrieval reads them", progress, words)
    for v in variants[len(clean):]:
        _set_topic_span(v, mention_table(v.text, v.hits, keep=None, partial=partial_names))
    for v in variants:
        v.mentions = mention_table(v.text, v.hits, rates, partial=partial_names)

    sampled = {id(v.query) for v in clean}
    marked = _marked_rows(graph, [q for q in every if id(q) not in sampled and q.topic],
                          max(max_prior_questions - len(clean), 0), typed, seed, mix)
    fold_priors = None
    try:
        prior, fold_priors = _fit_prior(graph, variants, encode, encode_tokens, hops, seed, progress, marked, folds,
                                        synonyms)
    except SeederError:
        if require_prior:
            raise
        prior = None
    if prior is not None:
        templates = sorted({v.mentions.template() for v in variants} - {None})
        readers = fold_priors.priors if fold_priors else [prior]
        tables = [dict(zip(templates, p.features(templates))) if templates else {} for p in readers]
        for v in variants:
            template = v.mentions.template()
            if template is not None:
                k = fold_priors.fold(v.query.id, None) if fold_priors else 0
                add_relation_features(v.mentions, readers[k].scores(tables[k][template], hops=1)[0])
    types = sorted({str(h.get("type")) for v in variants for h in v.hits if h.get("type")})
    examples = [LinkExample(v.mentions, v.gold()) for v in variants if v.topic]
    with _bars(progress) as bars:
        task = bars.add_task(f"entity linker on {sum(len(e.mentions) for e in examples):,} candidates",
                             total=LINKER_STEPS)
        linker = fit_linker(examples, rates, types, seed=seed, advance=lambda n: bars.advance(task, n))
    found = [bool(v.topic) and bool(v.gold().any()) for v in variants]
    stats = {"questions": len(clean), "typed_variants": len(variants) - len(clean), "joined_names": joined,
             "partial_names": partial_names,
             "prior_more_templates": len(marked),
             "relation_features": prior is not None,
             "topic_known": len(with_topic),
             "topic_from": "dataset" if any(q.topic for q in queries) else "answer paths",
             "topic_in_candidates": round(float(np.mean(found)), 4), "candidates": CANDIDATES}
    linker.stats.update(stats)
    if prior is not None:
        prior = prior.bind(encode, encode_tokens)  # not the fit's memory of every template's tokens
    if fold_priors is not None:
        fold_priors.priors = [p.bind(encode, encode_tokens) for p in fold_priors.priors]
        stats["prior_folds"] = fold_priors.folds  # 0: too few wordings to cross-fit
    return LinkingFit(linker.with_prior(prior), prior, stats, fold_priors)


def _read_hits(graph, variants: list[_Variant], encode, what: str, progress: bool,
               words: NameQuery = NameQuery()) -> None:
    if not variants:
        return
    texts = [v.text for v in variants]
    embeddings = encode(texts)
    with _bars(progress) as bars:
        task = bars.add_task(what, total=len(set(texts)))
        hits = read_names(graph, texts, embeddings, words, CANDIDATES,
                          advance=lambda n: bars.advance(task, n))
    for v in variants:
        v.hits = hits[(v.text, CANDIDATES, words)][1]


def topic_names(graph, queries: Sequence[Query], chunk: int = 2000) -> list[list[str]]:
    """The names of each question's marked topic entities, read from the live graph (``graph.live``
    or the graph itself) ``chunk`` ids per query; empty for a question without one."""
    live = getattr(graph, "live", None) or graph
    ids = sorted({int(t) for q in queries for t in q.topic})
    names: dict[int, str] = {}
    for lo in range(0, len(ids), chunk):
        part = ids[lo:lo + chunk]
        names.update(zip(part, live.describe(part)[1]))
    return [[names[int(t)] for t in q.topic] for q in queries]


def _marked_rows(graph, queries: Sequence[Query], limit: int, typed: bool, seed: int,
                 mix: Sequence[str] = TYPED_MIX) -> list[tuple[Query, str]]:
    """(question, template) for up to ``limit`` of ``queries`` (a seeded sample) whose topic the dataset
    marks, beyond the linker's sample: the template masks the topic's name, which needs no name
    index, so the prior can read many more questions than the linker. With ``typed``, each also as
    a typed template (``mix`` on the template: a typo goes into the masked name, so it leaves
    the template as written). Empty where the graph's names cannot be read."""
    live = getattr(graph, "live", None)
    if limit <= 0 or not queries or live is None:
        return []
    if len(queries) > limit:
        pick = np.sort(np.random.default_rng(seed + 1).choice(len(queries), size=limit, replace=False))
        queries = [queries[i] for i in pick]
    rows = []
    for q, names in zip(queries, topic_names(live, queries)):
        template = question_template(q.text, names)
        if not MASKED.search(template):
            continue  # the question does not spell its topic's name: no template to read
        rows.append((q, template))
        if typed:
            rng = random.Random(f"typed:{seed}:{q.id}")
            typed_template = question_template(perturb(template, rng.choice(mix), rng, [PLACEHOLDER]), [])
            if typed_template != template:
                rows.append((q, typed_template))
    return rows


def _fit_prior(graph, variants: list[_Variant], encode, encode_tokens, hops: int, seed: int,
               progress: bool, marked: Sequence[tuple[Query, str]] = (), folds: int = 0,
               synonyms: float = 0.0) -> tuple[RelationPrior, FoldPriors | None]:
    relation_types = list(graph.info.relation_types)
    linked = [v for v in variants if v.topic and v.topic_span is not None]
    asked = [(int(v.query.id), v.topic, v.query.answers) for v in linked] + [(int(q.id), q.topic, q.answers)
                                                                             for q, _ in marked]
    with _bars(progress) as bars:
        labels_of = _path_labels(graph.arrays, asked, hops, len(relation_types), bars)
    # Each question's template as retrieval reads it (its linked name masked), or the dataset's.
    templates = [(v.query, question_template(v.text, [v.span_text()])) for v in linked] + list(marked)
    rows, labels, owners = [], [], []
    for q, template in templates:
        found = labels_of[int(q.id)]
        if found is not None:
            rows.append(template)
            labels.append(found)
            owners.append(int(q.id))
    if len(rows) < 20:
        raise SeederError(f"only {len(rows)} training questions have an answer within {hops} hops of their topic: "
                          "too few to learn which relations to follow; use a profile without the relation prior")
    copies = synonym_copies(rows, synonyms, seed, embed=encode)
    for i, copy in copies:
        rows.append(copy)
        labels.append(labels[i])
        owners.append(owners[i])
    labels = np.stack(labels)
    if encode_tokens is None:
        sentences = encode(rows)

        def fit(pick, advance=None):
            return fit_relation_prior(sentences[pick], labels[pick], relation_types, seed=seed, input="template",
                                      advance=advance)
    else:
        encode_tokens = _remembered(encode_tokens)  # the linker's features read the same templates again
        sentences, tokens, spans = encode_tokens(rows)
        positions = [topic_positions(row, span, len(t)) for row, t, span in zip(rows, tokens, spans)]

        def fit(pick, advance=None):
            return fit_token_prior(sentences[pick], [tokens[i] for i in pick], labels[pick], relation_types,
                                   positions=[positions[i] for i in pick], seed=seed,
                                   relation_emb=getattr(graph, "rel_emb", None), advance=advance)
    words = TemplateWords.of(rows)  # the words it reads as fitted; others within a typo as the nearest
    with _bars(progress) as bars:
        task = bars.add_task(f"relation prior on {len(rows):,} templates",
                             total=TOKEN_PRIOR_STEPS if encode_tokens is not None else TEMPLATE_PRIOR_STEPS)
        prior = replace(fit(np.arange(len(rows)), lambda n: bars.advance(task, n)), words=words)
    prior.stats.update({"sampled": len(labels_of), "templates": len(rows), "synonyms": synonyms,
                        "synonym_copies": len(copies)})
    prior = prior.bind(encode, encode_tokens)
    answers = {int(v.query.id): v.query.answers for v in linked} | {int(q.id): q.answers for q, _ in marked}
    prior = with_answer_types(prior, graph, rows, [answers[o] for o in owners], seed, progress)
    if folds < 2:
        return prior, None
    with _bars(progress) as bars:
        task = bars.add_task(f"relation priors of {folds} wording folds",
                             total=folds * (TOKEN_PRIOR_STEPS if encode_tokens is not None else TEMPLATE_PRIOR_STEPS))
        fold_priors = cross_fit(rows, owners, folds,
                                lambda pick: replace(fit(pick, lambda n: bars.advance(task, n)),
                                                     words=TemplateWords.of([rows[i] for i in pick])),
                                prior.fingerprint)
    fold_priors.priors = [p.bind(encode, encode_tokens) for p in fold_priors.priors]
    return prior, fold_priors


def with_answer_types(prior: RelationPrior, graph, templates: Sequence[str], answers: Sequence[Sequence[int]],
                      seed: int = 0, progress: bool = False) -> RelationPrior:
    """``prior`` with an answer-type head (``RelationPrior.answer_types``) fitted on ``templates``
    and the node types of each one's ``answers``; unchanged on a graph of fewer than two types."""
    node_type, type_names = getattr(graph, "node_type", None), getattr(graph, "node_type_names", None)
    if node_type is None or not type_names or len(type_names) < 2:
        return prior
    rows, targets = [], []
    for template, found in zip(templates, answers):
        ids = np.asarray([a for a in found if 0 <= a < node_type.shape[0]], dtype=np.int64)
        kinds = node_type[ids] if ids.size else ids
        kinds = kinds[kinds >= 0]
        if kinds.size:
            rows.append(template)
            targets.append(np.bincount(kinds, minlength=len(type_names)) / kinds.size)
    if len(rows) < 20 or len({int(np.argmax(t)) for t in targets}) < 2:
        return prior
    # One row a wording and answer type, weighed by its questions; each wording embedded once.
    distinct, template, targets, counts = answer_type_rows(rows, targets)
    with _bars(progress) as bars:
        task = bars.add_task(f"answer types on {len(distinct):,} templates", total=len(distinct) + 1)
        features = []
        for lo in range(0, len(distinct), 1024):
            features.append(prior.features(distinct[lo:lo + 1024]))
            bars.advance(task, len(features[-1]))
        weight, bias, stats = fit_answer_types(np.concatenate(features)[template], targets, counts=counts, seed=seed)
        bars.advance(task, 1)
    prior.stats["answer_types"] = stats
    return replace(prior, answer_type_names=[str(t) for t in type_names], answer_type_weight=weight,
                   answer_type_bias=bias)


def _path_labels(arrays, questions: Sequence[tuple[int, Sequence[int], Sequence[int]]], hops: int,
                 num_relations: int, bars: Progress) -> dict[int, np.ndarray | None]:
    """``path_relations`` of each (question id, topic, answers), by id (a question's first topic), on
    every core.

    The walk is NumPy sorts and gathers over the reached sets, which release the GIL: on two cores
    two threads label MetaQA's questions 1.5 times as fast as one. Each label depends on its
    question alone, so the result does not depend on the thread count."""
    first: dict[int, tuple] = {}
    for qid, topic, answers in questions:
        first.setdefault(qid, (topic, answers))
    task = bars.add_task("relation paths of the training questions", total=len(first))

    def label(asked: tuple) -> np.ndarray | None:
        return path_relations(arrays, asked[0], asked[1], hops, num_relations)

    out: dict[int, np.ndarray | None] = {}
    with ThreadPoolExecutor(max_workers=available_cores()) as pool:
        for qid, found in zip(first, pool.map(label, first.values())):
            out[qid] = found
            bars.advance(task)
    return out


def cross_fit(rows: Sequence[str], owners: Sequence[int], folds: int, fit: Callable[[np.ndarray], RelationPrior],
              full: str) -> FoldPriors:
    """``FoldPriors`` over ``folds`` folds of the templates ``rows`` (``owners``: each row's question
    id): a question's rows go to the fold of its first row's wording (its template as written), and
    ``fit(indices)`` fits the prior of fold k on the rows of every other fold. ``full``: the
    fingerprint of the prior fitted on all rows."""
    fold_of: dict[int, int] = {}
    for qid, row in zip(owners, rows):
        fold_of.setdefault(int(qid), wording_fold(row, folds))
    row_fold = np.asarray([fold_of[int(qid)] for qid in owners], dtype=np.int64)
    sizes = np.bincount(row_fold, minlength=folds)
    if sizes.min() == 0 or (len(rows) - sizes).min() < MIN_FOLD_TEMPLATES:
        return FoldPriors([], {}, full)
    return FoldPriors([fit(np.flatnonzero(row_fold != k)) for k in range(folds)], fold_of, full)


def _remembered(encode_tokens):
    """``encode_tokens`` encoding each distinct text once for the fit (a template prior's ``encode``
    has the encoder's disk cache)."""
    seen: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}

    def encode(texts):
        texts = [str(t) for t in texts]
        missing = list(dict.fromkeys(t for t in texts if t not in seen))
        if missing:
            seen.update(zip(missing, zip(*encode_tokens(missing))))
        rows = [seen[t] for t in texts]
        return (np.stack([r[0] for r in rows]) if rows else np.zeros((0, 0), np.float32), [r[1] for r in rows],
                [r[2] for r in rows])

    return encode
