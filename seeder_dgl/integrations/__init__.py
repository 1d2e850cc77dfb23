"""SeedER retrieval inside other RAG frameworks.

- ``seeder_dgl.integrations.graphrag.SeederRetriever``: a neo4j-graphrag ``Retriever``, for
  ``GraphRAG(retriever=SeederRetriever(driver, "metaqa"), llm=...)`` (``pip install 'seeder-dgl[graphrag]'``).
- ``seeder_dgl.integrations.langchain.SeederLangChainRetriever``: a LangChain ``BaseRetriever``
  (``pip install 'seeder-dgl[langchain]'``).

Nothing is imported here, so ``seeder_dgl`` works without either framework installed. Both adapters
call ``seeder_dgl.api.Retriever`` and describe its result with ``context.node_contexts``.
"""
