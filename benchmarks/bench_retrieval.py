"""Seeding + K-hop-with-filtering latency through Cypher, side by side with the in-memory
reference on the same queries, the vector index's recall against exact search, and a
concurrency run (8 clients, 60 s).

    python benchmarks/bench_retrieval.py --dataset metaqa
    python benchmarks/bench_retrieval.py --dataset synthetic_prime_scale   # after bench_ingest.py --keep

MetaQA uses its real validation questions (MiniLM); the synthetic graph uses queries near random
nodes. Writes benchmarks/results/retrieval-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402
from seeder_dgl.datasets import cache_root  # noqa: E402
from seeder_dgl.graphstore.connection import open_driver  # noqa: E402
from seeder_dgl.graphstore.export import export_graph  # noqa: E402
from seeder_dgl.graphstore.live import LiveGraph  # noqa: E402
from seeder_dgl.graphstore.seeding import seed  # noqa: E402
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_filter  # noqa: E402


def query_embeddings(dataset: str, graph: LiveGraph, node_emb: np.ndarray, count: int,
                     seed: int) -> tuple[list[str], np.ndarray]:
    if dataset == "metaqa":
        from loaders.metaqa import load_metaqa
        from seeder_dgl.datasets import resolve_model
        from seeder_dgl.embeddings import TextEncoder

        queries = load_metaqa()[1].split("val")
        rng = np.random.default_rng(seed)
        picked = [queries[i] for i in rng.choice(len(queries), size=min(count, len(queries)), replace=False)]
        texts = [q.text for q in picked]
        return texts, TextEncoder(resolve_model(graph.info.model)).encode(texts, show_progress=False)
    rng = np.random.default_rng(seed)
    nodes = rng.choice(np.flatnonzero(np.abs(node_emb).sum(1) > 0), size=count, replace=False)
    q = node_emb[nodes] + 0.5 * rng.normal(size=(count, node_emb.shape[1])).astype(np.float32) / np.sqrt(node_emb.shape[1])
    return [""] * count, q / np.linalg.norm(q, axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budgets", default="50,97", help="B = seeds + sum = 150 by default")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--profile", default=None, help="use a dataset profile's seeds/budgets/seeding (e.g. deep)")
    parser.add_argument("--seeding", default="dense", choices=["dense", "fulltext", "hybrid"])
    parser.add_argument("--partitions", default="1,2",
                        help="hop partitions to time side by side (LiveGraph hop_partitions); the last one "
                             "also runs the concurrency test")
    parser.add_argument("--tag", default=None, help="suffix of the results file, to keep several runs")
    parser.add_argument("--warmup-passes", type=int, default=1,
                        help="untimed passes over all queries first (the first one is reported on its own)")
    args = parser.parse_args()
    probe_before = cpu_probe()
    if args.profile:
        from seeder_dgl.datasets import retrieval_profile

        prof = retrieval_profile(args.dataset, args.profile)
        args.seeds, args.budgets, args.seeding = prof.seeds, ",".join(map(str, prof.budgets)), prof.seeding
    budgets = [int(b) for b in args.budgets.split(",")]

    partitions = [int(p) for p in args.partitions.split(",")]
    driver = open_driver()
    lives = {p: LiveGraph(driver, args.dataset, hop_partitions=p) for p in partitions}
    live = lives[partitions[-1]]
    live.check_ready()
    t0 = time.perf_counter()
    export = export_graph(driver, args.dataset, cache_root() / args.dataset / "export", progress=False)
    arrays = GraphArrays.from_arrays(export.num_nodes, export.src, export.dst, export.rel)
    print(f"export + CSR: {time.perf_counter() - t0:.1f} s", flush=True)
    texts, queries = query_embeddings(args.dataset, live, export.node_emb, args.queries, seed=0)

    def live_seeds(i: int):
        return seed(live, texts[i], queries[i], args.seeds, args.seeding)

    # Warm-up: whole passes over the queries before anything is timed. Right after a restart the
    # JVM is still compiling the hot paths, and on two cores its compiler threads compete with the
    # queries (MetaQA: p50 40.9 ms in the first pass, 32.2 ms after it). The first pass is timed
    # too and reported on its own: it is what the first queries after a restart see.
    warmup_ms: list[float] = []
    for n in range(args.warmup_passes):
        for i, q in enumerate(queries):
            t = time.perf_counter()
            live.khop_filter(q, live_seeds(i), budgets)
            if n == 0:
                warmup_ms.append((time.perf_counter() - t) * 1000)
    if not args.warmup_passes:
        for i in range(min(10, len(queries))):  # at least the query plans
            live.khop_filter(queries[i], live_seeds(i), budgets)
    cypher_ms: dict[int, list[float]] = {p: [] for p in partitions}
    live_seed_lists, subgraphs = [], []
    # Cypher first, then the in-memory reference: interleaved per query, the reference's scans of
    # the whole embedding matrix would evict the server's working set from the CPU caches.
    for i, q in enumerate(queries):
        # Every setting runs each query in turn (rotating who goes first), so they share the load.
        for j in range(len(partitions)):
            p = partitions[(i + j) % len(partitions)]
            t = time.perf_counter()
            seeds = live_seeds(i)
            got = lives[p].khop_filter(q, seeds, budgets)
            cypher_ms[p].append((time.perf_counter() - t) * 1000)
            if p == partitions[-1]:
                live_seed_lists.append(seeds)
                subgraphs.append(got)
    memory_ms, recall, sizes, same_sets = [], [], [], 0
    for q, seeds, sub in zip(queries, live_seed_lists, subgraphs):
        t = time.perf_counter()
        if args.seeding == "dense":
            ids, sims = dense_topk(export.node_emb, q, args.seeds)
        else:  # full-text hits come from Neo4j's index either way; the K-hop is what is compared
            ids, sims = np.array([s for s, _ in seeds], np.int64), np.array([v for _, v in seeds])
        ref = khop_filter(arrays, export.node_emb, export.relation_emb, q, ids, budgets, seed_scores=sims)
        memory_ms.append((time.perf_counter() - t) * 1000)
        exact_ids = dense_topk(export.node_emb, q, args.seeds)[0] if args.seeding == "dense" else ids
        recall.append(len(set(s for s, _ in seeds) & set(exact_ids.tolist())) / max(args.seeds, 1))
        same_sets += set(sub.node_ids.tolist()) == set(ref.node_ids.tolist())
        sizes.append(sub.num_nodes)

    # Concurrency: clients share one driver (its pool), each loops over the queries.
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + args.seconds

    def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < stop_at:
            q = queries[i % len(queries)]
            t = time.perf_counter()
            try:
                live.khop_filter(q, live_seeds(i % len(queries)), budgets)
            except Exception as exc:  # counted, not raised: the run reports them
                with lock:
                    errors.append(str(exc)[:200])
            else:
                with lock:
                    latencies.append((time.perf_counter() - t) * 1000)
            i += 7

    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    probe_after = cpu_probe()

    result = {
        "cpu_probe_ms": {"before": probe_before, "after": probe_after},
        "machine": machine(), "dataset": args.dataset, "queries": len(queries), "seeds": args.seeds,
        "seeding": args.seeding, "profile": args.profile,
        "budgets": budgets, "mean_subgraph_nodes": float(np.mean(sizes)),
        "hop_partitions": partitions, "warmup_passes": args.warmup_passes,
        "first_pass_ms": {"p50": percentile(warmup_ms, 50), "p95": percentile(warmup_ms, 95)} if warmup_ms else None,
        "cypher_ms": {"p50": percentile(cypher_ms[partitions[-1]], 50),
                      "p95": percentile(cypher_ms[partitions[-1]], 95)},
        "cypher_ms_by_partitions": {str(p): {"p50": percentile(v, 50), "p95": percentile(v, 95)}
                                    for p, v in cypher_ms.items()},
        "memory_ms": {"p50": percentile(memory_ms, 50), "p95": percentile(memory_ms, 95)},
        "ratio_p50_cypher_over_memory": percentile(cypher_ms[partitions[-1]], 50) / percentile(memory_ms, 50),
        "index_recall_at_k0": float(np.mean(recall)) if args.seeding == "dense" else None,
        "same_node_set_fraction": same_sets / len(queries),
        "concurrency": {"clients": args.clients, "seconds": round(wall, 1), "completed": len(latencies),
                        "throughput_qps": len(latencies) / wall, "p50_ms": percentile(latencies, 50),
                        "p95_ms": percentile(latencies, 95), "errors": len(errors), "first_error": errors[:1]},
    }
    m, cc = result["memory_ms"], result["concurrency"]
    md = "\n".join([
        f"# Retrieval latency on {args.dataset} ({len(queries)} queries, {args.seeding} seeding, k0={args.seeds}, "
        f"budgets {budgets}, B={args.seeds + sum(budgets)})", "",
        f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores. "
        f"Command: `python benchmarks/bench_retrieval.py --dataset {args.dataset}"
        + (f" --profile {args.profile}" if args.profile else "")
        + (f" --warmup-passes {args.warmup_passes}" if args.warmup_passes != 1 else "") + "`.", "",
        "| seeding + K-hop-with-filtering | p50 ms | p95 ms |", "|---|---|---|",
        *[f"| Cypher on the live graph, hops in {p} partition{'s' if p > 1 else ''} | "
          f"{result['cypher_ms_by_partitions'][str(p)]['p50']:.1f} | "
          f"{result['cypher_ms_by_partitions'][str(p)]['p95']:.1f} |" for p in partitions],
        *([f"| first pass after start-up, {partitions[-1]} partitions (warm-up, not in the rows above) | "
           f"{result['first_pass_ms']['p50']:.1f} | {result['first_pass_ms']['p95']:.1f} |"] if warmup_ms else []),
        f"| in-memory reference (same queries) | {m['p50']:.1f} | {m['p95']:.1f} |",
        f"| ratio Cypher ({partitions[-1]} partitions) / in-memory (p50) | "
        f"{result['ratio_p50_cypher_over_memory']:.1f}x | |", "",
        f"After {args.warmup_passes} warm-up pass{'es' if args.warmup_passes != 1 else ''} over all queries, "
        "each query ran once per Cypher setting, in rotating order, so the settings shared the same load; "
        "the in-memory reference then ran the same queries.", "",
        (f"Vector index recall@{args.seeds} against exact search: {result['index_recall_at_k0']:.3f}. "
         if args.seeding == "dense" else f"Seeds: {args.seeding} (no vector-index recall to measure). ") +
        f"Same node set as the reference: {result['same_node_set_fraction']:.3f} of queries "
        "(differences come from approximate index seeds). "
        f"Mean subgraph: {result['mean_subgraph_nodes']:.0f} nodes.", "",
        f"Concurrency ({partitions[-1]} partitions): {cc['clients']} clients for {cc['seconds']} s: {cc['completed']} queries, "
        f"{cc['throughput_qps']:.1f} queries/s, p50 {cc['p50_ms']:.1f} ms, p95 {cc['p95_ms']:.1f} ms, "
        f"{cc['errors']} errors.", "", probe_line(probe_before, probe_after),
    ])
    print(md)
    write_result(f"retrieval-{args.dataset}" + (f"-{args.profile}" if args.profile else "")
                 + (f"-{args.tag}" if args.tag else ""), result, md)


if __name__ == "__main__":
    main()
