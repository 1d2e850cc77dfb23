"""BatchLRU: the bounded memory of rows the question encoder and the relation prior share."""
from __future__ import annotations

import numpy as np
import pytest

from seeder_dgl.caching import BatchLRU


def test_misses_are_computed_once_in_one_batch_and_the_least_recent_is_evicted():
    calls = []

    def compute(keys):
        calls.append(list(keys))
        return [np.full(2, float(ord(k))) for k in keys]

    cache = BatchLRU(2)
    rows = cache.get_many(["a", "b", "a"], compute)
    assert calls == [["a", "b"]] and [r[0] for r in rows] == [97.0, 98.0, 97.0]
    cache.get_many(["a"], compute)  # a is the most recent now
    cache.get_many(["c"], compute)  # evicts b
    assert len(cache) == 2 and calls[-1] == ["c"]
    cache.get_many(["a", "c"], compute)
    assert calls[-1] == ["c"]  # nothing new computed
    cache.get_many(["b"], compute)
    assert calls[-1] == ["b"]
    cache.clear()
    assert len(cache) == 0


def test_rows_are_read_only_copies():
    source = [np.zeros(3)]
    cache = BatchLRU(4)
    row = cache.get_many(["k"], lambda keys: source)[0]
    source[0][0] = 5.0  # the computed array changes afterwards: the kept row does not
    assert row[0] == 0.0
    with pytest.raises(ValueError):
        row[0] = 1.0
