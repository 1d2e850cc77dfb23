"""The relation prior's reworded template copies (``loaders.synonyms``)."""
from __future__ import annotations

import gzip
import re

import numpy as np
import pytest
from loaders.kg import DataError
from loaders.perturb import FUNCTION_WORDS
from loaders.synonyms import MIN_LETTERS, inflected_synonyms, synonym_copies, synonym_table
from seeder_dgl.datasets import RetrievalDefaults
from seeder_dgl.retrieval.extract import LinkerFit, prior_synonyms
from seeder_dgl.retrieval.relation_prior import RelationPrior

PRIOR = '{"weight": [[[1.0]]], "bias": [[0.0]], "relation_types": ["a"], "stats": {}}'
TEMPLATES = ["what films did x write", "which movies were directed by x", "who acted in the films written by x",
             "what genres are the movies written by x in", "the films starring x were released in which years",
             "what languages are the films that share actors with x in"] * 20


def test_the_packaged_table_holds_first_senses_by_part_of_speech():
    table = synonym_table()
    assert len(table) > 40_000
    assert "movie" in table["film"]["n"] and "flick" in table["film"]["n"]
    assert "pen" in table["write"]["v"]
    assert all(re.fullmatch(r"[a-z]{4,}", lemma) for lemma in list(table)[:2000])


def test_synonyms_are_inflected_as_the_word_is():
    table = synonym_table()
    films = inflected_synonyms("films", table)
    assert "movies" in films and "motion pictures" in films  # a noun's last word takes the plural
    assert "turned up" in inflected_synonyms("located", table)  # a verb's first word takes the ending
    assert inflected_synonyms("writes", table)[:2] == ["composes", "pens"]
    # "-ed" words take only verbs' synonyms: "direct"'s first adverb sense ("directly") is not one
    assert not any(s.startswith(("directly", "straight")) for s in inflected_synonyms("directed", table))
    assert inflected_synonyms("zzzzqx", table) == []


def test_copies_swap_only_content_words_for_words_no_template_uses():
    copies = synonym_copies(TEMPLATES, 0.5, seed=0)
    assert len(copies) > 20
    seen = {w for t in TEMPLATES for w in re.findall(r"[a-z]+", t)}
    for i, copy in copies:
        original, new = TEMPLATES[i].split(), copy.split()
        assert copy != TEMPLATES[i]
        assert " x " in f" {copy} "  # the topic's placeholder stays
        changed = set(new) - set(original)
        assert changed and not changed & seen  # never a word another template is labelled by
        for word in set(original) - set(new):
            assert len(word) >= MIN_LETTERS and word not in FUNCTION_WORDS


def test_copies_are_deterministic_given_the_seed_and_off_at_zero():
    assert synonym_copies(TEMPLATES, 0.3, seed=1) == synonym_copies(TEMPLATES, 0.3, seed=1)
    assert synonym_copies(TEMPLATES, 0.3, seed=1) != synonym_copies(TEMPLATES, 0.3, seed=2)
    assert synonym_copies(TEMPLATES, 0.0) == [] and synonym_copies([], 0.3) == []
    more = synonym_copies(TEMPLATES, 0.9, seed=0)
    fewer = synonym_copies(TEMPLATES, 0.1, seed=0)
    assert len(more) > len(fewer)


def test_the_profile_setting_reaches_the_fit_and_a_prior_says_how_it_was_fitted():
    assert LinkerFit.of(RetrievalDefaults()).synonyms == RetrievalDefaults().prior_synonyms > 0
    assert LinkerFit.of(RetrievalDefaults(prior_synonyms=0.0)).synonyms == 0.0
    before = RelationPrior.from_json(PRIOR)
    assert prior_synonyms(before) == 0.0  # fitted before reworded copies: the profile's fit differs
    after = RelationPrior.from_json(PRIOR.replace('"stats": {}', '"stats": {"synonyms": 0.3}'))
    assert prior_synonyms(RelationPrior.from_json(after.to_json())) == 0.3


def test_an_encoder_vetoes_synonyms_of_another_sense():
    def embed(texts):  # every text along one axis, but "flicks" and "pics" along another
        return np.array([[0.0, 1.0] if t in ("flicks", "pics") else [1.0, 0.0] for t in texts])

    plain = {c for _, c in synonym_copies(TEMPLATES, 1.0, seed=0)}
    vetted = {c for _, c in synonym_copies(TEMPLATES, 1.0, seed=0, embed=embed)}
    assert any("flicks" in c.split() for c in plain)
    assert not any({"flicks", "pics"} & set(c.split()) for c in vetted)
    assert any("pictures" in c.split() for c in vetted)  # "films" still has synonyms along its axis
    assert synonym_copies(TEMPLATES, 1.0, seed=0, embed=lambda texts: np.eye(len(texts))) == []


@pytest.mark.parametrize("content", [None, b"not gzip at all", gzip.compress(b"\xff\xfe binary"), gzip.compress(b"")])
def test_a_missing_or_damaged_table_is_a_one_line_error(monkeypatch, tmp_path, content):
    import loaders.synonyms as synonyms

    table = tmp_path / "data" / "wordnet_synonyms.tsv.gz"
    table.parent.mkdir()
    if content is not None:
        table.write_bytes(content)
    monkeypatch.setattr(synonyms.resources, "files", lambda package: tmp_path)
    synonyms.synonym_table.cache_clear()
    try:
        with pytest.raises(DataError, match="WordNet synonym table .* (missing or damaged|empty)") as caught:
            synonym_copies(TEMPLATES, 0.3)
        assert "\n" not in str(caught.value)
    finally:
        synonyms.synonym_table.cache_clear()  # the next test reads the packaged table again


def test_synonyms_take_english_spelling_of_their_ending():
    from loaders.synonyms import _inflect

    cases = {("get", "ing"): "getting", ("pen", "ed"): "penned", ("star", "ed"): "starred", ("act", "ed"): "acted",
             ("visit", "ing"): "visiting", ("make", "ing"): "making", ("see", "ing"): "seeing", ("die", "ing"): "dying",
             ("carry", "ed"): "carried", ("carry", "s"): "carries", ("play", "ed"): "played", ("play", "s"): "plays",
             ("rain", "ed"): "rained", ("move", "d"): "moved", ("box", "es"): "boxes", ("film", ""): "film"}
    assert {key: _inflect(*key) for key in cases} == cases


def test_english_words_are_known_with_their_endings_and_typos_are_not():
    from loaders.synonyms import is_english

    for word in ("come", "made", "where", "films", "directed", "featuring", "categories", "penned", "tongues",
                 "classify", "belong", "keywords", "writers"):
        assert is_english(word), word
    for typo in ("dirceted", "fims", "flim", "wrte", "langage", "whcih", "moveis", "acotr", "movis", "relased"):
        assert not is_english(typo), typo
