"""Entity linking for questions as people type them: the name-index query, spans within a typo,
features, the hand-set and the learned scorer, and the linker's stored form."""
from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from seeder_dgl.graphstore.name_index import NameQuery, fold, lucene_query
from seeder_dgl.retrieval.linking import (FEATURES, EntityLinker, LinkExample, add_relation_features, allowed_edits,
                                          fit_linker, link, mention_table, question_template, tokenize, word_rates)

F = {name: i for i, name in enumerate(FEATURES)}


def hit(i, name, score=1.0, sim=0.0, kind="thing", degrees=None):
    return {"id": i, "name": name, "text_score": score, "similarity": sim, "type": kind, "degrees": degrees}


def test_lucene_query_escapes_neutralises_operators_and_fuzzes_long_words():
    q = lucene_query('who wrote "C++" (2010) [x] a:b OR NOT && || ! ^ ~ * ? \\ / {y}')
    assert '"' not in q and "(" not in q and ":" not in q and "\\\\" not in q
    assert "wrote~1" in q and "2010~1" in q
    assert " OR " not in q and " NOT " not in q and " or " in q and " not " in q  # stop words: plain, lower case
    assert lucene_query("  ??? ") == ""
    words = lucene_query("what films did Mike O'Malley act in").split()
    assert words == ["what~1", "films~1", "did", "mike~1", "o'malley~1", "act", "in"]
    assert lucene_query("Schwarzenegger") == "schwarzenegger~2"  # eight letters or more: two edits
    assert lucene_query("with the movies") == "with the movies~1"  # stop words are never fuzzy
    # A possessive word is also asked without its ending, so the name scores as a match of a word.
    assert lucene_query("more films from Paul's director").split() == \
        ["more~1", "films~1", "from~1", "paul's~1", "director~2", "paul~1"]
    assert "mara~1" in lucene_query("Kate Mara’s sister").split()
    # The dataset's question words are asked exactly (the linker's plain_words), in any case.
    assert lucene_query("WHAT Films did Tom Hanks star in", frozenset({"what", "films", "star"})) == \
        "what films did tom hanks~1 star in"
    # Words as the index's tokenizer keeps them, where that differs: one term for 'T.J' or a name
    # written with underscores, as the question writes it.
    assert lucene_query("films by T.J. Scott").split() == ["films~1", "by", "t", "j", "scott~1", "t.j"]
    # ... within one edit: two on such a long term cost Lucene half the lookup
    assert "virginia_gubernatorial_election~1" in lucene_query("who won Virginia_gubernatorial_election,_1993").split()
    # A dataset whose names join words with '_': runs of question words are asked joined too.
    joined = NameQuery(frozenset({"won"}), joined=True).lucene("who won virginia gubernatorial election of 1993")
    joined = joined.split()
    assert {"virginia_gubernatorial", "virginia_gubernatorial_election", "election_of_1993"} <= set(joined)
    assert not [t for t in joined if "_" in t and (t.startswith(("won_", "of_")) or t.endswith(("_of", "_won")))]
    assert "virginia_gubernatorial_election_of_1993" not in joined  # at most JOINED_WORDS words
    linker = EntityLinker.default()
    assert linker.plain_words == frozenset() and linker.name_query == NameQuery()
    from dataclasses import replace

    assert replace(linker, word_rates={"films": 0.95, "hanks": 0.0, "actor": 0.5}).plain_words == {"films"}


def test_the_name_words_query_splits_as_the_stop_analyzer_splits_names():
    # 'Championnat_d'Écosse_de_football_D2_2013-2014' is indexed as its letter runs: the question's
    # words are asked the same way, without digits or stop words (the index keeps neither), fuzzy
    # from FUZZY_TERM letters, plain words exactly, each run once.
    words = NameQuery(frozenset({"won"}), joined=True).words("who won Championnat_d'Écosse_de_football_D2_2013-2014, "
                                                              "the football one?")
    assert words.split() == ["who", "won", "championnat~2", "écosse~1", "de", "football~2", "one"]
    assert NameQuery().words("1993 - a ?") == ""
    assert NameQuery().words('x:(y) AND "zz"').split() == ["zz"]  # no Lucene operator survives


def test_folding_and_words():
    assert fold("Amélie STRASSE Straße") == "amelie strasse strasse"
    tokens = tokenize("Who wrote Ocean's Eleven, T.J.?")
    assert [t.norm for t in tokens] == ["who", "wrote", "oceans", "eleven", "t", "j"]
    assert [t.raw for t in tokens][2] == "Oceans"
    assert "Ocean's" == "Who wrote Ocean's Eleven, T.J.?"[tokens[2].start:tokens[2].end]
    assert [allowed_edits(n) for n in (3, 4, 8, 9, 20)] == [0, 1, 1, 2, 2]


def test_spans_match_names_whatever_the_case_accents_punctuation_and_a_typo():
    hits = [hit(1, "Tom Hanks"), hit(2, "tom hanks"), hit(3, "Ocean's Eleven"), hit(4, "Amélie"), hit(5, "Heat"),
            hit(6, "Unrelated Name")]
    m = mention_table("what films did tom hnaks and ocenas eleven and amelie star in", hits)
    by_id = {h["id"]: j for j, h in enumerate(m.hits)}
    for node, words in ((1, "tom hnaks"), (2, "tom hnaks"), (3, "ocenas eleven"), (4, "amelie")):
        j = by_id[node]
        assert m.span_text(j) == words and m.features[j, F["match"]] == 1
        assert m.features[j, F["edits"]] == (0 if node == 4 else 1)  # 'ocenas': one transposition
    assert m.spans[by_id[5]] == (0, 0) and m.features[by_id[5], F["match"]] == 0  # 'Heat' is not in it
    assert m.spans[by_id[6]] == (0, 0)
    # Two nodes with the same name: ambiguity; the one whose case the question shares: cased.
    m = mention_table("what films did Tom Hanks star in", hits[:2])
    assert m.features[:, F["ambiguity"]].tolist() == [pytest.approx(np.log(2))] * 2
    cased = {h["id"]: m.features[j, F["cased"]] for j, h in enumerate(m.hits)}
    assert cased == {1: 1.0, 2: 0.0}
    assert m.features[0, F["question_cased"]] == 1.0
    assert mention_table("what films did tom hanks star in", hits[:2]).features[0, F["question_cased"]] == 0.0
    # A name of three letters gets no typo ('Ran' is not 'Rat'); one of four gets one ('Heat', 'heta').
    assert mention_table("who directed rat", [hit(5, "Ran")]).features[0, F["match"]] == 0
    assert mention_table("who directed heta", [hit(5, "Heat")]).features[0, F["match"]] == 1


def test_a_name_ends_before_a_possessive_with_no_edit():
    hits = [hit(1, "Paul"), hit(2, "More", score=2.0), hit(3, "Ocean's Eleven"), hit(4, "Kate Mara")]
    for question, node, words in (("more films from Paul's director", 1, "Paul's"),
                                  ("more films from Paul’s director", 1, "Paul’s"),
                                  ("who directed Ocean's Eleven's sequel", 3, "Ocean's Eleven's"),
                                  ("who is kate mara's sister", 4, "kate mara's")):
        m = mention_table(question, hits)
        j = next(j for j, h in enumerate(m.hits) if h["id"] == node)
        assert m.span_text(j) == words and m.features[j, F["edits"]] == 0
        assert m.features[j, F["exact"]] == 1 and m.features[j, F["cased"]] == (node != 4)
    # Only a possessive: "Pauls" is a typo of "Paul", and "Paula's" no possessive of it.
    assert mention_table("films by Pauls", hits[:1]).features[0, F["edits"]] == 1
    assert mention_table("films by Paula's son", hits[:1]).features[0, F["edits"]] >= 1


def test_a_name_of_several_words_is_matched_by_its_last_word_where_the_profile_asks():
    hits = [hit(1, "Colin Hanks", score=3.0), hit(2, "Tom Hanks", score=2.0), hit(3, "Hanks Street Blues", 1.0),
            hit(4, "Ang Lee"), hit(5, "Hi Fi")]
    m = mention_table("what films did hanks star in", hits, partial=True)
    by_id = {h["id"]: j for j, h in enumerate(m.hits)}
    for node in (1, 2):
        j = by_id[node]
        assert m.features[j, F["partial"]] == 1 and m.features[j, F["match"]] == 0
        assert m.span_text(j) == "hanks"
    assert m.features[by_id[3], F["partial"]] == 0  # its last word is not in the question
    assert m.template() == "what films did x star in"  # the partial span is masked
    assert [h["id"] for h in m.hits[:2]] == [1, 2]  # partial matches first, then by Lucene score
    # A whole match of the same span comes first, and a longer one before a shorter partial one.
    m = mention_table("what films did hanks star in", [hit(8, "Hanks", 0.1)] + hits[:2], partial=True)
    assert [h["id"] for h in m.hits] == [8, 1, 2]
    m = mention_table("what films did Tom Hanks star in", hits, partial=True)
    assert m.hits[0]["id"] == 2 and m.features[0, F["match"]] == 1 and m.features[0, F["partial"]] == 0
    assert m.features[1, F["partial"]] == 1 and m.hits[1]["id"] == 1
    assert m.template() == "what films did x star in"
    # A partial match before a whole one with a typo of the same length ('Shanks' for 'hanks').
    m = mention_table("what films did hanks star in", [hit(8, "Shanks", 9.0), hits[1]], partial=True)
    assert [h["id"] for h in m.hits] == [2, 8] and m.features[1, F["match"]] == 1
    # One edit in a surname of six letters or more, none in a shorter one.
    spielberg = mention_table("films by spielbreg", [hit(3, "Steven Spielberg")], partial=True)
    assert spielberg.features[0, F["partial"]] == 1
    assert mention_table("films by hnaks", hits[:2], partial=True).features[:, F["partial"]].tolist() == [0, 0]
    # Three letters are enough, two are not; a stop word never stands for a name.
    assert mention_table("films by lee", [hits[3]], partial=True).features[0, F["partial"]] == 1
    assert mention_table("films by fi", [hits[4]], partial=True).features[0, F["partial"]] == 0
    assert mention_table("what is the", [hit(7, "Over The")], partial=True).features[0, F["partial"]] == 0
    # Without it (the default) a surname alone matches nothing.
    plain = mention_table("what films did hanks star in", hits)
    assert plain.features[:, F["partial"]].sum() == 0 and all(span == (0, 0) for span in plain.spans)
    # A linker fitted with partial names links so: the hand-set weights take the partial match
    # over a name the question does not have.
    linker = replace(EntityLinker.default(), stats={"fitted": False, "partial_names": True})
    found = link("what films did hanks star in", [hit(9, "Tom Thumb", 5.0), hits[1]], 1, linker)
    assert linker.partial_names and not EntityLinker.default().partial_names
    assert found.ids(found.chosen) == [2] and found.names(found.chosen) == ["hanks"]


@pytest.mark.parametrize("first_new", ["partial", "exact_elsewhere"])
def test_a_linker_fitted_before_newer_features_scores_as_it_did(first_new):
    rng = np.random.default_rng(1)
    width = len(FEATURES) + 2
    at = FEATURES.index(first_new)
    added = len(FEATURES) - at
    hidden = rng.normal(size=(width, 4))
    hidden[at:len(FEATURES)] = 0.0  # what an older linker is read as
    linker = EntityLinker(rng.normal(size=width), rng.uniform(0.5, 2, size=width), rng.normal(size=4), 0.3,
                          ["person", "tag"], {}, hidden, rng.normal(size=4))
    raw = json.loads(linker.to_json())
    assert raw["features"][at:] == list(FEATURES[at:])
    raw["features"] = raw["features"][:at]
    for key in ("mean", "scale", "hidden_weight"):
        raw[key] = raw[key][:at] + raw[key][at + added:]
    older = EntityLinker.from_json(json.dumps(raw))
    m = mention_table("what films did tom hanks or hanks star in, or in yanks",
                      [hit(1, "Tom Hanks", kind="person"), hit(2, "Colin Hanks", kind="person"),
                       hit(3, "tom", kind="tag"), hit(4, "Shanks", kind="tag")], partial=True)
    assert m.features[:, F["partial"]].any() and m.features[:, F["exact_elsewhere"]].any()
    np.testing.assert_allclose(older.logits(m), linker.logits(m), atol=1e-12)


def test_a_typo_reading_of_a_word_that_is_another_names_surname_is_marked():
    """"hanks movies": the film Shanks is one edit away, but "hanks" is Tom Hanks's surname letter
    for letter, so the fuzzy reading carries ``exact_elsewhere``; the exact readings do not, and
    without partial names a surname does not count."""
    hits = [hit(1, "Shanks", kind="movie"), hit(2, "Tom Hanks", kind="person"), hit(3, "Colin Hanks", kind="person"),
            hit(4, "Hanks", kind="tag"), hit(5, "Yanks", kind="movie")]
    marked = lambda m: {h["id"]: m.features[j, F["exact_elsewhere"]] for j, h in enumerate(m.hits)}  # noqa: E731
    assert marked(mention_table("hanks movies", hits, partial=True)) == {1: 1, 2: 0, 3: 0, 4: 0, 5: 1}
    # without the tag "Hanks", only the surname makes the word a name
    assert marked(mention_table("hanks movies", hits[:3] + hits[4:], partial=True)) == {1: 1, 2: 0, 3: 0, 5: 1}
    assert marked(mention_table("hanks movies", hits[:3] + hits[4:], partial=False)) == {1: 0, 2: 0, 3: 0, 5: 0}
    # a typo in the surname itself: no candidate is the typed word, so nothing is marked
    assert not any(marked(mention_table("what movies did tom hankss act in", hits, partial=True)).values())


def test_candidates_come_in_lexical_order_and_are_cut():
    hits = [hit(i, f"Zed{i}", score=float(i)) for i in range(40)] + [hit(99, "The Lord of the Rings", 0.1),
                                                                      hit(98, "Rings", 0.2)]
    m = mention_table("who directed the lord of the rings", hits, keep=10)
    assert len(m) == 10
    assert [h["id"] for h in m.hits[:2]] == [99, 98]  # full matches first, the longer name first
    assert m.features[1, F["inside_other"]] == 1 and m.features[0, F["longest"]] == 1
    assert m.template() == "who directed x"
    assert [h["id"] for h in m.hits[2:4]] == [39, 38]  # then by Lucene score


def test_relation_features_compare_a_candidates_relations_with_the_priors_expectation():
    hits = [hit(1, "Tom Hanks", kind="person", degrees=[0, 5, 0]), hit(2, "tom hanks", kind="tag", degrees=[0, 0, 9])]
    m = mention_table("what films did tom hanks star in", hits)
    add_relation_features(m, np.asarray([0.05, 0.9, 0.05]))
    fit = {h["id"]: m.features[j, F["relation_fit"]] for j, h in enumerate(m.hits)}
    assert fit[1] == pytest.approx(0.9) and fit[2] == pytest.approx(0.05)
    assert (m.features[:, F["relation_known"]] == 1).all()


def test_the_hand_set_linker_takes_the_full_long_match_and_keeps_close_ones():
    hits = [hit(7, "love", 3.0, 0.1), hit(5, "Love Actually", 2.0, 0.4), hit(9, "Unrelated", 1.0, 0.2)]
    found = link("who starred in love actualy", hits, 1)
    assert found.ids(found.chosen) == [5] and found.names(found.chosen) == ["love actualy"]
    assert found.ids(found.order)[0] == 5
    three = link("who starred in love actualy", hits, 3)
    assert three.ids(three.chosen)[0] == 5 and len(three.chosen) == 3
    assert link("???", [], 1).chosen == []


def _examples(rng, n):
    """Questions naming one of two nodes of the same name, a person and a tag; the topic is the one
    whose relations the question's template asks for (the relation features tell them apart)."""
    out = []
    for i in range(n):
        wants_tag = bool(i % 2)
        hits = [hit(10 * i, f"Name{i} Surname", kind="person", degrees=[4, 0], sim=float(rng.random())),
                hit(10 * i + 1, f"name{i} surname", kind="tag", degrees=[0, 7], sim=float(rng.random())),
                hit(10 * i + 2, "films", kind="tag", degrees=[0, 3], sim=float(rng.random()))]
        question = f"which films are about name{i} surname" if wants_tag else f"what films did name{i} surname act in"
        m = mention_table(question, hits)
        add_relation_features(m, np.asarray([0.1, 0.9]) if wants_tag else np.asarray([0.9, 0.1]))
        gold = np.asarray([h["id"] == 10 * i + int(wants_tag) for h in m.hits])
        out.append(LinkExample(m, gold))
    return out


def test_a_fitted_linker_learns_what_the_features_say_and_is_stored_exactly():
    rng = np.random.default_rng(0)
    train, test = _examples(rng, 200), _examples(rng, 60)
    rates = word_rates(["what films did name1 surname act in", "which films are about name2 surname"],
                       [(15, 28), (22, 35)])
    assert rates["films"] > 0.4 and "name1" not in rates
    steps = []
    linker = fit_linker(train, rates, ["person", "tag"], steps=200, seed=0, advance=steps.append)
    assert sum(steps) == 200  # each step reported to a progress bar
    right = [bool(e.gold[linker.choose(e.mentions, 1)[0]]) for e in test]
    assert np.mean(right) == 1.0
    assert linker.stats["train_top1"] == 1.0 and linker.stats["fitted"]
    again = fit_linker(train, rates, ["person", "tag"], steps=200, seed=0)  # deterministic
    np.testing.assert_array_equal(again.out_weight, linker.out_weight)
    back = EntityLinker.from_json(linker.to_json())
    for e in test[:10]:
        np.testing.assert_allclose(back.logits(e.mentions), linker.logits(e.mentions), atol=1e-12)
    assert back.fingerprint == linker.fingerprint
    # A damaged or foreign record is refused with a reason.
    raw = json.loads(linker.to_json())
    raw["features"] = raw["features"][::-1]
    with pytest.raises(ValueError, match="other features"):
        EntityLinker.from_json(json.dumps(raw))
    raw = json.loads(linker.to_json())
    raw["hidden_bias"] = [0.0]
    with pytest.raises(ValueError, match="hidden layer"):
        EntityLinker.from_json(json.dumps(raw))


def test_close_candidates_are_kept_as_seeds_up_to_the_limit():
    m = mention_table("films by tom hanks", [hit(1, "Tom Hanks"), hit(2, "tom hanks"), hit(3, "Tom Hanks")])
    size = len(FEATURES)
    flat = EntityLinker(np.zeros(size), np.ones(size), np.zeros(size), 0.0)  # every candidate equally likely
    assert sorted(m.hits[j]["id"] for j in flat.choose(m, 1)) == [1, 2, 3]
    from dataclasses import replace

    assert len(replace(flat, max_seeds=2).choose(m, 1)) == 2
    assert len(replace(flat, keep_ratio=1.5).choose(m, 1)) == 1  # nothing is within a ratio above 1
    assert len(replace(flat, keep_ratio=1.5).choose(m, 2)) == 2  # but k is always met


def test_templates_are_the_same_whatever_the_case():
    assert question_template("WHAT Films did Tom HANKS star in", ["tom hanks"]) == \
        question_template("what films did tom hanks star in", ["Tom Hanks"]) == "what films did x star in"


def test_templates_mask_every_name_alike_past_the_regular_expression_cache():
    """Fitting the linker masks tens of thousands of names: each pattern is compiled once and kept,
    and a name met again after thousands of others is masked as the first time."""
    from seeder_dgl.retrieval.linking import name_pattern

    names = [f"Person {i} O'Neil-{i % 7}" for i in range(3000)] + ["Tom Hanks", "Person 5 O'Neil-5"]
    for name in names:
        question = f"what did {name.lower().replace('-', ' ')}'s friends see"
        expected = " ".join(re.sub(name_pattern(name), "X", question, flags=re.IGNORECASE).casefold().split())
        assert question_template(question, [name]) == expected == "what did x friends see"
    assert question_template("who is tom hanks", ["Tom Hanks", ""]) == "who is x"
    assert question_template("who is ...", ["..."]) == "who is ..."  # no letters: nothing to mask


def test_the_stored_linker_is_read_with_its_prior_or_refused_in_one_line():
    from types import SimpleNamespace

    from seeder_dgl.errors import SeederError
    from seeder_dgl.retrieval.pipeline import stored_linker

    rng = np.random.default_rng(1)
    linker = fit_linker(_examples(rng, 20), {}, ["person", "tag"], steps=20)

    def graph(**stored):
        return SimpleNamespace(info=SimpleNamespace(name="kg", model=None, relation_types=["A", "B"], **stored))

    assert stored_linker(graph(entity_linker=None)) is None
    assert stored_linker(graph(entity_linker=linker.to_json())).fingerprint == linker.fingerprint
    # fitted with the relation features: it needs the stored prior, and without one it is not used
    needs = replace_stats(linker, relation_features=True)
    assert stored_linker(graph(entity_linker=needs.to_json(), relation_prior=None)) is None
    with pytest.raises(SeederError, match="entity linker stored for 'kg' is damaged.*--refit-prior"):
        stored_linker(graph(entity_linker="{not json"))


def replace_stats(linker, **stats):
    from dataclasses import replace

    return replace(linker, stats={**linker.stats, **stats})


def test_the_prior_reads_more_questions_whose_topic_the_dataset_marks():
    """Beyond the linker's sample, questions with a marked topic give the prior their templates
    (the topic's name masked, read from the graph's names), each also typed; a question that does
    not spell its topic's name gives none; the sample is seeded and capped."""
    from types import SimpleNamespace

    from loaders.kg import Query
    from seeder_dgl.retrieval.link_training import _marked_rows

    names = {1: "Tom Hanks", 2: "Cast Away", 3: "Saint-Denis"}
    live = SimpleNamespace(describe=lambda ids: ([None] * len(ids), [names[i] for i in ids], [None] * len(ids)))
    graph = SimpleNamespace(live=live)
    queries = [Query(10, "What films did Tom Hanks act in?", [2], topic=[1]),
               Query(11, "who directed cast away", [1], topic=[2]),
               Query(12, "which films star him?", [2], topic=[1]),  # the name is not in the question
               Query(13, "What lies east of Saint-Denis?", [1], topic=[3])]
    rows = _marked_rows(graph, queries, limit=10, typed=False, seed=0)
    assert [(q.id, t) for q, t in rows] == [(10, "what films did x act in?"), (11, "who directed x"),
                                            (13, "what lies east of x?")]
    many = [Query(100 + i, f"What films did Tom Hanks act in, in {1990 + i}?", [2], topic=[1]) for i in range(30)]
    typed = _marked_rows(graph, many, limit=100, typed=True, seed=0)
    written = {q.id: t for q, t in typed[::-1]}  # each question's first row is its template as written
    assert all(written[q.id] == f"what films did x act in, in {1990 + i}?" for i, q in enumerate(many))
    # lower case, random case and a typo (in the masked name) leave a template as written; no
    # punctuation and keywords change it
    assert len(many) < len(typed) < 2 * len(many) and all(re.search(r"(?<!\w)x(?!\w)", t) for _, t in typed)
    assert typed == _marked_rows(graph, many, limit=100, typed=True, seed=0)
    assert len({q.id for q, _ in _marked_rows(graph, queries, limit=2, typed=False, seed=0)}) <= 2
    assert _marked_rows(SimpleNamespace(live=None), queries, limit=10, typed=True, seed=0) == []
    assert _marked_rows(graph, queries, limit=0, typed=True, seed=0) == []
