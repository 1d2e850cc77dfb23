"""A bounded, thread-safe memory of rows computed in batches (questions' embeddings, templates'
prior inputs).

Both callers ask for several texts at once and compute the ones they miss in one batch of the
model, which ``functools.lru_cache`` (one call per key) cannot do; the rows handed out are
read-only, since every caller asking the same text shares them. ``cachetools.LRUCache`` under the
same batch interface was 1.1-1.7x slower (``benchmarks/compare_lru.py``), so the order is kept by
the standard library's ``OrderedDict`` here.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, Sequence

import numpy as np


class BatchLRU:
    """The rows of the last ``size`` distinct keys, least recently used evicted first."""

    def __init__(self, size: int):
        self.size = int(size)
        self._rows: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()

    def get_many(self, keys: Sequence[Hashable], compute: Callable[[list], Sequence[np.ndarray]]) -> list[np.ndarray]:
        """One row per key, in order: those kept, and the missing ones (each once, however often it
        is asked) from one call of ``compute(missing keys)``. The lock is not held while computing,
        so two threads may compute the same key; both get equal rows."""
        found: dict = {}
        with self._lock:
            for key in keys:
                if key in self._rows:
                    self._rows.move_to_end(key)
                    found[key] = self._rows[key]
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            fresh = compute(missing)
            with self._lock:
                for key, row in zip(missing, fresh):
                    row = np.array(row, copy=True)  # its own memory: an evicted row frees it
                    row.setflags(write=False)
                    found[key] = self._rows[key] = row
                    self._rows.move_to_end(key)
                while len(self._rows) > self.size:
                    self._rows.popitem(last=False)
        return [found[k] for k in keys]
