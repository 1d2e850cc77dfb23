"""A question's words read as the relation prior's fitted templates spell them (``retrieval.spelling``)."""
from __future__ import annotations

import json
import pickle
from dataclasses import replace

import numpy as np
import pytest

from seeder_dgl.retrieval.relation_prior import RelationPrior, fit_token_prior
from seeder_dgl.retrieval.spelling import MIN_COUNT, TemplateWords
from tests.unit.test_relation_prior import _TokenEncoder

TEMPLATES = ["who directed x", "who directed x", "what films did x act in", "what films did x act in",
             "what films did x write", "what firms own x", "who wrote x", "who wrote x", "who wrote x"]


def test_words_seen_once_are_not_kept_and_counts_are_the_templates():
    words = TemplateWords.of(TEMPLATES)
    assert words.counts["films"] == 3 and words.counts["wrote"] == 3 and words.counts["x"] == 9
    assert "firms" not in words.counts and "write" not in words.counts  # once: as likely a typo as a word
    assert all(n >= MIN_COUNT for n in words.counts.values())


def test_an_unknown_word_is_read_as_the_most_frequent_known_word_within_one_edit():
    words = TemplateWords.of(TEMPLATES + ["what firms own x", "what fits x", "what fits x"])
    assert words.spell("who dirceted x") == "who directed x"  # two neighbours swapped
    assert words.spell("who drected x") == "who directed x"  # a letter dropped
    assert words.spell("who direccted x") == "who directed x"  # a letter added
    assert words.spell("who wrate x") == "who wrote x"  # a letter changed
    # 'fims' is one edit from 'films' (3), 'firms' (2) and 'fits' (2): the most frequent wins.
    assert words.counts["films"] == 3 and words.counts["firms"] == words.counts["fits"] == 2
    assert words.spell("what fims did x act in") == "what films did x act in"
    assert TemplateWords({"films": 2, "firms": 3}).spell("what fims") == "what firms"
    tied = TemplateWords({"bats": 2, "cats": 2})
    assert tied.spell("dats") == "bats"  # equal counts: the first in alphabetical order
    again = pickle.loads(pickle.dumps(words))  # as a process or a deep copy gets it
    assert again == words and again.spell("who dirceted x") == "who directed x"


def test_known_short_joined_and_distant_words_stay_as_typed():
    words = TemplateWords.of(TEMPLATES)
    for template in ("who directed x",  # known
                     "wat films did x act in",  # three letters: too many neighbours
                     "which pictures did x act in",  # no known word within one edit
                     "what productsg_films did x act in",  # joined by '_' into a name
                     "what post-films did x act in", "what films2 did x act in", "what film's x"):
        assert words.spell(template) == template
    # An English word no template has stays as written, however close to one it is: a rewording's
    # words are not typos ("come" is one edit from "some", "where" from "were", "featuring" from none).
    near = TemplateWords.of(["what some films x", "what some films x", "who were x", "who were x"])
    for template in ("what year did x come out", "where was x born", "the films featuring x", "who penned x"):
        assert near.spell(template) == template
    assert near.spell("wht sone flims x") == "wht some films x"  # 'sone' and 'flims' are no words


def test_a_prior_reads_a_misspelled_template_as_the_template_it_was_fitted_on():
    encode = _TokenEncoder()
    texts = ["who directed x", "what films did x act in", "who wrote x", "what films did x write"] * 25
    labels = np.zeros((len(texts), 1, 3), dtype=bool)
    for i, t in enumerate(texts):
        labels[i, 0, 0 if "directed" in t else 1 if "act" in t else 2] = True
    sentences, tokens, _ = encode(texts)
    fitted = fit_token_prior(sentences, tokens, labels, ["directed_by", "starred", "written_by"], hidden=4,
                             token_hidden=4, steps=50, batch_size=32)
    prior = replace(fitted, words=TemplateWords.of(texts)).bind(None, encode)
    plain = fitted.bind(None, encode)
    np.testing.assert_array_equal(prior.question_scores("who dirceted Nolan", np.zeros(16), ["Nolan"]),
                                  plain.question_scores("who directed Nolan", np.zeros(16), ["Nolan"]))
    assert encode.seen[-1] == "who directed x"  # what the encoder got for the misspelled question
    # A prior without words (fitted before them) reads the typo as typed.
    plain.question_scores("who dirceted Nolan", np.zeros(16), ["Nolan"])
    assert encode.seen[-1] == "who dirceted x"

    # Stored and read back with its words; the fingerprint covers them.
    back = RelationPrior.from_json(prior.to_json())
    assert back.words == prior.words and back.fingerprint == prior.fingerprint
    assert prior.fingerprint != fitted.fingerprint
    assert RelationPrior.from_json(fitted.to_json()).words is None
    broken = json.loads(prior.to_json())
    broken["words"] = {"who": "many"}
    with pytest.raises(ValueError, match="word counts"):
        RelationPrior.from_json(json.dumps(broken))
    assert prior.aligned(["written_by", "directed_by"]).words == prior.words
