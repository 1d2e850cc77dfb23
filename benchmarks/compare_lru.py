"""The memory of recent questions' embeddings and templates' prior inputs: seeder-dgl's ``BatchLRU``
(``collections.OrderedDict`` under a lock) beside the same batch interface on ``cachetools.LRUCache``,
alternated in one run on one thread.

    pip install cachetools && python benchmarks/compare_lru.py [--rounds 7]

Each call asks a batch of keys drawn at random from a key space smaller or larger than the memory
(4,096 rows of 384 float32, the default question cache), computes the missing ones in one call
and keeps them. Writes benchmarks/results/compare-lru.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Hashable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402
from seeder_dgl.caching import BatchLRU  # noqa: E402


class CachetoolsBatchLRU:
    """``BatchLRU``'s interface and behaviour on ``cachetools.LRUCache``."""

    def __init__(self, size: int):
        from cachetools import LRUCache

        self.size = int(size)
        self._rows = LRUCache(maxsize=max(self.size, 1))
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[Hashable], compute: Callable[[list], Sequence[np.ndarray]]) -> list[np.ndarray]:
        found: dict = {}
        with self._lock:
            for key in keys:
                row = self._rows.get(key)  # a hit counts as a use
                if row is not None:
                    found[key] = row
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            fresh = compute(missing)
            with self._lock:
                for key, row in zip(missing, fresh):
                    row = np.array(row, copy=True)
                    row.setflags(write=False)
                    found[key] = row
                    if self.size > 0:
                        self._rows[key] = row
        return [found[k] for k in keys]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    row = np.zeros(384, np.float32)

    def compute(keys):
        return [row] * len(keys)

    def timed(cls, keys) -> float:
        memory = cls(args.size)
        start = time.perf_counter()
        for batch in keys:
            memory.get_many(batch, compute)
        return time.perf_counter() - start

    cases, rows = [], []
    for batch, space in ((1, 2_000), (1, 20_000), (64, 2_000), (64, 20_000)):
        keys = np.random.default_rng(0).integers(0, space, size=(200_000 // batch, batch)).tolist()
        ours, lib = [], []
        for _ in range(args.rounds):
            ours.append(timed(BatchLRU, keys))
            lib.append(timed(CachetoolsBatchLRU, keys))
        a, b = statistics.median(ours), statistics.median(lib)
        cases.append({"batch": batch, "key_space": space, "calls": len(keys), "batchlru_s": ours, "cachetools_s": lib,
                      "ratio_cachetools_over_batchlru": b / a})
        rows.append(f"| {batch} | {space:,} | {len(keys):,} | {a * 1e3:.0f} | {b * 1e3:.0f} | {b / a:.2f}x |")
    md = ["# BatchLRU beside cachetools.LRUCache", "",
          f"{args.rounds} rounds alternated, medians; memory of {args.size:,} rows; one thread.", "",
          "| keys per call | key space | calls | BatchLRU ms | cachetools ms | cachetools / BatchLRU |",
          "|---:|---:|---:|---:|---:|---:|", *rows]
    write_result("compare-lru", {"machine": machine(), "size": args.size, "rounds": args.rounds, "cases": cases},
                 "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
