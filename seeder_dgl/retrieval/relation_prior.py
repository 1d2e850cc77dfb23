"""A learned relation prior for K-hop-with-filtering: which relations a question follows, hop by hop.

K-hop-with-filtering scores a neighbour ``u`` reached over ``v -r-> u`` with
``sim(q,u)/3 + (sim(q,v) + sim(q,r))/3``. With a general-purpose sentence encoder ``sim(q,r)`` is a
weak signal: for "which movies have the same director of Freaky Friday" MiniLM ranks the
relation "starred actors" (0.30) above "directed by" (0.22), so at hop 2 the director's other
films lose their places to films reached through the year and genre hubs, and the subgraph
misses the answer before the policy ever sees it.

The prior replaces ``sim(q,r)`` at hop ``h`` with ``p_h(r | q)``: the probability that relation
``r`` is the ``h``-th step of the relation path from the question's seeds to its answers. It is a
small network (one ReLU layer, one output per hop and relation) on the embedding of the
question's template: the question with the names of its linked seeds masked ("what films did X
act in"), since which relations a question follows depends on its wording, not on the entity it
names, and in a sentence embedding the name dominates. It is fitted on the training questions
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

from seeder_dgl.retrieval.linking import question_template
from seeder_dgl.retrieval.memory import GraphArrays

UNREACHED = np.iinfo(np.int16).max


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
            order = np.argsort(rel, kind="stable")
            rel, nbr = rel[order], nbr[order]
            cuts = np.flatnonzero(np.diff(rel)) + 1
            for r_group, n_group in zip(np.split(rel, cuts), np.split(nbr, cuts)):
                if r_group.size == 0:
                    continue
                reached = np.unique(n_group)
                hit = int(is_answer[reached].sum())
                step = (*path, int(r_group[0]))
                if hit:
                    f1 = 2 * hit / (reached.size + num_answers)
                    if f1 > best + 1e-12:
                        best, best_paths = f1, [step]
                    elif abs(f1 - best) <= 1e-12 and len(step) == len(best_paths[0]):
                        best_paths.append(step)
                if reached.size <= max_reached:
                    grown.append((step, reached))
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


PRIOR_INPUTS = ("question", "template")


@dataclass(frozen=True)
class RelationPrior:
    """``p_h(r | q) = σ(W_h,r · f(q̂) + b_h,r)`` for hops ``h = 1..hops`` and the dataset's relations.

    ``f`` is the identity (a logistic regression, ``hidden_weight`` None) or one ReLU layer
    ``f(q̂) = max(0, q̂ H + c)``. ``q̂`` is the unit embedding of the question itself
    (``input='question'``) or of its template, the question with the names of its linked seeds
    masked (``input='template'``, ``question_template``); a template prior embeds the template
    with the encoder given to ``bind``.
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
    """'question' or 'template' (see the class docstring)."""
    encode: Callable[[list[str]], np.ndarray] | None = field(default=None, compare=False, repr=False)
    """Texts -> embeddings [n, d] with the dataset's encoder (``bind``); needed for templates."""

    def __post_init__(self):
        if self.input not in PRIOR_INPUTS:
            raise ValueError(f"relation prior input {self.input!r} is not one of {PRIOR_INPUTS}")

    @property
    def hops(self) -> int:
        return int(self.weight.shape[0])

    def bind(self, encode: Callable[[list[str]], np.ndarray]) -> "RelationPrior":
        """The prior embedding its templates with ``encode`` (e.g. ``TextEncoder.encode_queries``)."""
        return replace(self, encode=encode)

    def scores(self, query_emb: np.ndarray, hops: int | None = None) -> np.ndarray:
        """float64 [hops, R] in (0, 1) for one input embedding (the question's or its template's,
        per ``input``); hops past the fitted ones repeat the last."""
        q = np.asarray(query_emb, dtype=np.float64).reshape(-1)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        if self.hidden_weight is not None:
            q = np.maximum(q @ self.hidden_weight + self.hidden_bias, 0.0)
        logits = np.einsum("hrd,d->hr", self.weight, q) + self.bias
        out = 1.0 / (1.0 + np.exp(-logits))
        if hops is not None and hops > self.hops:
            out = np.concatenate([out, np.repeat(out[-1:], hops - self.hops, axis=0)])
        return out[:hops] if hops is not None else out

    def question_scores(self, question: str, embedding: np.ndarray, names: Sequence[str] = (),
                        hops: int | None = None) -> np.ndarray:
        """``scores`` for a question with embedding ``embedding`` whose linked seeds are ``names``."""
        if self.input == "question":
            return self.scores(embedding, hops)
        if self.encode is None:
            raise RuntimeError("a template relation prior needs an encoder: RelationPrior.bind(encode)")
        return self.scores(self.encode([question_template(question, names)])[0], hops)

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for a in (self.weight, self.bias):
            digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        digest.update(json.dumps(self.relation_types).encode())
        if self.hidden_weight is not None:  # linear question priors keep their fingerprints
            for a in (self.hidden_weight, self.hidden_bias):
                digest.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        if self.input != "question":
            digest.update(self.input.encode())
        return digest.hexdigest()[:16]

    def to_json(self) -> str:
        # Full float64 repr: the prior read back scores exactly as the one that extracted the cache.
        out = {"weight": self.weight.tolist(), "bias": self.bias.tolist(),
               "relation_types": self.relation_types, "stats": self.stats, "input": self.input}
        if self.hidden_weight is not None:
            out.update(hidden_weight=self.hidden_weight.tolist(), hidden_bias=self.hidden_bias.tolist())
        return json.dumps(out)

    @classmethod
    def from_json(cls, text: str) -> "RelationPrior":
        raw = json.loads(text)
        weight = np.asarray(raw["weight"], dtype=np.float64)
        bias = np.asarray(raw["bias"], dtype=np.float64)
        types = [str(t) for t in raw["relation_types"]]
        if weight.ndim != 3 or bias.shape != weight.shape[:2] or weight.shape[1] != len(types):
            raise ValueError(f"relation prior of shape {weight.shape} / {bias.shape} for {len(types)} relations")
        hidden_weight = hidden_bias = None
        if raw.get("hidden_weight") is not None:
            hidden_weight = np.asarray(raw["hidden_weight"], dtype=np.float64)
            hidden_bias = np.asarray(raw["hidden_bias"], dtype=np.float64)
            if hidden_weight.ndim != 2 or hidden_bias.shape != (hidden_weight.shape[1],) \
                    or hidden_weight.shape[1] != weight.shape[2]:
                raise ValueError(f"relation prior hidden layer of shape {hidden_weight.shape} / {hidden_bias.shape} "
                                 f"for outputs of width {weight.shape[2]}")
        return cls(weight, bias, types, dict(raw.get("stats") or {}), hidden_weight, hidden_bias,
                   str(raw.get("input", "question")))

    def aligned(self, relation_types: Sequence[str]) -> "RelationPrior":
        """The prior with its columns in ``relation_types`` order; a type it never saw scores σ(-∞) = 0
        (upserts can add relation types after the prior was fitted)."""
        if list(relation_types) == self.relation_types:
            return self
        col = {t: i for i, t in enumerate(self.relation_types)}
        hops, _, d = self.weight.shape
        weight = np.zeros((hops, len(relation_types), d))
        bias = np.full((hops, len(relation_types)), -30.0)
        for j, t in enumerate(relation_types):
            if t in col:
                weight[:, j], bias[:, j] = self.weight[:, col[t]], self.bias[:, col[t]]
        return replace(self, weight=weight, bias=bias, relation_types=list(relation_types))


PRIOR_WEIGHT_DECAY = {True: 2.7e-4, False: 2.7e-5}
"""``fit_relation_prior``'s weight decay with a hidden layer (True) and without, per question's
summed loss: MetaQA's 3 hops x 9 relations times the 1e-5 and 1e-6 its prior was chosen with
per averaged output, so MetaQA keeps the objective it was tuned with, up to a constant factor
(Adam's steps then differ only through its epsilon; the fitted weights are not bit-identical)."""


def fit_relation_prior(query_emb: np.ndarray, labels: np.ndarray, relation_types: Sequence[str], *,
                       hidden: int = 64, weight_decay: float | None = None, steps: int = 1000,
                       lr: float | None = None, seed: int = 0, input: str = "question") -> RelationPrior:
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

    x = np.asarray(query_emb, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
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
    with torch.no_grad():
        final = float(loss_fn(logits(xt), yt))
    w = weight.detach().numpy().T.reshape(hops, r, width)
    stats = {"questions": int(q), "positives_per_hop": y.sum(axis=(0, 2)).astype(int).tolist(),
             "train_bce": round(final, 5), "steps": steps, "weight_decay": weight_decay, "hidden": hidden}
    return RelationPrior(w.copy(), bias.detach().numpy().reshape(hops, r).copy(), list(relation_types), stats,
                         hidden_weight.detach().numpy().copy() if hidden else None,
                         hidden_bias.detach().numpy().copy() if hidden else None, input)
