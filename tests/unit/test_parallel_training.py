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


def test_ddp_sums_the_weighted_shares_into_the_whole_batch_gradient():
    """Each rank's share is weighted by its size times the world size (DDP averages): after the
    backward pass both ranks hold the gradient of the whole batch's mean loss."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x, y, index = torch.randn(7, 4), torch.randn(7, 1), np.arange(7)
    whole = torch.autograd.grad(((model(x) - y) ** 2).mean(), list(model.parameters()))

    def step(group, module) -> list[torch.Tensor]:
        mine = torch.as_tensor(parallel.shard(index, group.rank, group.world))
        loss = ((module(x[mine]) - y[mine]) ** 2).mean() * (len(mine) / len(index) * group.world)
        group.backward(loss)
        return [p.grad for p in model.parameters()]

    def worker_main(group):
        summed = step(group, group.wrap(model))
        if not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(summed, whole)):
            raise AssertionError("worker's summed gradient differs from the whole batch's")
        group.command()  # wait for rank 0's stop

    group = parallel.start(2, worker_main)
    try:
        summed = step(group, group.wrap(model))
    finally:
        group.close()
    assert group.processes[0].exitcode == 0
    for a, b in zip(summed, whole):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


_TORCHRUN_SCRIPT = r"""
import os, sys
from pathlib import Path
sys.path.insert(0, os.getcwd())
import torch
torch.set_num_threads(1)
from seeder_dgl.training.trainer import train
from tests.unit.test_trainer import synthetic_task, tiny_config

train_r, train_q, val_r, val_q, node_emb, num_rel = synthetic_task(num_train=40, num_val=12, seed=3)
result = train(tiny_config(epochs=2, batch_size=7, workers=1), train_r[:36], train_q[:36], val_r, val_q,
               node_emb, num_rel, Path(sys.argv[1]), progress=False)
# One file per rank: two processes printing to one pipe can interleave their words.
(Path(sys.argv[1]).parent / f"rank{os.environ['RANK']}.txt").write_text("result" if result is not None else "none")
"""


def test_torchrun_trains_the_weights_the_forked_workers_train(task, tmp_path):
    """Two processes started by torchrun follow the same run as ``workers=2`` forked from one: same
    seed and world size, the same weights and history. 36 questions in batches of 7 end with a batch of
    one, so one rank has no share in that step (it runs a question weighted 0)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    train_r, train_q, val_r, val_q, node_emb, num_rel = task
    forked = train(tiny_config(epochs=2, batch_size=7, workers=2), train_r[:36], train_q[:36], val_r, val_q,
                   node_emb, num_rel, tmp_path / "forked", progress=False)
    script = tmp_path / "launched.py"
    script.write_text(_TORCHRUN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script), str(tmp_path / "launched")], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=300, env={**env, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = [(tmp_path / f"rank{rank}.txt").read_text() for rank in (0, 1)]
    assert outcomes == ["result", "none"], done.stdout
    launched = read_checkpoint(tmp_path / "launched" / "last.pt")
    # Equal up to float rounding: the PCA of the features is fitted in each launched process, and
    # BLAS's thread count there (torchrun's OMP_NUM_THREADS=1) may differ from this process's.
    ours = _weights(forked.last_path)
    assert ours.keys() == launched["model"].keys()
    for key, value in ours.items():
        torch.testing.assert_close(launched["model"][key], value, atol=1e-5, rtol=1e-4)
    for a, b in zip(_numbers(forked.history), _numbers(launched["history"]), strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
        assert b["val"]["mrr"] == pytest.approx(a["val"]["mrr"], abs=1e-6)
    import json

    assert json.loads((tmp_path / "launched" / "config.json").read_text())["workers"] == 2


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
summed = parallel.Group.sum_stats
steps = []

def counting(self, stats):  # rank 0 says when training is under way, and its workers' pids
    if self.rank == 0:
        steps.append(1)
        if len(steps) == after:
            marker.write_text(" ".join(str(p.pid) for p in self.processes))
    return summed(self, stats)

parallel.Group.sum_stats = counting

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
                            text=True, start_new_session=True, env={**os.environ, "COLUMNS": "200"},
                            # Ctrl-C handled whatever this process inherited: a shell's background job
                            # starts with SIGINT ignored, and Python then installs no handler for it.
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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


@pytest.mark.parametrize("ablation", ["rerank", "full"])
def test_two_workers_train_a_model_a_step_leaves_parameters_of_without_ddps_search(task, tmp_path, capfd, ablation):
    """'rerank' never calls the expansion head. DDP does not search each step for parameters it left
    out (an extra pass, and a warning from every process where it found none): every parameter has
    a zero part in every loss, so the ranks never wait for a gradient that does not come, and the
    run trains."""
    train_r, train_q, val_r, val_q, node_emb, num_rel = task
    result = train(tiny_config(epochs=2, batch_size=7, workers=2, ablation=ablation),
                   train_r, train_q, val_r, val_q, node_emb, num_rel, tmp_path / ablation, progress=False)
    assert len(result.history) == 2 and all(np.isfinite(row["loss"]) for row in result.history)
    assert "find_unused_parameters" not in capfd.readouterr().err
