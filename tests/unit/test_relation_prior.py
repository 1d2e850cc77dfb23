"""The learned relation prior: path labels, the regression, its storage form and its use in K-hop."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from seeder_dgl.retrieval.pipeline import RetrievalSettings, with_relation_prior
from seeder_dgl.retrieval.memory import GraphArrays, khop_select
from seeder_dgl.retrieval.relation_prior import (NO_TOPIC, TOPIC_BUCKETS, RelationPrior, bfs_distances,
                                                 fit_relation_prior, fit_token_prior, path_relations,
                                                 topic_positions)

DIRECTED, IN_YEAR, ACTED = 0, 1, 2


def film_graph(films_per_year: int = 30) -> tuple[GraphArrays, dict]:
    """Film 0 directed by person 100 (who also directed films 1 and 2); every film is in year 200,
    a hub; person 101 acted in films 0 and 3."""
    films = list(range(films_per_year))
    src, dst, rel = [], [], []
    for f in films:
        src.append(f), dst.append(200), rel.append(IN_YEAR)
    for f in (0, 1, 2):
        src.append(f), dst.append(100), rel.append(DIRECTED)
    for f in (0, 3):
        src.append(f), dst.append(101), rel.append(ACTED)
    graph = GraphArrays.from_arrays(201, np.asarray(src), np.asarray(dst), np.asarray(rel))
    return graph, {"topic": 0, "director": 100, "same_director": [1, 2]}


def test_bfs_distances_counts_hops_both_ways():
    graph, names = film_graph()
    dist = bfs_distances(graph, [names["director"]], 2)
    assert dist[100] == 0 and dist[0] == 1 and dist[2] == 1 and dist[200] == 2 and dist[101] == 2
    assert bfs_distances(graph, [names["director"]], 1)[200] == np.iinfo(np.int16).max  # beyond max_hops


def test_path_labels_follow_the_relation_that_explains_the_answers_not_the_hub():
    graph, names = film_graph()
    # Films by the same director are also two steps away through the year hub; only the
    # director path reaches exactly them.
    labels = path_relations(graph, [names["topic"]], names["same_director"], hops=3, num_relations=3)
    assert labels is not None and labels.shape == (3, 3)
    assert labels[0].tolist() == [True, False, False]
    assert labels[1].tolist() == [True, False, False]
    assert not labels[2].any()  # nothing to follow after the path's end


def test_path_labels_none_when_no_answer_is_in_reach():
    graph, _ = film_graph()
    assert path_relations(graph, [101], [150], hops=2, num_relations=3) is None  # 150 is isolated
    assert path_relations(graph, [0], [0], hops=2, num_relations=3) is None  # the answer is the seed
    assert path_relations(graph, [], [1], hops=2, num_relations=3) is None


def test_path_labels_of_many_questions_on_every_core_are_each_questions_own():
    """``_path_labels`` walks questions on a thread pool: each label is what ``path_relations`` gives
    that question alone, and a question asked again (a typed copy) keeps its first topic's label."""
    from rich.progress import Progress

    from seeder_dgl.retrieval.link_training import _path_labels

    rng = np.random.default_rng(3)
    n, relations = 400, 4
    src, dst = rng.integers(0, n, 3000), rng.integers(0, n, 3000)
    graph = GraphArrays.from_arrays(n, src, dst, rng.integers(0, relations, 3000))
    asked = [(i, [int(rng.integers(n))], rng.choice(n, size=int(rng.integers(1, 6)), replace=False).tolist())
             for i in range(300)]
    asked.append((7, [int((asked[7][1][0] + 1) % n)], asked[7][2]))  # question 7 again, another topic
    with Progress(disable=True) as bars:
        labels = _path_labels(graph, asked, 3, relations, bars)
    assert sorted(labels) == list(range(300))
    for qid, topic, answers in asked[:300]:
        alone = path_relations(graph, topic, answers, 3, relations)
        assert (labels[qid] is None) == (alone is None)
        if alone is not None:
            assert np.array_equal(labels[qid], alone)
    assert sum(label is not None for label in labels.values()) > 200  # the graph reaches most answers


def test_interrupted_path_labels_stop_walking_questions(monkeypatch):
    """Ctrl-C while ``extract --refit-prior`` labels the training questions' relation paths: the
    questions queued behind are not walked."""
    from rich.progress import Progress

    from seeder_dgl.retrieval import link_training

    walked = []
    real = link_training.path_relations

    def counted(*args, **kwargs):
        walked.append(1)
        time.sleep(0.002)
        return real(*args, **kwargs)

    monkeypatch.setattr(link_training, "path_relations", counted)
    rng = np.random.default_rng(0)
    graph = GraphArrays.from_arrays(100, rng.integers(0, 100, 400), rng.integers(0, 100, 400), rng.integers(0, 3, 400))
    asked = [(i, [i % 100], [(i + 1) % 100]) for i in range(2000)]

    class Bars(Progress):
        def advance(self, task, advance=1):
            if len(walked) >= 10:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with Bars(disable=True) as bars:
            link_training._path_labels(graph, asked, 2, 3, bars)
    assert len(walked) < 100


def test_fit_learns_separable_labels_deterministically():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8))
    labels = np.zeros((200, 2, 3), dtype=bool)
    labels[:, 0, 0] = x[:, 0] > 0  # hop 1 follows relation 0 when coordinate 0 is positive
    labels[:, 0, 1] = x[:, 0] <= 0
    labels[:, 1, 2] = x[:, 1] > 0
    a = fit_relation_prior(x, labels, ["a", "b", "c"], steps=400)
    steps = []
    b = fit_relation_prior(x, labels, ["a", "b", "c"], steps=400, advance=steps.append)
    np.testing.assert_array_equal(a.weight, b.weight)
    assert sum(steps) == 400  # a progress bar sees every step, and the fit is the same with it
    probe = np.zeros(8)
    probe[0], probe[1] = 1.0, -1.0
    s = a.scores(probe)
    assert s.shape == (2, 3)
    assert s[0, 0] > 0.8 and s[0, 1] < 0.2 and s[1, 2] < 0.2
    assert a.scores(probe, hops=3).shape == (3, 3)  # later hops repeat the last fitted one


def test_fit_is_as_sure_of_a_relation_among_hundreds_as_among_twenty():
    # A graph's many other relations (never on these questions' paths) must not drown the data's
    # pull on the few that are: the loss sums over relations, the decay does not grow with them
    # (averaged over outputs, 200 more relations took the true one's probability from 0.99 to 0.7).
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(20, 16))
    relation = rng.integers(0, 20, size=300)
    x = centres[relation] + 0.3 * rng.normal(size=(300, 16))

    def sureness(others: int) -> float:
        labels = np.zeros((300, 2, 20 + others), dtype=bool)
        labels[np.arange(300), 0, relation] = True
        prior = fit_relation_prior(x, labels, [f"r{i}" for i in range(20 + others)], steps=200)
        return float(np.mean([prior.scores(c)[0, i] for i, c in enumerate(centres)]))

    few, many = sureness(0), sureness(200)
    assert few > 0.9 and many > few - 0.05


def test_json_round_trip_and_alignment_to_new_relation_types():
    rng = np.random.default_rng(1)
    prior = RelationPrior(rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3)), ["a", "b", "c"], {"questions": 5})
    back = RelationPrior.from_json(prior.to_json())
    q = rng.normal(size=4)
    np.testing.assert_allclose(back.scores(q), prior.scores(q), atol=1e-6)
    assert back.fingerprint == RelationPrior.from_json(back.to_json()).fingerprint
    grown = back.aligned(["c", "new", "a"])  # an upsert added a type; order changed
    s = grown.scores(q)
    np.testing.assert_allclose(s[:, 0], back.scores(q)[:, 2])
    np.testing.assert_allclose(s[:, 2], back.scores(q)[:, 0])
    assert (s[:, 1] < 1e-9).all()
    with pytest.raises(ValueError):
        RelationPrior.from_json('{"weight": [[1.0]], "bias": [1.0], "relation_types": ["a"]}')


def test_khop_follows_the_prior_past_a_hub():
    graph, names = film_graph(films_per_year=60)
    d = 4
    rng = np.random.default_rng(2)
    node_emb = rng.normal(size=(201, d)).astype(np.float32)
    node_emb /= np.linalg.norm(node_emb, axis=1, keepdims=True)
    rel_emb = np.eye(3, d, dtype=np.float32)
    q = rng.normal(size=d)
    budgets = [2, 3]
    plain = khop_select(graph, node_emb, rel_emb, q, [0], budgets)
    prior = np.asarray([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    guided = khop_select(graph, node_emb, rel_emb, q, [0], budgets, relation_scores=prior)
    # Hop 1 keeps the director (and one more), hop 2 then holds both of the director's other films.
    assert names["director"] in guided.node_ids[guided.hop == 1]
    assert set(names["same_director"]) <= set(guided.node_ids[guided.hop == 2].tolist())
    assert plain.node_ids.shape == guided.node_ids.shape
    with pytest.raises(ValueError):
        khop_select(graph, node_emb, rel_emb, q, [0], budgets, relation_scores=prior[:1])


def test_settings_describe_the_prior_by_fingerprint_only_when_there_is_one():
    plain = RetrievalSettings(seeds=1, budgets=(5, 6))
    assert "relation_prior" not in plain.describe()  # caches made before priors keep their manifests
    assert plain.relation_scores(np.ones(4)) is None
    prior = RelationPrior(np.zeros((1, 2, 4)), np.zeros((1, 2)), ["a", "b"], {})
    with_prior = RetrievalSettings(seeds=1, budgets=(5, 6), relation_prior=prior)
    assert with_prior.describe()["relation_prior"] == prior.fingerprint
    assert with_prior.relation_scores(np.ones(4)).shape == (2, 2)


class _Info:
    name = "films"
    relation_types = ["a", "b"]
    entity_linker = None

    def __init__(self, text):
        self.relation_prior = text


class _Graph:
    def __init__(self, text):
        self.info = _Info(text)


def test_a_profile_with_a_prior_needs_one_fitted_and_reads_it_from_the_record():
    from seeder_dgl.errors import SeederError

    settings = RetrievalSettings(seeds=1, budgets=(5,))
    assert with_relation_prior(settings, _Graph(None), wanted=False) is settings
    with pytest.raises(SeederError, match="seeder-dgl extract films"):
        with_relation_prior(settings, _Graph(None), wanted=True)
    with pytest.raises(SeederError, match="damaged"):
        with_relation_prior(settings, _Graph("{not json"), wanted=True)
    prior = RelationPrior(np.zeros((1, 2, 4)), np.zeros((1, 2)), ["b", "a"], {})
    got = with_relation_prior(settings, _Graph(prior.to_json()), wanted=True).relation_prior
    assert got.relation_types == ["a", "b"]

    # Seeding by names, the linker reads the very prior K-hop reads: a question's template is
    # embedded once for both.
    from seeder_dgl.retrieval.linking import EntityLinker

    graph = _Graph(prior.to_json())
    linker = EntityLinker.default()
    linker.stats["relation_features"] = True
    graph.info.entity_linker = linker.to_json()
    both = with_relation_prior(RetrievalSettings(seeds=1, budgets=(5,), seeding="fulltext"), graph, wanted=True)
    assert both.linker is not None and both.linker.prior is both.relation_prior


def test_path_score_follows_the_asked_relations_hop_by_hop_and_survives_the_cache(tmp_path):
    import torch

    from seeder_dgl.model.batch import collate
    from seeder_dgl.model.encoder import path_end_scores, relation_path_scores
    from seeder_dgl.subgraph.cache import load_shard, save_shard
    from seeder_dgl.subgraph.record import QuerySubgraph

    # seed 0 -DIRECTED- 1 (hop 1) -DIRECTED- 2 (hop 2); seed 0 -IN_YEAR- 3 (hop 1) -IN_YEAR- 4 (hop 2);
    # 2 -IN_YEAR- 3 joins the two paths (both hop 2/hop 1, an edge backwards in hops).
    src = np.asarray([0, 1, 0, 3, 3])
    dst = np.asarray([1, 2, 3, 4, 2])
    rel = np.asarray([DIRECTED, DIRECTED, IN_YEAR, IN_YEAR, IN_YEAR])
    scores = np.asarray([[0.9, 0.2, 0.0], [0.5, 0.1, 0.0]], dtype=np.float32)
    record = QuerySubgraph(query_id=7, node_ids=np.arange(5), hop=np.asarray([0, 1, 2, 1, 2], np.int8),
                           score=np.zeros(5, np.float32), src=np.concatenate([src, dst]),
                           dst=np.concatenate([dst, src]), rel=np.concatenate([rel, rel]),
                           relation_scores=scores)
    save_shard(tmp_path / "shard.npz", [record], np.ones((1, 4), np.float32))
    (loaded,), _ = load_shard(tmp_path / "shard.npz")
    np.testing.assert_array_equal(loaded.relation_scores, scores)
    batch = collate([loaded, loaded], np.eye(5, 4, dtype=np.float32), np.ones((2, 4), np.float32))
    pi = relation_path_scores(batch)
    expected = torch.tensor([1.0, 0.9, 0.45, 0.2, 0.02])  # node 2: max(0.9*0.5, 0.2*0.1)
    torch.testing.assert_close(pi[:5], expected)
    torch.testing.assert_close(pi[5:], expected)
    torch.testing.assert_close(relation_path_scores(batch.select_graphs(torch.tensor([1]))), expected)
    plain = QuerySubgraph(query_id=8, node_ids=np.arange(5), hop=loaded.hop, score=loaded.score, src=loaded.src,
                          dst=loaded.dst, rel=loaded.rel)
    mixed = collate([loaded, plain], np.eye(5, 4, dtype=np.float32), np.ones((2, 4), np.float32))
    assert mixed.relation_scores is None and not relation_path_scores(mixed).any()
    assert not path_end_scores(mixed, relation_path_scores(mixed)).any()

    # ρ: the prior goes on past hop 1 with p 0.5 (the max of its hop-2 row) and the subgraph ends at
    # hop 2 (nothing goes on), so the hop-2 node that π puts at half the hop-1 one's score ends the
    # asked-for path as well as it does; the seed goes on with p 0.9.
    rho = path_end_scores(batch, pi)
    torch.testing.assert_close(rho[:5], torch.tensor([1.0 * 0.1, 0.9 * 0.5, 0.45, 0.2 * 0.5, 0.02]))
    torch.testing.assert_close(rho[5:], rho[:5])
    assert pi[1] == 2 * pi[2] and rho[1] == rho[2]


def test_question_template_masks_whole_names_in_any_case_longest_first():
    from seeder_dgl.retrieval.relation_prior import question_template

    assert question_template("what films did Kate Mara act in", ["Kate Mara"]) == "what films did x act in"
    assert question_template("who directed the movie cat people?", ["Cat People"]) == "who directed the movie x?"
    # Whole words only: 'Ann' is not masked inside 'Annie'; the longer name wins over its part.
    assert question_template("did Annie meet Ann", ["Ann"]) == "did annie meet x"
    assert question_template("films set in New York City", ["York", "New York City"]) == "films set in x"
    assert question_template("who wrote Ocean's Eleven", ["Ocean's Eleven"]) == "who wrote x"
    # The template does not depend on the case the question was typed in, nor on its spacing.
    assert question_template("WHAT films  did kATE mara act in", ["kate MARA"]) == "what films did x act in"
    # Nor on its punctuation: a name is found by its letters and digits, as typed without punctuation,
    # its possessive with it.
    from loaders.perturb import no_punctuation

    for question, name, template in [
            ("who led European_Parliament_election,_2004_(France)?", "European_Parliament_election,_2004_(France)",
             "who led x"),
            ("which type is Saint-Elzéar-de-Témiscouata,_Quebec", "Saint-Elzéar-de-Témiscouata,_Quebec",
             "which type is x"),
            ("what films did Kate Mara's sister act in?", "Kate Mara", "what films did x sister act in")]:
        assert question_template(question, [name]).rstrip("?") == template
        assert question_template(no_punctuation(question), [name]) == template
    assert question_template("is Ann's friend Annie", ["Ann"]) == "is x friend annie"
    assert question_template("nothing to mask", []) == "nothing to mask"
    assert question_template("nothing to mask", ["absent"]) == "nothing to mask"


def test_wording_key_is_the_template_words_whatever_case_punctuation_and_topic():
    from seeder_dgl.retrieval.linking import wording_key

    key = wording_key("What films, did Tom Hanks star_in?", ["Tom Hanks"])
    assert key == "what films did x star in"
    assert wording_key("what films did HEAT star in", ["Heat"]) == key
    assert wording_key("what  films did x star in", ()) == key  # a template is its own wording
    assert wording_key("which films star Tom Hanks", ["Tom Hanks"]) != key


class _TemplateEncoder:
    """Embeds a text by hashing it (same text, same vector) and records what it was asked."""

    def __init__(self, dim: int = 6):
        self.dim, self.seen = dim, []

    def __call__(self, texts):
        import hashlib

        self.seen.extend(texts)
        return np.stack([np.random.default_rng(int.from_bytes(hashlib.sha1(t.encode()).digest()[:4], "little"))
                         .normal(size=self.dim) for t in texts])


def test_a_template_prior_reads_the_question_with_its_seed_names_masked():
    rng = np.random.default_rng(3)
    prior = RelationPrior(rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3)), ["a", "b", "c"], {},
                          hidden_weight=rng.normal(size=(6, 5)), hidden_bias=rng.normal(size=5), input="template")
    with pytest.raises(RuntimeError, match="bind"):
        prior.question_scores("what films did Bob act in", np.ones(6), ["Bob"])
    encode = _TemplateEncoder()
    bound = prior.bind(encode)
    bob = bound.question_scores("what films did Bob act in", np.ones(6), ["Bob"])
    carol = bound.question_scores("what films did Carol Ann act in", -np.ones(6), ["Carol Ann"])
    np.testing.assert_array_equal(bob, carol)  # one template, one answer, whatever the name
    assert encode.seen == ["what films did x act in"]  # and embedded once: the prior keeps its templates
    other = bound.question_scores("who acted with Bob", np.ones(6), ["Bob"])
    assert not np.allclose(other, bob)
    # Through the settings K-hop reads its relation terms from.
    settings = RetrievalSettings(seeds=1, budgets=(4, 4, 4), relation_prior=bound)
    assert settings.relation_scores(np.ones(6), "what films did Dan act in", ["Dan"]).shape == (3, 3)

    # The stored form keeps the hidden layer and the input; the fingerprint tells the two apart.
    back = RelationPrior.from_json(prior.to_json())
    assert back.input == "template" and back.encode is None
    np.testing.assert_allclose(back.bind(encode).question_scores("what films did Bob act in", np.ones(6), ["Bob"]),
                               bob, atol=1e-12)
    assert back.fingerprint == prior.fingerprint == bound.fingerprint
    linear = RelationPrior(prior.weight[:, :, :5], prior.bias, ["a", "b", "c"], {})
    assert linear.fingerprint != RelationPrior(linear.weight, linear.bias, ["a", "b", "c"], {},
                                               input="template").fingerprint
    import json

    legacy = json.loads(linear.to_json())
    del legacy["input"]  # priors stored before templates read the question itself
    assert RelationPrior.from_json(json.dumps(legacy)).input == "question"
    broken = json.loads(prior.to_json())
    broken["hidden_bias"] = [0.0]
    with pytest.raises(ValueError, match="hidden layer"):
        RelationPrior.from_json(json.dumps(broken))


class _LinkingGraph:
    """Full-text hits for one question, and dense seeds, as a live graph would return them (with
    each hit's relationships per relation type where ``degrees``)."""

    def __init__(self, degrees: bool = False):
        self.degrees = degrees

    def fulltext_hits(self, question, embedding, candidates=50, words=None):
        hits = [{"id": 7, "name": "love", "text_score": 3.0, "similarity": 0.1},
                {"id": 5, "name": "Love Actually", "text_score": 2.0, "similarity": 0.4},
                {"id": 9, "name": "Unrelated", "text_score": 1.0, "similarity": 0.2}]
        if self.degrees:
            for hit, counts in zip(hits, ([0, 0, 4], [3, 1, 0], [0, 0, 0])):
                hit["degrees"] = counts
        return hits

    def dense_seeds(self, embedding, k, exact=False):
        return [(11, 0.9), (5, 0.4), (12, 0.3)][:k]


def test_seeding_reports_the_names_of_the_seeds_the_question_mentions():
    from seeder_dgl.retrieval.seeding import seed, seed_linked

    question, emb = "who starred in Love Actually", np.ones(4)
    # As typed: lower case and a dropped letter link the same node, named as the question writes it.
    seeds, names, _ = seed_linked(_LinkingGraph(), "who starred in love actualy", emb, 1, "fulltext")
    assert [s for s, _ in seeds] == [5] and names == ["love actualy"]
    seeds, names, _ = seed_linked(_LinkingGraph(), question, emb, 1, "fulltext")
    assert [s for s, _ in seeds] == [5] and names == ["Love Actually"]
    seeds, names, _ = seed_linked(_LinkingGraph(), question, emb, 3, "fulltext")
    # The names are the question's own words for each seed; 'Unrelated' matches none of them.
    assert [s for s, _ in seeds] == [5, 7, 9] and names == ["Love Actually", "Love"]
    assert seed_linked(_LinkingGraph(), question, emb, 2, "dense") == ([(11, 0.9), (5, 0.4)], [], None)
    seeds, names, _ = seed_linked(_LinkingGraph(), question, emb, 2, "hybrid")
    assert {s for s, _ in seeds} == {5, 11} and names == ["Love Actually"]
    assert seed(_LinkingGraph(), question, emb, 1, "fulltext") == [(5, 0.4)]


def test_seeding_reports_the_relation_types_of_the_linked_seeds_where_it_knows_them():
    from seeder_dgl.retrieval.seeding import seed_linked

    question, emb = "who starred in Love Actually", np.ones(4)
    graph = _LinkingGraph(degrees=True)
    assert seed_linked(graph, question, emb, 1, "fulltext").relations.tolist() == [True, True, False]
    assert seed_linked(graph, question, emb, 2, "fulltext").relations.tolist() == [True, True, True]
    # Not known: hits without counts, a dense seed filling in, or a dense seed fused in.
    assert seed_linked(_LinkingGraph(), question, emb, 1, "fulltext").relations is None
    assert seed_linked(graph, question, emb, 4, "fulltext").relations is None
    assert seed_linked(graph, question, emb, 2, "hybrid").relations is None
    assert seed_linked(graph, question, emb, 2, "dense").relations is None


class _TokenEncoder:
    """Templates of words -> (a sentence vector that says nothing: a hash of the text, one fixed
    vector per word as its tokens); ``seen`` records what reached it."""

    def __init__(self, dim: int = 16, seed: int = 0):
        self.dim, self.seen, self.words = dim, [], {}
        self.rng = np.random.default_rng(seed)

    def word(self, w: str) -> np.ndarray:
        if w not in self.words:
            self.words[w] = 3.0 * self.rng.normal(size=self.dim)
        return self.words[w]

    def __call__(self, texts):
        import hashlib

        self.seen.extend(texts)
        sentences = np.stack([np.random.default_rng(int.from_bytes(hashlib.sha1(t.encode()).digest()[:4], "little"))
                              .normal(size=self.dim) for t in texts])
        return (sentences, [np.stack([self.word(w) for w in t.split()]) for t in texts],
                [np.asarray([m.span() for m in re.finditer(r"\S+", t)]).reshape(-1, 2) for t in texts])


def _hop_templates(count: int, seed: int):
    """'the b1 of the a2 of x' style templates in random word orders: hop 1 follows relation i for
    word a<i>, hop 2 relation 3 + j for word b<j>; the sentence vector is noise."""
    rng = np.random.default_rng(seed)
    texts, labels = [], np.zeros((count, 2, 6), dtype=bool)
    for n in range(count):
        i, j = rng.integers(0, 3, size=2)
        words = [f"a{i}", f"b{j}", "the", "of", "x", "what", "is"][: rng.integers(3, 8)]
        texts.append(" ".join(rng.permutation(words)))
        labels[n, 0, i], labels[n, 1, 3 + j] = True, True
    return texts, labels


def test_a_token_prior_reads_each_hop_from_its_own_word():
    encode = _TokenEncoder()
    texts, labels = _hop_templates(400, seed=1)
    relations = [f"r{i}" for i in range(6)]
    sentences, tokens, _ = encode(texts)
    prior = fit_token_prior(sentences, tokens, labels, relations, hidden=8, token_hidden=8, steps=400, batch_size=64)
    steps = []
    again = fit_token_prior(sentences, tokens, labels, relations, hidden=8, token_hidden=8, steps=400, batch_size=64,
                            advance=steps.append)
    np.testing.assert_array_equal(prior.token_query, again.token_query)  # deterministic given the seed
    assert sum(steps) == 400  # each step reported to a progress bar
    assert prior.input == "tokens" and prior.hops == 2 and prior.weight.shape == (2, 6, 16)

    with pytest.raises(RuntimeError, match="token encoder"):
        prior.features(["a0 b0"])
    bound = prior.bind(None, encode)
    held_out, truth = _hop_templates(100, seed=2)
    scores = np.stack([bound.scores(f) for f in bound.features(held_out)])
    for hop in range(2):
        assert (scores[:, hop].argmax(1) == truth[:, hop].argmax(1)).mean() > 0.95

    # One template, read by the linker and by K-hop: embedded once.
    encode.seen.clear()
    a = bound.question_scores("the b2 of the a1 of Bob", np.zeros(16), ["Bob"])
    b = bound.question_scores("the b2 of the a1 of Carol", np.zeros(16), ["Carol"])
    np.testing.assert_array_equal(a, b)
    assert encode.seen == ["the b2 of the a1 of x"]
    assert a[0].argmax() == 1 and a[1].argmax() == 5

    # Stored and read back it scores the same; the fingerprint covers the token weights.
    back = RelationPrior.from_json(prior.to_json())
    assert back.input == "tokens" and back.token_scale == prior.token_scale
    np.testing.assert_allclose(back.bind(None, encode).question_scores("the b2 of the a1 of Bob", np.zeros(16), ["Bob"]),
                               a, atol=1e-12)
    assert back.fingerprint == prior.fingerprint
    from dataclasses import replace

    assert replace(prior, token_query=prior.token_query + 1e-3).fingerprint != prior.fingerprint
    moved = bound.aligned(["r5", "new", "r1"])
    np.testing.assert_allclose(moved.question_scores("the b2 of the a1 of Bob", np.zeros(16), ["Bob"])[:, [0, 2]],
                               a[:, [5, 1]], atol=1e-12)

    import json

    broken = json.loads(prior.to_json())
    broken["token_weight"] = broken["token_weight"][:1]
    with pytest.raises(ValueError, match="token weights"):
        RelationPrior.from_json(json.dumps(broken))
    with pytest.raises(ValueError, match="token weights"):
        RelationPrior(prior.weight, prior.bias, relations, {}, prior.hidden_weight, prior.hidden_bias, "template",
                      prior.token_query, prior.token_weight, prior.token_bias)


def test_relation_names_share_what_the_prior_learns_and_fold_into_its_weights():
    # Each relation is named like the word that asks for it (the question says "director", the
    # relation is "directed by"); the names' part of the output weights is stored folded in.
    encode = _TokenEncoder(seed=4)
    texts, labels = _hop_templates(300, seed=5)
    words = [f"a{i}" for i in range(3)] + [f"b{j}" for j in range(3)]
    names = np.stack([encode.word(w) for w in words])
    sentences, tokens, _ = encode(texts)
    kw = dict(hidden=8, token_hidden=8, steps=300, batch_size=64)
    named = fit_token_prior(sentences, tokens, labels, words, relation_emb=names, **kw).bind(None, encode)
    plain = fit_token_prior(sentences, tokens, labels, words, **kw)
    assert named.stats["relation_names"] and not plain.stats["relation_names"]
    assert named.weight.shape == plain.weight.shape  # scoring reads the same arrays
    assert not np.allclose(named.weight, plain.weight)
    for i, j in ((0, 2), (2, 1), (1, 0)):
        s = named.scores(named.features([f"what is the b{j} of the a{i} of x"])[0])
        assert s[0].argmax() == i and s[1].argmax() == 3 + j
    with pytest.raises(ValueError, match="relation embeddings"):
        fit_token_prior(sentences, tokens, labels, words, relation_emb=names[:5], **kw)


def test_topic_positions_bucket_each_token_by_its_signed_distance_to_the_masked_name():
    text = "who is the successor of the parent of x?"
    spans = np.asarray([(0, 0)] + [m.span() for m in re.finditer(r"\w+|\?", text)] + [(0, 0)])
    got = topic_positions(text, spans, len(spans))
    centre = (TOPIC_BUCKETS - 2) // 2
    # [CLS] who is the successor of the parent of x ? [SEP]: 'x' is the centre, 'of' one before it,
    # '?' one after, 'successor' 5 before (the 4-5 bucket), [CLS] 9 before (9-12).
    assert got[9] == centre and got[8] == centre - 1 and got[10] == centre + 1 and got[11] == centre + 2
    assert got[4] == centre - 4 and got[0] == centre - 6
    assert got.min() >= 0 and got.max() < NO_TOPIC
    assert (topic_positions(text, None, 12) == NO_TOPIC).all()  # a tokenizer without offsets
    assert (topic_positions(text, spans[:5], 12) == NO_TOPIC).all()  # spans of another tokenization
    assert (topic_positions("who is the successor of bob", spans[:7], 7) == NO_TOPIC).all()  # nothing masked
    two = topic_positions("x or x", np.asarray([(0, 1), (2, 4), (5, 6)]), 3)
    assert list(two) == [centre, centre + 1, centre]  # the nearest of several masks


def _ordered_templates(count: int, seed: int, leads: tuple[str, ...]):
    """'<lead> the w<j> of the w<i> of x': one vocabulary for both steps, hop 1 is the word next to
    the topic (relation i), hop 2 the one further out (relation 3 + j); only where a word stands
    says which step it names."""
    rng = np.random.default_rng(seed)
    texts, labels = [], np.zeros((count, 2, 6), dtype=bool)
    for n in range(count):
        i, j = rng.integers(0, 3, size=2)
        lead = leads[rng.integers(0, len(leads))]
        texts.append(" ".join(f"{lead} the w{j} of the w{i} of x".split()))
        labels[n, 0, i], labels[n, 1, 3 + j] = True, True
    return texts, labels


def test_the_topic_bias_reads_which_step_a_word_names_from_where_it_stands():
    encode = _TokenEncoder(seed=7)
    texts, labels = _ordered_templates(400, seed=8, leads=("what is", "tell me", ""))
    sentences, tokens, spans = encode(texts)
    positions = [topic_positions(t, s, len(k)) for t, k, s in zip(texts, tokens, spans)]
    relations = [f"r{i}" for i in range(6)]
    # No token dropout: here one word carries each step, and a step without it is noise.
    kw = dict(hidden=8, token_hidden=8, steps=400, batch_size=64, token_dropout=0.0)
    placed = fit_token_prior(sentences, tokens, labels, relations, positions=positions, **kw).bind(None, encode)
    plain = fit_token_prior(sentences, tokens, labels, relations, **kw).bind(None, encode)
    assert placed.topic_bias.shape == (2, TOPIC_BUCKETS) and plain.topic_bias is None
    # Worded unlike any training template: their sentence vectors (noise here) were never seen.
    held_out, truth = _ordered_templates(200, seed=9, leads=("which is", "show me"))
    swapped = truth[:, 0].argmax(1) != truth[:, 1].argmax(1) - 3

    def accuracy(prior):
        scores = np.stack([prior.scores(f) for f in prior.features(held_out)])
        return [(scores[swapped, h].argmax(1) == truth[swapped, h].argmax(1)).mean() for h in range(2)]

    assert min(accuracy(placed)) > 0.9
    assert min(accuracy(plain)) < 0.8  # the same words at both steps: content alone cannot tell them apart

    # Stored and read back it scores the same; the bias is part of the fingerprint.
    back = RelationPrior.from_json(placed.to_json()).bind(None, encode)
    np.testing.assert_allclose(back.features(held_out[:5]), placed.features(held_out[:5]), atol=1e-12)
    assert back.fingerprint == placed.fingerprint
    from dataclasses import replace

    assert replace(placed, topic_bias=placed.topic_bias + 1e-3).fingerprint != placed.fingerprint
    with pytest.raises(ValueError, match="topic bias"):
        replace(placed, topic_bias=placed.topic_bias[:, :3])
    with pytest.raises(ValueError, match="topic positions"):
        fit_token_prior(sentences, tokens, labels, relations, positions=[p[:-1] for p in positions], **kw)


def _step_templates(count: int, seed: int, far_words: tuple[str, ...]):
    """1-hop 'what is the a<i> of x' (relation i) or 2-hop 'what is the <w> of the a<i> of x' (hop 2:
    relation 3 + j for the word far_words[j])."""
    rng = np.random.default_rng(seed)
    texts, labels = [], np.zeros((count, 2, 6), dtype=bool)
    for n in range(count):
        i = rng.integers(0, 3)
        labels[n, 0, i] = True
        if rng.random() < 0.5:
            j = rng.integers(0, len(far_words))
            texts.append(f"what is the {far_words[j]} of the a{i} of x")
            labels[n, 1, 3 + j] = True
        else:
            texts.append(f"what is the a{i} of x")
    return texts, labels


def test_the_step_head_reads_a_step_named_by_an_unseen_word_as_a_step():
    """Whether a path goes on comes from a head of its own: a second step named by a word no
    training template has is still a second step, where one sigmoid per relation reads no relation
    it knows and so no step at all. The step head is stored, read back and fingerprinted."""
    encode = _TokenEncoder(seed=7)
    texts, labels = _step_templates(400, seed=1, far_words=("b0", "b1", "b2"))
    sentences, tokens, spans = encode(texts)
    positions = [topic_positions(t, k, len(v)) for t, v, k in zip(texts, tokens, spans)]
    relations = [f"r{i}" for i in range(6)]
    kw = dict(positions=positions, hidden=8, token_hidden=8, steps=400, batch_size=64, token_dropout=0.0)
    stepped = fit_token_prior(sentences, tokens, labels, relations, **kw).bind(None, encode)
    sigmoids = fit_token_prior(sentences, tokens, labels, relations, step_head=False, **kw).bind(None, encode)
    assert stepped.step_weight.shape == (2, 16) and sigmoids.step_weight is None
    held_out, truth = _step_templates(200, seed=2, far_words=("c0", "c1", "c2"))
    two = truth[:, 1].any(1)

    def reading(prior):
        scores = np.stack([prior.scores(f) for f in prior.features(held_out)])
        return ((scores[two, 1].max(1) > 0.5).mean(), (scores[~two, 1].max(1) < 0.5).mean(),
                (scores[:, 0].argmax(1) == truth[:, 0].argmax(1)).mean())

    goes_on, stops, first = reading(stepped)
    assert goes_on > 0.9 and stops > 0.9 and first > 0.9
    goes_on, stops, first = reading(sigmoids)
    assert goes_on < 0.1 and stops > 0.9 and first > 0.9
    # The likeliest relation of a hop carries the step's probability; scores stay in (0, 1].
    scores = stepped.scores(stepped.features(held_out[:1])[0])
    assert ((scores > 0) & (scores <= 1)).all()

    back = RelationPrior.from_json(stepped.to_json()).bind(None, encode)
    np.testing.assert_allclose(back.scores(back.features(held_out[:3])[0]), stepped.scores(stepped.features(held_out[:3])[0]),
                               atol=1e-12)
    assert back.fingerprint == stepped.fingerprint
    from dataclasses import replace

    assert replace(stepped, step_bias=stepped.step_bias + 1e-3).fingerprint != stepped.fingerprint
    with pytest.raises(ValueError, match="step head"):
        replace(stepped, step_bias=None)
    with pytest.raises(ValueError, match="step head"):
        replace(stepped, step_weight=stepped.step_weight[:, :3])


def test_a_fit_does_not_depend_on_the_callers_thread_count():
    """Questions of MiniLM's width, enough of them that MKL splits the products over threads (on
    an Intel Xeon the unfixed fit then differs between one and two threads)."""
    import torch

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 384))
    labels = np.zeros((3000, 2, 3), dtype=bool)
    labels[:, 0, 0], labels[:, 1, 2] = x[:, 0] > 0, x[:, 1] > 0
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        a = fit_relation_prior(x, labels, ["a", "b", "c"], steps=100)
        torch.set_num_threads(1)
        b = fit_relation_prior(x, labels, ["a", "b", "c"], steps=100)
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(a.weight, b.weight)


def test_every_fit_of_linking_runs_on_its_own_thread_count_and_gives_the_callers_back(monkeypatch):
    """The relation priors and the linker are fitted on ``FIT_THREADS`` torch threads whatever the
    caller runs with, so `tune` and a later `extract --refit-prior` (which may run with another
    count) fit the same weights."""
    import torch

    from seeder_dgl.retrieval import linking, relation_prior
    from seeder_dgl.threads import FIT_THREADS

    class Seen(Exception):
        pass

    seen = []

    def spy(*args, **kwargs):  # the optimiser is built inside the fit: the thread count there
        seen.append(torch.get_num_threads())
        raise Seen

    monkeypatch.setattr(torch.optim, "Adam", spy)
    threads = torch.get_num_threads()
    try:
        for caller in (1, FIT_THREADS + 1):
            torch.set_num_threads(caller)
            with pytest.raises(Seen):
                relation_prior.fit_relation_prior(np.eye(4), np.ones((4, 1, 2), bool), ["a", "b"], steps=1)
            assert seen[-1] == FIT_THREADS and torch.get_num_threads() == caller
    finally:
        torch.set_num_threads(threads)
    for fit in (relation_prior.fit_token_prior, linking.fit_linker):  # the same decorator
        assert fit.__wrapped__.__name__ == fit.__name__


def test_a_prior_reads_a_word_it_never_saw_by_the_relation_name_it_resembles():
    """With the relations' names, each hop's pooled words are also read against every name
    (``name_gain``): a word no training template used, close to a relation's name, reads as that
    relation. The gain is learned (positive where the training words resemble their relations'
    names), stored, read back, fingerprinted and kept with its relation when columns move."""
    encode = _TokenEncoder(dim=32, seed=3)
    rng = np.random.default_rng(11)
    names = np.stack([3.0 * rng.normal(size=32) for _ in range(6)])
    for i in range(3):
        encode.words[f"a{i}"] = names[i] + 3.0 * rng.normal(size=32)
        encode.words[f"new{i}"] = names[i] + 0.5 * rng.normal(size=32)  # near the name, far from a<i>
    for j in range(3):
        encode.words[f"b{j}"] = names[3 + j] + 3.0 * rng.normal(size=32)
    texts, labels = _step_templates(400, seed=1, far_words=("b0", "b1", "b2"))
    sentences, tokens, spans = encode(texts)
    positions = [topic_positions(t, k, len(v)) for t, v, k in zip(texts, tokens, spans)]
    relations = [f"r{i}" for i in range(6)]
    kw = dict(positions=positions, hidden=8, token_hidden=8, steps=400, batch_size=64, relation_emb=names)
    reading = fit_token_prior(sentences, tokens, labels, relations, **kw).bind(None, encode)
    plain = fit_token_prior(sentences, tokens, labels, relations, name_reading=False, **kw).bind(None, encode)
    assert plain.name_gain is None and "name_gain" not in plain.stats
    assert reading.name_gain.shape == (2,) and (reading.name_gain > 0.5).all()
    np.testing.assert_allclose(np.linalg.norm(reading.name_emb, axis=1), 1.0)

    from dataclasses import replace

    held_out = [f"what is the new{i} of x" for i in range(3)]
    features = reading.features(held_out)
    # The name term is the gain times the cosine of the hop's pooled words with each name.
    strong = replace(reading, name_gain=reading.name_gain + 50.0)
    assert [int(strong.scores(f)[0].argmax()) for f in features] == [0, 1, 2]
    assert not np.allclose(strong.scores(features[0]), reading.scores(features[0]))

    back = RelationPrior.from_json(reading.to_json()).bind(None, encode)
    np.testing.assert_allclose(back.scores(back.features(held_out[:1])[0]), reading.scores(features[0]), atol=1e-12)
    assert back.fingerprint == reading.fingerprint != strong.fingerprint
    moved = reading.aligned(["r5", "r4", "r3", "r2", "new", "r1", "r0"])
    order = [5, 4, 3, 2, 1, 0]
    np.testing.assert_array_equal(moved.name_emb[[0, 1, 2, 3, 5, 6]], reading.name_emb[order])
    assert not moved.name_emb[4].any()
    np.testing.assert_allclose(moved.scores(features[0])[:, [0, 1, 2, 3, 5, 6]], reading.scores(features[0])[:, order],
                               atol=1e-12)
    with pytest.raises(ValueError, match="name reading"):
        replace(reading, name_gain=None)
    with pytest.raises(ValueError, match="name reading"):
        replace(reading, name_emb=reading.name_emb[:4])


def test_the_first_step_is_one_of_the_relations_the_seeds_have():
    """Given the seeds' relation types, the likeliest of them carries hop 1's step probability:
    a question read as 'starring' about a seed with only 'directed by' follows 'directed by'
    with the step's full weight. Later hops, and a prior without the step head, are unchanged."""
    encode = _TokenEncoder(seed=7)
    texts, labels = _step_templates(400, seed=1, far_words=("b0", "b1", "b2"))
    sentences, tokens, spans = encode(texts)
    relations = [f"r{i}" for i in range(6)]
    kw = dict(hidden=8, token_hidden=8, steps=400, batch_size=64, token_dropout=0.0)
    prior = fit_token_prior(sentences, tokens, labels, relations, **kw).bind(None, encode)
    f = prior.features(["what is the b1 of the a0 of x"])[0]
    free = prior.scores(f)
    assert free[0].argmax() == 0
    only = np.asarray([False, False, True, False, False, False])
    held = prior.scores(f, first_relations=only)
    assert held[0, 2] == pytest.approx(free[0].max()) and held[0, 2] > 20 * free[0, 2]
    np.testing.assert_array_equal(held[1:], free[1:])
    assert (held <= 1.0).all() and not held[0, [0, 1, 3, 4, 5]].any()
    # The seeds have the likeliest relation, or nothing is known: the same scores.
    np.testing.assert_array_equal(prior.scores(f, first_relations=np.ones(6, bool)), free)
    np.testing.assert_array_equal(prior.scores(f, first_relations=np.zeros(6, bool)), free)
    np.testing.assert_array_equal(prior.question_scores("what is the b1 of the a0 of Bob", np.zeros(16), ["Bob"],
                                                        first_relations=only), held)
    sigmoids = fit_token_prior(sentences, tokens, labels, relations, step_head=False, **kw).bind(None, encode)
    np.testing.assert_array_equal(sigmoids.scores(f, first_relations=only), sigmoids.scores(f))
