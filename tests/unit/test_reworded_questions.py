"""Training questions reworded with synonyms for the policy (``retrieval.extract.reworded_queries``)."""
from __future__ import annotations

import random
import re

from loaders.kg import Query
from loaders.synonyms import swap_synonyms, synonym_options
from seeder_dgl.datasets import RetrievalDefaults
from seeder_dgl.retrieval.extract import REWORD_MIN_QUESTIONS, reworded_queries

WORDINGS = ["what films did {} write", "which movies were directed by {}", "who acted in the films written by {}",
            "what genres are the movies written by {} in", "the films starring {} were released in which years"]
NAMES = ["Mountain Film Festival", "Jane Director", "Directed Writings", "Tom Hanks", "Meryl Streep"]


class NamedGraph:
    """The one thing ``reworded_queries`` reads of a graph: topic names by id."""

    def describe(self, ids):
        return list(ids), [NAMES[int(i)] for i in ids]


def _queries(marked: bool = True) -> list[Query]:
    return [Query(id=i, text=w.format(NAMES[i % len(NAMES)]), answers=[9],
                  topic=[i % len(NAMES)] if marked else [])
            for i, w in enumerate(WORDINGS * 40)]


def test_swaps_never_touch_a_kept_span_and_draw_alike():
    text = "which films were directed by the film director"
    options = {"films": ["flicks"], "directed": ["conducted"], "film": ["movie"], "director": ["manager"]}
    keep = [(text.index("the film director"), len(text))]
    a = swap_synonyms(text, options, 1.0, random.Random(0), keep)
    assert a == "which flicks were conducted by the film director"
    # The draws do not depend on the kept spans: what lies outside them is swapped alike.
    b = swap_synonyms(text, options, 0.5, random.Random(3), keep)
    c = swap_synonyms(text, options, 0.5, random.Random(3))
    assert b.split(" by ")[0] == c.split(" by ")[0]
    assert synonym_options(["films were directed"])["films"]  # the packaged table has "films"


def test_a_share_of_training_questions_is_reworded_around_the_topic_name():
    queries = _queries()
    out = reworded_queries(NamedGraph(), queries, 0.5, 1.0, seed=0)
    changed = [(q, r) for q, r in zip(queries, out) if q.text != r.text]
    assert 0.3 * len(queries) < len(changed) <= 0.6 * len(queries)
    words = {w for q in queries for w in re.findall(r"[a-z]+", q.text.lower())}
    for q, r in changed:
        name = NAMES[q.topic[0]]
        assert name in r.text  # the name as written, capitals and all, though "film", "directed" have synonyms
        assert (r.id, r.answers, r.topic) == (q.id, q.answers, q.topic)
        new = set(re.findall(r"[a-z]+", r.text.lower())) - words
        assert new  # the swaps are words no training question uses
    assert reworded_queries(NamedGraph(), queries, 0.5, 1.0, seed=0) == out  # drawn per id and seed
    assert reworded_queries(NamedGraph(), queries, 0.5, 1.0, seed=1) != out
    assert reworded_queries(NamedGraph(), queries, 0.0, 1.0) == queries
    assert reworded_queries(NamedGraph(), queries, 0.5, 0.0) == queries


def test_without_marked_topics_only_words_many_questions_use_are_reworded():
    queries = _queries(marked=False)
    rare = Query(id=999, text="what films did Blossom Seedling write", answers=[9])  # a name's words, once
    out = reworded_queries(NamedGraph(), queries + [rare], 1.0, 1.0, seed=0)
    assert "Blossom Seedling" in out[-1].text and out[-1].text != rare.text  # "films" and "write" swapped
    assert REWORD_MIN_QUESTIONS > 1


def test_the_profile_setting_reads_a_share_and_is_off_by_default():
    defaults = RetrievalDefaults()
    assert defaults.reworded_questions == 0  # measured neutral on MetaQA (docs/method.md)
    assert defaults.prior_synonyms > 0  # the per-word share it would use
