"""``prefetch_linking``: a batch of questions gets its names read and its templates embedded up
front, in batches, and every subgraph is the one seeding and expanding each question alone gives."""
from __future__ import annotations

import hashlib
import re
import threading
import time

import numpy as np
import pytest

from seeder_dgl.graphstore.name_index import CANDIDATES
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings, prefetch_linking, read_names, seed_and_expand
from seeder_dgl.retrieval.linking import EntityLinker
from seeder_dgl.retrieval.memory import GraphArrays, unit_query
from seeder_dgl.retrieval.relation_prior import TOPIC_BUCKETS, RelationPrior
from tests.helpers.graphs import random_embeddings, random_kg

N, DIM, R = 300, 16, 5
NAMES = ["Tom Hanks", "Kate Mara", "Ocean's Eleven", "Heat", "Michael Mann", "Amélie"]
QUESTIONS = ["what films did Tom Hanks star in", "what films did kate mara act in", "who directed oceans eleven",
             "who directed Heat", "films by Michael Man", "what language is Amélie in", "who directed Heat"]


class Names:
    """The name index: node i is named NAMES[i]; each question finds every name (scored by words shared)."""

    def __init__(self, graph):
        self.graph, self.calls = graph, 0

    def fulltext_hits(self, question, embedding, candidates=100, words=None):
        self.calls += 1
        q = unit_query(embedding)
        words_of = set(question.lower().split())
        hits = [{"id": i, "name": name, "text_score": float(len(words_of & set(name.lower().split()))),
                 "similarity": float(self.graph.node_emb[i].astype(np.float64) @ q), "type": "thing",
                 "degrees": [1] * R} for i, name in enumerate(NAMES)]
        return sorted(hits, key=lambda h: -h["text_score"])


class Encoder:
    """Deterministic text embeddings with a question cache, like ``TextEncoder.encode_queries``;
    ``batches`` records what reached the model."""

    def __init__(self):
        self.cache, self.batches = {}, []

    def __call__(self, texts):
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            self.batches.append(missing)
            for t in missing:
                seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
                v = np.random.default_rng(seed).normal(size=DIM)
                self.cache[t] = v / np.linalg.norm(v)
        return np.stack([self.cache[t] for t in texts])


class TokenEncoder(Encoder):
    """``Encoder``'s sentence vectors with one fixed vector per word as the tokens, like
    ``TextEncoder.encode_query_tokens``."""

    def __call__(self, texts):
        sentences = super().__call__(texts)
        word = Encoder()
        return (sentences, [word(t.split()) for t in texts],
                [np.asarray([m.span() for m in re.finditer(r"\S+", t)]).reshape(-1, 2) for t in texts])


def _world(kind: str = "template"):
    kg = random_kg("prefetch", N, 1500, seed=3, num_relations=R)
    graph = MemoryGraph(GraphArrays.from_kg(kg), random_embeddings(N, DIM, seed=4), random_embeddings(R, DIM, seed=5))
    graph.live = Names(graph)
    rng = np.random.default_rng(6)
    if kind == "tokens":
        prior = RelationPrior(rng.normal(size=(2, R, 2 * DIM)), rng.normal(size=(2, R)), [f"r{i}" for i in range(R)],
                              {}, rng.normal(size=(DIM, DIM)), rng.normal(size=DIM), "tokens",
                              rng.normal(size=(2, DIM)), rng.normal(size=(2, DIM, DIM)), rng.normal(size=(2, DIM)),
                              topic_bias=rng.normal(size=(2, TOPIC_BUCKETS)))
    else:
        prior = RelationPrior(rng.normal(size=(2, R, DIM)), rng.normal(size=(2, R)), [f"r{i}" for i in range(R)], {},
                              input="template")
    return graph, prior


def _bind(prior, encode):
    return prior.bind(None, encode) if prior.input == "tokens" else prior.bind(encode)


@pytest.mark.parametrize("kind", ["template", "tokens"])
def test_a_prefetched_batch_gives_the_same_subgraphs_with_its_templates_embedded_in_batches(kind):
    graph, prior = _world(kind)
    distinct = list(dict.fromkeys(QUESTIONS))  # a question asked twice has one embedding
    table = dict(zip(distinct, random_embeddings(len(distinct), DIM, seed=7)))
    embeddings = np.stack([table[q] for q in QUESTIONS])
    for seeding in ("fulltext", "hybrid"):
        alone, batched = (TokenEncoder(), TokenEncoder()) if kind == "tokens" else (Encoder(), Encoder())

        def settings(encode):
            bound = _bind(prior, encode)
            return RetrievalSettings(seeds=2, budgets=(10, 20), seeding=seeding, relation_prior=bound,
                                     linker=EntityLinker.default().with_prior(bound))

        one = settings(alone)
        expected = [seed_and_expand(graph, q, e, one) for q, e in zip(QUESTIONS, embeddings)]
        graph.live.calls = 0
        many = settings(batched)
        prepared = prefetch_linking(graph, QUESTIONS, embeddings, many)
        # one batch: the linker's templates, which the relation prior reads too
        assert graph.live.calls == len(distinct) and len(batched.batches) == 1
        before = len(batched.batches)
        got = [seed_and_expand(prepared, q, e, many) for q, e in zip(QUESTIONS, embeddings)]
        assert graph.live.calls == len(distinct)  # no name read twice
        assert len(batched.batches) == before  # every template was embedded up front
        assert len(alone.batches) > 2
        for (seeds_a, a), (seeds_b, b) in zip(expected, got):
            assert seeds_a == seeds_b
            assert a.node_ids.tolist() == b.node_ids.tolist() and a.hop.tolist() == b.hop.tolist()
            np.testing.assert_array_equal(a.relation_scores, b.relation_scores)
        # Another embedding of a prefetched question is read from the index again, not mistaken.
        seed_and_expand(prepared, QUESTIONS[0], embeddings[1], many)
        assert graph.live.calls == len(distinct) + 1


def test_dense_seeding_needs_no_prefetch():
    graph, prior = _world()
    settings = RetrievalSettings(seeds=2, budgets=(10,), seeding="dense", relation_prior=prior.bind(Encoder()))
    assert prefetch_linking(graph, QUESTIONS, random_embeddings(len(QUESTIONS), DIM), settings) is graph
    assert graph.live.calls == 0


class SlowNames(Names):
    """``Names`` whose lookups take a while, counting how many run at once."""

    def __init__(self, graph):
        super().__init__(graph)
        self.lock, self.running, self.most, self.asked = threading.Lock(), 0, 0, []

    def fulltext_hits(self, question, embedding, candidates=100, words=None):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.asked.append(question)
        time.sleep(0.02)  # the wait on Neo4j's Lucene
        try:
            return super().fulltext_hits(question, embedding, candidates, words)
        finally:
            with self.lock:
                self.running -= 1


def test_names_are_read_by_several_readers_at_once_with_the_hits_of_one_at_a_time():
    graph, _ = _world()
    questions = QUESTIONS * 3  # each distinct question is read once
    embeddings = np.stack([random_embeddings(1, DIM, seed=len(q))[0] for q in questions])
    words = EntityLinker.default().name_query
    graph.live = SlowNames(graph)
    one = read_names(graph, questions, embeddings, words, readers=1)
    assert graph.live.most == 1 and sorted(graph.live.asked) == sorted(set(QUESTIONS))
    graph.live = SlowNames(graph)
    done = []
    many = read_names(graph, questions, embeddings, words, readers=4, advance=done.append)
    assert graph.live.most > 1 and sorted(graph.live.asked) == sorted(set(QUESTIONS))
    assert sum(done) == len(set(QUESTIONS))
    assert one.keys() == many.keys()
    for key in one:
        np.testing.assert_array_equal(one[key][0], many[key][0])
        assert one[key][1] == many[key][1]
    # Names read ahead (extract reads the next shard's while it expands this one) are not read again.
    settings = RetrievalSettings(seeds=2, budgets=(10,), seeding="fulltext")
    graph.live.asked.clear()
    prepared = prefetch_linking(graph, questions, embeddings, settings, many)
    assert graph.live.asked == []
    assert [h["id"] for h in prepared.fulltext_hits(questions[0], embeddings[0], words=words)] == \
        [h["id"] for h in one[(questions[0], CANDIDATES, words)][1]]


def test_the_linker_reads_the_mention_tables_the_batch_made(monkeypatch):
    import seeder_dgl.retrieval.linking as linking

    graph, prior = _world("tokens")
    embeddings = random_embeddings(len(QUESTIONS), DIM, seed=7)
    bound = _bind(prior, TokenEncoder())
    settings = RetrievalSettings(seeds=2, budgets=(10, 20), seeding="fulltext", relation_prior=bound,
                                 linker=EntityLinker.default().with_prior(bound))
    prepared = prefetch_linking(graph, QUESTIONS[:3], embeddings[:3], settings)
    expected = [seed_and_expand(graph, q, e, settings) for q, e in zip(QUESTIONS, embeddings)]
    made = []
    original = linking.mention_table
    monkeypatch.setattr(linking, "mention_table", lambda *a, **k: made.append(a[0]) or original(*a, **k))
    got = [seed_and_expand(prepared, q, e, settings) for q, e in zip(QUESTIONS, embeddings)]
    # The batch's questions are not tabled again; the others are, and every result is the same.
    assert made == [q for q in QUESTIONS[3:]]
    for (seeds_a, a), (seeds_b, b) in zip(expected, got):
        assert seeds_a == seeds_b and a.node_ids.tolist() == b.node_ids.tolist()
    # The table handed out is a copy: linking the same question twice gives the same seeds.
    assert seed_and_expand(prepared, QUESTIONS[0], embeddings[0], settings)[0] == got[0][0]
