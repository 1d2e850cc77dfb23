"""Large parameters reach the server unchanged, without the driver formatting them for a debug line.

The neo4j driver formats ``repr`` of every RUN's parameters whether or not anything logs it; for
an ingest batch of embeddings that was most of the node phase. ``quiet`` wraps list parameters so
that repr is short while the bytes on the wire stay the same.
"""
from __future__ import annotations

import io
import logging

import numpy as np
import pytest
from neo4j._codec.packstream.v1 import Packer

from seeder_dgl.graphstore.cypher import QuietList, quiet
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.graphstore.writer import GraphWriter
from tests.helpers.graphs import random_embeddings, random_kg

ROWS = [{"id": 1, "embedding": [0.5, -0.25, 1e-30], "sketch": b"\x01\xff", "pair": (3, 4)},
        {"id": 2, "embedding": [], "name": "x" * 10, "nested": [[1, 2], [3]]}]


def _packed(value, rust: bool) -> bytes:
    stream = io.BytesIO()
    packer = Packer(stream)
    hooks = Packer._inject_hooks(None)
    (packer._pack if rust else packer._py_pack)(value, hooks)
    return stream.getvalue()


@pytest.mark.parametrize("rust", [True, False], ids=["rust-codec", "python-codec"])
def test_quiet_parameters_pack_to_the_same_bytes(rust):
    params = {"rows": ROWS, "embedding": [0.1] * 384, "ids": (7, 8), "limit": 5, "name": "q"}
    assert _packed(quiet(params), rust) == _packed(params, rust)


def test_quiet_wraps_lists_and_tuples_only_and_keeps_their_values():
    params = quiet({"rows": ROWS, "ids": (7, 8), "limit": 5, "meta": {"a": [1] * 1000}, "name": "q"})
    assert type(params["rows"]) is QuietList and params["rows"] == ROWS
    assert type(params["ids"]) is QuietList and params["ids"] == [7, 8]
    assert params["limit"] == 5 and params["name"] == "q" and type(params["meta"]) is dict
    assert repr(QuietList(range(1_000_000))) == "<1000000 values>"


@pytest.fixture
def driver_debug_lines():
    """The lines the driver logs at DEBUG (what it would format anyway, logged or not)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger, handler = logging.getLogger("neo4j"), Keep(level=logging.DEBUG)
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(old)


@pytest.mark.neo4j
def test_ingest_and_retrieval_send_embeddings_without_formatting_them(neo4j_driver, dataset_label,
                                                                      driver_debug_lines):
    kg = random_kg(dataset_label, 60, 200, seed=4)
    emb = random_embeddings(60, seed=4)
    GraphWriter(neo4j_driver, dataset_label, node_batch=50).ingest(
        kg, emb, random_embeddings(4, seed=5), "test-model", progress=False)
    graph = LiveGraph(neo4j_driver, dataset_label, hop_partitions=1)
    seeds = graph.dense_seeds(emb[3], 3)
    graph.khop_filter(emb[3], seeds, [5, 5])

    runs = [line for line in driver_debug_lines if "C: RUN" in line]
    node_batches = [line for line in runs if "setNodeVectorProperty" in line]
    hops = [line for line in runs if "$frontier" in line or "seeder.khop(" in line]  # Cypher or the procedure
    assert len(node_batches) >= 2 and hops  # 60 nodes in batches of 50; two hops
    first = f"{float(emb[0, 0])!r}"[:8]  # an embedding value, as repr would print it
    for line in node_batches + hops:
        assert "values>" in line and first not in line
    # The whole debug output of the ingest stays small: no batch was formatted value by value.
    assert max(len(line) for line in runs) < 20_000, max(len(line) for line in runs)
