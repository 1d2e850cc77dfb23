"""A learned relation prior for K-hop-with-filtering: which relations a question follows, hop by hop.

K-hop-with-filtering scores a neighbour ``u`` reached over ``v -r-> u`` with
``sim(q,u)/3 + (sim(q,v) + sim(q,r))/3``. With a general-purpose sentence encoder ``sim(q,r)`` is a
weak signal: for "which movies have the same director of Freaky Friday" MiniLM ranks the
relation "starred actors" (0.30) above "directed by" (0.22), so at hop 2 the director's other
films lose their places to films reached through the year and genre hubs, and the subgraph
misses the answer before the policy ever sees it.

The prior replaces ``sim(q,r)`` at hop ``h`` with ``p_h(r | q)``: the probability that relation
``r`` is the ``h``-th step of the relation path from the question's seeds to its answers. It is a
small network (one output per hop and relation) that reads the question's template: the question
with the names of its linked seeds masked ("what films did X act in"), since which relations a
question follows depends on its wording, not on the entity it names, and in a sentence embedding
the name dominates. It reads the template twice: its sentence embedding (what the question asks
as a whole) and, for each hop, its own attention over the template's token embeddings. "who is the
successor of the parent of X" names its hops word by word, last hop first; one sentence vector
blurs "successor" and "parent" together, a hop's attention can pick its word. It is fitted on the training questions
of the dataset together with the entity linker (``retrieval.link_training``): their topic
entities and answers give the paths in the whole graph, so the labels cost no annotation. The K-hop formula, its float64 rules and the Cypher
statement stay as they are; only the relation term per hop changes
(``khop_select(relation_scores=...)``, ``LiveGraph.khop_filter(relation_scores=...)``).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from seeder_dgl.caching import BatchLRU
from seeder_dgl.retrieval.linking import MASKED, question_template
from seeder_dgl.retrieval.memory import GraphArrays
from seeder_dgl.retrieval.spelling import TemplateWords
from seeder_dgl.threads import FIT_THREADS, fixed_threads

UNREACHED = np.iinfo(np.int16).max
FEATURE_CACHE_SIZE = 2048
"""Templates whose input vectors one bound prior keeps (about 25 MB for a token prior at 384
dimensions): the entity linker and K-hop read the same template of a question, and ``extract``
embeds a batch of them ahead (``retrieval.pipeline.prefetch_linking``)."""


def bfs_distances(graph: GraphArrays, sources: np.ndarray, max_hops: int) -> np.ndarray:
    """int16 [N]: hops from the nearest of ``sources`` (both edge directions), UNREACHED beyond ``max_hops``."""
    dist = np.full(graph.num_nodes, UNREACHED, dtype=np.int16)
    frontier = np.unique(np.asarray(sources, dtype=np.int64))
    dist[frontier] = 0
    for h in range(1, max_hops + 1):
        if frontier.size == 0:
            break
        _, nbr, _ = graph.gather(frontier)
        nbr = np.unique(nbr[dist[nbr] == UNREACHED])
        dist[nbr] = h
        frontier = nbr
    return dist


def seed_paths(graph: GraphArrays, seed: int, is_answer: np.ndarray, num_answers: int, hops: int,
               max_reached: int = 20_000) -> tuple[float, list[tuple[int, ...]]]:
    """The relation sequences of at most ``hops`` steps from ``seed`` whose reached set matches the
    answers (``is_answer``: bool [N], ``num_answers`` of them) best, and that F1 (0.0, [] when no
    sequence reaches an answer); ties keep the sequences as long as the first found.

    Every sequence of relations followed from the seed reaches a set of nodes; its F1 against the
    answers says how well it explains them. Sequences whose set grows past ``max_reached`` nodes
    are not followed further (they cannot be precise)."""
    best, best_paths = 0.0, []
    prefixes = [((), np.asarray([seed], dtype=np.int64))]
    for _ in range(hops):
        grown = []
        for path, nodes in prefixes:
            _, nbr, rel = graph.gather(nodes)
            back = nbr != seed  # a step back to the seed explains nothing
            nbr, rel = nbr[back], rel[back]
            if nbr.size == 0:
                continue
            # Each relation's reached set, sorted and without repeats, from one sort of the (relation,
            # node) pairs: a np.unique per relation took a third of MetaQA's prior fit.
            order = np.lexsort((nbr, rel))
            rel, nbr = rel[order], nbr[order]
            first = np.ones(rel.size, dtype=bool)
            first[1:] = (rel[1:] != rel[:-1]) | (nbr[1:] != nbr[:-1])
            rel, nbr = rel[first], nbr[first]
            starts = np.flatnonzero(np.r_[True, rel[1:] != rel[:-1]])
            sizes = np.diff(np.r_[starts, rel.size])
            hits = np.add.reduceat(is_answer[nbr].astype(np.int64), starts)
            for start, size, hit in zip(starts.tolist(), sizes.tolist(), hits.tolist()):
                step = (*path, int(rel[start]))
                if hit:
                    f1 = 2 * hit / (size + num_answers)
                    if f1 > best + 1e-12:
                        best, best_paths = f1, [step]
                    elif abs(f1 - best) <= 1e-12 and len(step) == len(best_paths[0]):
                        best_paths.append(step)
                if size <= max_reached:
                    grown.append((step, nbr[start:start + size]))
        prefixes = grown
    return best, best_paths


def answer_mask(num_nodes: int, answers: Sequence[int]) -> np.ndarray:
    is_answer = np.zeros(num_nodes, dtype=bool)
    is_answer[np.asarray(answers, dtype=np.int64)] = True
    return is_answer


def path_relations(graph: GraphArrays, seeds: Sequence[int], answers: Sequence[int], hops: int,
                   num_relations: int, max_reached: int = 20_000) -> np.ndarray | None:
    """bool [hops, R]: relation r is step h of a relation path that best explains the answers;
    None when no path of at most ``hops`` steps from a seed reaches an answer.

    The best sequences are those whose reached set matches the answers best (F1 of the set
    against the answers, then the shorter; ``seed_paths``). Shortest paths alone would not do:
    through a hub (a year, a genre) almost every film is two steps from every other, so "films by
    the same director" would also teach "same year" and "same genre". Steps after a path's end stay
    False: a 1-hop question says that nothing is worth following at hops 2 and 3.
    """
    answers = np.unique(np.asarray(answers, dtype=np.int64))
    seeds = np.unique(np.asarray(seeds, dtype=np.int64))
    if seeds.size == 0 or answers.size == 0:
        return None
    is_answer = answer_mask(graph.num_nodes, answers)
    best, best_paths = 0.0, []
    for s in seeds:
        f1, paths = seed_paths(graph, int(s), is_answer, answers.size, hops, max_reached)
        if not paths:
            continue
        if f1 > best + 1e-12:
            best, best_paths = f1, list(paths)
        elif abs(f1 - best) <= 1e-12:
            best_paths += [p for p in paths if len(p) == len(best_paths[0])]
    if not best_paths:
        return None
    labels = np.zeros((hops, num_relations), dtype=bool)
    for path in best_paths:
        for h, r in enumerate(path):
            labels[h, r] = True
    return labels


PRIOR_INPUTS = ("question", "template", "tokens")


def unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


TOKEN_NORM = 7.0
"""The mean length a token prior scales its token embeddings to (what all-MiniLM-L6-v2's have,
the scale its decay and learning rate were chosen at). Their lengths differ from token to token
and stay so: scaled to unit length each, the prior read hop 3 of MLPQ's validation questions
worse (0.68 against 0.71 top-1)."""


TOPIC_DISTANCES = (1, 2, 3, 4, 6, 9, 13)
"""Lower edges of the distance buckets, in tokens, from a template's token to the nearest token of
its masked topic: 0 (the topic itself), 1, 2, 3, 4-5, 6-8, 9-12 and 13 or more, before or after it."""
TOPIC_BUCKETS = 2 * len(TOPIC_DISTANCES) + 2
"""Buckets of ``topic_positions``: the signed distances (0 .. 2·len(TOPIC_DISTANCES)) and ``NO_TOPIC``."""
NO_TOPIC = TOPIC_BUCKETS - 1
"""The bucket of every token of a template with no masked topic (or whose token spans are unknown)."""


def topic_positions(template: str, spans: np.ndarray | None, count: int) -> np.ndarray:
    """int64 [count]: each token's bucket of its signed distance to the nearest token of a masked
    name (``PLACEHOLDER`` in ``question_template``'s output).

    Which step of a path a phrase names follows from where it stands: "the successor of the parent
    of X", "who directed the films starring X" name hop 1 next to the topic and later hops further
    out. A contextual token embedding carries its position only faintly, so each hop's attention gets
    a learned bias per bucket (``RelationPrior.topic_bias``). ``spans`` [count, 2] are the tokens'
    character spans in ``template`` (special tokens (0, 0)); None (a tokenizer without offsets)
    gives ``NO_TOPIC`` throughout, as does a template with nothing masked.
    """
    out = np.full(count, NO_TOPIC, dtype=np.int64)
    masks = [m.span() for m in MASKED.finditer(template)]
    if spans is None or not masks or count == 0:
        return out
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if spans.shape[0] != count:
        return out
    real = spans[:, 1] > spans[:, 0]
    topic = np.zeros(count, dtype=bool)
    for lo, hi in masks:
        topic |= real & (spans[:, 0] < hi) & (spans[:, 1] > lo)
    at = np.flatnonzero(topic)
    if at.size == 0:
        return out
    index = np.arange(count)
    signed = index - at[np.abs(index[:, None] - at[None, :]).argmin(axis=1)]
    size = np.searchsorted(TOPIC_DISTANCES, np.abs(signed), side="right")
    return len(TOPIC_DISTANCES) + np.sign(signed) * size


def attention_pool(tokens: np.ndarray, query: np.ndarray, scale: float = 1.0,
                   bias: np.ndarray | None = None) -> np.ndarray:
    """float64 [hops, d]: for each row ``u_h`` of ``query`` [hops, d], the token embeddings
    ``tokens`` [T, d] times ``scale`` averaged with weights ``softmax_i(t_i · u_h + bias_h,i)``
    (``bias`` [hops, T], default none; zeros for no tokens)."""
    t = np.asarray(tokens, dtype=np.float64).reshape(-1, query.shape[1]) * scale
    if t.shape[0] == 0:
        return np.zeros_like(query, dtype=np.float64)
    logits = t @ query.T
    if bias is not None:
        logits = logits + np.asarray(bias, dtype=np.float64).T
    weights = np.exp(logits - logits.max(axis=0, keepdims=True))
    return (weights / weights.sum(axis=0, keepdims=True)).T @ t


def _relation_mask(relations: np.ndarray | None, count: int) -> np.ndarray | None:
    """``relations`` as bool [count] (cut or padded with False), or None when it holds none."""
    if relations is None:
        return None
    given = np.asarray(relations, dtype=bool).reshape(-1)[:count]
    if not given.any():
        return None
    return np.concatenate([given, np.zeros(count - given.size, dtype=bool)])


@dataclass(frozen=True)
class RelationPrior:
    """``p_h(r | q) = σ(W_h,r · f_h(q) + b_h,r)`` for hops ``h = 1..hops`` and the dataset's relations.

    ``f_h(q) = f(q̂)``: the identity (a logistic regression, ``hidden_weight`` None) or one ReLU
    layer ``f(q̂) = max(0, q̂ H + c)``. ``q̂`` is the unit embedding of the question itself
    (``input='question'``) or of its template, the question with the names of its linked seeds
    masked (``input='template'``, ``question_template``).

    ``input='tokens'`` reads the template's token embeddings ``t_1..t_T`` (times ``token_scale``) as well, hop by
    hop: ``a_h = softmax_i(t_i · u_h + c_h,b(i))`` with ``b(i)`` the bucket of token i's distance to
    the masked topic (``topic_positions``; ``c`` is ``topic_bias``, zero where None),
    ``g_h = max(0, (Σ_i a_h,i t_i) P_h + e_h)`` and
    ``f_h(q) = [f(q̂), g_h]``. Its input vector (``features``) is ``q̂`` followed by the ``hops``
    pooled token vectors, so ``scores`` takes one fixed-size vector as for the others.

    Template and token priors embed with the encoder given to ``bind``.
    """

    weight: np.ndarray
    """float64 [hops, R, k]: k = d without a hidden layer, else the hidden width."""
    bias: np.ndarray
    """float64 [hops, R]."""
    relation_types: list[str]
    """The relation types the columns stand for (the dataset record's order)."""
    stats: dict
    """How it was fitted: questions used, positives per hop, training loss."""
    hidden_weight: np.ndarray | None = None
    """float64 [d, k]: the hidden layer (None: a logistic regression on q̂)."""
    hidden_bias: np.ndarray | None = None
    """float64 [k]."""
    input: str = "question"
    """'question', 'template' or 'tokens' (see the class docstring)."""
    token_query: np.ndarray | None = None
    """float64 [hops, d]: ``u_h``, what hop h's attention looks for in the tokens ('tokens' only)."""
    token_weight: np.ndarray | None = None
    """float64 [hops, d, k2]: ``P_h``, the pooled tokens' ReLU layer ('tokens' only)."""
    token_bias: np.ndarray | None = None
    """float64 [hops, k2]: ``e_h``."""
    token_scale: float = 1.0
    """What the token embeddings are multiplied by before the attention (``TOKEN_NORM`` over their
    mean length in the fit)."""
    topic_bias: np.ndarray | None = None
    """float64 [hops, TOPIC_BUCKETS]: ``c_h``, what hop h's attention adds to a token's logit by its
    distance to the masked topic ('tokens' only; None: content alone, as priors fitted before it)."""
    step_weight: np.ndarray | None = None
    """float64 [hops, k]: the step head (None: priors fitted before it, one sigmoid per relation).
    With it, ``p_h(r | q) = σ(s_h · f_h(q) + a_h) · exp(l_h,r − max_r' l_h,r')`` where ``l_h`` are the
    relation logits (``weight``, ``bias``): whether the path takes step h at all comes from a head of
    its own, which relation it takes from a softmax over relations scaled so that the likeliest one
    carries the step's probability."""
    step_bias: np.ndarray | None = None
    """float64 [hops]: ``a_h``."""
    name_emb: np.ndarray | None = None
    """float64 [R, d]: the relation names' unit embeddings, read by ``name_gain`` (None: priors fitted
    before it, or without names)."""
    name_gain: np.ndarray | None = None
    """float64 [hops]: ``β_h``. A token prior with it adds ``β_h cos(ā_h, n_r)`` to relation r's logit at
    hop h, with ``ā_h`` hop h's attention-pooled tokens and ``n_r`` the relation's name embedding: a
    word no training template used still reads as the relation whose name it resembles
    ("what is X tagged with" -> has_tags)."""
    words: TemplateWords | None = None
    """The words of the templates it was fitted on: a template word it never saw is read as the
    nearest of them within a typo (``retrieval.spelling``). None: priors fitted before it read every
    word as typed."""
    answer_type_names: list[str] | None = None
    """The node types the answer-type head reads as (the graph's when it was fitted); None: priors
    fitted before it, or on a graph without types."""
    answer_type_weight: np.ndarray | None = None
    """float64 [F, T]: the answer-type head, ``p(t | q) = softmax(ANSWER_TYPE_SCALE · x̂ W + c)`` on
    the unit input vector x̂ (``features``; the question's embedding for a question prior): which
    type of node the question asks for ("which films ..." a movie, "who ..." a person)."""
    answer_type_bias: np.ndarray | None = None
    """float64 [T]: ``c``."""
    encode: Callable[[list[str]], np.ndarray] | None = field(default=None, compare=False, repr=False)
    """Texts -> embeddings [n, d] with the dataset's encoder (``bind``); needed for templates."""
    encode_tokens: Callable[[list[str]], tuple[np.ndarray, list[np.ndarray], list]] | None = field(
        default=None, compare=False, repr=False)
    """Texts -> (embeddings [n, d], token embeddings [T_i, d] each, token character spans [T_i, 2]
    or None each) from one pass of the dataset's encoder (``TextEncoder.encode_query_tokens``);
    needed for token priors."""
    _features: BatchLRU = field(default_factory=lambda: BatchLRU(FEATURE_CACHE_SIZE), init=False, compare=False,
                                repr=False)

    def __post_init__(self):
        if self.input not in PRIOR_INPUTS:
            raise ValueError(f"relation prior input {self.input!r} is not one of {PRIOR_INPUTS}")
        if (self.input == "tokens") != (self.token_query is not None):
            raise ValueError("a relation prior reads tokens exactly when it has token weights")
        if self.topic_bias is not None and (self.token_query is None
                                            or self.topic_bias.shape != (self.hops, TOPIC_BUCKETS)):
            raise ValueError(f"relation prior topic bias of shape {self.topic_bias.shape}: expected "
                             f"({self.hops}, {TOPIC_BUCKETS}) on a token prior")
        if (self.step_weight is None) != (self.step_bias is None) or (
                self.step_weight is not None and (self.step_weight.shape != (self.hops, self.weight.shape[2])
                                                  or self.step_bias.shape != (self.hops,))):
            raise ValueError(f"relation prior step head of shape "
                             f"{None if self.step_weight is None else self.step_weight.shape}: expected "
                             f"({self.hops}, {self.weight.shape[2]}) with a bias of ({self.hops},)")
        if (self.name_gain is None) != (self.name_emb is None) or (self.name_gain is not None and (
                self.token_query is None or self.name_gain.shape != (self.hops,)
                or self.name_emb.shape != (self.weight.shape[1], self.token_query.shape[1]))):
            raise ValueError(f"relation prior name reading of shape "
                             f"{None if self.name_emb is None else self.name_emb.shape}: expected a token prior's "
                             f"({self.weight.shape[1]}, d) names with a gain of ({self.hops},)")

        head = (self.answer_type_names, self.answer_type_weight, self.answer_type_bias)
        if any(a is not None for a in head) and (
                any(a is None for a in head) or self.answer_type_weight.ndim != 2
                or self.answer_type_weight.shape[1] != len(self.answer_type_names)
                or self.answer_type_bias.shape != (len(self.answer_type_names),)):
            raise ValueError(f"relation prior answer-type head of shape "
                             f"{None if self.answer_type_weight is None else self.answer_type_weight.shape}: "
                             f"expected (F, T) with a bias of (T,) for T type names")

    @property
    def hops(self) -> int:
        return int(self.weight.shape[0])

    def bind(self, encode: Callable[[list[str]], np.ndarray],
             encode_tokens: Callable[[list[str]], tuple[np.ndarray, list[np.ndarray], list]] | None = None
             ) -> "RelationPrior":
        """The prior embedding its templates with ``encode`` (e.g. ``TextEncoder.encode_queries``)
        and, for a token prior, ``encode_tokens`` (``TextEncoder.encode_query_tokens``)."""
        return replace(self, encode=encode, encode_tokens=encode_tokens)

    def bind_encoder(self, encoder) -> "RelationPrior":
        """``bind`` to a ``TextEncoder``'s query methods (the in-memory cache live queries use)."""
        return self.bind(encoder.encode_queries, encoder.encode_query_tokens)

    @property
    def reads_templates(self) -> bool:
        return self.input != "question"

    @property
    def bound(self) -> bool:
        """Whether the prior can read templates (it has the encoder it needs)."""
        return self.encode_tokens is not None if self.input == "tokens" else self.encode is not None

    def features(self, templates: Sequence[str]) -> np.ndarray:
        """float64 [n, F]: the input vectors ``scores`` reads for these templates (their unit
        embeddings; for a token prior followed by each hop's attention-pooled tokens). The last
        ``FEATURE_CACHE_SIZE`` distinct templates are kept; the ones missing are embedded in one
        batch. Safe to call from several threads."""
        templates = [str(t) for t in templates]
        if self.input == "question":
            raise RuntimeError("a question relation prior reads the question's embedding, not templates")
        rows = self._features.get_many(templates, self._embed)
        if not templates:
            return np.zeros((0, 0))
        return np.stack(rows)

    def _embed(self, templates: list[str]) -> np.ndarray:
        if self.words is not None:
            templates = [self.words.spell(t) for t in templates]
        if self.input == "template":
            if self.encode is None:
                raise RuntimeError("a template relation prior needs an encoder: RelationPrior.bind(encode)")
            return np.asarray(self.encode(templates), dtype=np.float64).reshape(len(templates), -1)
        if self.encode_tokens is None:
            raise RuntimeError("a token relation prior needs a token encoder: RelationPrior.bind_encoder(encoder)")
        sentences, tokens, spans = self.encode_tokens(templates)
        pooled = [attention_pool(t, self.token_query, self.token_scale, self._topic_logits(text, s, len(t))).reshape(-1)
                  for text, t, s in zip(templates, tokens, spans)]
        return np.concatenate([np.asarray(sentences, dtype=np.float64).reshape(len(templates), -1),
                               np.asarray(pooled, dtype=np.float64).reshape(len(templates), -1)], axis=1)

    def _topic_logits(self, template: str, spans, count: int) -> np.ndarray | None:
        if self.topic_bias is None:
            return None
        return self.topic_bias[:, topic_positions(template, spans, count)]

    def scores(self, query_emb: np.ndarray, hops: int | None = None,
               first_relations: np.ndarray | None = None) -> np.ndarray:
        """float64 [hops, R] in (0, 1) for one input vector (the question's or its template's
        embedding, per ``input``; a token prior's ``features``); hops past the fitted ones repeat
        the last.

        ``first_relations`` (bool [R]: the relation types the question's seeds have) makes the
        likeliest of them carry the first step's probability, and the others 0 (with the step head):
        hop 1 leaves the seeds, so a relation they lack cannot be the question's first step. A wording the prior has
        not seen ("the films X made") often reads as the commonest first step (starring), where X,
        a director, has only 'directed by'."""
        x = np.asarray(query_emb, dtype=np.float64).reshape(-1)
        pooled = None
        if self.token_query is not None:
            d = self.token_query.shape[1]
            x, pooled = x[:-self.hops * d], x[-self.hops * d:].reshape(self.hops, d)
        q = x / max(float(np.linalg.norm(x)), 1e-12)
        if self.hidden_weight is not None:
            q = np.maximum(q @ self.hidden_weight + self.hidden_bias, 0.0)
        q = np.broadcast_to(q, (self.hops, q.shape[0]))
        if pooled is not None:
            g = np.maximum(np.einsum("hd,hdk->hk", pooled, self.token_weight) + self.token_bias, 0.0)
            q = np.concatenate([q, g], axis=1)
        logits = np.einsum("hrd,hd->hr", self.weight, q) + self.bias
        if self.name_gain is not None:
            unit = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            logits = logits + self.name_gain[:, None] * (unit @ self.name_emb.T)
        if self.step_weight is None:
            out = 1.0 / (1.0 + np.exp(-logits))
        else:
            step = np.einsum("hk,hk->h", self.step_weight, q) + self.step_bias
            top = logits.max(axis=1, keepdims=True)
            has = _relation_mask(first_relations, logits.shape[1])
            if has is not None:
                top[0] = logits[0, has].max()
            out = np.exp(logits - top) / (1.0 + np.exp(-step))[:, None]
            if has is not None:
                out[0, ~has] = 0.0
        if hops is not None and hops > self.hops:
            out = np.concatenate([out, np.repeat(out[-1:], hops - self.hops, axis=0)])
        return out[:hops] if hops is not None else out

    def question_scores(self, question: str, embedding: np.ndarray, names: Sequence[str] = (),
                        hops: int | None = None, first_relations: np.ndarray | None = None) -> np.ndarray:
        """``scores`` for a question with embedding ``embedding`` whose linked seeds are ``names``
        (and have the relation types ``first_relations``, see ``scores``)."""
        return self.scores(self.input_vector(question, embedding, names), hops, first_relations)

    def input_vector(self, question: str, embedding: np.ndarray, names: Sequence[str] = ()) -> np.ndarray:
        """What ``scores`` and ``answer_types`` read for a question with embedding ``embedding`` whose
        linked seeds are ``names``: the embedding itself for a question prior, else its template's
        ``features`` (cached, so the relation terms and the answer types embed it once)."""
        if self.input == "question":
            return embedding
        return self.features([question_template(question, names)])[0]

    def answer_types(self, features: np.ndarray) -> np.ndarray | None:
        """float64 [T] (``answer_type_names``' order): the answer-type head's probabilities for one
        input vector (as ``scores`` reads it), or None without a head."""
        if self.answer_type_weight is None:
            return None
        x = np.asarray(features, dtype=np.float64).reshape(-1)
        logits = ANSWER_TYPE_SCALE * (x / max(float(np.linalg.norm(x)), 1e-12)) @ self.answer_type_weight
        logits = logits + self.answer_type_bias
        p = np.exp(logits - logits.max())
        return p / p.sum()

    def question_answer_types(self, question: str, embedding: np.ndarray,
                              names: Sequence[str] = ()) -> np.ndarray | None:
        """``answer_types`` of the question's ``input_vector``, as ``question_scores`` reads it."""
        if self.answer_type_weight is None:
            return None
        return self.answer_types(self.input_vector(question, embedding, names))

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for a in (self.weight, self.bias):
            digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        digest.update(json.dumps(self.relation_types).encode())
        if self.hidden_weight is not None:  # linear question priors keep their fingerprints
            for a in (self.hidden_weight, self.hidden_bias):
                digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        if self.token_query is not None:
            for a in (self.token_query, self.token_weight, self.token_bias, np.float64(self.token_scale)):
                digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        if self.topic_bias is not None:
            digest.update(np.ascontiguousarray(self.topic_bias, dtype=np.float64).tobytes())
        if self.step_weight is not None:
            for a in (self.step_weight, self.step_bias):
                digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        if self.name_gain is not None:
            for a in (self.name_emb, self.name_gain):
                digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        if self.input != "question":
            digest.update(self.input.encode())
        if self.words is not None:
            digest.update(json.dumps(sorted(self.words.counts.items())).encode())
        if self.answer_type_weight is not None:
            digest.update(json.dumps(self.answer_type_names).encode())
            for a in (self.answer_type_weight, self.answer_type_bias):
                digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        return digest.hexdigest()[:16]

    def to_json(self) -> str:
        # Full float64 repr: the prior read back scores exactly as the one that extracted the cache.
        out = {"weight": self.weight.tolist(), "bias": self.bias.tolist(),
               "relation_types": self.relation_types, "stats": self.stats, "input": self.input}
        if self.hidden_weight is not None:
            out.update(hidden_weight=self.hidden_weight.tolist(), hidden_bias=self.hidden_bias.tolist())
        if self.token_query is not None:
            out.update(token_query=self.token_query.tolist(), token_weight=self.token_weight.tolist(),
                       token_bias=self.token_bias.tolist(), token_scale=self.token_scale)
        if self.topic_bias is not None:
            out.update(topic_bias=self.topic_bias.tolist())
        if self.step_weight is not None:
            out.update(step_weight=self.step_weight.tolist(), step_bias=self.step_bias.tolist())
        if self.name_gain is not None:
            out.update(name_emb=self.name_emb.tolist(), name_gain=self.name_gain.tolist())
        if self.words is not None:
            out.update(words=self.words.to_dict())
        if self.answer_type_weight is not None:
            out.update(answer_type_names=self.answer_type_names, answer_type_weight=self.answer_type_weight.tolist(),
                       answer_type_bias=self.answer_type_bias.tolist())
        return json.dumps(out)

    @classmethod
    def from_json(cls, text: str) -> "RelationPrior":
        raw = json.loads(text)
        weight = np.asarray(raw["weight"], dtype=np.float64)
        bias = np.asarray(raw["bias"], dtype=np.float64)
        types = [str(t) for t in raw["relation_types"]]
        if weight.ndim != 3 or bias.shape != weight.shape[:2] or weight.shape[1] != len(types):
            raise ValueError(f"relation prior of shape {weight.shape} / {bias.shape} for {len(types)} relations")
        tokens = {}
        token_width = 0
        if raw.get("token_query") is not None:
            tokens = {k: np.asarray(raw[k], dtype=np.float64) for k in ("token_query", "token_weight", "token_bias")}
            u, p, e = tokens["token_query"], tokens["token_weight"], tokens["token_bias"]
            if u.ndim != 2 or u.shape[0] != weight.shape[0] or p.ndim != 3 or p.shape[:2] != u.shape \
                    or e.shape != (u.shape[0], p.shape[2]):
                raise ValueError(f"relation prior token weights of shape {u.shape} / {p.shape} / {e.shape} "
                                 f"for {weight.shape[0]} hops")
            token_width = p.shape[2]
            tokens["token_scale"] = float(raw.get("token_scale", 1.0))
            if raw.get("topic_bias") is not None:
                tokens["topic_bias"] = np.asarray(raw["topic_bias"], dtype=np.float64)
            if raw.get("name_gain") is not None:
                tokens["name_emb"] = np.asarray(raw["name_emb"], dtype=np.float64)
                tokens["name_gain"] = np.asarray(raw["name_gain"], dtype=np.float64)
        hidden_weight = hidden_bias = None
        if raw.get("hidden_weight") is not None:
            hidden_weight = np.asarray(raw["hidden_weight"], dtype=np.float64)
            hidden_bias = np.asarray(raw["hidden_bias"], dtype=np.float64)
            if hidden_weight.ndim != 2 or hidden_bias.shape != (hidden_weight.shape[1],) \
                    or hidden_weight.shape[1] + token_width != weight.shape[2]:
                raise ValueError(f"relation prior hidden layer of shape {hidden_weight.shape} / {hidden_bias.shape} "
                                 f"for outputs of width {weight.shape[2]}")
        steps = {k: np.asarray(raw[k], dtype=np.float64) for k in ("step_weight", "step_bias")
                 if raw.get(k) is not None}
        words = raw.get("words")
        if words is not None and (not isinstance(words, dict)
                                  or not all(isinstance(n, int) and n > 0 for n in words.values())):
            raise ValueError("relation prior words are not a table of word counts")
        head = {}
        if raw.get("answer_type_weight") is not None:
            head = {"answer_type_names": [str(t) for t in raw["answer_type_names"]],
                    "answer_type_weight": np.asarray(raw["answer_type_weight"], dtype=np.float64),
                    "answer_type_bias": np.asarray(raw["answer_type_bias"], dtype=np.float64)}
        return cls(weight, bias, types, dict(raw.get("stats") or {}), hidden_weight, hidden_bias,
                   str(raw.get("input", "question")), **tokens, **steps,
                   words=TemplateWords({str(w): int(n) for w, n in words.items()}) if words else None, **head)

    def aligned(self, relation_types: Sequence[str]) -> "RelationPrior":
        """The prior with its columns in ``relation_types`` order; a type it never saw scores σ(-∞) = 0
        (upserts can add relation types after the prior was fitted)."""
        if list(relation_types) == self.relation_types:
            return self
        col = {t: i for i, t in enumerate(self.relation_types)}
        hops, _, d = self.weight.shape
        weight = np.zeros((hops, len(relation_types), d))
        bias = np.full((hops, len(relation_types)), -30.0)
        names = None if self.name_emb is None else np.zeros((len(relation_types), self.name_emb.shape[1]))
        for j, t in enumerate(relation_types):
            if t in col:
                weight[:, j], bias[:, j] = self.weight[:, col[t]], self.bias[:, col[t]]
                if names is not None:
                    names[j] = self.name_emb[col[t]]
        return replace(self, weight=weight, bias=bias, relation_types=list(relation_types), name_emb=names)


ANSWER_TYPE_SCALE = 10.0
"""The answer-type head reads a unit vector: its logits are this times the weights' products, so
that Adam's steps of the same size move them by units."""
ANSWER_TYPE_STEPS = 400
"""Full-batch steps of ``fit_answer_types``."""


@fixed_threads(FIT_THREADS)  # the same fit whatever thread count the command runs with
def fit_answer_types(features: np.ndarray, targets: np.ndarray, *, counts: np.ndarray | None = None,
                     steps: int = ANSWER_TYPE_STEPS, lr: float = 0.05, weight_decay: float = 1e-4,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """(weight [F, T], bias [T], stats): a softmax regression of the answers' node types on the unit
    input vectors ``features`` [Q, F] (what ``RelationPrior.features`` gives for the templates).
    ``targets`` [Q, T]: each question's answers' share per type (rows summing to 1). Full-batch Adam
    on the cross-entropy plus ``weight_decay`` times the squared weights; float64, deterministic.

    ``counts`` [Q]: how many questions each row stands for, its target their mean (``answer_type_rows``
    gives them for questions worded alike): the cross-entropy is linear in the target, so the fit
    is that of the questions one by one, in a fraction of the products."""
    import torch

    x = torch.from_numpy(unit_rows(np.asarray(features, dtype=np.float64)))
    y = torch.from_numpy(np.asarray(targets, dtype=np.float64))
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(f"{x.shape[0]} feature rows for {y.shape[0]} answer-type rows")
    n = torch.ones(x.shape[0], dtype=torch.float64) if counts is None else torch.from_numpy(
        np.asarray(counts, dtype=np.float64))
    if n.shape[0] != x.shape[0] or bool((n <= 0).any()):
        raise ValueError(f"counts must give each of the {x.shape[0]} rows a positive count")
    share = n / n.sum()
    torch.manual_seed(seed)
    weight = torch.zeros(x.shape[1], y.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.log((share @ y).clamp_min(1e-4)).clone().requires_grad_(True)
    opt = torch.optim.Adam([weight, bias], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        logp = torch.log_softmax(ANSWER_TYPE_SCALE * x @ weight + bias, dim=1)
        loss = -(share * (y * logp).sum(1)).sum() + weight_decay * weight.pow(2).sum()
        loss.backward()
        opt.step()
    with torch.no_grad():
        p = torch.softmax(ANSWER_TYPE_SCALE * x @ weight + bias, dim=1)
        right = float((share * (p.argmax(1) == y.argmax(1)).double()).sum())
    stats = {"questions": int(round(float(n.sum()))), "rows": int(x.shape[0]),
             "train_loss": round(float(loss.detach()), 5), "train_top1": round(right, 4), "steps": steps}
    return weight.detach().numpy().copy(), bias.detach().numpy().copy(), stats


def answer_type_rows(templates: Sequence[str], targets: Sequence[np.ndarray]
                     ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct templates in order of first use, each row's template among them [U], the rows'
    mean targets [U, T], counts [U]): what ``fit_answer_types`` reads for questions many of which are
    worded alike (MetaQA's 31,311 training questions have a few thousand templates). A row holds the
    questions of one template whose answers' commonest type is the same, so the fit's share of
    questions it types right is the same as one by one."""
    targets = np.asarray(targets, dtype=np.float64)
    distinct: dict[str, int] = {}
    index: dict[tuple[int, int], int] = {}
    owner = np.asarray([index.setdefault((distinct.setdefault(t, len(distinct)), int(k)), len(index))
                        for t, k in zip(templates, targets.argmax(1))], dtype=np.int64)
    counts = np.bincount(owner, minlength=len(index)).astype(np.float64)
    sums = np.zeros((len(index), targets.shape[1]), dtype=np.float64)
    np.add.at(sums, owner, targets)
    template = np.asarray([t for t, _ in index], dtype=np.int64)
    return list(distinct), template, sums / counts[:, None], counts


TOKEN_DROPOUT = 0.2
"""``fit_token_prior``'s default chance that a token is left out of a fitting step's attention."""

PRIOR_WEIGHT_DECAY = {True: 2.7e-4, False: 2.7e-5}
"""``fit_relation_prior``'s weight decay with a hidden layer (True) and without, per question's
summed loss: MetaQA's 3 hops x 9 relations times the 1e-5 and 1e-6 its prior was chosen with
per averaged output, so MetaQA keeps the objective it was tuned with, up to a constant factor
(Adam's steps then differ only through its epsilon; the fitted weights are not bit-identical)."""


NAME_GAIN_SCALE = 10.0
"""``fit_token_prior`` learns ``β_h / NAME_GAIN_SCALE``: a cosine between two texts moves by tenths
where a logit moves by units, and Adam's steps are of the same size for every parameter."""

TEMPLATE_PRIOR_STEPS = 1000
"""Full-batch steps of ``fit_relation_prior``."""
TOKEN_PRIOR_STEPS = 1500
"""Mini-batch steps of ``fit_token_prior``."""


@fixed_threads(FIT_THREADS)  # the same fit whatever thread count the command runs with
def fit_relation_prior(query_emb: np.ndarray, labels: np.ndarray, relation_types: Sequence[str], *,
                       hidden: int = 64, weight_decay: float | None = None, steps: int = TEMPLATE_PRIOR_STEPS,
                       lr: float | None = None, seed: int = 0, input: str = "question",
                       advance: Callable[[int], object] | None = None) -> RelationPrior:
    """Fit ``labels`` (bool [Q, hops, R]) on the unit input embeddings [Q, d]: one ReLU layer of
    width ``hidden`` (0: a logistic regression), an output per hop and relation.

    Full-batch Adam on each question's binary cross-entropy summed over its hops and relations,
    averaged over the questions, plus ``weight_decay`` times the squared weights (default
    ``PRIOR_WEIGHT_DECAY``); seconds to minutes on a CPU for ten thousand questions.
    Deterministic given ``seed`` (float64, fixed initialisation).

    Summed, not averaged, over the outputs: averaged, the data's pull on each relation's weights
    shrinks with the number of relations while the decay does not, so on a graph of 346 relations
    the decay won and the prior gave every relation about the same small probability (its best
    hop-2 relation was on the answer path for 0.29 of MLPQ's validation questions; summed, 0.86).
    """
    import torch

    x = unit_rows(query_emb)
    y = np.asarray(labels, dtype=np.float64)
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(f"{x.shape[0]} question embeddings for {y.shape[0]} label rows")
    q, hops, r = y.shape
    weight_decay = weight_decay if weight_decay is not None else PRIOR_WEIGHT_DECAY[bool(hidden)]
    lr = lr if lr is not None else (0.01 if hidden else 0.05)
    generator = torch.Generator().manual_seed(seed)
    xt = torch.from_numpy(x)
    yt = torch.from_numpy(y.reshape(q, hops * r))
    width = hidden or x.shape[1]
    matrices = []
    if hidden:
        hidden_weight = (torch.randn(x.shape[1], hidden, dtype=torch.float64, generator=generator)
                         / np.sqrt(x.shape[1])).requires_grad_(True)
        hidden_bias = torch.zeros(hidden, dtype=torch.float64, requires_grad=True)
        matrices.append(hidden_weight)
    # The output layer starts at zero and its bias at the base rates: rare relations begin near 0,
    # the usual first step near its frequency.
    weight = torch.zeros(width, hops * r, dtype=torch.float64, requires_grad=True)
    matrices.append(weight)
    rate = yt.mean(0).clamp(1e-4, 1 - 1e-4)
    bias = torch.log(rate / (1 - rate)).clone().requires_grad_(True)

    def logits(inputs):
        if hidden:
            inputs = torch.relu(inputs @ hidden_weight + hidden_bias)
        return inputs @ weight + bias

    params = matrices + [bias] + ([hidden_bias] if hidden else [])
    opt = torch.optim.Adam(params, lr=lr, weight_decay=0.0)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in range(steps):
        opt.zero_grad()
        data = torch.nn.functional.binary_cross_entropy_with_logits(logits(xt), yt, reduction="sum") / q
        loss = data + weight_decay * sum(m.pow(2).sum() for m in matrices)
        loss.backward()
        opt.step()
        if advance is not None:
            advance(1)
    with torch.no_grad():
        final = float(loss_fn(logits(xt), yt))
    w = weight.detach().numpy().T.reshape(hops, r, width)
    stats = {"questions": int(q), "positives_per_hop": y.sum(axis=(0, 2)).astype(int).tolist(),
             "train_bce": round(final, 5), "steps": steps, "weight_decay": weight_decay, "hidden": hidden}
    return RelationPrior(w.copy(), bias.detach().numpy().reshape(hops, r).copy(), list(relation_types), stats,
                         hidden_weight.detach().numpy().copy() if hidden else None,
                         hidden_bias.detach().numpy().copy() if hidden else None, input)


@fixed_threads(FIT_THREADS)  # the same fit whatever thread count the command runs with
def fit_token_prior(sentences: np.ndarray, tokens: Sequence[np.ndarray], labels: np.ndarray,
                    relation_types: Sequence[str], *, positions: Sequence[np.ndarray] | None = None,
                    relation_emb: np.ndarray | None = None, hidden: int = 64,
                    token_hidden: int = 64, weight_decay: float | None = None, steps: int = TOKEN_PRIOR_STEPS,
                    batch_size: int = 256, lr: float = 0.01, seed: int = 0, step_head: bool = True,
                    token_dropout: float = TOKEN_DROPOUT, name_reading: bool = True,
                    advance: Callable[[int], object] | None = None) -> RelationPrior:
    """Fit a token prior (``input='tokens'``, see ``RelationPrior``) on templates given as their
    embeddings [Q, d] and token embeddings (one [T_i, d] array each), ``labels`` bool [Q, hops, R].

    With ``relation_emb`` [R, d'] (the relation names' embeddings), each relation's output weights
    are ``W_h,r + A_h e_r``: a part of its own and a part read from its name through a map ``A_h``
    shared by all relations, so a relation that few training questions follow borrows from those
    whose names mean the same ("successor", "after", "après"). The sum is what is stored: scoring
    is unchanged. On MLPQ's 346 relations it read hop 3 right for 0.738 of the validation questions
    against 0.717 without (``benchmarks/prior_reading.py``, same templates).

    With ``positions`` (``topic_positions`` of each template, one int array [T_i] each) each hop's
    attention also learns ``topic_bias``, where its words stand relative to the topic. It starts at
    zero and is not decayed. On MLPQ's validation templates worded like no training template it
    read hop 2 right for 0.755 / 0.760 (two seeds) against 0.692 / 0.684 without, hop 3 for 0.833 /
    0.806 against 0.748 / 0.760; on the others within 0.015.

    With ``step_head`` (the default) whether the path takes step h has a head of its own
    (``RelationPrior.step_weight``) and the relation it takes a softmax over relations: the loss
    per question is, for each hop, the binary cross-entropy of the step head against whether the
    hop has a gold relation, plus, where it has, −log of the softmax mass on its gold relations.
    One sigmoid per relation (without it) reads a step whose words it has not seen as no step at
    all. The whole path (every hop's relation, and where it stops) was read right with the step
    head against without: MLPQ validation 0.848 against 0.791 (0.724 against 0.614 where no training
    question has the wording); MetaQA validation 0.978 either way, and its 2-hop questions reworded
    by ``benchmarks/reworded_metaqa.py`` 0.393 against 0.317.

    ``token_dropout``: in each fitting step every token is left out of the attention with this
    probability (a template keeps at least one), so a hop reads several words rather than the one
    it found first; a reworded question often keeps some of them. With 0.2: MLPQ 0.848 (new
    wordings 0.728), reworded MetaQA 0.449; with 0.4: 0.834 (0.695) and 0.487; MetaQA as written
    0.978 in every case.

    The loss without the step head is ``fit_relation_prior``'s (summed over hops and relations,
    averaged over the questions); ``PRIOR_WEIGHT_DECAY[True]`` on the weight matrices in both. It is
    minimised by Adam on batches
    of ``batch_size`` templates for ``steps`` steps with the learning rate falling linearly to 0:
    the attention costs a pass over every token, so a full batch per step would take minutes
    where batches take seconds. Deterministic given ``seed`` (fixed initialisation and order).
    """
    import torch

    s = unit_rows(sentences)
    y = np.asarray(labels, dtype=np.float32)
    q, hops, r = y.shape
    if s.shape[0] != q or len(tokens) != q or q == 0:
        raise ValueError(f"{s.shape[0]} template embeddings and {len(tokens)} token lists for {q} label rows")
    d = s.shape[1]
    weight_decay = weight_decay if weight_decay is not None else PRIOR_WEIGHT_DECAY[True]
    lengths = np.asarray([len(t) for t in tokens], dtype=np.int64)
    norms = [np.linalg.norm(np.asarray(t, dtype=np.float64).reshape(-1, d), axis=1) for t in tokens]
    scale = TOKEN_NORM / max(float(np.concatenate(norms).mean()) if lengths.sum() else 1.0, 1e-12)
    padded = np.zeros((q, max(int(lengths.max()), 1), d), dtype=np.float32)
    buckets = np.full(padded.shape[:2], NO_TOPIC, dtype=np.int64)
    for i, t in enumerate(tokens):
        padded[i, :len(t)] = np.asarray(t, dtype=np.float32).reshape(-1, d) * scale
    if positions is not None:
        if len(positions) != q:
            raise ValueError(f"{len(positions)} topic position lists for {q} templates")
        for i, p in enumerate(positions):
            p = np.asarray(p, dtype=np.int64).reshape(-1)
            if p.shape[0] != lengths[i] or (p.size and (p.min() < 0 or p.max() >= TOPIC_BUCKETS)):
                raise ValueError(f"template {i}: {p.shape[0]} topic positions for {lengths[i]} tokens")
            buckets[i, :len(p)] = p
    generator = torch.Generator().manual_seed(seed)
    x_all, t_all, b_all = torch.from_numpy(s.astype(np.float32)), torch.from_numpy(padded), torch.from_numpy(buckets)
    len_all, y_all = torch.from_numpy(lengths), torch.from_numpy(y.reshape(q, hops * r))

    def param(*shape, scale: float = 0.0):
        init = torch.randn(*shape, generator=generator) * scale if scale else torch.zeros(*shape)
        return init.requires_grad_(True)

    hidden_weight, hidden_bias = param(d, hidden, scale=d ** -0.5), param(hidden)
    token_query = param(hops, d)  # uniform attention (the mean token) to start with
    topic_bias = param(hops, TOPIC_BUCKETS)
    token_weight, token_bias = param(hops, d, token_hidden, scale=d ** -0.5), param(hops, token_hidden)
    weight = param(hops, hidden + token_hidden, r)
    rate = y_all.mean(0).clamp(1e-4, 1 - 1e-4)
    bias = torch.log(rate / (1 - rate)).reshape(hops, r).clone().requires_grad_(True)
    matrices = [hidden_weight, token_weight, weight]
    step_weight = step_bias = None
    y_step = torch.from_numpy(y.max(axis=2))  # [Q, hops]: the hop has a gold relation
    if step_head:
        step_weight = param(hops, hidden + token_hidden)
        go = y_step.mean(0).clamp(1e-4, 1 - 1e-4)
        step_bias = torch.log(go / (1 - go)).clone().requires_grad_(True)
        bias = torch.zeros(hops, r, requires_grad=True)
        matrices.append(step_weight)
    names = None
    if relation_emb is not None:
        names = torch.from_numpy(unit_rows(relation_emb).astype(np.float32))
        if names.shape[0] != r:
            raise ValueError(f"{names.shape[0]} relation embeddings for {r} relations")
        name_map = param(hops, hidden + token_hidden, names.shape[1], scale=(hidden + token_hidden) ** -0.5)
        matrices.append(name_map)
    name_gain = param(hops) if names is not None and name_reading else None

    def output_weight():
        return weight if names is None else weight + torch.einsum("hkd,rd->hkr", name_map, names)

    def logits(x, t, n, b, dropout: float = 0.0):
        """Relation logits [B, hops, R] and step logits [B, hops] (zeros without the step head)."""
        keep = torch.arange(t.shape[1]) < n.clamp(min=1)[:, None]  # [B, T]; a template without tokens reads zeros
        if dropout:
            kept = keep & (torch.rand(keep.shape, generator=generator) >= dropout)
            keep = torch.where(kept.any(1, keepdim=True), kept, keep)
        attend = torch.einsum("btd,hd->bht", t, token_query)
        if positions is not None:
            attend = attend + topic_bias[:, b].permute(1, 0, 2)  # [B, hops, T]
        attend = attend.masked_fill(~keep[:, None, :], float("-inf"))
        pooled = torch.einsum("bht,btd->bhd", attend.softmax(-1), t)
        g = torch.relu(torch.einsum("bhd,hdk->bhk", pooled, token_weight) + token_bias)
        f = torch.relu(x @ hidden_weight + hidden_bias)[:, None, :].expand(-1, hops, -1)
        z = torch.cat([f, g], -1)
        step = torch.einsum("bhk,hk->bh", z, step_weight) + step_bias if step_head else z.new_zeros(z.shape[:2])
        out = torch.einsum("bhk,hkr->bhr", z, output_weight()) + bias
        if name_gain is not None:  # the pooled words read against the relations' names, no weights in between
            unit = pooled / pooled.norm(dim=-1, keepdim=True).clamp(min=1e-12)
            out = out + (NAME_GAIN_SCALE * name_gain)[None, :, None] * torch.einsum("bhd,rd->bhr", unit, names)
        return out, step

    def data_loss(out, step, target, target_step):
        """Summed over hops (and relations), not yet averaged over the questions."""
        if not step_head:
            return torch.nn.functional.binary_cross_entropy_with_logits(out, target, reduction="sum")
        gold = torch.logsumexp(out.log_softmax(-1).masked_fill(target < 0.5, float("-inf")), -1)
        taken = target_step > 0.5
        return (torch.nn.functional.binary_cross_entropy_with_logits(step, target_step, reduction="sum")
                - torch.where(taken, gold, torch.zeros_like(gold)).sum())

    opt = torch.optim.Adam(matrices + [hidden_bias, token_query, token_bias, bias, topic_bias]
                           + ([step_bias] if step_head else []) + ([name_gain] if name_gain is not None else []), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / steps)
    order = torch.randperm(q, generator=generator)
    at = 0
    for _ in range(steps):
        if at + batch_size > q:
            order, at = torch.randperm(q, generator=generator), 0
        idx = order[at:at + batch_size]
        at += batch_size
        n = len_all[idx]
        width = max(int(n.max()), 1)
        opt.zero_grad()
        out, step = logits(x_all[idx], t_all[idx, :width], n, b_all[idx, :width], token_dropout)
        data = data_loss(out, step, y_all[idx].reshape(len(idx), hops, r), y_step[idx]) / len(idx)
        loss = data + weight_decay * sum(m.pow(2).sum() for m in matrices)
        loss.backward()
        opt.step()
        schedule.step()
        if advance is not None:
            advance(1)
    with torch.no_grad():
        total = 0.0
        for lo in range(0, q, 1024):
            out, step = logits(x_all[lo:lo + 1024], t_all[lo:lo + 1024], len_all[lo:lo + 1024], b_all[lo:lo + 1024])
            total += float(data_loss(out, step, y_all[lo:lo + 1024].reshape(-1, hops, r), y_step[lo:lo + 1024]))

    def out(tensor):
        return tensor.detach().double().numpy().copy()

    stats = {"questions": int(q), "positives_per_hop": y.sum(axis=(0, 2)).astype(int).tolist(),
             "train_loss": round(total / (q * hops * r), 5), "steps": steps, "batch_size": batch_size,
             "weight_decay": weight_decay, "hidden": hidden, "token_hidden": token_hidden,
             "relation_names": names is not None, "topic_positions": positions is not None,
             "step_head": step_head, "token_dropout": token_dropout}
    reading = {}
    if name_gain is not None:
        reading = {"name_emb": names.double().numpy().copy(), "name_gain": out(NAME_GAIN_SCALE * name_gain)}
        stats["name_gain"] = [round(float(b), 3) for b in reading["name_gain"]]
    return RelationPrior(out(output_weight()).transpose(0, 2, 1).copy(), out(bias), list(relation_types), stats,
                         out(hidden_weight), out(hidden_bias), "tokens", out(token_query), out(token_weight),
                         out(token_bias), scale, out(topic_bias) if positions is not None else None,
                         out(step_weight) if step_head else None, out(step_bias) if step_head else None, **reading)
