"""Entity linking for questions as people type them: lower case, a typo, no punctuation, reworded.

A question names its topic entity in its own words: "what films did tom hnaks star in". Linking
finds which node that is in three steps:

1. **Candidates** from the full-text index on node names (``graphstore.name_index``): every word of the
   question, words of four letters or more also within one edit (eight or more: two), so a
   name is found whatever its case, with a dropped, added or swapped letter, or without its
   apostrophe.
2. **Spans** (``mention_table``): for each candidate, the run of question words its name matches
   best, compared as letters and digits only, case and accents folded ("Ocean's Eleven" and
   "oceans eleven" are one string), by optimal-string-alignment distance (``rapidfuzz``). A name
   of ``MIN_FUZZY_NAME`` letters or more may differ by one edit, of ``MIN_TWO_EDITS`` or more by
   two (``allowed_edits``). A name of several words none of whose spans matches may still be
   named by its last word alone, as people name a person by the surname ("what films did hanks
   star in"): a partial match, marked by a feature of its own, where the profile asks for it
   (``partial_names``; the linker is then fitted with such questions in its mix).
3. **A learned score** (``EntityLinker``): a small network over features of each candidate: how
   well and how much of the question its span matches, whether the letter case agrees and
   whether the question has any case at all, how often its words belong to questions rather than
   names (``word_rates``, learned), how many candidates share the name, its node type, degree
   and cosine to the question, and whether it has the relations the dataset's relation prior
   expects at hop 1 for the question with that span masked. It is fitted on the training
   questions, their topic entity known from the dataset or from the answer paths, with typed
   variants mixed in (``loaders.perturb``). Where the best candidates are close (probability within
   ``keep_ratio`` of the best), several are kept as seeds and expansion and the policy decide.

Without a fitted linker the same features are scored by hand-set weights (``EntityLinker.default``).
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Callable, Sequence

import numpy as np
from rapidfuzz.distance import OSA
from rapidfuzz.process import cdist

from seeder_dgl.graphstore.name_index import APOSTROPHES, MAX_TERMS, POSSESSIVE, STOP_WORDS, WORD, NameQuery, fold
from seeder_dgl.threads import FIT_THREADS, fixed_threads

MIN_FUZZY_NAME = 4
"""Names (letters and digits) of this length or more match a span within one edit ..."""
MIN_TWO_EDITS = 9
"""... and of this length, within two."""
JOINED_NAME = re.compile(r"[^\W_]_[^\W_]")
"""Two words of a name joined by '_' ('New_York')."""
JOINED_SHARE = 0.1
"""Share of names written with '_' between words above which questions are also asked joined."""
MIN_PARTIAL = 3
"""Letters the last word of a name needs to match a question word on its own (a partial match) ..."""
MIN_FUZZY_PARTIAL = 6
"""... and to match it within one edit (never two: one word says less than a whole name)."""
PLAIN_RATE = 0.9
"""A word found outside the topic's name in this share of the training questions that use it is
sent to the name index exactly (``graphstore.name_index.lucene_query``)."""


@dataclass(frozen=True)
class Token:
    norm: str
    """Folded, without apostrophes: what names are matched on."""
    raw: str
    """As written, without apostrophes: what letter case is compared on."""
    start: int
    end: int
    possessive: bool = False
    """Written with a possessive ending ("Paul's", "Paul’s"): a name may end before it."""


def tokenize(text: str) -> list[Token]:
    """Words (letters and digits; inner apostrophes kept in one word: "O'Malley") with their places."""
    out = []
    for m in WORD.finditer(text):
        raw = m.group().translate(APOSTROPHES)
        out.append(Token(fold(raw), raw, m.start(), m.end(), bool(POSSESSIVE.search(m.group()))))
    return out


def allowed_edits(length: int) -> int:
    """Edits a name of ``length`` letters and digits may differ by and still match."""
    return 0 if length < MIN_FUZZY_NAME else (1 if length < MIN_TWO_EDITS else 2)


@dataclass(frozen=True)
class NameForm:
    norm: tuple[str, ...]
    raw: tuple[str, ...]
    compact: str
    has_upper: bool


@lru_cache(maxsize=1 << 17)
def name_form(name: str) -> NameForm:
    tokens = tokenize(unicodedata.normalize("NFC", name or ""))
    return NameForm(tuple(t.norm for t in tokens), tuple(t.raw for t in tokens), "".join(t.norm for t in tokens),
                    any(c.isupper() for c in name or ""))


PLACEHOLDER = "X"
"""What stands in a question's template for the entity it names."""
MASKED = re.compile(r"(?<!\w)" + re.escape(PLACEHOLDER.casefold()) + r"(?!\w)")
"""The placeholder as a word of a template (``question_template`` case-folds it)."""


def question_template(question: str, names: Sequence[str]) -> str:
    """``question`` with every occurrence of each of ``names`` (whole words, any case) replaced by
    ``PLACEHOLDER``, case-folded and with single spaces: "what films did Kate Mara act in" ->
    "what films did x act in", whatever the case the question was typed in.

    Which relations a question follows is a property of its wording, not of the entity it names;
    in a sentence embedding the name is most of the signal, so the relation prior reads the template.
    """
    out = question
    for name in sorted({n for n in names if n}, key=len, reverse=True):  # 'New York City' before 'York'
        pattern = _compiled_name_pattern(name)
        if pattern is not None:
            out = pattern.sub(PLACEHOLDER, out)
    return " ".join(out.casefold().split())


@lru_cache(maxsize=1 << 16)
def _compiled_name_pattern(name: str) -> re.Pattern | None:
    """``name_pattern`` compiled, case-insensitive. ``re`` keeps only 512 compiled patterns: fitting
    the linker masks tens of thousands of names, and compiling them again took a tenth of the fit."""
    pattern = name_pattern(name)
    return None if pattern is None else re.compile(pattern, re.IGNORECASE)


def wording_key(question: str, names: Sequence[str]) -> str:
    """A question's wording: its template (``question_template``) with only its letters and digits,
    so questions worded alike have one key whatever their case, punctuation and topic. ``eval``
    marks a validation question 'seen' by it, and the prior's cross-fitting folds wordings by it."""
    return " ".join(re.findall(r"[^\W_]+", question_template(question, names)))


def name_pattern(name: str) -> str | None:
    """A regular expression for ``name`` in a question whatever its punctuation: its letters and
    digits in order, with any punctuation, underscores or spaces (or none) between them, and the
    name's own leading and trailing punctuation where the question kept it. So
    "European_Parliament_election,_2004_(France)" is found typed "european parliament election 2004
    france", and "Ocean's Eleven" as "Oceans Eleven" (``loaders.perturb.no_punctuation`` drops
    apostrophes). A possessive goes with the name ("Kate Mara's sister" and "Kate Maras sister"
    both read "X sister"). None for a name without letters or digits."""
    words = re.findall(r"[^\W_]+", name)
    if not words:
        return None
    head, tail = re.match(r"[\W_]*", name).group(), re.search(r"[\W_]*$", name).group()
    return (r"(?<![^\W_])" + (f"(?:{re.escape(head)})?" if head.strip() else "")
            + r"[\W_]*".join(re.escape(w) for w in words)
            + (f"(?:{re.escape(tail)})?" if tail.strip() else r"(?:['’]?s)?") + r"(?![^\W_])")


# ---- features ----------------------------------------------------------------------------------
FEATURES = ("match", "edits", "edit_rate", "exact", "cased", "name_upper", "question_cased", "span_share",
            "name_chars", "name_words", "token_recall", "longest", "inside_other", "ambiguity", "question_words",
            "text_score", "similarity", "similarity_rank", "log_degree", "relation_fit", "relation_max",
            "relation_known", "partial", "exact_elsewhere")
"""Per-candidate features, in column order (node types follow as one-hot columns)."""
LINKER_FEATURES_V1 = FEATURES[:FEATURES.index("partial")]
"""The features of linkers fitted before partial matches: they are read with ``partial`` unweighted."""
_F = {name: i for i, name in enumerate(FEATURES)}


@dataclass
class Mentions:
    """The candidates of one question: full-text hits with the question span each name matches
    best, and their features (the relation features are filled by ``add_relation_features``),
    in lexical order, cut to the ``SCORED`` best (``mention_table``)."""

    question: str
    hits: list[dict]
    spans: list[tuple[int, int]]
    """(start, end) character offsets in ``question`` of the span each candidate's name matches
    within its allowed edits ((0, 0): none does)."""
    features: np.ndarray
    """float64 [C, len(FEATURES)]."""
    degrees: np.ndarray | None = None
    """float64 [C, R]: relationships of each relation type per candidate (None: not read)."""

    def __len__(self) -> int:
        return len(self.hits)

    def span_text(self, i: int) -> str:
        start, end = self.spans[i]
        return self.question[start:end]

    @property
    def template_span(self) -> tuple[int, int] | None:
        """The span of the best candidate by lexical match: the question with it masked is the
        template whose relations every candidate is compared with (one embedding a question,
        which retrieval's relation prior reuses when that candidate is the seed)."""
        return self.spans[0] if self.hits and self.spans[0] != (0, 0) else None

    def template(self) -> str | None:
        span = self.template_span
        return None if span is None else question_template(self.question, [self.question[span[0]:span[1]]])


SCORED = 30
"""Candidates a question keeps after the lexical order (``mention_table``), for the scorer."""


def mention_table(question: str, hits: Sequence[dict], word_rates: dict[str, float] | None = None,
                  keep: int | None = SCORED, partial: bool = False) -> Mentions:
    """The spans and features of ``hits`` (dicts with id, name, text_score, similarity, and where the
    backend reads them, type and degrees) for ``question``: the ``keep`` best by lexical match
    (None: all), in that order.

    Lexical order: a name matched within its allowed edits, or, with ``partial``, a name of several
    words whose last word alone matches a question word (a partial match, feature ``partial``:
    "hanks" for Tom Hanks; exactly, or within one edit from ``MIN_FUZZY_PARTIAL`` letters) first; among them the
    longer match less twice its edits (a partial one less half a letter more), scaled by how
    little its span's words are question words (``word_rates``); then the Lucene score, then the
    hit's position."""
    question = unicodedata.normalize("NFC", question)
    tokens = tokenize(question)[:MAX_TERMS]
    n, c = len(tokens), len(hits)
    if c == 0 or n == 0:
        return Mentions(question, [], [], np.zeros((0, len(FEATURES))))
    forms = [name_form(h.get("name") or "") for h in hits]
    name_words = np.fromiter((len(f.norm) for f in forms), dtype=np.int64, count=c)
    name_chars = np.fromiter((len(f.compact) for f in forms), dtype=np.int64, count=c)
    longest = int(name_words.max())
    starts, lengths, compacts = [], [], []
    for i in range(n):
        for length in range(1, min(n - i, longest + 1) + 1):
            starts.append(i)
            lengths.append(length)
            compacts.append("".join(t.norm for t in tokens[i:i + length]))
    span_start, span_len = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    dist = cdist([f.compact for f in forms], compacts, scorer=OSA.distance, dtype=np.int32, workers=1).astype(np.int64)
    # A span ending in a possessive ("more films from Paul's director") also matches a name without
    # its 's': the apostrophe is dropped with the others, and "pauls" would be a typo of "Paul".
    owned = np.flatnonzero([tokens[a + w - 1].possessive for a, w in zip(starts, lengths)])
    if owned.size:
        bare = cdist([f.compact for f in forms], [compacts[j][:-1] for j in owned], scorer=OSA.distance,
                     dtype=np.int32, workers=1).astype(np.int64)
        dist[:, owned] = np.minimum(dist[:, owned], bare)
    # Spans of one word fewer (joined words, a dropped stop word) to one more than the name.
    gap = np.abs(span_len[None, :] - name_words[:, None])
    key = np.where(gap <= 1, dist * 1_000_000 + gap * 1000 + span_start[None, :], np.iinfo(np.int64).max)
    best = key.argmin(axis=1)
    rows = np.arange(c)
    has_name = name_chars > 0
    edits = np.where((gap[rows, best] <= 1) & has_name, dist[rows, best], 99)
    allowed = np.where(name_chars < MIN_FUZZY_NAME, 0, np.where(name_chars < MIN_TWO_EDITS, 1, 2))
    matched = edits <= allowed
    # A partial match: a name of several words not matched whole, its last word alone matching
    # one question word (a one-word span; not a stop word).
    last = [f.norm[-1] if len(f.norm) > 1 and len(f.norm[-1]) >= MIN_PARTIAL else "" for f in forms]
    is_partial = np.zeros(c, dtype=bool)
    part_edits = np.full(c, 99, dtype=np.int64)
    if partial and any(last) and not matched.all():
        single = np.flatnonzero(span_len == 1)
        words = [compacts[j] for j in single]
        far = cdist(last, words, scorer=OSA.distance, dtype=np.int32, workers=1).astype(np.int64)
        far[:, [w in STOP_WORDS for w in words]] = 99
        near = far.argmin(axis=1)
        part_len = np.fromiter((len(w) for w in last), dtype=np.int64, count=c)
        part_allowed = (part_len >= MIN_FUZZY_PARTIAL).astype(np.int64)  # one word: at most one edit
        part_edits = far[rows, near]
        is_partial = ~matched & (part_len > 0) & (part_edits <= part_allowed)
        best = np.where(is_partial, single[near], best)
    # question_words of each span, once per distinct span
    rates = word_rates or {}
    span_rate = np.zeros(len(compacts))
    for b in np.unique(best):
        words = tokens[span_start[b]:span_start[b] + span_len[b]]
        span_rate[b] = sum(rates.get(t.norm, 0.0) for t in words) / len(words)
    q_words = np.where(has_name, span_rate[best], 0.0)
    text = np.fromiter((float(h.get("text_score") or 0.0) for h in hits), dtype=np.float64, count=c)
    strength = matched * (name_chars - 2.0 * np.minimum(edits, 3)) * (1.0 - q_words)
    # A partial match ranks among the whole ones by its strength, less half a letter: a whole name
    # as long as a surname goes first ("Hanks" before "Tom Hanks" for "hanks").
    strength = np.where(is_partial, (span_chars(compacts, best) - 2.0 * np.minimum(part_edits, 3) - 0.5)
                        * (1.0 - q_words), strength)
    order = np.lexsort((rows, -text, -strength, ~(matched | is_partial)))
    order = order[:keep] if keep is not None else order
    k = order.shape[0]

    feats = np.zeros((k, len(FEATURES)), dtype=np.float64)
    e = edits[order]
    feats[:, _F["match"]] = matched[order]
    feats[:, _F["edits"]] = np.minimum(e, 3)
    feats[:, _F["edit_rate"]] = np.minimum(e / np.maximum(name_chars[order], 1), 1.0)
    s0, width = span_start[best[order]], span_len[best[order]]
    feats[:, _F["exact"]] = (e == 0) & (width == name_words[order])
    feats[:, _F["span_share"]] = np.where(has_name[order], width / n, 0.0)
    feats[:, _F["name_chars"]] = np.log1p(name_chars[order])
    feats[:, _F["name_words"]] = np.log1p(name_words[order])
    feats[:, _F["question_words"]] = q_words[order]
    feats[:, _F["text_score"]] = text[order] / max(float(text.max()), 1e-9)
    q_norms = {t.norm for t in tokens}
    letters = [ch for ch in question if ch.isalpha()]
    feats[:, _F["question_cased"]] = any(ch.isupper() for ch in letters[1:])  # more than a capital first letter
    feats[:, _F["partial"]] = is_partial[order]
    kept_hits = [hits[j] for j in order]
    spans = []
    for i, j in enumerate(order.tolist()):
        form = forms[j]
        a, w = int(s0[i]), int(width[i])
        spans.append((tokens[a].start, tokens[a + w - 1].end) if matched[j] or is_partial[j] else (0, 0))
        feats[i, _F["name_upper"]] = form.has_upper
        raw = [t.raw for t in tokens[a:a + w]]
        if tokens[a + w - 1].possessive and (len(form.raw) == len(raw) and raw[-1][:-1] == form.raw[-1]):
            raw[-1] = raw[-1][:-1]
        feats[i, _F["cased"]] = e[i] == 0 and tuple(raw) == form.raw
        feats[i, _F["token_recall"]] = sum(1 for word in form.norm if word in q_norms) / max(len(form.norm), 1)
    # Among matched candidates: the longest span, and spans inside another's longer span.
    m = feats[:, _F["match"]] > 0
    if m.any():
        lo, hi = s0, s0 + width
        feats[:, _F["longest"]] = m & (width == width[m].max())
        inside = (lo[m][None, :] <= lo[:, None]) & (hi[m][None, :] >= hi[:, None]) & (width[m][None, :] > width[:, None])
        feats[:, _F["inside_other"]] = m & inside.any(axis=1)
    compact = [forms[j].compact for j in order]
    counts: dict[str, int] = {}
    for name in compact:
        counts[name] = counts.get(name, 0) + 1
    feats[:, _F["ambiguity"]] = [math.log(counts[name]) for name in compact]
    sim = np.fromiter((float(h.get("similarity") or 0.0) for h in kept_hits), dtype=np.float64, count=k)
    feats[:, _F["similarity"]] = sim
    rank = np.empty(k, dtype=np.int64)
    rank[np.lexsort((np.arange(k), -sim))] = np.arange(k)
    feats[:, _F["similarity_rank"]] = 1.0 / (1.0 + rank)
    # The span, as typed, is another candidate's whole name or surname letter for letter: then it is
    # a real name word, and reading it as a typo of this name is likely wrong ("hanks movies": Tom
    # Hanks, not the film Yanks one edit away).
    spans_typed = best[order]
    named = (dist[:, spans_typed] == 0) & (gap[:, spans_typed] <= 1) & has_name[:, None]
    if partial:  # a surname counts where the linker reads names by their last word
        typed = np.asarray([compacts[b] for b in spans_typed], dtype=object)
        named |= (np.asarray(last, dtype=object)[:, None] == typed[None, :]) & (np.asarray(last) != "")[:, None]
    named[order, np.arange(k)] = False
    inexact = np.where(is_partial, part_edits > 0, edits > 0) & (matched | is_partial)
    feats[:, _F["exact_elsewhere"]] = named.any(axis=0) & inexact[order]
    degrees = None
    if kept_hits and all(h.get("degrees") is not None for h in kept_hits):
        degrees = np.asarray([h["degrees"] for h in kept_hits], dtype=np.float64).reshape(k, -1)
        feats[:, _F["log_degree"]] = np.log1p(degrees.sum(axis=1))
    return Mentions(question, kept_hits, spans, feats, degrees)


def span_chars(compacts: Sequence[str], spans: np.ndarray) -> np.ndarray:
    """Letters and digits of each of the question's spans ``spans`` (indices into ``compacts``)."""
    return np.fromiter((len(compacts[j]) for j in spans), dtype=np.float64, count=len(spans))


def add_relation_features(mentions: Mentions, hop1: np.ndarray | None) -> None:
    """Fill the relation features: ``hop1`` [R] is the relation prior's hop-1 probabilities for the
    question's template (None: no prior, the features stay 0); a candidate's relations are its
    ``degrees`` (one count per relation type, in the prior's order)."""
    if hop1 is None or not len(mentions) or mentions.degrees is None:
        return
    p = np.asarray(hop1, dtype=np.float64)
    has = np.zeros((len(mentions), p.shape[0]), dtype=bool)
    width = min(p.shape[0], mentions.degrees.shape[1])
    has[:, :width] = mentions.degrees[:, :width] > 0
    weighted = has * p[None, :]
    f = mentions.features
    f[:, _F["relation_fit"]] = weighted.sum(axis=1) / max(float(p.sum()), 1e-9)
    f[:, _F["relation_max"]] = weighted.max(axis=1)
    f[:, _F["relation_known"]] = 1.0


# ---- the scorer ---------------------------------------------------------------------------------
# Hand-set weights for a dataset without a fitted linker: a name matched in full first (then one
# named by its last word), with few edits, over a long span and not inside a longer match, in the question's case, a proper noun
# before a common one; then relations the prior expects, then cosine to the question.
_DEFAULT_WEIGHTS = {"match": 6.0, "edits": -1.0, "edit_rate": -4.0, "exact": 1.0, "cased": 1.0, "name_upper": 1.0,
                    "span_share": 4.0, "longest": 1.5, "inside_other": -3.0, "token_recall": 2.0,
                    "question_words": -2.0, "text_score": 0.5, "similarity": 1.0, "relation_fit": 2.0,
                    "relation_max": 1.0, "partial": 3.0}


@dataclass(frozen=True)
class EntityLinker:
    """Scores a question's candidates: ``logit = v · relu(W x + b) + c`` over the standardised
    features ``x`` (``FEATURES``, then the one-hot node type), or ``v · x + c`` without a hidden
    layer; the seeds are the best candidate and those within ``keep_ratio`` of its probability."""

    mean: np.ndarray
    """float64 [F]: feature means (standardisation; the type columns included)."""
    scale: np.ndarray
    """float64 [F]: feature standard deviations (1 where constant)."""
    out_weight: np.ndarray
    """float64 [H] (or [F] without a hidden layer)."""
    out_bias: float
    type_names: list[str] = field(default_factory=list)
    """Node types with a column of their own; other types have none."""
    word_rates: dict[str, float] = field(default_factory=dict)
    """Folded word -> share of its occurrences in training questions outside the topic's span."""
    hidden_weight: np.ndarray | None = None
    """float64 [F, H]."""
    hidden_bias: np.ndarray | None = None
    max_seeds: int = 3
    """Seeds kept at most when candidates are close."""
    keep_ratio: float = 0.5
    """A candidate whose probability is at least this share of the best one's is kept as a seed too."""
    stats: dict = field(default_factory=dict)
    """How it was fitted: questions, accuracy, candidate recall, whether with relation features."""
    prior: object | None = field(default=None, compare=False, repr=False)
    """The dataset's relation prior, bound to its encoder, for the relation features (set when the
    linker is loaded, ``with_prior``; not stored with the linker)."""

    @cached_property
    def plain_words(self) -> frozenset[str]:
        """Words the dataset's questions use rather than its names (``word_rates`` of at least
        ``PLAIN_RATE``): the name index is asked for them exactly, not within a typo."""
        return frozenset(w for w, rate in self.word_rates.items() if rate >= PLAIN_RATE)

    @property
    def joined_names(self) -> bool:
        """The dataset's names join their words with '_' (a share of the training candidates' names
        of at least ``JOINED_SHARE``): questions are also asked as joined runs of words."""
        return float(self.stats.get("joined_names", 0.0)) >= JOINED_SHARE

    @property
    def name_query(self) -> NameQuery:
        """How this dataset's questions are put to its name index."""
        return NameQuery(self.plain_words, self.joined_names)

    @property
    def partial_names(self) -> bool:
        """Fitted to link names by their last word too (``mention_table(partial=True)``)."""
        return bool(self.stats.get("partial_names"))

    @property
    def relation_features(self) -> bool:
        """Fitted with the relation prior's expectations among its features (then it needs the prior)."""
        return bool(self.stats.get("relation_features"))

    def with_prior(self, prior) -> "EntityLinker":
        return replace(self, prior=prior)

    @classmethod
    def default(cls) -> "EntityLinker":
        """The hand-set linker (no types, no learned words) for a dataset without a fitted one."""
        weight = np.asarray([_DEFAULT_WEIGHTS.get(name, 0.0) for name in FEATURES])
        size = len(FEATURES)
        return cls(np.zeros(size), np.ones(size), weight, 0.0, stats={"fitted": False})

    def inputs(self, mentions: Mentions) -> np.ndarray:
        """[C, F]: the features with the type columns, standardised."""
        return (self.raw_inputs(mentions) - self.mean) / self.scale

    def raw_inputs(self, mentions: Mentions) -> np.ndarray:
        """[C, F]: the features with the type columns."""
        x = mentions.features
        if self.type_names:
            col = {t: i for i, t in enumerate(self.type_names)}
            onehot = np.zeros((len(mentions), len(self.type_names)))
            for j, hit in enumerate(mentions.hits):
                i = col.get(hit.get("type"))
                if i is not None:
                    onehot[j, i] = 1.0
            x = np.concatenate([x, onehot], axis=1)
        return x

    def logits(self, mentions: Mentions) -> np.ndarray:
        x = self.inputs(mentions)
        if self.hidden_weight is not None:
            x = np.maximum(x @ self.hidden_weight + self.hidden_bias, 0.0)
        return x @ self.out_weight + self.out_bias

    def order(self, mentions: Mentions) -> tuple[list[int], np.ndarray]:
        """Candidate indices by score, best first (ties by node id), and the logits."""
        logits = self.logits(mentions)
        ids = [h["id"] for h in mentions.hits]
        return sorted(range(len(ids)), key=lambda j: (-logits[j], ids[j])), logits

    def choose(self, mentions: Mentions, k: int) -> list[int]:
        """Indices of the seeds among the candidates, best first: the best one, those within
        ``keep_ratio`` of its probability (at most ``max(k, max_seeds)``), and at least ``k``."""
        return self._choose(mentions, *self.order(mentions), k)

    def _choose(self, mentions: Mentions, order: list[int], logits: np.ndarray, k: int) -> list[int]:
        if not order:
            return []
        chosen, seen = [], set()
        limit = max(k, self.max_seeds)
        floor = logits[order[0]] + math.log(self.keep_ratio) if self.keep_ratio > 0 else -math.inf
        for j in order:
            node = mentions.hits[j]["id"]
            if node in seen:
                continue
            if len(chosen) >= k and (logits[j] < floor or len(chosen) >= limit):
                break
            chosen.append(j)
            seen.add(node)
        return chosen

    # ---- storage --------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def to_json(self) -> str:
        out = {"features": list(FEATURES), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
               "out_weight": self.out_weight.tolist(), "out_bias": self.out_bias, "type_names": self.type_names,
               "word_rates": self.word_rates, "max_seeds": self.max_seeds, "keep_ratio": self.keep_ratio,
               "stats": self.stats}
        if self.hidden_weight is not None:
            out.update(hidden_weight=self.hidden_weight.tolist(), hidden_bias=self.hidden_bias.tolist())
        return json.dumps(out, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "EntityLinker":
        raw = json.loads(text)
        stored = list(raw.get("features", []))
        added = len(FEATURES) - len(stored)
        if stored != list(FEATURES)[:len(stored)] or stored[:len(LINKER_FEATURES_V1)] != list(LINKER_FEATURES_V1):
            raise ValueError("it was fitted on other features than this version computes")
        mean, scale = np.asarray(raw["mean"], dtype=np.float64), np.asarray(raw["scale"], dtype=np.float64)
        width = len(FEATURES) + len(raw.get("type_names", []))
        out = np.asarray(raw["out_weight"], dtype=np.float64)
        hidden_weight = hidden_bias = None
        if raw.get("hidden_weight") is not None:
            hidden_weight = np.asarray(raw["hidden_weight"], dtype=np.float64)
            hidden_bias = np.asarray(raw["hidden_bias"], dtype=np.float64)
        if added:  # a linker fitted before the newer features: they get no weight, so it scores as it did
            at = len(stored)
            mean, scale = np.insert(mean, at, np.zeros(added)), np.insert(scale, at, np.ones(added))
            if hidden_weight is None:
                out = np.insert(out, at, np.zeros(added))
            elif hidden_weight.ndim == 2:
                hidden_weight = np.insert(hidden_weight, at, np.zeros((added, hidden_weight.shape[1])), axis=0)
        if hidden_weight is not None:
            if hidden_weight.shape != (width, out.shape[0]) or hidden_bias.shape != out.shape:
                raise ValueError(f"hidden layer of shape {hidden_weight.shape} for {width} inputs")
        elif out.shape != (width,):
            raise ValueError(f"{out.shape[0]} weights for {width} inputs")
        if mean.shape != (width,) or scale.shape != (width,):
            raise ValueError(f"standardisation of {mean.shape[0]} columns for {width} inputs")
        return cls(mean, scale, out, float(raw["out_bias"]), [str(t) for t in raw.get("type_names", [])],
                   {str(k): float(v) for k, v in (raw.get("word_rates") or {}).items()}, hidden_weight, hidden_bias,
                   int(raw.get("max_seeds", 3)), float(raw.get("keep_ratio", 0.5)), dict(raw.get("stats") or {}))


# ---- linking a question --------------------------------------------------------------------------
def hop1_scores(prior, template: str | None) -> np.ndarray | None:
    """[R] hop-1 probabilities of the relation prior for ``template`` (None without a template, or
    without a prior that reads templates)."""
    if prior is None or template is None or not prior.reads_templates or not prior.bound:
        return None
    return prior.scores(prior.features([template])[0], hops=1)[0]


@dataclass
class Linked:
    """What linking found for one question."""

    mentions: Mentions
    order: list[int]
    """Candidates by the linker's score, best first."""
    chosen: list[int]
    """The seeds among them, best first."""

    def ids(self, indices: Sequence[int]) -> list[int]:
        return [int(self.mentions.hits[j]["id"]) for j in indices]

    def names(self, indices: Sequence[int]) -> list[str]:
        """The question's words that name those candidates (distinct, in order)."""
        return list(dict.fromkeys(self.mentions.span_text(j) for j in indices if self.mentions.spans[j] != (0, 0)))


def link(question: str, hits: Sequence[dict], k: int, linker: EntityLinker | None = None,
         mentions: Mentions | None = None) -> Linked:
    """Link ``question`` to ``k`` or more of ``hits`` (more where candidates are close to the best).
    ``mentions``: their ``mention_table`` made already for this linker (it is filled in here)."""
    linker = linker or EntityLinker.default()
    if mentions is None:
        mentions = mention_table(question, hits, linker.word_rates, partial=linker.partial_names)
    add_relation_features(mentions, hop1_scores(linker.prior, mentions.template()))
    order, logits = linker.order(mentions)
    return Linked(mentions, order, linker._choose(mentions, order, logits, k))


# ---- fitting -----------------------------------------------------------------------------------
def word_rates(questions: Sequence[str], topic_spans: Sequence[tuple[int, int] | None], min_count: int = 2,
               max_words: int = 20_000) -> dict[str, float]:
    """Folded word -> share of its occurrences in ``questions`` outside the topic's span (smoothed
    by one occurrence inside): 'films' ~1, a name's words ~0. Words seen fewer than ``min_count``
    times are left out (unknown words count as names)."""
    total: dict[str, int] = {}
    outside: dict[str, int] = {}
    for text, span in zip(questions, topic_spans):
        if span is None:
            continue
        for t in tokenize(unicodedata.normalize("NFC", text)):
            total[t.norm] = total.get(t.norm, 0) + 1
            if not (t.start >= span[0] and t.end <= span[1]):
                outside[t.norm] = outside.get(t.norm, 0) + 1
    kept = sorted((w for w, n in total.items() if n >= min_count), key=lambda w: (-total[w], w))[:max_words]
    return {w: round(outside.get(w, 0) / (total[w] + 1), 4) for w in sorted(kept)}


@dataclass
class LinkExample:
    """One training question for the linker: its mention table and which candidates are its topic."""

    mentions: Mentions
    gold: np.ndarray
    """bool [C]."""


LINKER_STEPS = 400
"""Full-batch Adam steps of ``fit_linker``."""


@fixed_threads(FIT_THREADS)  # the same fit whatever thread count the command runs with
def fit_linker(examples: Sequence[LinkExample], rates: dict[str, float], type_names: Sequence[str], *,
               hidden: int = 32, steps: int = LINKER_STEPS, lr: float = 0.02, weight_decay: float = 1e-4,
               seed: int = 0, max_seeds: int = 3, keep_ratio: float = 0.5,
               advance: Callable[[int], object] | None = None) -> EntityLinker:
    """Fit the linker on ``examples`` (those with a gold candidate): softmax over each question's
    candidates, the loss the negative log of the gold candidates' total probability. Full-batch
    Adam in float32 from a seeded initialisation on ``FIT_THREADS`` threads: deterministic given ``seed``.

    float32, not float64: on MetaQA's 275,000 candidate rows 42 s against 86 s, the training loss
    0.00218 against 0.00217, the same first candidate for all 9,350 training questions and the same
    seeds for 9,347 of them at k0 = 1 (9,217 at k0 = 3, where near ties decide the last). The output
    has no trained bias: adding one number to every candidate's logit changes no softmax, so its
    gradient is rounding noise, which Adam scales up to full steps (in float32 it drifted by 4.5)."""
    import torch

    dtype = torch.float32
    usable = [e for e in examples if len(e.mentions) and e.gold.any()]
    if not usable:
        raise ValueError("no training question has its topic entity among its candidates")
    shell = EntityLinker(np.zeros(0), np.ones(0), np.zeros(0), 0.0, list(type_names), dict(rates))
    rows = [shell.raw_inputs(e.mentions) for e in usable]
    x = np.concatenate(rows)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    width = x.shape[1]
    counts = np.asarray([r.shape[0] for r in rows])
    group = np.repeat(np.arange(len(rows)), counts)
    gold = np.concatenate([e.gold for e in usable]).astype(bool)
    xt = torch.from_numpy((x - mean) / scale).to(dtype)
    gt = torch.from_numpy(group)
    goldt = torch.from_numpy(gold)
    generator = torch.Generator().manual_seed(seed)
    params = []
    if hidden:
        w1 = (torch.randn(width, hidden, dtype=torch.float64, generator=generator).to(dtype) / math.sqrt(width)).requires_grad_()
        b1 = torch.zeros(hidden, dtype=dtype, requires_grad=True)
        params += [w1, b1]
    w2 = torch.zeros(hidden or width, dtype=dtype, requires_grad=True)
    params += [w2]
    opt = torch.optim.Adam(params, lr=lr)
    q = len(rows)

    def logits():
        h = torch.relu(xt @ w1 + b1) if hidden else xt
        return h @ w2

    def loss_of(z):
        # log-sum-exp per question over all candidates and over the gold ones
        peak = torch.full((q,), -math.inf, dtype=dtype).scatter_reduce(0, gt, z.detach(), "amax")
        e = torch.exp(z - peak[gt])
        all_sum = torch.zeros(q, dtype=dtype).index_add_(0, gt, e)
        gold_sum = torch.zeros(q, dtype=dtype).index_add_(0, gt, e * goldt)
        return (torch.log(all_sum) - torch.log(gold_sum.clamp_min(torch.finfo(dtype).tiny))).mean()

    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of(logits()) + weight_decay * sum(p.pow(2).sum() for p in params[::2])
        loss.backward()
        opt.step()
        if advance is not None:
            advance(1)
    with torch.no_grad():
        z = logits().numpy()
        final = float(loss_of(torch.from_numpy(z)))
    top_ok = 0
    start = 0
    for r, e in zip(rows, usable):
        zz = z[start:start + r.shape[0]]
        top_ok += bool(e.gold[int(np.argmax(zz))])
        start += r.shape[0]
    stats = {"fitted": True, "questions": len(usable), "examples": len(examples), "train_loss": round(final, 5),
             "train_top1": round(top_ok / len(usable), 4), "hidden": hidden, "steps": steps}
    return EntityLinker(mean, scale, w2.detach().double().numpy(), 0.0, list(type_names), dict(rates),
                        w1.detach().double().numpy() if hidden else None, b1.detach().double().numpy() if hidden else None,
                        max_seeds, keep_ratio, stats)
