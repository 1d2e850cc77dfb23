"""`seeder-dgl mcp` end to end against the real Neo4j, driven by the MCP SDK's own client: the
command started over stdio (as an MCP client's config starts it) and over streamable HTTP, on a
small graph of its own. `retrieve` gives what `query --format json` gives, `subgraph` the
relationships among given nodes, `datasets` the node and relation types; a Host header that is
not this server's is refused (DNS-rebinding protection)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter

import pytest
from typer.testing import CliRunner

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from seeder_dgl.cli import app  # noqa: E402
from tests.helpers.own_graph import company_graph, ingested_graph  # noqa: E402
from tests.helpers.processes import free_port, stop  # noqa: E402

runner = CliRunner()
START_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def dataset(neo4j_target, tmp_path_factory):
    """A small company graph ingested under a fresh name (no policy trained: K-hop is its default
    method); dropped afterwards. Yields (name, graph, environment for the server's process)."""
    root = tmp_path_factory.mktemp("mcp")
    name = "mcp" + uuid.uuid4().hex[:8]
    graph = company_graph(seed=5, people=20)
    with ingested_graph(neo4j_target, root, name, graph):
        yield name, graph, {k: v for k, v in os.environ.items() if k != "SEEDER_EMBEDDINGS"}


def _employee(graph) -> tuple[str, str]:
    person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
    return person, next(t for h, r, t in graph.triples if h == person and r == "works at")


async def _session(server, name: str, graph) -> dict:
    """Every tool once through ``server`` (a URL or stdio parameters); what each answered."""
    person, employer = _employee(graph)
    async with Client(server, read_timeout_seconds=120) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        retrieved = await client.call_tool("retrieve", {"question": f"Where does {person} work?", "k": 5})
        ids = [n["id"] for n in retrieved.structured_content["nodes"]]
        around = await client.call_tool("subgraph", {"node_ids": ids + [10 ** 9]})
        served = await client.call_tool("datasets", {})
        wrong = await client.call_tool("retrieve", {"question": "x", "dataset": "no-such-dataset"})
    return {"tools": tools, "retrieved": retrieved, "subgraph": around, "datasets": served, "wrong": wrong,
            "person": person, "employer": employer}


def _check(answers: dict, name: str, graph, env: dict, monkeypatch) -> None:
    assert answers["tools"] == {"retrieve", "subgraph", "datasets"}
    body = answers["retrieved"].structured_content
    assert not answers["retrieved"].is_error and body["dataset"] == name and body["method"] == "khop"
    assert answers["employer"] in [n["name"] for n in body["nodes"]]

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    printed = runner.invoke(app, ["query", name, f"Where does {answers['person']} work?", "--method", "khop",
                                  "--k", "5", "--format", "json"])
    assert printed.exit_code == 0, printed.output
    expected = json.loads(printed.output)
    got = {k: v for k, v in body.items() if k not in ("seconds", "dataset")}
    assert got == {k: v for k, v in expected.items() if k != "seconds"}

    around = answers["subgraph"].structured_content
    assert around["missing_ids"] == [10 ** 9] and len(around["nodes"]) == len(body["nodes"])
    assert {(t["head"], t["relation"], t["tail"]) for t in around["triples"]} == {
        (t["head"], t["relation"], t["tail"]) for t in body["triples"]}
    assert ((answers["person"], "works_at", answers["employer"])
            in {(t["head"], t["relation"], t["tail"]) for t in around["triples"]})

    (described,) = answers["datasets"].structured_content["result"]
    assert described["node_types"] == dict(Counter(n["type"] for n in graph.nodes))
    assert sorted(r.lower() for r in described["relation_types"]) == sorted(
        {r.replace(" ", "_").lower() for _, r, _ in graph.triples})
    assert described["methods"]["seeder"]["available"] is False

    assert answers["wrong"].is_error and "not served here" in answers["wrong"].content[0].text


def test_over_stdio_as_an_mcp_client_starts_it(dataset, monkeypatch):
    name, graph, env = dataset
    params = StdioServerParameters(command=sys.executable, args=["-m", "seeder_dgl.cli", "mcp", name], env=env)
    answers = asyncio.run(_session(params, name, graph))
    _check(answers, name, graph, env, monkeypatch)


def test_over_streamable_http_refusing_other_hosts(dataset, monkeypatch, tmp_path):
    name, graph, env = dataset
    port = free_port()
    log = tmp_path / "mcp.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "seeder_dgl.cli", "mcp", name, "--transport", "http",
                                    "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        answers = asyncio.run(_session(f"http://127.0.0.1:{port}/mcp", name, graph))
        _check(answers, name, graph, env, monkeypatch)

        hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=hello, method="POST", headers={
            "Host": "attacker.example:80", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code in (403, 421)
    finally:
        stop(process)
