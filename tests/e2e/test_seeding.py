"""Full-text entity linking and hybrid seeding on the real name index: fuzzy candidates, their
relation counts, questions as people type them, fusion."""
from __future__ import annotations

import numpy as np
import pytest

from loaders.kg import KnowledgeGraph
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.retrieval.seeding import check_mode, fuse, seed
from seeder_dgl.retrieval.linking import link
from seeder_dgl.graphstore.writer import GraphWriter
from tests.helpers.graphs import random_embeddings


def test_fusion_and_modes():
    # 3: 1/63 + 1/61 > 2: 2/62 > 1: 1/61
    assert fuse([[1, 2, 3], [3, 2, 9]], 3) == [3, 2, 1]
    assert check_mode("hybrid") == "hybrid"
    with pytest.raises(SeederError, match="unknown seeding mode"):
        check_mode("magic")


def test_fulltext_seeding_on_neo4j_finds_rare_names(neo4j_driver, dataset_label, tmp_path):
    names = ["Inception", "Christopher Nolan", "actors", "Heat", "Michael Mann", "The Thin Red Line"]
    n = len(names)
    kg = KnowledgeGraph(dataset_label, names, names, np.zeros(n, np.int64), ["thing"],
                        np.array([0, 3]), np.array([1, 4]), np.array([0, 0]), ["directed_by"])
    emb = random_embeddings(n, seed=1)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, random_embeddings(1, seed=2), "m", progress=False)
    try:
        graph = LiveGraph(neo4j_driver, dataset_label)
        question = 'who directed "Heat" (the movie with actors) AND NOT:[x]'
        q = random_embeddings(1, seed=3)[0]
        top = seed(graph, question, q, 1, "fulltext")
        assert top[0][0] == 3
        assert top[0][1] == pytest.approx(float(emb[3] @ q), abs=1e-5)  # cos(q, v) for K-hop scoring
        hybrid = seed(graph, question, q, 3, "hybrid")
        assert 3 in [i for i, _ in hybrid] and len(hybrid) == 3
        # no name matches the question: dense seeds fill in, so a question always has seeds
        assert seed(graph, "???", q, 2, "fulltext") == graph.dense_seeds(q, 2)
        # the raw hits: one columnar row, by Lucene score, each with its exact cosine
        hits = graph.fulltext_hits("Michael Mann Heat actors", q)
        assert {h["id"] for h in hits} == {2, 3, 4}
        scores = [h["text_score"] for h in hits]
        assert scores == sorted(scores, reverse=True)
        for h in hits:
            assert h["name"] == names[h["id"]]
            assert h["similarity"] == pytest.approx(float(emb[h["id"]] @ q), abs=1e-5)
        assert graph.fulltext_hits("zebra", q) == []  # words, but no name matches
        # each hit carries its type and its relationships per relation type (DIRECTED_BY: Heat, Mann)
        by_id = {h["id"]: h for h in hits}
        assert by_id[3]["type"] == "thing" and by_id[3]["degrees"] == [1] and by_id[2]["degrees"] == [0]
        # as people type: lower case, a letter dropped or two swapped, no quotes; the same node
        for typed in ("who directed heat", "who directed Haet", "who directed heatt the movie", "WHO DIRECTED HEAT"):
            assert seed(graph, typed, q, 1, "fulltext")[0][0] == 3, typed
        assert seed(graph, "films by michael man", q, 1, "fulltext")[0][0] == 4
        assert seed(graph, "who directed the thin red lnie", q, 1, "fulltext")[0][0] == 5

        # eval --profile on the export: each question's names read from Neo4j once, then every
        # method seeds in memory as the live graph does
        from seeder_dgl.retrieval.pipeline import MemoryGraph
        from seeder_dgl.graphstore.export import export_graph

        memory = MemoryGraph.from_export(export_graph(neo4j_driver, dataset_label, tmp_path / "export",
                                                      progress=False), graph)
        texts = [question, "films by Michael Mann"]
        embs = random_embeddings(2, seed=4)
        memory.link_names(texts, embs)
        memory.live = None  # from here on, names come from what link_names kept
        assert seed(memory, texts[0], embs[0], 1, "fulltext")[0][0] == 3
        linked = seed(memory, texts[1], embs[1], 1, "fulltext")
        assert linked == [(4, pytest.approx(float(emb[4] @ embs[1]), abs=1e-5))]
        assert linked == seed(graph, texts[1], embs[1], 1, "fulltext")
        assert [i for i, _ in seed(memory, texts[0], embs[0], 3, "hybrid")] == \
            [i for i, _ in seed(graph, texts[0], embs[0], 3, "hybrid", exact=True)]
    finally:
        writer.reset()


def test_hits_carry_the_relation_types_of_graphs_with_many_of_them(neo4j_driver, dataset_label):
    """Past MAX_COUNTED_TYPES relation types each hit lists the types it has (no count per type),
    and the hits read them into the same per-type vector."""
    from seeder_dgl.graphstore.cypher import MAX_COUNTED_TYPES

    types = MAX_COUNTED_TYPES + 8
    names = ["Alpha Centauri", "Beta Pictoris", "Gamma Draconis", "Delta Cephei"]
    # Alpha -r0-> Beta, Alpha -r39-> Gamma, Delta -r5-> Beta
    kg = KnowledgeGraph(dataset_label, names, names, np.zeros(4, np.int64), ["star"], np.array([0, 0, 3]),
                        np.array([1, 2, 1]), np.array([0, types - 1, 5]), [f"relation {i}" for i in range(types)])
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, random_embeddings(4, seed=1), random_embeddings(types, seed=2), "m", progress=False)
    try:
        graph = LiveGraph(neo4j_driver, dataset_label)
        hits = {h["id"]: h for h in graph.fulltext_hits("alpha centauri beta pictoris", random_embeddings(1)[0])}
        expected = {0: {0, types - 1}, 1: {0, 5}}
        for node, present in expected.items():
            assert len(hits[node]["degrees"]) == types
            assert {i for i, d in enumerate(hits[node]["degrees"]) if d} == present
    finally:
        writer.reset()


def test_coverage_rows_count_topics_answers_and_sizes(neo4j_driver, dataset_label):
    from loaders.kg import Query
    from seeder_dgl.evaluation.coverage import CoverageSetting, coverage

    names = ["Heat", "Michael Mann", "Collateral", "Tom Cruise", "Top Gun", "Tony Scott", "Alien"]
    n = len(names)
    # Heat -directed_by-> Mann <-directed_by- Collateral -starred-> Cruise <-starred- Top Gun -directed_by-> Scott
    src, dst, rel = np.array([0, 2, 2, 4, 4]), np.array([1, 1, 3, 3, 5]), np.array([0, 0, 1, 1, 0])
    kg = KnowledgeGraph(dataset_label, names, names, np.zeros(n, np.int64), ["thing"], src, dst, rel,
                        ["directed_by", "starred_actors"])
    emb = random_embeddings(n, seed=7)
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, emb, random_embeddings(2, seed=8), "m", progress=False)
    try:
        graph = LiveGraph(neo4j_driver, dataset_label)
        queries = [Query(1, "who directed Heat", [1], topic=[0], hops=1),
                   Query(2, "actors in movies directed by the director of Heat", [3], topic=[0], hops=3),
                   Query(3, "who directed Alien", [99], topic=[6], hops=1)]
        q = random_embeddings(3, seed=9)
        rows = coverage(graph, queries, q, [CoverageSetting("fulltext", 1, (2, 2, 2))], progress=False)
        by_group = {r["group"]: r for r in rows}
        assert set(by_group) == {"1", "3", "all"}
        assert by_group["1"]["topic_in_seeds"] == 1.0 and by_group["1"]["queries"] == 2
        assert by_group["1"]["subgraph_hit_any"] == 0.5  # Alien is isolated, its answer is not in the graph
        assert by_group["3"]["subgraph_hit_any"] == 1.0  # Heat -> Mann -> Collateral -> Cruise
        assert by_group["all"]["queries"] == 3 and by_group["all"]["mean_nodes"] <= 7
    finally:
        writer.reset()


def test_names_joined_with_underscores_are_found_from_questions_typed_with_spaces(neo4j_driver, dataset_label):
    """A graph whose names join words with '_' (DBpedia titles): the standard name index keeps
    "Championnat_d'Écosse_de_football_D2_2013-2014" as one term, which a question typed with spaces
    or without punctuation cannot reach; the name-words index, asked in the same statement,
    reaches it word by word. ``reset`` removes that index with the others."""
    from seeder_dgl.graphstore.name_index import NameQuery

    names = ["Championnat_d'Écosse_de_football_D2_2013-2014", "Championnat_d'Écosse_de_football_D2_2016-2017",
             "Virginia_gubernatorial_election,_1993", "Scotland", "Football"]
    n = len(names)
    kg = KnowledgeGraph(dataset_label, names, names, np.zeros(n, np.int64), ["thing"],
                        np.array([0, 1, 2]), np.array([3, 3, 4]), np.array([0, 0, 0]), ["located_in"])
    writer = GraphWriter(neo4j_driver, dataset_label)
    writer.ingest(kg, random_embeddings(n, seed=1), random_embeddings(1, seed=2), "m", progress=False)
    label = writer.label
    try:
        graph = LiveGraph(neo4j_driver, dataset_label)
        assert graph.words_index_online
        q = random_embeddings(1, seed=3)[0]
        joined, alone = NameQuery(joined=True), NameQuery()
        words = "which league is championnat decosse de football"
        assert not {0, 1} & {h["id"] for h in graph.fulltext_hits(words, q, words=alone)}  # one term: unreachable
        assert {0, 1} <= {h["id"] for h in graph.fulltext_hits(words, q, words=joined)}
        for question in ("who won championnat decosse de football d2 2013 2014", "who won Championnat d'Écosse de football D2 2013-2014?",
                         "who won Championnat_d'Écosse_de_football_D2_2013-2014"):
            hits = graph.fulltext_hits(question, q, words=joined)
            assert len({h["id"] for h in hits}) == len(hits)  # a node both indexes find is one hit
            linked = link(question, hits, 1)
            assert linked.ids(linked.chosen)[:1] == [0], question
        assert [h["id"] for h in graph.fulltext_hits("virginia gubernatorial elcetion 1993", q, words=joined)][0] == 2
    finally:
        writer.reset()
    left = neo4j_driver.execute_query("SHOW INDEXES YIELD name RETURN collect(name) AS c").records[0]["c"]
    assert not {f"{label}_name", f"{label}_words", f"{label}_embedding"} & set(left)
