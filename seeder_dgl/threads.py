"""Thread settings for training and ranking on CPUs (one place: training, query, eval and serve use it)."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


ENCODER_THREADS_MAX = 4


def encoder_threads() -> int:
    """ONNX Runtime threads of the question encoder: every core, up to ``ENCODER_THREADS_MAX``.

    Its pool is its own (not torch's or DGL's OpenMP runtimes, which spin against each other on two
    cores) and its idle threads sleep. On two cores two threads embed batches of 256 MetaQA
    questions 1.8 times as fast as one and a single question 0.3-0.6 ms sooner, with the same
    embeddings (bit for bit on an AMD EPYC: each output there is summed by one thread)."""
    return min(available_cores(), ENCODER_THREADS_MAX)


def default_threads() -> int:
    """Threads for one process: 1 on machines with up to 2 cores, else half the cores (at most 4).

    The per-step tensors are small (hidden width 16-64, ~10k active nodes), so threads stop paying
    off quickly. Measured on a shared 2-core machine (Prime defaults, 150-node subgraphs): with
    1 thread training runs 60-75 queries/s, with torch's default 2 threads 13-19 q/s, and one live
    ``rank`` call takes ~16 ms instead of 120-1000 ms: torch and DGL load two separate libgomp
    runtimes whose worker threads spin-wait against each other and the Python thread.
    """
    cores = available_cores()
    return 1 if cores <= 2 else min(cores // 2, 4)


def configure_threads(num_threads: int | None = None) -> dict[str, Any]:
    """Thread defaults for training and ranking, applied only where the user has not chosen.

    If ``OMP_NUM_THREADS`` is unset: it is set to ``num_threads`` or ``default_threads()`` (and,
    above one thread, ``OMP_WAIT_POLICY=PASSIVE`` so idle OpenMP workers sleep instead of spinning);
    torch's pool is resized with ``torch.set_num_threads`` and DGL's with
    ``dgl.utils.set_num_threads`` if DGL is already loaded. The environment variables only reach
    an OpenMP runtime loaded after this call (DGL's usually is; torch's is if nothing imported
    torch yet). A user's ``OMP_NUM_THREADS`` is left alone. Returns what was decided.
    """
    user = os.environ.get("OMP_NUM_THREADS")
    n = None if user else int(num_threads or default_threads())
    if n is not None:
        for name in THREAD_VARIABLES:
            os.environ.setdefault(name, str(n))
        if n > 1:
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch  # after the environment is set, in case this is the first import

    if n is None:
        return {"OMP_NUM_THREADS": user, "torch_threads": torch.get_num_threads(), "set_by": "user"}
    torch.set_num_threads(n)
    if "dgl" in sys.modules:
        try:
            sys.modules["dgl"].utils.set_num_threads(n)
        except Exception:  # pragma: no cover - a broken DGL falls back to the torch ops anyway
            pass
    return {"OMP_NUM_THREADS": str(n), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"), "torch_threads": n,
            "set_by": "seeder-dgl"}


FIT_THREADS = 2
"""torch threads of the linker's and relation prior's fits, whatever the machine or command: their
full-batch products over MetaQA's 275,000 candidate rows run 1.6 times as fast on two threads as on
one (2 cores), and a fixed count keeps each fit the same whichever command runs it (``fixed_threads``)."""


@contextmanager
def fixed_threads(n: int = 1) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block (or the decorated function), restored after.

    For fits whose result must not depend on the caller's thread count: MKL's matrix products add
    in another order with another number of threads on some CPUs. On an Intel Xeon, a relation
    prior fitted by ``tune`` (two threads) and refitted by ``extract --refit-prior`` (one thread, set
    by a command in between) differed after a few hundred Adam steps; on an AMD EPYC they agreed.
    """
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
