"""Training with several CPU processes (``TrainConfig.workers``): every batch is split between
them, gradients summed; the run is deterministic, resumes exactly, learns like a one-process run,
and a worker that fails is reported in one line."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seeder_dgl.errors import SeederError
from seeder_dgl.training import parallel
from seeder_dgl.training.checkpoint import read_checkpoint
from seeder_dgl.training.trainer import train
from tests.unit.test_trainer import _numbers, interrupt_after_first_epoch, synthetic_task, tiny_config


@pytest.fixture(scope="module")
def task():
    return synthetic_task(num_train=40, num_val=12, seed=3)


def _weights(path):
    return read_checkpoint(path)["model"]


def _same_weights(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_shards_cover_the_batch_in_order_and_differ_by_at_most_one():
    for size in range(0, 20):
        for world in (1, 2, 3, 5):
            index = np.arange(100, 100 + size)
            parts = [parallel.shard(index, r, world) for r in range(world)]
            assert np.concatenate(parts).tolist() == index.tolist()
            sizes = [len(p) for p in parts]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert parallel.shard([7, 8, 9], 0, 1).tolist() == [7, 8, 9]


def test_shards_by_cost_cover_the_batch_and_balance_the_work():
    rng = np.random.default_rng(0)
    for trial in range(30):
        size, world = int(rng.integers(0, 24)), int(rng.integers(2, 4))
        index = rng.permutation(1000)[:size]
        cost = rng.pareto(1.5, size) * 100 + 1
        parts = [parallel.shard(index, r, world, cost=cost) for r in range(world)]
        assert sorted(np.concatenate(parts).tolist()) == sorted(index.tolist())
        position = {v: i for i, v in enumerate(index.tolist())}
        assert all([position[v] for v in p.tolist()] == sorted(position[v] for v in p.tolist()) for p in parts)
        loads = [cost[[position[v] for v in p.tolist()]].sum() for p in parts]
        if size:  # greedy by decreasing cost: no share exceeds another by more than the largest item
            assert max(loads) - min(loads) <= cost.max() + 1e-9
    # one very costly subgraph gets a process to itself
    assert parallel.shard(np.arange(5), 0, 2, cost=np.array([1, 1, 50, 1, 1])).tolist() == [2]


def test_worker_seeds_depend_on_seed_epoch_and_rank():
    seeds = {parallel.rank_seed(s, e, r) for s in (0, 1) for e in (1, 2) for r in (1, 2)}
    assert len(seeds) == 8 and all(0 <= x < 2 ** 63 for x in seeds)
    assert parallel.rank_seed(0, 1, 1) == parallel.rank_seed(0, 1, 1)


def test_two_workers_are_deterministic_resume_exactly_and_learn(task, tmp_path):
    train_r, train_q, val_r, val_q, node_emb, num_rel = task
    # batch 7 over 40 questions: shares of 4 and 3, and a last batch of 5 (3 and 2)
    cfg = tiny_config(epochs=3, batch_size=7, workers=2)
    args = (train_r, train_q, val_r, val_q, node_emb, num_rel)

    first = train(cfg, *args, tmp_path / "a", progress=False)
    second = train(cfg, *args, tmp_path / "b", progress=False)
    assert _numbers(first.history) == _numbers(second.history)
    assert _same_weights(_weights(first.last_path), _weights(second.last_path))
    assert first.best_metrics["recall@20"] > first.initial_metrics["recall@20"]
    assert all(np.isfinite(row["loss"]) and row["val"]["num_queries"] == len(val_r) for row in first.history)

    # Stopped after epoch 1, then resumed: the same run.
    interrupt_after_first_epoch(cfg, args, tmp_path / "c")
    resumed = train(cfg, *args, tmp_path / "c", progress=False, resume=True)
    assert resumed.resumed_from == 1
    assert _numbers(resumed.history) == _numbers(first.history)
    assert _same_weights(_weights(first.last_path), _weights(resumed.last_path))


def test_validation_split_over_workers_scores_every_question_like_one_process(task, tmp_path):
    """The untrained policy's validation (same weights in both runs) does not depend on the split."""
    train_r, train_q, val_r, val_q, node_emb, num_rel = task
    args = (train_r, train_q, val_r, val_q, node_emb, num_rel)
    one = train(tiny_config(epochs=1, workers=1), *args, tmp_path / "one", progress=False)
    two = train(tiny_config(epochs=1, workers=2), *args, tmp_path / "two", progress=False)
    assert one.initial_metrics.keys() == two.initial_metrics.keys()
    for key, value in one.initial_metrics.items():
        assert two.initial_metrics[key] == pytest.approx(value, abs=1e-6), key


def test_one_worker_keeps_the_one_process_run(task, tmp_path):
    """workers=1 starts no process and trains exactly as before (its generators are the run's)."""
    train_r, train_q, val_r, val_q, node_emb, num_rel = task
    args = (train_r, train_q, val_r, val_q, node_emb, num_rel)
    a = train(tiny_config(epochs=1, workers=1), *args, tmp_path / "a", progress=False)
    b = train(tiny_config(epochs=1, workers=2), *args, tmp_path / "b", progress=False)
    assert not _same_weights(_weights(a.last_path), _weights(b.last_path))
    assert parallel.start(1, lambda group: None) == parallel.Group()


def test_a_failing_worker_is_a_one_line_error_and_leaves_no_process(task, tmp_path, monkeypatch):
    train_r, train_q, val_r, val_q, node_emb, num_rel = task

    def broken(seed, epoch, rank):  # only workers (rank >= 1) draw their seed
        raise ValueError("disk on fire")

    monkeypatch.setattr(parallel, "rank_seed", broken)
    with pytest.raises(SeederError, match="worker 1: ValueError: disk on fire") as info:
        train(tiny_config(epochs=1, workers=2), train_r, train_q, val_r, val_q, node_emb, num_rel, tmp_path,
              progress=False)
    assert "\n" not in str(info.value)
    import multiprocessing

    assert not [p for p in multiprocessing.active_children() if p.name.startswith("seeder-train-worker")]
    assert not (tmp_path / "last.pt").exists()


def test_gradients_summed_in_shared_memory_equal_all_reduce(task, tmp_path, monkeypatch):
    """The shared-memory sum (rows added in rank order after a barrier) gives the weights gloo's
    all_reduce gives: with two processes both add the same two numbers."""
    args = task
    groups = []
    real_start = parallel.start

    def spy(*a, **k):
        groups.append(real_start(*a, **k))
        return groups[-1]

    monkeypatch.setattr(parallel, "start", spy)
    cfg = tiny_config(epochs=2, batch_size=7, workers=2)
    shared = train(cfg, *args, tmp_path / "shared", progress=False)
    assert groups[0].exchange is not None and bool(groups[0].exchange.any()), "the shared block was not used"
    monkeypatch.setattr(parallel, "exchange_size", lambda params, num_stats: 0)
    reduced = train(cfg, *args, tmp_path / "reduced", progress=False)
    assert groups[1].exchange is None
    assert _numbers(shared.history) == _numbers(reduced.history)
    assert _same_weights(_weights(shared.last_path), _weights(reduced.last_path))


def test_a_worker_failing_inside_a_step_is_a_one_line_error(task, tmp_path, monkeypatch):
    """Rank 0 waits at the gradient barrier while the worker fails: it reports the worker's error."""
    import os

    from seeder_dgl.training import trainer

    parent = os.getpid()
    real = trainer.training_objective

    def failing_in_worker(*a, **k):
        if os.getpid() != parent:
            raise RuntimeError("out of cheese")
        return real(*a, **k)

    monkeypatch.setattr(trainer, "training_objective", failing_in_worker)
    with pytest.raises(SeederError, match="worker 1: RuntimeError: out of cheese") as info:
        train(tiny_config(epochs=1, workers=2), *task, tmp_path, progress=False)
    assert "\n" not in str(info.value)
    import multiprocessing

    assert not [p for p in multiprocessing.active_children() if p.name.startswith("seeder-train-worker")]


def test_several_processes_use_the_torch_ops_even_where_dgl_was_asked(task, tmp_path):
    """DGL's OpenMP runtime can hang a forked process whose parent ran DGL kernels (as this test
    process has): training with several processes passes messages with the pure-torch ops."""
    from seeder_dgl.model import dgl_available

    ops = "dgl" if dgl_available("cpu") else "auto"
    result = train(tiny_config(epochs=1, workers=2, ops=ops), *task, tmp_path, progress=False)
    assert result.ops == "torch"
    one = train(tiny_config(epochs=1, workers=1, ops=ops), *task, tmp_path / "one", progress=False)
    assert one.ops == ("dgl" if dgl_available("cpu") else "torch")


@pytest.mark.dgl
def test_a_short_training_run_with_dgl_ops_matches_the_torch_ops(task, tmp_path):
    """The DGL lane's training run: `ops="dgl"` trains with DGL's kernels and, from the same seed,
    follows the pure-torch run (same sums, another order of floating-point additions)."""
    dgl_run = train(tiny_config(epochs=2, workers=1, ops="dgl"), *task, tmp_path / "dgl", progress=False)
    torch_run = train(tiny_config(epochs=2, workers=1, ops="torch"), *task, tmp_path / "torch", progress=False)
    assert dgl_run.ops == "dgl" and torch_run.ops == "torch"
    for a, b in zip(_numbers(dgl_run.history), _numbers(torch_run.history)):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-4)
        assert a["val"]["mrr"] == pytest.approx(b["val"]["mrr"], abs=0.02)


_CTRL_C_SCRIPT = r'''
import os, sys
from pathlib import Path
sys.path.insert(0, os.getcwd())
import typer
from seeder_dgl.cli import exit_after_interrupt, one_line_errors
from seeder_dgl.training import parallel
from seeder_dgl.training.trainer import train
from tests.unit.test_trainer import synthetic_task, tiny_config

marker, after = Path(sys.argv[1]), int(sys.argv[2])
summed = parallel.Group.sum_gradients
steps = []

def counting(self, params, stats):  # rank 0 says when training is under way, and its workers' pids
    if self.rank == 0:
        steps.append(1)
        if len(steps) == after:
            marker.write_text(" ".join(str(p.pid) for p in self.processes))
    return summed(self, params, stats)

parallel.Group.sum_gradients = counting

@one_line_errors
def train_cmd():  # named as the CLI's command, so the message is the one `train` prints
    task = synthetic_task(num_train=160, num_val=40, seed=3)
    train(tiny_config(epochs=200, workers=2, batch_size=8), *task, Path(sys.argv[3]), progress=False)

def run():  # as the console entry point runs a command
    try:
        train_cmd()
    except typer.Exit as exc:
        sys.exit(exc.exit_code)

exit_after_interrupt(run)
'''


@pytest.mark.parametrize("after", [1, 12])
def test_ctrl_c_in_the_first_epoch_exits_at_once_and_leaves_no_worker(tmp_path, after):
    """Ctrl-C reaches every process of the terminal's process group: the run stops within seconds
    with "interrupted" and exit code 130, whatever step the workers are in, and no worker is left."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    marker = tmp_path / "started"
    script = tmp_path / "ctrl_c.py"
    script.write_text(_CTRL_C_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(marker), str(after), str(tmp_path / "run")],
                            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.05)
        workers = [int(p) for p in marker.read_text().split()]
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: the whole group
        sent = time.monotonic()
        out, err = proc.communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err, err
    assert waited < 8, waited  # close() waits 10 s for a stuck worker before terminating it
    for pid in workers:  # reparented and reaped once gone: none may still run
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"worker {pid} still runs after Ctrl-C")
