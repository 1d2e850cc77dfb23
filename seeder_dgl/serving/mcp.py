"""SeedER as an MCP server: ``seeder-dgl mcp [DATASET...]`` over stdio or streamable HTTP.

Three read-only tools, on the official MCP Python SDK (``mcp`` 2.x, its ``MCPServer``):

- ``retrieve``: a question -> the ranked nodes (id, type, name, score, text) and the triples among
  them, as ``seeder-dgl query --format json`` gives them;
- ``subgraph``: node ids -> those nodes and the relationships among them (to look around what
  ``retrieve`` found);
- ``datasets``: what is served: each dataset's size, node types, relation types and methods.

The retrievers are the HTTP server's (``serving.app.open_retrievers``/``prepare``): one shared Neo4j
driver, one encoder per model, each dataset warmed once before the first request. Tools are plain
functions; the SDK runs them in worker threads, as FastAPI runs ``serve``'s. Errors reach the
client as the tool's error result, one line each.

Needs ``pip install 'seeder-dgl[mcp]'``.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Sequence

from pydantic import Field

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.transport_security import TransportSecuritySettings
    from mcp_types import ToolAnnotations
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the MCP server needs the MCP Python SDK: pip install 'seeder-dgl[mcp]'") from exc

from seeder_dgl import __version__
from seeder_dgl.api import METHODS
from seeder_dgl.errors import SeederError
from seeder_dgl.serving.app import ServedDataset, allowed_host_names, choose, open_retrievers, prepare
from seeder_dgl.validation import MAX_K, check_k, check_question

MAX_SUBGRAPH_NODES = 500
"""The most node ids one ``subgraph`` call may name (a retrieval returns tens)."""
TRANSPORTS = ("stdio", "http")
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

INSTRUCTIONS = ("Knowledge-graph retrieval with SeedER on graphs kept in Neo4j. Call `datasets` to see what is "
                "served, `retrieve` with a natural-language question for the best-ranked nodes and the triples "
                "among them, and `subgraph` with node ids to see how given nodes are connected.")


class McpDatasets:
    """The datasets one MCP server serves, and the three tools' logic (also usable without MCP)."""

    def __init__(self, served: Sequence[ServedDataset]):
        if not served:
            raise SeederError("no dataset to serve: ingest one first (`seeder-dgl ingest metaqa`)")
        self.served = {s.name: s for s in served}
        self._node_types: dict[str, dict[str, int]] = {}

    def pick(self, dataset: str | None) -> ServedDataset:
        return choose(self.served, dataset or None, None)[0]

    def retrieve(self, question: str, k: int = 10, method: str | None = None,
                 dataset: str | None = None) -> dict[str, Any]:
        question = check_question(question)  # before any work, as the CLI and the HTTP server do
        served, chosen = choose(self.served, dataset or None, method or None)
        (result,) = served.retriever.retrieve_many([question], k=check_k(k), method=chosen)
        return {"dataset": served.name, **result.to_dict()}

    def subgraph(self, node_ids: list[int], dataset: str | None = None) -> dict[str, Any]:
        served = self.pick(dataset)
        if len(node_ids) > MAX_SUBGRAPH_NODES:
            raise SeederError(f"{len(node_ids):,} node ids given; name at most {MAX_SUBGRAPH_NODES}")
        graph = served.retriever.graph
        nodes = graph.find_nodes(node_ids)
        held = [i for i, *_ in nodes]
        return {"dataset": served.name,
                "nodes": [{"id": i, "type": t, "name": n, "text": x} for i, t, n, x in nodes],
                "missing_ids": [int(i) for i in dict.fromkeys(node_ids) if int(i) not in set(held)],
                "triples": [{"head": h, "relation": r, "tail": t, "head_id": hi, "tail_id": ti}
                            for hi, h, r, ti, t in graph.edges(held)]}

    def datasets(self) -> list[dict[str, Any]]:
        out = []
        for name, served in self.served.items():
            if name not in self._node_types:
                self._node_types[name] = served.retriever.graph.node_types()
            described = served.describe()
            described["node_types"] = self._node_types[name]
            described["relation_types"] = list(served.retriever.graph.info.relation_types)
            out.append(described)
        return out


def build_server(datasets: McpDatasets) -> MCPServer:
    """The MCP server with the three tools over ``datasets``."""
    server = MCPServer("seeder-dgl", version=__version__, instructions=INSTRUCTIONS,
                       description="SeedER knowledge-graph retrieval on graphs kept in Neo4j")

    @server.tool(annotations=READ_ONLY, structured_output=True)
    def retrieve(
        question: Annotated[str, Field(description="The question, as a person would type it.")],
        k: Annotated[int, Field(description="How many nodes to return, best first.", ge=1, le=MAX_K)] = 10,
        method: Annotated[str | None, Field(description=f"One of {', '.join(METHODS)}; default: the dataset's "
                                                        "(seeder, the learned policy, where trained).")] = None,
        dataset: Annotated[str | None, Field(description="A served dataset (the datasets tool lists them); "
                                                         "default: the first.")] = None,
    ) -> dict[str, Any]:
        """Retrieve the nodes of a knowledge graph that answer a natural-language question: the
        ranked nodes (id, type, name, score, text, whether it was a seed) and the triples among them."""
        return _one_line(datasets.retrieve, question, k, method, dataset)

    @server.tool(annotations=READ_ONLY, structured_output=True)
    def subgraph(
        node_ids: Annotated[list[int], Field(description=f"Node ids, e.g. from retrieve (at most "
                                                         f"{MAX_SUBGRAPH_NODES}).")],
        dataset: Annotated[str | None, Field(description="A served dataset; default: the first.")] = None,
    ) -> dict[str, Any]:
        """The given nodes of a served dataset (id, type, name, text) and every relationship among
        them as head -[relation]-> tail triples; ids the dataset does not hold are listed apart."""
        return _one_line(datasets.subgraph, node_ids, dataset)

    @server.tool(name="datasets", annotations=READ_ONLY)
    def list_datasets() -> list[dict]:
        """The datasets served here: nodes and relationships, node types with their counts, relation
        types, the embedding model, and which retrieval methods each can run."""
        return _one_line(datasets.datasets)

    return server


def _one_line(fn: Callable, *args) -> Any:
    """A SeederError's one line reaches the client as the tool's error result (the SDK keeps the
    text of any other exception on the server, as a crash)."""
    try:
        return fn(*args)
    except SeederError as exc:
        raise ToolError(str(exc)) from None


def http_security(host: str, port: int, allowed_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection: Host and Origin must name this server (``allowed_host_names``, as
    for ``serve``), here with the port, which the SDK compares too."""
    hosts = [name if re.search(r":\d+$", name) else f"{name}:{port}"  # a name given with its port stays so
             for name in allowed_host_names(host, allowed_hosts) if name != "::1"]  # "[::1]" is its Host form
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts])


def run(server: MCPServer, transport: str = "stdio", *, host: str = "127.0.0.1", port: int = 8001,
        allowed_hosts: Sequence[str] = ()) -> None:
    """Serve until stopped: ``stdio`` (a client starts this process) or ``http`` (streamable HTTP at /mcp)."""
    if transport == "stdio":
        server.run("stdio")
    elif transport == "http":
        server.run("streamable-http", host=host, port=port,
                   transport_security=http_security(host, port, allowed_hosts))
    else:
        raise SeederError(f"unknown transport {transport!r}: choose one of {', '.join(TRANSPORTS)}")


def open_datasets(names: Sequence[str], *, method: str = "seeder", profile: str | None = None, warm: bool = True):
    """The served datasets (every completely ingested one when ``names`` is empty) and the shared
    driver to close when done."""
    retrievers, driver = open_retrievers(names, method=method, profile=profile)
    try:
        served = [prepare(r, method, warm=warm) for r in retrievers]
    except BaseException:
        driver.close()
        raise
    return McpDatasets(served), driver
