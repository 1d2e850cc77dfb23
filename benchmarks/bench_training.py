"""Training throughput and policy inference latency on CPU (or --device cuda).

    python benchmarks/bench_training.py [--queries 2000] [--device cpu] [--threads 1] [--profile deep] [--trajectories 8,4]
                                        [--workers 1,2] [--variant 'NAME={"num_layers": 3}' ...] [--tag NAME]

Trains one epoch with MetaQA's training config of the profile on MetaQA 2-hop training subgraphs
from the extract cache (`seeder-dgl extract metaqa --split train`; `--profile paper` reads the
paper profile's cache), once per config (the profile's, and each `--variant`: the profile's with
some fields changed), trajectory count of `--trajectories` and number of training processes of
`--workers` (side by side, same questions), then times each config's trained policy alone ranking
subgraphs one query at a time, with both message-passing backends. Wall-clock rates depend on what else the machine runs; the
CPU seconds per question (process time, all threads and training processes) much less so. Writes
benchmarks/results/training-<device>-<profile>-<threads>t.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seeder_dgl.threads import configure_threads  # noqa: E402


def _threads() -> int | None:
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return int(sys.argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return None


THREADS = configure_threads(_threads())  # before torch spins up its pool

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402
from benchmarks.training_inputs import metaqa_two_hop, rank_one_at_a_time, train_kwargs  # noqa: E402
from seeder_dgl.datasets import subgraph_dir  # noqa: E402
from seeder_dgl.subgraph.cache import load_split  # noqa: E402
from seeder_dgl.inference import load_policy  # noqa: E402
from seeder_dgl.training.command import load_features  # noqa: E402
from seeder_dgl.training.config import TrainConfig  # noqa: E402
from seeder_dgl.training.trainer import train  # noqa: E402


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=2000, help="2-hop training questions for the epoch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--latency-queries", type=int, default=300)
    parser.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads [default: 1 on 2 cores]")
    parser.add_argument("--profile", default="deep", help="retrieval profile whose cached subgraphs train")
    parser.add_argument("--trajectories", default=None,
                        help="comma list of M to train with side by side [default: the profile's]")
    parser.add_argument("--workers", default=None,
                        help="comma list of training-process counts to train with side by side [default: the profile's]")
    parser.add_argument("--tag", default=None,
                        help="write the run to training-<device>-<profile>-<threads>t-TAG.{json,md} (keeps several runs, "
                             "e.g. of two commits alternated)")
    parser.add_argument("--variant", action="append", default=[], metavar='NAME=JSON',
                        help='a config to train side by side with the profile\'s, e.g. '
                             '\'three-layers={"num_layers": 3, "batch_size": 16}\' (repeat the option)')
    args = parser.parse_args()
    variants: dict[str, dict] = {"profile": {}}
    for spec in args.variant:
        name, _, text = spec.partition("=")
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError as exc:
            parser.error(f"--variant {spec!r}: not NAME=JSON ({exc})")
        if not name or not isinstance(overrides, dict):
            parser.error(f"--variant {spec!r}: not NAME=JSON with a JSON object")
        variants[name] = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}

    probe_before = cpu_probe()
    records, query_emb = load_split(subgraph_dir("metaqa", args.profile, "train"))
    questions = metaqa_two_hop(records)
    two_hop, val = questions[: args.queries], questions[args.queries: args.queries + 200]
    feats = load_features("metaqa")
    common = train_kwargs(feats)
    # MetaQA's config is Prime's model (docs/method.md) under MetaQA's name, so its checkpoint loads for metaqa.
    base = TrainConfig.for_dataset("metaqa", args.profile, epochs=1, warmup_epochs=0, device=args.device, seed=0)
    counts = [int(m) for m in args.trajectories.split(",")] if args.trajectories else [base.num_trajectories]
    worker_counts = [int(w) for w in args.workers.split(",")] if args.workers else [base.workers]
    with tempfile.TemporaryDirectory() as out:
        runs, latency, result_of = [], {}, {}
        # An untimed warm-up run first: the first training in a process pays for reading the
        # features and for torch's first allocations, which would count against the first config.
        train(replace(base, workers=1), [records[i] for i in two_hop[:64]], query_emb[two_hop[:64]],
              [records[i] for i in val[:16]], query_emb[val[:16]], feats.node_emb, len(feats.relation_types),
              Path(out) / "warm-up", **common)
        for variant, m, w in [(v, m, w) for v in variants for m in counts for w in worker_counts]:
            cfg = replace(base, **{"num_trajectories": m, "workers": w, **variants[variant]})
            t0, c0, children0 = time.perf_counter(), time.process_time(), _children_cpu()
            result = train(cfg, [records[i] for i in two_hop], query_emb[two_hop], [records[i] for i in val],
                           query_emb[val], feats.node_emb, len(feats.relation_types), Path(out) / f"{variant}-m{m}-w{w}",
                           **common)
            result_of[variant] = result
            epoch = result.history[-1]
            # training steps only for the rate (validation is timed apart); CPU time covers the whole call
            cpu = time.process_time() - c0 + _children_cpu() - children0  # the workers' CPU time too
            runs.append({"variant": variant, "overrides": {k: list(v) if isinstance(v, tuple) else v
                                                           for k, v in variants[variant].items()},
                         "trajectories": m, "workers": w, "parameters": result.num_parameters,
                         "queries_per_second": float(epoch["queries_per_s"]),
                         "wall_seconds": time.perf_counter() - t0,
                         "cpu_ms_per_question": 1000 * cpu / len(two_hop),
                         "epoch_seconds": len(two_hop) / float(epoch["queries_per_s"])})
        sample = [records[i] for i in val[: args.latency_queries]]
        sample_q = query_emb[val[: args.latency_queries]]
        for variant, ops in [(v, o) for v in variants for o in ("torch", "dgl")]:
            policy = load_policy(result_of[variant].best_path, dataset="metaqa")
            policy.cfg.ops = ops
            times = rank_one_at_a_time(policy, feats, sample, sample_q)
            latency[f"{variant}, {ops} ops"] = {"p50_ms": percentile(times, 50), "p95_ms": percentile(times, 95)}
    probe_after = cpu_probe()
    for run in runs:
        run["full_metaqa_epoch_estimate_seconds"] = 31_311 / run["queries_per_second"]
    payload = {"machine": machine(), "device": args.device, "profile": args.profile, "threads": THREADS,
               "config": {k: getattr(base, k) for k in ("hidden_dim", "num_layers", "expansion_sizes",
                                                        "frontier_caps", "num_trajectories", "batch_size", "workers")},
               "train_queries": len(two_hop), "ops": result.ops,
               "runs": runs, "mean_subgraph_nodes": float(np.mean([records[i].num_nodes for i in two_hop])),
               "inference": latency, "cpu_probe_ms": [probe_before, probe_after]}
    md = "\n".join([
        f"# Training throughput and policy latency ({args.device})", "",
        f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. "
        f"Command: `python benchmarks/bench_training.py --device {args.device} --profile {args.profile}"
        f" --threads {THREADS['torch_threads']}"
        + (f" --trajectories {args.trajectories}" if args.trajectories else "")
        + (f" --workers {args.workers}" if args.workers else "")
        + "".join(f" --variant '{v}'" for v in args.variant) + f" --queries {args.queries}`. "
        + probe_line(probe_before, probe_after), "",
        f"MetaQA's {args.profile}-profile config ('profile' below) {payload['config']}, "
        f"ops {result.ops}, {THREADS['torch_threads']} torch thread(s); {len(two_hop)} MetaQA 2-hop training "
        f"subgraphs (mean {payload['mean_subgraph_nodes']:.0f} nodes).", "",
        f"| config | trajectories M | training processes | parameters | queries/s | CPU ms per question | "
        f"seconds per epoch ({len(two_hop)} queries) | a full MetaQA epoch (31,311 queries), estimated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {r['variant']} | {r['trajectories']} | {r['workers']} | {r['parameters']:,} | "
          f"{r['queries_per_second']:.1f} | {r['cpu_ms_per_question']:.1f} | "
          f"{r['epoch_seconds']:.1f} | {r['full_metaqa_epoch_estimate_seconds']:.0f} s |" for r in runs], "",
        *([f"Configs: " + "; ".join(f"{name} = {over}" for name, over in variants.items() if over), ""]
          if len(variants) > 1 else []),
        "| policy alone, one query at a time | p50 ms | p95 ms |", "|---|---|---|",
        *[f"| {name} | {v['p50_ms']:.1f} | {v['p95_ms']:.1f} |" for name, v in latency.items()],
    ])
    print(md)
    name = f"training-{args.device}-{args.profile}-{THREADS['torch_threads']}t"
    write_result(f"{name}-{args.tag}" if args.tag else name, payload, md)


if __name__ == "__main__":
    main()
