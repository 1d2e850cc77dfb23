"""The relation prior's answer-type head: fitted on the templates' answers, stored with the prior,
carried by the subgraph records and their cache, and multiplied into the ranking."""
from __future__ import annotations

import json

import numpy as np
import pytest

from seeder_dgl.retrieval.link_training import with_answer_types as fit_head
from seeder_dgl.retrieval.pipeline import RetrievalSettings
from seeder_dgl.retrieval.relation_prior import RelationPrior, answer_type_rows, fit_answer_types
from seeder_dgl.subgraph.cache import load_shard, save_shard
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training.checkpoint import FeatureRows, Preprocessing
from seeder_dgl.training.ranking import ANSWER_TYPE_FLOOR, with_answer_types


class _WordEncoder:
    """Embeds a text as the sum of a fixed random vector per word (the same words, the same vector)."""

    def __init__(self, dim: int = 12):
        self.dim, self.vectors, self.seen = dim, {}, []

    def __call__(self, texts):
        self.seen.extend(texts)
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            for word in text.split():
                if word not in self.vectors:
                    seed = sum(ord(c) * 31 ** k for k, c in enumerate(word)) % 2 ** 32
                    self.vectors[word] = np.random.default_rng(seed).normal(size=self.dim)
                out[i] += self.vectors[word]
        return out


def _template_prior(dim: int = 12) -> RelationPrior:
    rng = np.random.default_rng(0)
    return RelationPrior(rng.normal(size=(2, 3, dim)), rng.normal(size=(2, 3)), ["a", "b", "c"], {},
                         input="template")


class _TypedGraph:
    """What ``with_answer_types`` reads of an in-memory graph: each node's type."""

    def __init__(self, node_type, names):
        self.node_type, self.node_type_names = np.asarray(node_type, dtype=np.int64), names


FILM_WORDS = ("which films", "what movies", "what films", "which movies")
PERSON_WORDS = ("who", "which person", "who was it that")


def _questions(count: int, seed: int):
    """Templates asking for a film (answers 0-9, type 0) or a person (10-19, type 1)."""
    rng = np.random.default_rng(seed)
    templates, answers = [], []
    for i in range(count):
        if i % 2:
            templates.append(f"{FILM_WORDS[rng.integers(len(FILM_WORDS))]} did x star in")
            answers.append([int(rng.integers(0, 10))])
        else:
            templates.append(f"{PERSON_WORDS[rng.integers(len(PERSON_WORDS))]} directed x")
            answers.append([int(rng.integers(10, 20))])
    return templates, answers


def test_the_head_learns_which_type_a_wording_asks_for_and_is_deterministic():
    encode = _WordEncoder()
    prior = _template_prior().bind(encode)
    graph = _TypedGraph([0] * 10 + [1] * 10, ["movie", "person"])
    templates, answers = _questions(60, 0)
    fitted = fit_head(prior, graph, templates, answers)
    again = fit_head(prior, graph, templates, answers)
    np.testing.assert_array_equal(fitted.answer_type_weight, again.answer_type_weight)
    assert fitted.answer_type_names == ["movie", "person"]
    assert fitted.stats["answer_types"]["train_top1"] == 1.0
    films = fitted.question_answer_types("which films did Ann star in", np.zeros(12), ["Ann"])
    people = fitted.question_answer_types("who directed Ann", np.zeros(12), ["Ann"])
    assert films[0] > 0.9 and people[1] > 0.9
    np.testing.assert_allclose(films.sum(), 1.0)
    # The relation scores are the prior's as before: the head reads beside them, not into them.
    np.testing.assert_array_equal(fitted.question_scores("who directed Ann", np.zeros(12), ["Ann"]),
                                  prior.question_scores("who directed Ann", np.zeros(12), ["Ann"]))


def test_no_head_on_a_graph_of_one_type_or_without_types():
    prior = _template_prior().bind(_WordEncoder())
    templates, answers = _questions(40, 1)
    assert fit_head(prior, _TypedGraph([0] * 20, ["entity"]), templates, answers) is prior
    assert fit_head(prior, _TypedGraph([0] * 20, None), templates, answers) is prior
    # Answers of unknown type (-1) or outside the graph teach nothing.
    assert fit_head(prior, _TypedGraph([-1] * 20, ["movie", "person"]), templates, answers) is prior
    assert prior.question_answer_types("who directed Ann", np.zeros(12), ["Ann"]) is None


def test_the_head_is_stored_with_the_prior_and_changes_its_fingerprint():
    encode = _WordEncoder()
    prior = _template_prior().bind(encode)
    fitted = fit_head(prior, _TypedGraph([0] * 10 + [1] * 10, ["movie", "person"]), *_questions(60, 2))
    assert fitted.fingerprint != prior.fingerprint
    back = RelationPrior.from_json(fitted.to_json()).bind(encode)
    assert back.fingerprint == fitted.fingerprint
    np.testing.assert_allclose(back.question_answer_types("what movies did Bo star in", np.zeros(12), ["Bo"]),
                               fitted.question_answer_types("what movies did Bo star in", np.zeros(12), ["Bo"]),
                               atol=1e-12)
    # A prior stored before the head loads without one, with its fingerprint as it was.
    legacy = RelationPrior.from_json(prior.to_json())
    assert legacy.answer_type_weight is None and legacy.fingerprint == prior.fingerprint
    broken = json.loads(fitted.to_json())
    broken["answer_type_bias"] = [0.0]
    with pytest.raises(ValueError, match="answer-type head"):
        RelationPrior.from_json(json.dumps(broken))


def test_fit_answer_types_refuses_mismatched_rows():
    with pytest.raises(ValueError, match="feature rows"):
        fit_answer_types(np.ones((3, 4)), np.ones((2, 2)) / 2)
    with pytest.raises(ValueError, match="positive count"):
        fit_answer_types(np.ones((2, 4)), np.ones((2, 2)) / 2, counts=np.asarray([1.0, 0.0]))


def test_questions_worded_alike_fit_as_one_row_weighed_by_their_count():
    """The head fitted on every question equals the one fitted on each distinct template with its
    questions' mean target and their count (the cross-entropy is linear in the target)."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(6)]
    templates = [" ".join(rng.choice(words, 3)) for _ in range(8)]
    asked = [templates[i] for i in rng.integers(0, len(templates), 120)]
    targets = [rng.dirichlet(np.ones(3)) for _ in asked]  # answers of several types
    distinct, template, mean, counts = answer_type_rows(asked, targets)
    rows = [distinct[i] for i in template]
    # A row: one template and its questions' commonest answer type.
    keys = list(dict.fromkeys((a, int(t.argmax())) for a, t in zip(asked, targets)))
    assert [(r, int(m.argmax())) for r, m in zip(rows, mean)] == keys and counts.sum() == len(asked)
    assert distinct == list(dict.fromkeys(asked)) and len(distinct) < len(rows) < len(asked)
    members = [t for a, t in zip(asked, targets) if (a, int(t.argmax())) == keys[0]]
    np.testing.assert_allclose(mean[0], np.mean(members, axis=0))
    assert counts[0] == len(members)
    vectors = {t: rng.normal(size=5) for t in templates}
    each = fit_answer_types(np.stack([vectors[a] for a in asked]), np.stack(targets), steps=60)
    grouped = fit_answer_types(np.stack([vectors[r] for r in rows]), mean, counts=counts, steps=60)
    np.testing.assert_allclose(grouped[0], each[0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(grouped[1], each[1], rtol=1e-7, atol=1e-9)
    assert grouped[2]["questions"] == each[2]["questions"] == 120 and grouped[2]["rows"] == len(rows)
    assert grouped[2]["train_top1"] == pytest.approx(each[2]["train_top1"])


def _record(node_ids, **kwargs) -> QuerySubgraph:
    n = len(node_ids)
    return QuerySubgraph(query_id=1, node_ids=np.asarray(node_ids, dtype=np.int64), hop=np.zeros(n, np.int8),
                         score=np.zeros(n, np.float32), src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64),
                         rel=np.zeros(0, np.int64), **kwargs)


def test_the_ranking_multiplies_in_the_question_answer_types():
    prep = Preprocessing(3, node_type_names=["movie", "person"])
    # Nodes 5 and 6 are people, 7 a film, 8 of a type the policy never saw (its unknown slot).
    rows = FeatureRows(np.asarray([5, 6, 7, 8]), np.zeros((4, 2)), types=np.asarray([1, 1, 0, 2]))
    asks_film = _record([5, 6, 7, 8], answer_types=np.asarray([0.9, 0.1], np.float32),
                        answer_type_names=("movie", "person"))
    ids, scores = with_answer_types(prep, asks_film, rows, [5, 6, 7, 8], [1.0, 0.8, 0.5, 0.3])
    assert ids == [7, 8, 5, 6]  # the film first; the unknown type keeps its own score
    np.testing.assert_allclose(scores, [0.5 + np.log(0.9), 0.3, 1.0 + np.log(0.1), 0.8 + np.log(0.1)], rtol=1e-6)
    # A policy far surer of a node than the head is against its type still ranks it first.
    ids, _ = with_answer_types(prep, asks_film, rows, [5, 7], [9.0, 0.5])
    assert ids == [5, 7]
    # Head columns in another order, a type the head does not know, a zero probability floored.
    other = _record([5, 7], answer_types=np.asarray([1.0, 0.0], np.float32), answer_type_names=("person", "genre"))
    ids, scores = with_answer_types(prep, other, rows, [7, 5], [1.0, 0.2])
    assert ids == [7, 5] and scores == pytest.approx([1.0, 0.2])  # films unknown to this head: unchanged
    floored = _record([5, 7], answer_types=np.asarray([0.0, 1.0], np.float32), answer_type_names=("person", "movie"))
    ids, scores = with_answer_types(prep, floored, rows, [5, 7], [1.0, 0.2])
    assert ids == [7, 5] and scores[1] == pytest.approx(1.0 + np.log(ANSWER_TYPE_FLOOR))
    # Without a head, or with a policy that reads no types, the policy's ranking stands.
    assert with_answer_types(prep, _record([5, 7]), rows, [5, 7], [1.0, 0.5]) == ([5, 7], [1.0, 0.5])
    untyped = FeatureRows(np.asarray([5, 7]), np.zeros((2, 2)))
    assert with_answer_types(Preprocessing(3), asks_film, untyped, [5, 7], [1.0, 0.5]) == ([5, 7], [1.0, 0.5])


def test_records_carry_the_head_through_the_pipeline_and_the_cache(tmp_path):
    encode = _WordEncoder()
    prior = fit_head(_template_prior().bind(encode), _TypedGraph([0] * 10 + [1] * 10, ["movie", "person"]),
                     *_questions(60, 3))
    settings = RetrievalSettings(seeds=1, budgets=(2, 2), relation_prior=prior)
    sub = _record([1, 2])
    settings.set_answer_types(sub, np.zeros(12), "which films did Cy star in", ["Cy"])
    assert sub.answer_type_names == ("movie", "person") and sub.answer_types.dtype == np.float32
    assert sub.answer_types[0] > 0.9
    plain = _record([3])
    RetrievalSettings(seeds=1, budgets=(2, 2)).set_answer_types(plain, np.zeros(12), "who directed Cy", ["Cy"])
    assert plain.answer_types.size == 0

    save_shard(tmp_path / "typed.npz", [sub, _record([4], answer_types=sub.answer_types,
                                                     answer_type_names=sub.answer_type_names)], np.ones((2, 3)))
    loaded, _ = load_shard(tmp_path / "typed.npz")
    np.testing.assert_array_equal(loaded[0].answer_types, sub.answer_types)
    assert loaded[1].answer_type_names == ("movie", "person")
    # A shard of records without the head (caches written before it) loads with none.
    save_shard(tmp_path / "plain.npz", [plain], np.ones((1, 3)))
    (back,), _ = load_shard(tmp_path / "plain.npz")
    assert back.answer_types.size == 0 and back.answer_type_names == ()
