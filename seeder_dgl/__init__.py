"""seeder-dgl: SeedER knowledge-graph retrieval on live Neo4j graphs."""

__version__ = "0.1.0"


def __getattr__(name):  # lazy: `import seeder_dgl` stays light (no torch, no driver)
    if name in ("Retriever", "Retrieval", "RetrievedNode"):
        from seeder_dgl import api

        return getattr(api, name)
    raise AttributeError(name)
