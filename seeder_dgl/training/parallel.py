"""Data-parallel training on the CPU: ``TrainConfig.workers`` processes, one thread each.

The policy's tensors are small (width 16-64, a few thousand active nodes per step), so a second
thread inside one process buys little (measured: 110 → 120 questions/s on two cores), while a
second process doing the other half of every batch raises it about 1.4 times (each step has a
fixed cost that both pay). The run's process is
rank 0: it forks ``workers − 1`` copies of itself once the policy, optimiser and data are in
memory, and from then on every rank

* takes its share of each batch of questions, balanced by subgraph size (``shard``),
* computes the loss of its share, weighted by the share's size, and its gradients,
* sums gradients and step statistics with the others, then clips and steps its own optimiser.
  Each rank writes its flat gradient into its row of a shared-memory block allocated before the
  fork, waits at a gloo barrier (which also reports a peer that died), and adds the rows in rank
  order: a 400 kB ``all_reduce`` over loopback TCP took 4 to 5 ms of a 60 ms step, the barrier
  takes about 0.25 ms. Every rank adds the same rows in the same order, so all hold the same sum.

All ranks start from the same weights and apply the same summed gradients, so they stay equal
without sending weights. Rank 0 alone decides (the batch order, validation, checkpoints, early
stopping) and sends its commands (``Group.command``: train an epoch in a given order, validate,
stop); the workers follow them. Validation is split the same way and
the rankings gathered on rank 0. Results depend on the number of workers (each has its own noise
and the loss is summed in another order), not on the machine: same seed and same ``workers``,
same weights.
"""
from __future__ import annotations

import datetime
import multiprocessing
import os
import shutil
import socket
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from seeder_dgl.errors import SeederError

TIMEOUT = datetime.timedelta(minutes=30)
"""How long a rank waits in a collective: rank 0 may be validating or writing checkpoints."""
TRAIN, VALIDATE, STOP = 1, 2, 0


def shard(index: Sequence[int] | np.ndarray, rank: int, world: int, cost: np.ndarray | None = None) -> np.ndarray:
    """Rank ``rank``'s share of ``index``, in ``index`` order.

    Without ``cost``: contiguous shares whose sizes differ by at most one, the larger going to the
    lower ranks (``np.array_split``). With ``cost`` (one number per entry of ``index``, e.g. a
    subgraph's edges): the entries, most costly first, each go to the rank with the least cost so
    far (ties: the lower rank), so that no process waits long for another at the gradient sum.
    """
    index = np.asarray(index)
    if world <= 1:
        return index
    if cost is None:
        return np.array_split(index, world)[rank]
    load = np.zeros(world)
    owner = np.empty(len(index), dtype=np.int64)
    for i in np.argsort(-np.asarray(cost, dtype=np.float64), kind="stable"):
        owner[i] = int(np.argmin(load))
        load[owner[i]] += cost[i]
    return index[owner == rank]


def rank_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of worker ``rank``'s noise (dropout, Gumbel, hidden relations) in ``epoch`` (rank ≥ 1;
    rank 0 keeps the run's own generators, so a one-process run is unchanged)."""
    return int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1, np.uint64)[0]) >> 1


def _loopback() -> str | None:
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:  # pragma: no cover - platforms without interface listing
        return None
    return next((n for n in names if n == "lo"), next((n for n in names if n.startswith("lo")), None))


@dataclass
class Group:
    """This process's place among the training processes (a one-process run has ``world == 1``)."""

    rank: int = 0
    world: int = 1
    folder: Path | None = None
    """Scratch folder: the gloo store and the workers' error reports."""
    processes: tuple = ()
    threads: int | None = None
    """Rank 0's torch threads before ``start`` set them to one (restored by ``close``)."""
    exchange: torch.Tensor | None = None
    """Shared memory [2, world, size] for ``sum_gradients`` (two blocks used in turn: a rank may
    write the next step's row while a slower one still reads this step's), or None."""
    turn: int = 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    # -- collectives ---------------------------------------------------------------------------
    def all_reduce(self, flat: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            self._guard(lambda: dist.all_reduce(flat))
        return flat

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            self._guard(lambda: dist.broadcast(tensor, src=0))
        return tensor

    def gather(self, items: list) -> list:
        """Rank 0: every rank's ``items`` concatenated in rank order; other ranks: ``items``."""
        if not self.parallel:
            return items
        out: list = [None] * self.world
        self._guard(lambda: dist.all_gather_object(out, items))
        return [x for part in out for x in part]

    def command(self, code: int = STOP, epoch: int = 0, order: np.ndarray | None = None) -> tuple[int, int, np.ndarray | None]:
        """Rank 0 sends (code, epoch[, batch order]); workers receive them. Returns what was sent."""
        head = self.broadcast(torch.tensor([code, epoch, -1 if order is None else len(order)], dtype=torch.int64))
        code, epoch, size = (int(v) for v in head)
        if size < 0:
            return code, epoch, None
        buf = torch.from_numpy(np.ascontiguousarray(order, np.int64)) if self.rank == 0 else torch.empty(size, dtype=torch.int64)
        return code, epoch, self.broadcast(buf).numpy()

    def sum_gradients(self, params: Sequence[torch.nn.Parameter], stats: torch.Tensor) -> torch.Tensor:
        """Sum every parameter's gradient and ``stats`` over the ranks, in place; returns the summed stats.

        A parameter without a gradient anywhere stays without one (AdamW then skips it, as in a
        one-process run); one with a gradient on some rank gets the sum, zeros counted for the rest.
        """
        if not self.parallel:
            return stats
        has = torch.tensor([p.grad is not None for p in params], dtype=stats.dtype)
        parts = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), dtype=stats.dtype)
                 for p in params] + [has, stats.reshape(-1)]
        size = exchange_size(params, stats.numel())
        if self.exchange is not None and self.exchange.shape[2] == size and self.exchange.dtype == stats.dtype:
            block = self.exchange[self.turn]
            self.turn ^= 1
            torch.cat(parts, out=block[self.rank])
            self._guard(dist.barrier)  # every row written (and every peer alive)
            flat = block[0].clone()
            for row in block[1:]:
                flat += row
        else:
            flat = self.all_reduce(torch.cat(parts))
        offset = 0
        for p in params:  # views of ``flat``, which belongs to this call: no copies
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p) if n else None
            offset += n
        has = flat[offset:offset + len(params)]
        for p, any_grad in zip(params, has.tolist()):
            if not any_grad:
                p.grad = None
        return flat[offset + len(params):].view_as(stats)

    # -- lifetime ------------------------------------------------------------------------------
    def _guard(self, call: Callable[[], object]) -> None:
        try:
            call()
        except RuntimeError as exc:  # a peer died: gloo reports a closed connection or a timeout
            raise SeederError(self._failure(exc)) from exc

    def _failure(self, exc: BaseException) -> str:
        if self.rank != 0:
            return f"training worker {self.rank}: rank 0 went away ({exc})"
        reports = sorted(self.folder.glob("worker-*.error")) if self.folder else []
        if reports:
            return f"a training worker failed: {reports[0].read_text().strip()}"
        return (f"a training worker stopped ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                "train with --workers 1 to see the error in this process")

    def close(self, graceful: bool = True) -> None:
        """Rank 0: tell the workers to stop (``graceful``: between commands; otherwise they may be
        inside a collective and are terminated), wait for them, clean up."""
        if self.rank != 0 or not self.parallel:
            return
        if graceful and all(p.is_alive() for p in self.processes):
            try:
                self.command(STOP)
            except SeederError:
                pass
        else:
            for p in self.processes:
                p.terminate()
        for p in self.processes:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if dist.is_initialized():
            dist.destroy_process_group()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.threads is not None:
            torch.set_num_threads(self.threads)


def _init(rank: int, world: int, folder: Path) -> None:
    loopback = _loopback()
    if loopback is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    store = dist.FileStore(str(folder / "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=TIMEOUT)


def exchange_size(params: Sequence[torch.nn.Parameter], num_stats: int) -> int:
    """The length of ``sum_gradients``' flat vector: every parameter, one has-gradient flag each, the stats."""
    return sum(p.numel() for p in params) + len(params) + num_stats


def start(workers: int, worker_main: Callable[[Group], None], exchange: int = 0) -> Group:
    """Fork ``workers − 1`` processes running ``worker_main(group)`` and join them as rank 0.

    Call it once everything the workers need is in memory: they are copies of this process.
    ``exchange``: the length of the gradient vector ``sum_gradients`` will sum (``exchange_size``),
    for its shared-memory block; 0 sums through ``all_reduce``. ``workers <= 1`` returns a
    one-process group and starts nothing.
    """
    if workers <= 1:
        return Group()
    if "fork" not in multiprocessing.get_all_start_methods():
        raise SeederError(f"--workers {workers} needs the 'fork' start method, which this platform lacks: "
                          "train with --workers 1")
    # One thread per process: the point is process parallelism (and no OpenMP pool crosses a fork).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="seeder-train-"))
    # Allocated before the fork, so every process maps the same pages.
    block = torch.zeros(2, workers, exchange).share_memory_() if exchange > 0 else None
    context = multiprocessing.get_context("fork")
    processes = []
    for rank in range(1, workers):
        p = context.Process(target=_worker_entry, args=(rank, workers, folder, worker_main, block), daemon=True,
                            name=f"seeder-train-worker-{rank}")
        p.start()
        processes.append(p)
    group = Group(rank=0, world=workers, folder=folder, processes=tuple(processes), threads=threads, exchange=block)
    try:
        _init(0, workers, folder)
    except Exception as exc:
        group.close()
        raise SeederError(f"could not connect {workers} training processes ({exc}); train with --workers 1") from exc
    return group


def _worker_entry(rank: int, world: int, folder: Path, worker_main: Callable[[Group], None],
                  exchange: torch.Tensor | None = None) -> None:
    torch.set_num_threads(1)
    group = Group(rank=rank, world=world, folder=folder, exchange=exchange)
    try:
        _init(rank, world, folder)
        worker_main(group)
    except KeyboardInterrupt:  # Ctrl-C reaches every process of the terminal; rank 0 reports it
        os._exit(1)
    except BaseException as exc:  # noqa: BLE001 - reported to rank 0, which raises it in one line
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        (folder / f"worker-{rank}.error").write_text(f"worker {rank}: {detail}\n")
        os._exit(1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    os._exit(0)
