"""Data-parallel training on ``torch.distributed``: ``DistributedDataParallel`` sums the gradients.

The policy's tensors are small (width 16-64, a few thousand active nodes per step), so a second
thread inside one process buys little (measured: 110 → 120 questions/s on two cores), while a
second process doing the other half of every batch raises it about 1.4 times (each step has a
fixed cost that both pay). Two ways to start the processes, one loop:

* ``seeder-dgl train --workers N`` (one machine): the run's process is rank 0. Once the policy,
  optimiser and data are in memory it forks ``N − 1`` copies of itself (they share the loaded
  data's pages), and all join a gloo group through a file store in a scratch folder.
* ``torchrun --nproc-per-node N [--nnodes M ...] -m seeder_dgl.cli train ...`` (one machine or
  several): every process loads the data itself and joins through torchrun's environment; gloo
  on the CPU, NCCL for the gradients on GPUs (one per process, ``LOCAL_RANK``), gloo for the rest.

From then on every rank

* takes its share of each batch of questions, balanced by subgraph size (``shard``),
* computes the loss of its share through ``Group.wrap``'s DDP module, weighted by the share's
  size × the world size (DDP averages the ranks' gradients: the result is the gradient of the
  whole batch's mean loss), and DDP all-reduces the gradients in buckets during the backward pass,
* sums the step statistics with the others (``sum_stats``), then clips and steps its own optimiser.

All ranks start from rank 0's weights (DDP broadcasts them) and apply the same summed gradients,
so they stay equal without sending weights. Rank 0 alone decides (the batch order, validation,
checkpoints, early stopping) and sends its commands (``Group.command``: train an epoch in a given
order, validate, stop); the others follow them. Validation is split the same way and the rankings
gathered on rank 0. Results depend on the number of processes (each has its own noise and the
loss is summed in another order), not on the machine or the launcher: same seed and same world
size, same weights.
"""
from __future__ import annotations

import datetime
import multiprocessing
from collections import deque
import os
import shutil
import socket
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from seeder_dgl.errors import SeederError

TIMEOUT = datetime.timedelta(minutes=30)
"""How long a rank waits in a collective: rank 0 may be validating or writing checkpoints."""
TRAIN, VALIDATE, STOP = 1, 2, 0
T = TypeVar("T")


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


def launched() -> bool:
    """Whether a ``torch.distributed`` launcher (torchrun, or a cluster's equivalent) started this
    process as one of several: its environment names the world (``env://``)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and "RANK" in os.environ and "MASTER_ADDR" in os.environ


def local_device(device: torch.device) -> torch.device:
    """Under a launcher, ``cuda`` means this process's GPU (``LOCAL_RANK``); anything else is kept."""
    if device.type == "cuda" and device.index is None and launched():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


@dataclass
class Group:
    """This process's place among the training processes (a one-process run has ``world == 1``)."""

    rank: int = 0
    world: int = 1
    folder: Path | None = None
    """Scratch folder of a forked group: the gloo store and the workers' error reports."""
    processes: tuple = ()
    threads: int | None = None
    """Torch threads before ``start`` set them to one (restored by ``close``)."""
    launcher: str = ""
    """'fork' (``--workers``), 'torchrun', or '' for one process."""
    control: Any = None
    """The gloo group commands, statistics and rankings travel in (None: the default group, gloo)."""
    device: torch.device | None = None
    handed: deque = field(default_factory=lambda: deque(maxlen=8))
    """The last tensors given to gloo, kept until ``close``: a gloo thread frees a finished work's
    tensors after the call returned, and where Python had already dropped one, freeing it takes the
    GIL, which the main thread holds while ``destroy_process_group`` joins that thread (a deadlock
    at exit seen with torch 2.2)."""

    parameters: list = field(default_factory=list, repr=False)
    """The wrapped module's trainable parameters (``wrap``), each given a part in every step (``backward``)."""

    @property
    def parallel(self) -> bool:
        return self.world > 1

    # -- gradients -----------------------------------------------------------------------------
    def wrap(self, module: torch.nn.Module) -> torch.nn.Module:
        """``module`` as every rank must call it in a training step: under DDP when there are
        several processes (its backward pass all-reduces the gradients), else itself. Every rank
        calls ``wrap`` at the same point: DDP starts by broadcasting rank 0's weights."""
        if not self.parallel:
            return module
        device_ids = [self.device.index] if self.device is not None and self.device.type == "cuda" else None
        self.parameters = [p for p in module.parameters() if p.requires_grad]
        # Without DDP's search for unused parameters (an extra pass over the autograd graph each
        # step, and a warning of its own from every process where there were none): ``backward``
        # gives every parameter a part in every loss instead.
        return self._guard(lambda: DistributedDataParallel(
            module, device_ids=device_ids, gradient_as_bucket_view=True, find_unused_parameters=False))

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``; with DDP it waits for the gradients' all-reduce (a dead peer: one line).

        With DDP, a step that leaves a parameter out (an ablation's head, a batch whose frontier is
        empty) would keep every rank waiting for that parameter's gradient: a zero term of every
        parameter is added to the loss, so each gets a gradient, zero where the step did not use it,
        and the others' gradients are unchanged."""
        if self.parallel:
            loss = loss + torch.stack([p.sum() for p in self.parameters]).sum() * 0.0 if self.parameters else loss
            self._guard(loss.backward)
        else:
            loss.backward()

    # -- collectives on the control group -------------------------------------------------------
    def sum_stats(self, stats: torch.Tensor) -> torch.Tensor:
        """``stats`` (on the CPU) summed over the ranks, in place."""
        if self.parallel:
            self.handed.append(stats)
            self._guard(lambda: dist.all_reduce(stats, group=self.control))
        return stats

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            self.handed.append(tensor)
            self._guard(lambda: dist.broadcast(tensor, src=0, group=self.control))
        return tensor

    def share(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled; for state that launched processes do not hold)."""
        if not self.parallel:
            return obj
        box = [obj if self.rank == 0 else None]
        self._guard(lambda: dist.broadcast_object_list(box, src=0, group=self.control))
        return box[0]

    def gather(self, items: list) -> list:
        """Rank 0: every rank's ``items`` concatenated in rank order; other ranks: ``items``."""
        if not self.parallel:
            return items
        out: list = [None] * self.world
        self._guard(lambda: dist.all_gather_object(out, items, group=self.control))
        return [x for part in out for x in part]

    def command(self, code: int = STOP, epoch: int = 0, order: np.ndarray | None = None) -> tuple[int, int, np.ndarray | None]:
        """Rank 0 sends (code, epoch[, batch order]); workers receive them. Returns what was sent."""
        head = self.broadcast(torch.tensor([code, epoch, -1 if order is None else len(order)], dtype=torch.int64))
        code, epoch, size = (int(v) for v in head)
        if size < 0:
            return code, epoch, None
        buf = torch.from_numpy(np.ascontiguousarray(order, np.int64)) if self.rank == 0 else torch.empty(size, dtype=torch.int64)
        return code, epoch, self.broadcast(buf).numpy()

    # -- lifetime ------------------------------------------------------------------------------
    def _guard(self, call: Callable[[], T]) -> T:
        """``call()``'s result; a peer's death (a closed connection, a timeout) as one line."""
        try:
            return call()
        except RuntimeError as exc:  # a peer died: a closed connection or a timeout
            raise SeederError(self._failure(exc)) from exc

    def _failure(self, exc: BaseException) -> str:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if self.rank != 0:
            return f"training worker {self.rank}: rank 0 went away ({first})"
        reports = sorted(self.folder.glob("worker-*.error")) if self.folder else []
        if reports:
            return f"a training worker failed: {reports[0].read_text().strip()}"
        if self.launcher == "torchrun":
            return f"a training process stopped ({first}); its own output says why"
        return f"a training worker stopped ({first}); train with --workers 1 to see the error in this process"

    def close(self, graceful: bool = True) -> None:
        """End this process's part: a forked group's rank 0 tells the workers to stop (``graceful``:
        between commands; otherwise they may be inside a collective and are terminated), waits for
        them and cleans up; a launched process leaves the group."""
        if not self.parallel:
            return
        if self.launcher == "fork" and self.rank == 0:
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
        elif self.launcher == "torchrun" and self.rank == 0 and graceful:
            try:
                self.command(STOP)
            except SeederError:
                pass
        if dist.is_initialized():
            dist.destroy_process_group()
        self.handed.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.threads is not None:
            torch.set_num_threads(self.threads)


def _init_forked(rank: int, world: int, folder: Path) -> None:
    loopback = _loopback()
    if loopback is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    store = dist.FileStore(str(folder / "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=TIMEOUT)


def start(workers: int, worker_main: Callable[[Group], None], device: torch.device | None = None) -> Group:
    """Join the training processes; rank 0 returns its group, the others follow ``worker_main(group)``.

    Under a launcher (``launched()``): join its world (``workers`` is the launcher's); a rank other
    than 0 runs ``worker_main`` here and then returns its group (the caller ends there). Otherwise
    fork ``workers − 1`` processes running ``worker_main(group)`` and join them as rank 0: call it once
    everything they need is in memory, as they are copies of this process. ``workers <= 1``
    without a launcher returns a one-process group and starts nothing.
    """
    device = torch.device("cpu") if device is None else device
    if launched():
        return _join_launched(worker_main, device)
    if workers <= 1:
        return Group()
    if device.type != "cpu":
        raise SeederError(f"--workers {workers} forks CPU processes; on GPUs start one process per GPU with "
                          "torchrun --nproc-per-node N -m seeder_dgl.cli train ...")
    if "fork" not in multiprocessing.get_all_start_methods():
        raise SeederError(f"--workers {workers} needs the 'fork' start method, which this platform lacks: "
                          "train with --workers 1, or start the processes with torchrun")
    # One thread per process: the point is process parallelism (and no OpenMP pool crosses a fork).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp(prefix="seeder-train-"))
    context = multiprocessing.get_context("fork")
    processes = []
    for rank in range(1, workers):
        p = context.Process(target=_worker_entry, args=(rank, workers, folder, worker_main), daemon=True,
                            name=f"seeder-train-worker-{rank}")
        p.start()
        processes.append(p)
    group = Group(rank=0, world=workers, folder=folder, processes=tuple(processes), threads=threads,
                  launcher="fork", device=device)
    try:
        _init_forked(0, workers, folder)
    except Exception as exc:
        group.close()
        raise SeederError(f"could not connect {workers} training processes ({exc}); train with --workers 1") from exc
    return group


def _join_launched(worker_main: Callable[[Group], None], device: torch.device) -> Group:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    threads = None
    if device.type == "cpu":  # one thread per process, as forked workers have (and the same sums)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
    else:
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    loopback = _loopback()
    if loopback is not None and os.environ.get("LOCAL_WORLD_SIZE") == os.environ["WORLD_SIZE"]:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)  # every process on this machine
    try:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=TIMEOUT)
        control = dist.new_group(backend="gloo") if backend != "gloo" else None
    except Exception as exc:
        raise SeederError(f"could not join the {world} launched training processes ({exc})") from exc
    group = Group(rank=rank, world=world, threads=threads, launcher="torchrun", control=control, device=device)
    if rank != 0:
        worker_main(group)
    return group


def _worker_entry(rank: int, world: int, folder: Path, worker_main: Callable[[Group], None]) -> None:
    torch.set_num_threads(1)
    group = Group(rank=rank, world=world, folder=folder, launcher="fork", device=torch.device("cpu"))
    try:
        _init_forked(rank, world, folder)
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
