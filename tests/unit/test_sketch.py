"""The int8 sketch's error bound holds for any unit embedding and query: K-hop's pruning (and so
its exactness) rests on it."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder_dgl.graphstore.sketch import LEVELS, embedding_sketch, sketch_properties


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a @ b) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.sampled_from([2, 3, 16, 384, 768]),
       shape=st.sampled_from(["gaussian", "spiky", "one-hot", "flat"]))
def test_cosine_of_the_codes_is_within_the_stored_error(seed, dim, shape):
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(64, dim))
    if shape == "spiky":  # one large component: a coarse scale for all the others
        rows[:, 0] *= 40
    elif shape == "one-hot":
        rows = np.eye(dim)[rng.integers(0, dim, size=64)] + 1e-9 * rows
    elif shape == "flat":  # every component the same size
        rows = np.sign(rows)
    unit = _unit(rows).astype(np.float32)
    codes, error = embedding_sketch(unit)
    assert codes.dtype == np.int8 and codes.shape == unit.shape and np.abs(codes).max() <= LEVELS
    queries = _unit(rng.normal(size=(16, dim)))
    # A query on a node itself, and queries shaped like the nodes (spiky, one-hot, flat).
    queries = np.concatenate([queries, unit[:4].astype(np.float64), unit[-4:, ::-1].astype(np.float64)])
    for q in queries:
        exact = unit.astype(np.float64) @ q
        approx = _cos(codes.astype(np.float64), q)
        assert np.all(np.abs(exact - approx) <= error)
        # Both sides sketched, as K-hop's first pass compares them: the two errors add up.
        q_codes, q_error = embedding_sketch(q)
        both = _cos(codes.astype(np.float64), q_codes[0].astype(np.float64))
        assert np.all(np.abs(exact - both) <= error + q_error[0])


def test_the_bound_is_tight_enough_to_prune():
    """For 384-d unit vectors of MiniLM's spread the bound is about 0.01-0.03 in cosine: scores
    in a hop differ by more than that, so few neighbours survive to the exact pass."""
    rng = np.random.default_rng(0)
    unit = _unit(rng.normal(size=(1000, 384))).astype(np.float32)
    _, error = embedding_sketch(unit)
    assert 0.005 < np.median(error) < 0.03


def test_properties_are_bytes_and_one_error_per_node():
    unit = _unit(np.random.default_rng(1).normal(size=(3, 8))).astype(np.float32)
    props = sketch_properties(unit)
    codes, error = embedding_sketch(unit)
    assert [p["sketch"] for p in props] == [c.tobytes() for c in codes]
    assert all(isinstance(p["sketch"], bytes) and len(p["sketch"]) == 8 for p in props)
    assert [p["sketch_error"] for p in props] == error.tolist()
