"""SeedER as a neo4j-graphrag retriever: ``GraphRAG(retriever=SeederRetriever(driver, "metaqa"), llm=...)``.

neo4j-graphrag's ``Retriever.search`` calls ``get_search_results`` for a ``RawSearchResult`` (a
list of ``neo4j.Record`` and metadata), then turns each record into a ``RetrieverResultItem`` with
the retriever's ``result_formatter`` (or ``default_record_formatter``). ``GraphRAG`` joins the
items' ``content`` into the prompt's context. Here each record is one retrieved node, best first,
with the retrieved triples listed under their better-ranked end (``context.node_contexts``), so
the LLM reads every retrieved triple once; the metadata carries the Cypher statement that draws
the retrieved subgraph in Neo4j Browser.

Retrieval itself is ``seeder_dgl.api.Retriever``: seeding, K-hop expansion in Cypher and the
policy's ranking run exactly as for ``seeder-dgl query``.

Needs ``pip install 'seeder-dgl[graphrag]'`` (neo4j-graphrag 1.22 or later). ``get_search_results``
has typed parameters, so ``convert_to_tool`` and ``ToolsRetriever`` offer it to an LLM as a tool.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import neo4j

try:
    from neo4j_graphrag.retrievers.base import Retriever
    from neo4j_graphrag.types import RawSearchResult, RetrieverResultItem
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("SeederRetriever needs neo4j-graphrag: pip install 'seeder-dgl[graphrag]'") from exc

from seeder_dgl.api import Retrieval, Retriever as SeederApiRetriever
from seeder_dgl.integrations.context import NodeContext, node_contexts
from seeder_dgl.validation import check_k

RECORD_KEYS = ("rank", "id", "name", "type", "score", "description", "triples")
"""The keys of each record ``get_search_results`` returns (what a custom ``result_formatter`` reads)."""


def search_result(result: Retrieval, dataset: str) -> RawSearchResult:
    """One ``neo4j.Record`` per retrieved node (keys ``RECORD_KEYS``), best first, and metadata on
    the whole retrieval: question, dataset, method, seconds, subgraph size and the Cypher statement."""
    records = [neo4j.Record(c.metadata()) for c in node_contexts(result)]
    metadata = {"question": result.question, "dataset": dataset, "method": result.method,
                "seconds": result.seconds, "subgraph_size": result.subgraph_size, "cypher": result.to_cypher()}
    return RawSearchResult(records=records, metadata=metadata)


def format_record(record: neo4j.Record) -> RetrieverResultItem:
    """The node's name and type and its triples as the item's content; the record's fields as metadata."""
    context = NodeContext(**{key: record[key] for key in RECORD_KEYS})
    return RetrieverResultItem(content=context.text(), metadata=context.metadata())


class SeederRetriever(Retriever):
    """SeedER retrieval on one ingested dataset, as a neo4j-graphrag ``Retriever``.

    ``driver`` is the neo4j driver of the database that holds the dataset; it stays the caller's
    (``close`` does not close it). Retrieval reads ``neo4j_database`` [default: ``NEO4J_DATABASE``,
    else the server's default], like ``seeder_dgl.api.Retriever``. ``options`` are passed on to ``seeder_dgl.api.Retriever``
    (``checkpoint``, ``profile``, ``seeding``, ``seeds``, ``budgets``, ``encoder``, ...).

    neo4j-graphrag's base class checks the server's version when it is built (one
    ``CALL dbms.components()``; it wants 5.18.1 or later, and seeder-dgl's datasets need 5.26
    anyway) and sets the driver's user agent to neo4j-graphrag's.
    """

    def __init__(self, driver: neo4j.Driver, dataset: str, *, method: str = "seeder", top_k: int = 20,
                 result_formatter: Optional[Callable[[neo4j.Record], RetrieverResultItem]] = None,
                 neo4j_database: Optional[str] = None, **options: Any):
        self.top_k = check_k(top_k)  # before any query: a bad argument is the caller's one-line error
        super().__init__(driver, neo4j_database)
        self.dataset = dataset
        self.result_formatter = result_formatter
        self.retriever = SeederApiRetriever(dataset, method=method, driver=driver, database=neo4j_database,
                                            **options)

    def get_search_results(self, query_text: str, top_k: Optional[int] = None,
                           method: Optional[str] = None) -> RawSearchResult:
        """Retrieve for ``query_text``: the ``top_k`` best nodes (default: the constructor's) by
        ``method`` (default: the constructor's: seeder, dense, khop or ppr), one record each.

        Args:
            query_text (str): the question, in natural language.
            top_k (int, optional): how many nodes to return.
            method (str, optional): which ranking to use for this call.

        Returns:
            RawSearchResult: one record per node (rank, id, name, type, score, triples) and the
            retrieval's metadata (question, dataset, method, seconds, subgraph_size, cypher).
        """
        k = self.top_k if top_k is None else top_k
        return search_result(self.retriever.retrieve(query_text, k=k, method=method), self.dataset)

    def default_record_formatter(self, record: neo4j.Record) -> RetrieverResultItem:
        return format_record(record)

    def close(self) -> None:
        """Release what the SeedER retriever holds (the driver is the caller's and stays open)."""
        self.retriever.close()

    def __enter__(self) -> "SeederRetriever":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
