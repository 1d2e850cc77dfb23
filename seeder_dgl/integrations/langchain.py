"""SeedER as a LangChain retriever: ``SeederLangChainRetriever(retriever=Retriever("metaqa")).invoke(question)``.

Each retrieved node becomes one ``Document``, best first: its name and type, then the retrieved
triples listed under their better-ranked end (``context.node_contexts``), with the node's id, type,
score and rank as metadata. Retrieval is ``seeder_dgl.api.Retriever``, unchanged.

Needs ``pip install 'seeder-dgl[langchain]'`` (langchain-core 1.x).
"""
from __future__ import annotations

from typing import Optional

try:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("SeederLangChainRetriever needs langchain-core: pip install 'seeder-dgl[langchain]'") from exc

from seeder_dgl.api import Retriever
from seeder_dgl.integrations.context import node_contexts


class SeederLangChainRetriever(BaseRetriever):
    """A ``seeder_dgl.Retriever`` behind LangChain's retriever interface.

    ``retriever`` is opened and closed by the caller (``with Retriever("metaqa") as r: ...``), so one
    encoder and policy serve every call. ``k`` nodes come back per question, ranked by ``method``
    (default: the retriever's own).
    """

    retriever: Retriever
    k: int = 20
    method: Optional[str] = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        result = self.retriever.retrieve(query, k=self.k, method=self.method)
        return [Document(page_content=c.text(), metadata={**c.metadata(), "dataset": self.retriever.dataset})
                for c in node_contexts(result)]
