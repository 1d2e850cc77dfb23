"""int8 sketches of the stored embeddings, with a bound that keeps K-hop-with-filtering exact.

A hop scores every neighbour u of the frontier with sim(q, u). Neo4j decodes a float array value
by value, so reading the 384-float ``u.embedding`` costs about 17 us, and a hop through hubs meets
tens of thousands of neighbours. Each node therefore also stores

- ``sketch``: the codes c = round(u / s) as a byte array (Neo4j copies those whole), with
  s = max_i |u_i| / 127;
- ``sketch_error``: a bound on |cos(q, u) - cos(q, c)| for every unit query q:
  q . u - cos(q, c) = q . (u - s c) + (q . s c - cos(q, c)), where every component of u - s c is
  at most s / 2, so the first term is at most s / 2 * ||q||_1 <= s / 2 * sqrt(d), and
  q . s c = cos(q, c) * ||s c||, so the second is at most | ||s c|| - 1 |. ROUNDING covers the
  float32 arithmetic of Neo4j's similarity functions.

The query is sketched the same way (``query_sketch``): |cos(q, u) - cos(c_q, c_u)| is at most the
sum of both errors, because each error bounds the distance between a unit vector and its
normalised codes. Neo4j compares two byte arrays directly, where a list parameter would be
converted value by value on every row.

A hop bounds every neighbour's score from the sketches, and reads the float embedding only of the
neighbours whose upper bound reaches the ``limit``-th best lower bound: no other neighbour can
make the top ``limit`` (cypher/retrieval/khop_hop.cypher). The result is the exact one; the
sketch only decides whose embedding is worth reading. The bound is about 0.015 in cosine for
MiniLM vectors, so a hop reads ~100 embeddings instead of tens of thousands.
"""
from __future__ import annotations

import math

import numpy as np

LEVELS = 127
ROUNDING = 1e-5


def embedding_sketch(unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes int8 [n, d], sketch_error float64 [n]) of the unit-length rows of ``unit``."""
    rows = np.asarray(unit, dtype=np.float64)
    if rows.ndim == 1:
        rows = rows[None, :]
    peak = np.abs(rows).max(axis=1)
    scale = np.where(peak > 0, peak / LEVELS, 1.0)
    codes = np.rint(rows / scale[:, None]).clip(-LEVELS, LEVELS).astype(np.int8)
    length = scale * np.linalg.norm(codes.astype(np.float64), axis=1)
    error = scale / 2.0 * math.sqrt(rows.shape[1]) + np.abs(length - 1.0) + ROUNDING
    return codes, error


def query_sketch(unit_query) -> dict:
    """The query's sketch parameters for cypher/retrieval/khop_hop.cypher."""
    codes, error = embedding_sketch(np.asarray(unit_query))  # one row: embedding_sketch takes 1-d too
    return {"query_sketch": codes[0].tobytes(), "query_sketch_error": float(error[0])}


def sketch_properties(unit: np.ndarray) -> list[dict]:
    """The sketch properties of each row, as the node statements take them."""
    codes, error = embedding_sketch(unit)
    return [{"sketch": codes[i].tobytes(), "sketch_error": float(error[i])} for i in range(codes.shape[0])]
