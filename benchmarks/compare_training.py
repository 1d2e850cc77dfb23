"""Training speed of this checkout against another one, alternated in one run.

    python benchmarks/compare_training.py --baseline DIR [--rounds 5] [--queries 1000] [--workers 2]
                                          [--profile deep] [--latency-queries 100] [--tag NAME]

``DIR`` is a checkout of the commit to compare with (e.g. ``git worktree add /tmp/base <commit>``);
its ``seeder_dgl`` package is imported instead of this one's, while the data (this checkout's
cache, ``SEEDER_CACHE``) and the measuring code are the same for both. Each round trains one epoch
with MetaQA's training config of the profile on the same MetaQA 2-hop training subgraphs, first
with the baseline and then with this checkout, each in a fresh process, and times the trained
policy ranking validation subgraphs one query at a time (pure-torch ops, one thread). This VM's
speed drifts by tens of percent within minutes, so single runs of two versions taken apart
cannot be compared; alternating them and taking medians can. Writes
benchmarks/results/training-compare-<profile>[-TAG].{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]


def child(args: argparse.Namespace) -> None:
    """One measurement with the ``seeder_dgl`` of ``args.child``: prints one JSON line."""
    sys.path.insert(0, str(REPO))  # this checkout's benchmarks (they import no seeder_dgl) ...
    from benchmarks.training_inputs import metaqa_two_hop, rank_one_at_a_time, train_kwargs

    sys.path.insert(0, str(Path(args.child).resolve()))  # ... and the compared checkout's package
    from seeder_dgl.threads import configure_threads

    configure_threads(1)
    import seeder_dgl

    # As every `seeder-dgl` command sets it. A checkout before seeder_dgl.allocator has none (the
    # editable install's finder would import this checkout's module into it: look in its folder).
    if (Path(seeder_dgl.__path__[0]) / "allocator.py").exists():
        from seeder_dgl.allocator import configure_allocator

        configure_allocator()
    import numpy as np

    from seeder_dgl.datasets import subgraph_dir
    from seeder_dgl.inference import load_policy
    from seeder_dgl.subgraph.cache import load_split
    from seeder_dgl.training.command import load_features
    from seeder_dgl.training.config import TrainConfig
    from seeder_dgl.training.trainer import train

    records, query_emb = load_split(subgraph_dir("metaqa", args.profile, "train"))
    two_hop = metaqa_two_hop(records)
    chosen, val = two_hop[: args.queries], two_hop[args.queries: args.queries + args.latency_queries]
    feats = load_features("metaqa")
    cfg = TrainConfig.for_dataset("metaqa", args.profile, epochs=1, warmup_epochs=0, device="cpu", seed=0,
                                  workers=args.workers)
    with tempfile.TemporaryDirectory() as out:
        started = time.process_time()
        result = train(cfg, [records[i] for i in chosen], query_emb[chosen], [records[i] for i in val],
                       query_emb[val], feats.node_emb, len(feats.relation_types), Path(out), **train_kwargs(feats))
        policy = load_policy(result.best_path, dataset="metaqa")
        policy.cfg.ops = "torch"
        times = rank_one_at_a_time(policy, feats, [records[i] for i in val], query_emb[val])
    print(json.dumps({"queries_per_second": float(result.history[-1]["queries_per_s"]),
                      "rank0_cpu_seconds": time.process_time() - started,
                      "policy_p50_ms": float(np.percentile(times, 50)),
                      "policy_p95_ms": float(np.percentile(times, 95))}))


def run_once(tree: Path, args: argparse.Namespace, cache: Path, python: str = sys.executable) -> dict:
    command = [python, str(HERE), "--child", str(tree), "--queries", str(args.queries),
               "--workers", str(args.workers), "--profile", args.profile,
               "--latency-queries", str(args.latency_queries)]
    env = {**os.environ, "SEEDER_CACHE": str(cache)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(tree))
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"the run in {tree} failed: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a checkout of the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="baseline/this pairs, alternated")
    parser.add_argument("--queries", type=int, default=1000, help="2-hop training questions per epoch")
    parser.add_argument("--workers", type=int, default=2, help="training processes")
    parser.add_argument("--profile", default="deep")
    parser.add_argument("--latency-queries", type=int, default=100,
                        help="validation questions ranked one at a time (also the epoch's validation)")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--baseline-python", default=sys.executable,
                        help="the Python (venv) that runs the baseline: with --baseline . it compares two stacks")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not args.baseline:
        parser.error("--baseline DIR is required")
    baseline = Path(args.baseline).resolve()
    if not (baseline / "seeder_dgl" / "__init__.py").exists():
        parser.error(f"--baseline {baseline}: not a checkout of this project (no seeder_dgl/ there)")

    sys.path.insert(0, str(REPO))
    from benchmarks.common import cpu_probe, machine, probe_line, stack_line, stack_versions, write_result
    from seeder_dgl.datasets import cache_root

    pythons = {"baseline": args.baseline_python, "this": sys.executable}
    stacks = {name: stack_versions(python) for name, python in pythons.items()}

    cache = cache_root()
    commits = {}
    for name, tree in (("baseline", baseline), ("this", REPO)):
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        commits[name] = (head.stdout.strip() or "?") + (" (with changes)" if dirty else "")
    probe_before = cpu_probe()
    runs: dict[str, list[dict]] = {"baseline": [], "this": []}
    for round_ in range(1, args.rounds + 1):
        for name, tree in (("baseline", baseline), ("this", REPO)):
            runs[name].append(run_once(tree, args, cache, pythons[name]))
            print(f"round {round_}/{args.rounds} {name}: {runs[name][-1]['queries_per_second']:.1f} questions/s, "
                  f"policy p50 {runs[name][-1]['policy_p50_ms']:.1f} ms", flush=True)
    probe_after = cpu_probe()
    keys = ("queries_per_second", "policy_p50_ms", "policy_p95_ms")
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in keys} for name, rs in runs.items()}
    ratio = medians["this"]["queries_per_second"] / medians["baseline"]["queries_per_second"]
    payload = {"machine": machine(), "profile": args.profile, "workers": args.workers, "queries": args.queries,
               "rounds": args.rounds, "commits": commits, "stacks": stacks, "runs": runs, "medians": medians,
               "speedup_of_medians": ratio, "cpu_probe_ms": [probe_before, probe_after]}
    md = "\n".join([
        (f"# Training speed, this checkout ({commits['this']}) against {commits['baseline']}"
         if commits["this"] != commits["baseline"] or pythons["this"] == pythons["baseline"] else
         f"# Training speed, the same code ({commits['this']}) on two Python stacks"), "",
        f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. Command: `python "
        f"benchmarks/compare_training.py --baseline <checkout of {commits['baseline']}> --rounds {args.rounds} "
        f"--queries {args.queries} --workers {args.workers} --profile {args.profile}"
        + (f" --baseline-python {args.baseline_python}" if args.baseline_python != sys.executable else "") + "`. "
        + probe_line(probe_before, probe_after), "",
        f"Stacks: baseline {stack_line(stacks['baseline'])}; this {stack_line(stacks['this'])}.", "",
        f"One epoch of MetaQA's {args.profile}-profile training config on {args.queries} MetaQA 2-hop training "
        f"subgraphs with {args.workers} training process(es), the two versions alternated round by round; then "
        f"the trained policy ranking {args.latency_queries} validation subgraphs one query at a time "
        "(pure-torch ops, one thread).", "",
        "| round | baseline questions/s | this questions/s | baseline policy p50 ms | this policy p50 ms |",
        "|---:|---:|---:|---:|---:|",
        *[f"| {i + 1} | {b['queries_per_second']:.1f} | {t['queries_per_second']:.1f} | {b['policy_p50_ms']:.1f} | "
          f"{t['policy_p50_ms']:.1f} |" for i, (b, t) in enumerate(zip(runs['baseline'], runs['this']))],
        f"| **median** | **{medians['baseline']['queries_per_second']:.1f}** | "
        f"**{medians['this']['queries_per_second']:.1f}** | {medians['baseline']['policy_p50_ms']:.1f} | "
        f"{medians['this']['policy_p50_ms']:.1f} |", "",
        f"Ratio of the medians (this / baseline): **{ratio:.2f}x** questions/s; policy p95 "
        f"{medians['baseline']['policy_p95_ms']:.1f} against {medians['this']['policy_p95_ms']:.1f} ms.",
    ])
    print(md)
    name = f"training-compare-{args.profile}"
    write_result(f"{name}-{args.tag}" if args.tag else name, payload, md)


if __name__ == "__main__":
    main()
