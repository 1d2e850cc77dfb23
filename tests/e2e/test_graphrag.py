"""SeedER inside neo4j-graphrag's GraphRAG and LangChain, against the real Neo4j with a small film
graph of its own: the retrieved nodes and triples reach the LLM (a deterministic stand-in that
answers only from the context it is given; no network, no model download)."""
from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from typer.testing import CliRunner

pytest.importorskip("neo4j_graphrag")

from neo4j_graphrag.generation import GraphRAG  # noqa: E402
from neo4j_graphrag.llm import LLMInterface, LLMResponse  # noqa: E402
from neo4j_graphrag.types import RetrieverResultItem  # noqa: E402

from seeder_dgl.api import Retriever  # noqa: E402
from seeder_dgl.cli import app  # noqa: E402
from seeder_dgl.errors import SeederError  # noqa: E402
from seeder_dgl.graphstore.writer import GraphWriter  # noqa: E402
from seeder_dgl.integrations.graphrag import SeederRetriever  # noqa: E402

KB = """Never Let Me Go|written_by|Kazuo Ishiguro
Never Let Me Go|directed_by|Mark Romanek
Never Let Me Go|starred_actors|Carey Mulligan
The Remains of the Day|written_by|Kazuo Ishiguro
The Remains of the Day|directed_by|James Ivory
The Remains of the Day|starred_actors|Anthony Hopkins
The White Countess|written_by|Kazuo Ishiguro
The White Countess|directed_by|James Ivory
Howards End|directed_by|James Ivory
Howards End|starred_actors|Anthony Hopkins
One Hour Photo|directed_by|Mark Romanek
Drive|starred_actors|Carey Mulligan
Drive|directed_by|Nicolas Winding Refn
"""
NODES = len({name for line in KB.splitlines() for name in line.split("|")[::2]})  # 12
SMALL = {"method": "khop", "seeds": 2, "budgets": (10, 10, 10, 10)}  # no policy needed; reaches every node


@pytest.fixture(scope="module")
def films(neo4j_target, neo4j_driver, tmp_path_factory):
    """The film graph ingested under a fresh name (MetaQA's kb.txt format), and one encoder for all tests."""
    folder = tmp_path_factory.mktemp("films")
    (folder / "qa").mkdir()
    (folder / "kb.txt").write_text(KB)
    name = "t" + uuid.uuid4().hex[:10]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NEO4J_URI", neo4j_target.uri)
        env.setenv("NEO4J_USER", neo4j_target.user)
        env.setenv("NEO4J_PASSWORD", neo4j_target.password)
        env.setenv("SEEDER_CACHE", str(folder / "cache"))
        result = CliRunner().invoke(app, ["ingest", "metaqa", "--source", str(folder), "--name", name])
        assert result.exit_code == 0, result.output
        try:
            with Retriever(name, driver=neo4j_driver, **SMALL) as retriever:
                yield name, retriever.encoder
        finally:
            GraphWriter(neo4j_driver, name).reset()


class ContextReadingLLM(LLMInterface):
    """An LLM stand-in that knows nothing but its prompt: it answers with the tails of the context's
    facts ('head -[relation]-> tail') whose head the question names and whose relation shares a word
    with the question ('who directed X' -> X -[directed_by]-> ...). It keeps every prompt it gets."""

    FACT = re.compile(r"^\s*(.+?) -\[(.+?)\]-> (.+?)\s*$")

    def __init__(self):
        super().__init__(model_name="context-reader")
        self.prompts: list[str] = []

    def invoke(self, input, message_history=None, system_instruction=None) -> LLMResponse:
        self.prompts.append(input)
        context = input.split("Context:\n", 1)[1].split("\n\nExamples:", 1)[0]
        question = input.rsplit("Question:\n", 1)[1].split("\n\nAnswer:", 1)[0].lower()
        words = set(re.findall(r"[a-z]+", question))
        answers = []
        for line in context.splitlines():
            fact = self.FACT.match(line)
            if fact and fact[1].lower() in question and words & set(fact[2].split("_")) and fact[3] not in answers:
                answers.append(fact[3])
        return LLMResponse(content="; ".join(answers) or "I don't know")

    async def ainvoke(self, input, message_history=None, system_instruction=None) -> LLMResponse:
        return self.invoke(input, message_history, system_instruction)


def test_graphrag_passes_the_retrieved_subgraph_to_the_llm(films, neo4j_driver):
    name, encoder = films
    question = "who directed Never Let Me Go"
    with SeederRetriever(neo4j_driver, name, encoder=encoder, **SMALL) as retriever:
        llm = ContextReadingLLM()
        rag = GraphRAG(retriever=retriever, llm=llm)
        answer = rag.search(query_text=question, return_context=True)
        assert answer.answer == "Mark Romanek"

        # the whole graph was retrieved (top_k 20 > 12 nodes): every node is an item, every triple is
        # in the LLM's prompt exactly once
        items = answer.retriever_result.items
        assert len(items) == NODES and [i.metadata["rank"] for i in items] == list(range(1, NODES + 1))
        prompt = llm.prompts[-1]
        for head, relation, tail in (line.split("|") for line in KB.splitlines()):
            assert prompt.count(f"{head} -[{relation}]-> {tail}") == 1, (head, relation, tail)
        assert f"Question:\n{question}" in prompt
        metadata = answer.retriever_result.metadata
        assert metadata["__retriever"] == "SeederRetriever" and metadata["dataset"] == name
        assert metadata["cypher"].startswith(f"// {NODES} retrieved nodes")

        # fewer nodes through GraphRAG's retriever_config; the context holds only their triples
        few = rag.search(query_text="who wrote The Remains of the Day", retriever_config={"top_k": 4},
                         return_context=True)
        assert len(few.retriever_result.items) == 4
        names = {i.metadata["name"] for i in few.retriever_result.items}
        for line in llm.prompts[-1].splitlines():
            fact = ContextReadingLLM.FACT.match(line)
            if fact:
                assert fact[1] in names and fact[3] in names


def test_retriever_contract_and_a_custom_formatter(films, neo4j_driver):
    name, encoder = films
    with Retriever(name, driver=neo4j_driver, encoder=encoder, **SMALL) as direct:
        expected = direct.retrieve("movies written by Kazuo Ishiguro", k=5)
    with SeederRetriever(neo4j_driver, name, encoder=encoder, top_k=5, **SMALL) as retriever:
        raw = retriever.get_search_results("movies written by Kazuo Ishiguro")
        assert [r["id"] for r in raw.records] == [n.id for n in expected.nodes]
        listed = [t for r in raw.records for t in r["triples"]]
        assert sorted(listed) == sorted(expected.triples()) and listed

        result = retriever.search(query_text="movies written by Kazuo Ishiguro", top_k=3, method="dense")
        assert len(result.items) == 3 and result.metadata["method"] == "dense"
        assert all(isinstance(i, RetrieverResultItem) for i in result.items)
        assert result.items[0].content.splitlines()[0] == f"{result.items[0].metadata['name']} " \
                                                          f"({result.items[0].metadata['type']})"

    def just_names(record):
        return RetrieverResultItem(content=record["name"], metadata={"id": record["id"]})

    with SeederRetriever(neo4j_driver, name, encoder=encoder, top_k=5, result_formatter=just_names,
                         **SMALL) as retriever:
        result = retriever.search(query_text="movies written by Kazuo Ishiguro")
        assert [i.content for i in result.items] == [n.name for n in expected.nodes]


def test_langchain_retriever_returns_one_document_per_node(films, neo4j_driver):
    pytest.importorskip("langchain_core")
    from seeder_dgl.integrations.langchain import SeederLangChainRetriever

    name, encoder = films
    with Retriever(name, driver=neo4j_driver, encoder=encoder, **SMALL) as direct:
        expected = direct.retrieve("who starred in Drive", k=4)
        lc = SeederLangChainRetriever(retriever=direct, k=4)
        documents = lc.invoke("who starred in Drive")
        awaited = asyncio.run(lc.ainvoke("who starred in Drive"))  # langchain-core 1.x's async path
    assert [d.metadata["id"] for d in documents] == [n.id for n in expected.nodes]
    assert [(d.page_content, d.metadata) for d in awaited] == [(d.page_content, d.metadata) for d in documents]
    assert documents[0].page_content.startswith(f"{expected.nodes[0].name} ({expected.nodes[0].type})")
    assert sorted(t for d in documents for t in d.metadata["triples"]) == sorted(expected.triples())
    assert {d.metadata["dataset"] for d in documents} == {name}


def test_the_retriever_as_a_tool_answers_like_search(films, neo4j_driver):
    """neo4j-graphrag 1.22's ``convert_to_tool``: what an LLM's tool call (or ``ToolsRetriever``) runs."""
    name, encoder = films
    with SeederRetriever(neo4j_driver, name, encoder=encoder, top_k=4, **SMALL) as retriever:
        tool = retriever.convert_to_tool("movie_graph", "Movies, people and genres")
        called = tool.execute(query_text="who starred in Drive", top_k=3)
        searched = retriever.search(query_text="who starred in Drive", top_k=3)
    assert tool.get_name() == "movie_graph" and tool.get_parameters()["required"] == ["query_text"]
    assert [i.content for i in called.items] == [i.content for i in searched.items] and len(called.items) == 3


def test_user_errors_are_one_line_seeder_errors(films, neo4j_driver):
    name, encoder = films
    with pytest.raises(SeederError, match="is not in Neo4j"):
        SeederRetriever(neo4j_driver, "not_ingested_xyz")
    with pytest.raises(SeederError, match="k must be at least 1"):
        SeederRetriever(neo4j_driver, name, top_k=0)
    with SeederRetriever(neo4j_driver, name, encoder=encoder, **SMALL) as retriever:
        with pytest.raises(SeederError, match="the question is empty"):
            retriever.search(query_text="   ")
        with pytest.raises(SeederError, match="unknown method 'magic'"):
            retriever.search(query_text="Drive", method="magic")
