"""The retrieved subgraph as an LLM's context (seeder_dgl.integrations), without a server: one item
per node, best first, every retrieved triple exactly once, under its better-ranked end."""
from __future__ import annotations

import neo4j
import pytest

from seeder_dgl.api import Retrieval, RetrievedNode

pytest.importorskip("neo4j_graphrag")

from seeder_dgl.integrations.context import node_contexts  # noqa: E402
from seeder_dgl.integrations.graphrag import RECORD_KEYS, format_record, search_result  # noqa: E402

NODES = [RetrievedNode(11, "person", "Mark Romanek", 0.9), RetrievedNode(4, "movie", "Never Let Me Go", 0.7,
                                                                     text="a 2010 British dystopian drama"),
         RetrievedNode(7, "person", "Kazuo Ishiguro", 0.6), RetrievedNode(30, "movie", "One Hour Photo", 0.4),
         RetrievedNode(51, "genre", "Drama", 0.1)]
TRIPLES = [("Never Let Me Go", "directed_by", "Mark Romanek"), ("Never Let Me Go", "written_by", "Kazuo Ishiguro"),
           ("One Hour Photo", "directed_by", "Mark Romanek"), ("One Hour Photo", "has_genre", "One Hour Photo")]


def _retrieval() -> Retrieval:
    ids = {n.name: n.id for n in NODES}
    edges = [(ids[h], h, r, ids[t], t) for h, r, t in TRIPLES]
    return Retrieval("who directed Never Let Me Go", "seeder", NODES, 0.02, 40, edges, label="KG_films")


def test_each_triple_is_listed_once_under_its_better_ranked_end():
    contexts = node_contexts(_retrieval())
    assert [c.rank for c in contexts] == [1, 2, 3, 4, 5] and [c.id for c in contexts] == [11, 4, 7, 30, 51]
    assert contexts[0].triples == ["Never Let Me Go -[directed_by]-> Mark Romanek",
                                   "One Hour Photo -[directed_by]-> Mark Romanek"]
    assert contexts[1].triples == ["Never Let Me Go -[written_by]-> Kazuo Ishiguro"]
    assert contexts[2].triples == [] and contexts[4].triples == []
    assert contexts[3].triples == ["One Hour Photo -[has_genre]-> One Hour Photo"]  # a self-loop, once
    listed = [t for c in contexts for t in c.triples]
    assert sorted(listed) == sorted(_retrieval().triples())
    assert contexts[0].text() == ("Mark Romanek (person)\n  Never Let Me Go -[directed_by]-> Mark Romanek\n"
                                  "  One Hour Photo -[directed_by]-> Mark Romanek")
    assert contexts[4].text() == "Drama (genre)"


def test_search_result_holds_one_record_per_node_and_the_cypher_statement():
    raw = search_result(_retrieval(), "films")
    assert all(isinstance(r, neo4j.Record) for r in raw.records)
    assert [tuple(r.keys()) for r in raw.records] == [RECORD_KEYS] * len(NODES)
    assert [r["id"] for r in raw.records] == [11, 4, 7, 30, 51]
    assert raw.metadata["cypher"] == _retrieval().to_cypher()
    assert raw.metadata["dataset"] == "films" and raw.metadata["method"] == "seeder"

    items = [format_record(r) for r in raw.records]
    assert [i.content for i in items] == [c.text() for c in node_contexts(_retrieval())]
    assert items[1].metadata == {"rank": 2, "id": 4, "name": "Never Let Me Go", "type": "movie", "score": 0.7,
                                 "description": "a 2010 British dystopian drama",
                                 "triples": ["Never Let Me Go -[written_by]-> Kazuo Ishiguro"]}
    assert items[1].content.startswith("Never Let Me Go (movie): a 2010 British dystopian drama\n  ")
    assert items[0].metadata["description"] == ""  # a node whose text is only its name adds nothing


def test_an_empty_retrieval_gives_no_items():
    raw = search_result(Retrieval("q", "khop", [], 0.0, 0, [], label="KG_films"), "films")
    assert raw.records == [] and "WHERE n.id IN []" in raw.metadata["cypher"]


def test_the_retriever_becomes_a_tool_with_typed_parameters():
    """neo4j-graphrag's ``convert_to_tool`` (and so ``ToolsRetriever``) reads the parameters off
    ``get_search_results``'s signature: the question is a required string, ``top_k`` an integer of at
    least 1, ``method`` an optional string."""
    from seeder_dgl.integrations.graphrag import SeederRetriever

    retriever = SeederRetriever.__new__(SeederRetriever)  # no driver: the tool needs only the signature
    tool = retriever.convert_to_tool("kg_search", "Find what the knowledge graph knows about a question",
                                     {"query_text": "the user's question"})
    schema = tool.get_parameters()
    assert schema["required"] == ["query_text"]
    assert schema["properties"]["query_text"] == {"type": "string", "description": "the user's question"}
    assert schema["properties"]["top_k"]["type"] == "integer" and schema["properties"]["top_k"]["minimum"] == 1
    assert schema["properties"]["method"]["type"] == "string"
    assert set(schema["properties"]) == {"query_text", "top_k", "method"}
