"""seeder-dgl: SeedER knowledge-graph retrieval on live Neo4j graphs."""

__version__ = "0.1.0"
