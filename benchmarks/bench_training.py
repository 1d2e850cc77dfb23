"""Training throughput and policy inference latency on CPU (or --device cuda).

    python benchmarks/bench_training.py [--queries 2000] [--device cpu] [--threads 1] [--profile deep] [--trajectories 8,4]
                                        [--workers 1,2] [--variant 'NAME={"num_layers": 3}' ...] [--tag NAME]
                                        [--write-pack DIR | --pack DIR]

`--device cpu,cuda` trains on each device side by side (same questions, same seed). `--write-pack DIR`
writes the questions it would train on, with the embeddings of the nodes their subgraphs hold,
to DIR (tens of MB) and stops; `--pack DIR` trains from such a folder instead of the extract
cache and Neo4j: so the benchmark runs on a GPU machine that has neither.

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
import importlib.util
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


VALIDATION = 200
"""Validation questions after the training ones (each config's checkpoint is chosen on them)."""
HAVE_DGL = importlib.util.find_spec("dgl") is not None


def write_pack(folder: Path, records, query_emb: np.ndarray, feats) -> None:
    """The questions with only the features of the nodes their subgraphs hold (embeddings in
    float16), node ids renumbered 0..n-1 in id order: what ``read_pack`` trains from, without the
    cache or Neo4j."""
    from seeder_dgl.fileio import atomic_write_json
    from seeder_dgl.subgraph.cache import save_shard, shard_path, write_manifest

    used = np.unique(np.concatenate([r.node_ids for r in records]))
    renumbered = [replace(r, node_ids=np.searchsorted(used, r.node_ids).astype(np.int64)) for r in records]
    split = folder / "records"
    split.mkdir(parents=True, exist_ok=True)
    save_shard(shard_path(split, 0), renumbered, np.asarray(query_emb, dtype=np.float32))
    write_manifest(split, {"num_shards": 1, "num_queries": len(records)})
    # float16: half the size, so that a pack of a thousand questions travels to a GPU machine; both
    # devices of a --pack run train from the same rounded embeddings.
    np.savez(folder / "features.npz", node_emb=feats.node_emb[used].astype(np.float16),
             node_type=np.asarray(feats.node_type)[used],
             relation_emb=np.zeros((0, 0), np.float32) if feats.relation_emb is None else feats.relation_emb)
    atomic_write_json(folder / "features.json", {"relation_types": list(feats.relation_types),
                                                 "node_type_names": list(feats.node_type_names or []),
                                                 "meta": feats.meta, "nodes": int(used.size)})


def read_pack(folder: Path):
    """(records, query embeddings, GraphFeatures) from a folder ``write_pack`` wrote."""
    from seeder_dgl.training.command import GraphFeatures

    records, query_emb = load_split(folder / "records")
    info = json.loads((folder / "features.json").read_text())
    with np.load(folder / "features.npz") as z:
        relation_emb = z["relation_emb"] if z["relation_emb"].size else None
        feats = GraphFeatures(z["node_emb"].astype(np.float32), info["relation_types"], relation_emb, info["meta"], z["node_type"],
                              info["node_type_names"] or None)
    return records, query_emb, feats


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
    parser.add_argument("--write-pack", default=None, metavar="DIR",
                        help="write the training and validation questions with their nodes' features to DIR, then stop")
    parser.add_argument("--pack", default=None, metavar="DIR",
                        help="train from a folder --write-pack wrote (no extract cache, no Neo4j)")
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
    if args.pack:
        records, query_emb, feats = read_pack(Path(args.pack))
        two_hop = list(range(min(args.queries, len(records) - VALIDATION)))
        val = list(range(len(records) - VALIDATION, len(records)))
    else:
        records, query_emb = load_split(subgraph_dir("metaqa", args.profile, "train"))
        questions = metaqa_two_hop(records)
        two_hop, val = questions[: args.queries], questions[args.queries: args.queries + VALIDATION]
        feats = load_features("metaqa")
    if args.write_pack:
        write_pack(Path(args.write_pack), [records[i] for i in two_hop + val], query_emb[two_hop + val], feats)
        print(f"wrote {len(two_hop)} training and {len(val)} validation questions to {args.write_pack}")
        return
    common = train_kwargs(feats)
    devices = args.device.split(",")
    # MetaQA's config is Prime's model (docs/method.md) under MetaQA's name, so its checkpoint loads for metaqa.
    base = TrainConfig.for_dataset("metaqa", args.profile, epochs=1, warmup_epochs=0, device=devices[0], seed=0)
    counts = [int(m) for m in args.trajectories.split(",")] if args.trajectories else [base.num_trajectories]
    worker_counts = [int(w) for w in args.workers.split(",")] if args.workers else [base.workers]
    with tempfile.TemporaryDirectory() as out:
        runs, latency, result_of = [], {}, {}
        # An untimed warm-up run first: the first training in a process pays for reading the
        # features and for torch's first allocations, which would count against the first config.
        for device in devices:
            train(replace(base, workers=1, device=device), [records[i] for i in two_hop[:64]],
                  query_emb[two_hop[:64]], [records[i] for i in val[:16]], query_emb[val[:16]], feats.node_emb,
                  len(feats.relation_types), Path(out) / f"warm-up-{device}", **common)
        for device, variant, m, w in [(d, v, m, w) for d in devices for v in variants for m in counts
                                      for w in worker_counts]:
            cfg = replace(base, **{"num_trajectories": m, "workers": w, "device": device, **variants[variant]})
            t0, c0, children0 = time.perf_counter(), time.process_time(), _children_cpu()
            result = train(cfg, [records[i] for i in two_hop], query_emb[two_hop], [records[i] for i in val],
                           query_emb[val], feats.node_emb, len(feats.relation_types),
                           Path(out) / f"{device}-{variant}-m{m}-w{w}", **common)
            result_of.setdefault(variant, result)  # latency below: the first device's policy
            epoch = result.history[-1]
            # training steps only for the rate (validation is timed apart); CPU time covers the whole call
            cpu = time.process_time() - c0 + _children_cpu() - children0  # the workers' CPU time too
            runs.append({"device": device, "variant": variant,
                         "validation_hit@1": result.best_metrics.get("hit@1"), "overrides": {k: list(v) if isinstance(v, tuple) else v
                                                           for k, v in variants[variant].items()},
                         "trajectories": m, "workers": w, "parameters": result.num_parameters,
                         "queries_per_second": float(epoch["queries_per_s"]),
                         "wall_seconds": time.perf_counter() - t0,
                         "cpu_ms_per_question": 1000 * cpu / len(two_hop),
                         "epoch_seconds": len(two_hop) / float(epoch["queries_per_s"])})
        sample = [records[i] for i in val[: args.latency_queries]]
        sample_q = query_emb[val[: args.latency_queries]]
        for variant, ops in [(v, o) for v in variants for o in ("torch", "dgl") if o == "torch" or HAVE_DGL]:
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
        + "".join(f" --variant '{v}'" for v in args.variant) + f" --queries {args.queries}"
        + (" --pack DIR" if args.pack else "") + "`. "
        + probe_line(probe_before, probe_after), "",
        f"MetaQA's {args.profile}-profile config ('profile' below) {payload['config']}, "
        f"ops {result.ops}, {THREADS['torch_threads']} torch thread(s); {len(two_hop)} MetaQA 2-hop training "
        f"subgraphs (mean {payload['mean_subgraph_nodes']:.0f} nodes).", "",
        f"| device | config | trajectories M | training processes | parameters | queries/s | CPU ms per question | "
        f"seconds per epoch ({len(two_hop)} queries) | a full MetaQA epoch (31,311 queries), estimated | "
        f"validation Hit@1 after it ({len(val)} questions) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {r['device']} | {r['variant']} | {r['trajectories']} | {r['workers']} | {r['parameters']:,} | "
          f"{r['queries_per_second']:.1f} | {r['cpu_ms_per_question']:.1f} | "
          f"{r['epoch_seconds']:.1f} | {r['full_metaqa_epoch_estimate_seconds']:.0f} s | "
          f"{r['validation_hit@1'] if r['validation_hit@1'] is not None else float('nan'):.3f} |" for r in runs], "",
        *(["Configs: " + "; ".join(f"{name} = {over}" for name, over in variants.items() if over), ""]
          if len(variants) > 1 else []),
        "| policy alone, one query at a time | p50 ms | p95 ms |", "|---|---|---|",
        *[f"| {name} | {v['p50_ms']:.1f} | {v['p95_ms']:.1f} |" for name, v in latency.items()],
    ])
    print(md)
    name = f"training-{'-'.join(devices)}-{args.profile}-{THREADS['torch_threads']}t"
    write_result(f"{name}-{args.tag}" if args.tag else name, payload, md)


if __name__ == "__main__":
    main()
