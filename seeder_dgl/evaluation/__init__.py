"""Retrieval metrics computed in the project (STaRK conventions, docs/method.md)."""
from seeder_dgl.evaluation.metrics import aggregate, batch_metrics, query_metrics

__all__ = ["aggregate", "batch_metrics", "query_metrics"]
