"""The MCP server's tools without Neo4j, through the SDK's own in-process client: three read-only
tools with typed, described parameters; results as structured content; bad input as the tool's
one-line error result."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from seeder_dgl.api import Retrieval, RetrievedNode  # noqa: E402
from seeder_dgl.serving.app import ServedDataset  # noqa: E402
from seeder_dgl.serving.mcp import MAX_SUBGRAPH_NODES, McpDatasets, build_server, http_security  # noqa: E402

NODES = {0: ("person", "Ada Okafor", "an engineer"), 1: ("company", "Acme Robotics", ""), 2: ("city", "Lisbon", "")}
EDGES = [(0, "Ada Okafor", "works at", 1, "Acme Robotics"), (1, "Acme Robotics", "headquartered in", 2, "Lisbon")]


class FakeGraph:
    class info:
        relation_types = ["WORKS_AT", "HEADQUARTERED_IN"]
        num_nodes, num_relationships, model = 3, 2, "all-MiniLM-L6-v2"

    def find_nodes(self, ids):
        return [(i, *NODES[i]) for i in dict.fromkeys(ids) if i in NODES]

    def edges(self, ids):
        return [e for e in EDGES if e[0] in ids and e[3] in ids]

    def node_types(self):
        return {"person": 1, "company": 1, "city": 1}


class FakeRetriever:
    dataset, profile = "firms", "tuned"

    def __init__(self):
        self.graph, self.asked = FakeGraph(), []

    def retrieve_many(self, questions, k, method):
        self.asked.append((questions, k, method))
        nodes = [RetrievedNode(1, "company", "Acme Robotics", 0.9), RetrievedNode(0, "person", "Ada Okafor", 0.5,
                                                                                   seed=True)][:k]
        return [Retrieval(questions[0], method, nodes, 0.01, 3, EDGES[:1])]


def _call(server, tool: str, arguments: dict):
    async def run():
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(run())


@pytest.fixture()
def served():
    retriever = FakeRetriever()
    datasets = McpDatasets([ServedDataset(retriever, "khop", {"seeder": "no trained checkpoint"})])
    return retriever, build_server(datasets)


def test_three_read_only_tools_with_described_parameters(served):
    async def tools():
        async with Client(served[1]) as client:
            return (await client.list_tools()).tools

    listed = {t.name: t for t in asyncio.run(tools())}
    assert set(listed) == {"retrieve", "subgraph", "datasets"}
    assert all(t.annotations.read_only_hint and not t.annotations.destructive_hint for t in listed.values())
    schema = listed["retrieve"].input_schema
    assert schema["required"] == ["question"] and schema["properties"]["k"]["minimum"] == 1
    assert all(p.get("description") for p in schema["properties"].values())
    assert listed["subgraph"].input_schema["properties"]["node_ids"]["items"] == {"type": "integer"}


def test_retrieve_answers_with_the_json_of_query_and_the_dataset_default_method(served):
    retriever, server = served
    result = _call(server, "retrieve", {"question": "Where does Ada Okafor work?", "k": 2})
    assert not result.is_error
    body = result.structured_content
    assert body["dataset"] == "firms" and body["method"] == "khop"  # no checkpoint: the dataset's K-hop
    assert [n["name"] for n in body["nodes"]] == ["Acme Robotics", "Ada Okafor"]
    assert body["triples"] == [{"head": "Ada Okafor", "relation": "works at", "tail": "Acme Robotics",
                                "head_id": 0, "tail_id": 1}]
    assert retriever.asked == [(["Where does Ada Okafor work?"], 2, "khop")]


@pytest.mark.parametrize("arguments, says", [
    ({"question": "x", "dataset": "other"}, "dataset 'other' is not served here: choose one of firms"),
    ({"question": "x", "method": "seeder"}, "method 'seeder' is not available for firms: no trained checkpoint"),
    ({"question": "x", "method": "magic"}, "unknown method 'magic'"),
    ({"question": "   "}, "the question is empty"),
    ({"question": "x " * 60_000}, "ask in at most 100,000"),
    ({"question": "who is " + "x" * 300}, "a word of 300 characters"),
])
def test_bad_input_is_the_tools_one_line_error(served, arguments, says):
    retriever, server = served
    result = _call(server, "retrieve", arguments)
    assert result.is_error and len(result.content) == 1
    text = result.content[0].text
    assert says in text and "\n" not in text
    assert retriever.asked == []  # refused before any retrieval


def test_subgraph_lists_the_nodes_held_the_ids_not_held_and_the_relationships_among_them(served):
    body = _call(served[1], "subgraph", {"node_ids": [2, 1, 99, 1]}).structured_content
    assert [n["id"] for n in body["nodes"]] == [2, 1] and body["missing_ids"] == [99]
    assert [(t["head"], t["relation"], t["tail"]) for t in body["triples"]] == [
        ("Acme Robotics", "headquartered in", "Lisbon")]
    too_many = _call(served[1], "subgraph", {"node_ids": list(range(MAX_SUBGRAPH_NODES + 1))})
    assert too_many.is_error and f"name at most {MAX_SUBGRAPH_NODES}" in too_many.content[0].text


def test_datasets_lists_types_relations_and_methods(served):
    (described,) = _call(served[1], "datasets", {}).structured_content["result"]
    assert described["name"] == "firms" and described["node_types"] == {"person": 1, "company": 1, "city": 1}
    assert described["relation_types"] == ["WORKS_AT", "HEADQUARTERED_IN"]
    assert described["methods"]["seeder"] == {"available": False, "reason": "no trained checkpoint"}


def test_http_accepts_only_this_servers_host_names():
    local = http_security("127.0.0.1", 8001)
    assert "127.0.0.1:8001" in local.allowed_hosts and "localhost:8001" in local.allowed_hosts
    assert not any("evil" in h for h in local.allowed_hosts) and local.enable_dns_rebinding_protection
    wide = http_security("0.0.0.0", 8001, ["kg.example.org"])
    assert "kg.example.org:8001" in wide.allowed_hosts and "0.0.0.0:8001" not in wide.allowed_hosts
    assert "https://kg.example.org:8001" in wide.allowed_origins
