"""Evaluation: `eval` (every method on the same questions), coverage, funnels, reports and plots;
the retrieval metrics themselves (STaRK conventions, docs/method.md) live in ``seeder_dgl.metrics``
so training's validation reads them from below, and are re-exported here."""
from seeder_dgl.metrics import aggregate, batch_metrics, query_metrics

__all__ = ["aggregate", "batch_metrics", "query_metrics"]
