"""Seeding + K-hop-with-filtering latency on the live graph, through seeder-dgl's procedures and
through Cypher side by side, with the in-memory reference on the same queries, the vector index's
recall against exact search, and a concurrency run (8 clients, 60 s) for each path.

    python benchmarks/bench_retrieval.py --dataset metaqa
    python benchmarks/bench_retrieval.py --dataset synthetic_prime_scale   # after bench_ingest.py --keep

MetaQA uses its real validation questions (MiniLM); the synthetic graph uses queries near random
nodes. The server needs the procedures for the procedure rows (`seeder-dgl neo4j start` installs
them; `--khop cypher` leaves them out). The procedure runs twice side by side: walking its in-memory
copy of the relationships (the default) and walking the store. Writes benchmarks/results/retrieval-<dataset>.{json,md}.
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
from seeder_dgl.api import SEED_CANDIDATES  # noqa: E402
from seeder_dgl.graphstore.procedures import khop_engine  # noqa: E402
from seeder_dgl.retrieval.seeding import seed  # noqa: E402
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


def short(setting: str) -> str:
    """``procedure``, ``procedure-store`` or ``cypher-<partitions>``, in words."""
    if setting == "procedure":
        return "procedure"
    if setting == "procedure-store":
        return "procedure, store walk"
    if setting == "procedure-store-scores":
        return "procedure, scores from the store"
    if setting == "procedure-exact":
        return "procedure, exact seeds"
    if setting == "procedure-exact-apart":
        return "procedure, exact seeds apart"
    if setting == "procedure-candidates":
        return "procedure, seeds among candidates"
    parts = int(setting.split("-")[1])
    return f"Cypher, {parts} partition{'s' if parts > 1 else ''}"


def describe(setting: str) -> str:
    """A table row's name for a setting."""
    if setting == "procedure":
        return "procedure on the live graph (seeder.khop: all hops in one call, on its copy of the relationships)"
    if setting == "procedure-store":
        return "procedure on the live graph, walking the store (adjacency: false)"
    if setting == "procedure-store-scores":
        return ("procedure on the live graph, on its copy of the relationships, survivors scored from the store "
                "instead of its copy of the nodes (node_copy: false)")
    if setting == "procedure-exact-apart":
        return "procedure on the live graph, on its copy, seeded exactly by a call of its own before K-hop"
    if setting == "procedure-candidates":
        return ("procedure on the live graph, on its copy, seeded exactly among the candidates a 1-bit scan "
                "preselects, in the same statement (seeder.exactSeeds with config candidates: the API's default "
                "past 500,000 nodes)")
    if setting == "procedure-exact":
        return ("procedure on the live graph, on its copy, seeded exactly in the same statement (seeder.exactSeeds "
                "then seeder.khop: the API's default with the procedures, up to 500,000 nodes)")
    return f"Cypher on the live graph, hops in {short(setting).split(', ')[1]}"


def concurrency(graph: LiveGraph, retrieve, queries: np.ndarray, clients: int, seconds: float) -> dict:
    """``clients`` threads sharing one driver (its pool), each looping over the queries
    (``retrieve(graph, i)``: seeding and K-hop of query i)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(offset: int) -> None:
        i = offset
        while time.perf_counter() < stop_at:
            t = time.perf_counter()
            try:
                retrieve(graph, i % len(queries))
            except Exception as exc:  # counted, not raised: the run reports them
                with lock:
                    errors.append(str(exc)[:200])
            else:
                with lock:
                    latencies.append((time.perf_counter() - t) * 1000)
            i += 7

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "seconds": round(wall, 1), "completed": len(latencies),
            "throughput_qps": len(latencies) / wall, "p50_ms": percentile(latencies, 50),
            "p95_ms": percentile(latencies, 95), "errors": len(errors), "first_error": errors[:1]}


CYPHER_EXACT_QUERIES = 50
"""Cypher's exact seeding reads every node of the dataset (above a second a query at Prime scale):
timed on the first 50 queries only."""


def exact_seeding(graphs: dict[str, LiveGraph], node_emb: np.ndarray, queries: np.ndarray, k: int,
                  cypher_queries: int = CYPHER_EXACT_QUERIES) -> dict:
    """Exact dense seeding alone, timed per query side by side: the procedure, the Cypher statement
    (when a Cypher setting runs, on the first ``cypher_queries``), the vector index, the procedure
    among preselected candidates (when that setting runs) and the in-memory scan; how often the
    procedure's seeds are the scan's, and the recall@k of the approximate paths."""
    paths = {"procedure": lambda q: graphs["procedure"].dense_seeds(q, k, exact=True),
             "vector_index": lambda q: graphs["procedure"].dense_seeds(q, k, exact=False),
             "memory": lambda q: dense_topk(node_emb, q, k)}
    if "procedure-candidates" in graphs:
        paths["candidates"] = lambda q: graphs["procedure-candidates"].dense_seeds(q, k, exact=True)
    cypher = next((g for name, g in graphs.items() if name.startswith("cypher")), None)
    if cypher is not None:
        paths["cypher"] = lambda q: cypher.dense_seeds(q, k, exact=True)
    for i, q in enumerate(queries):  # warm-up: the procedure reads the dataset's sketches on its first call
        for name, run in paths.items():
            if name != "cypher" or i < cypher_queries:
                run(q)
    times: dict[str, list[float]] = {name: [] for name in paths}
    same = 0
    found = {name: 0 for name in ("vector_index", "candidates") if name in paths}
    for i, q in enumerate(queries):
        got = {}
        for name, run in paths.items():
            if name == "cypher" and i >= cypher_queries:
                continue
            t = time.perf_counter()
            got[name] = run(q)
            times[name].append((time.perf_counter() - t) * 1000)
        same += [s for s, _ in got["procedure"]] == got["memory"][0].tolist()
        for name in found:
            found[name] += len({s for s, _ in got[name]} & set(got["memory"][0].tolist()))
    out: dict = {name: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for name, v in times.items()}
    out["same_seeds_fraction"] = same / max(len(queries), 1)
    out["recall_at_k"] = {name: n / max(len(queries) * k, 1) for name, n in found.items()}
    return out


def copy_read_seconds(driver, dataset: str, q: np.ndarray, seeds, budgets: list[int]) -> float:
    """How long one K-hop takes that reads the procedures' copies of the relationships and of the
    nodes first: a node created and deleted (of a label of its own) makes both stale, as any write
    does. Both are read again within the call, so the concurrency runs after it find them ready."""
    driver.execute_query("CREATE (:SeederBenchProbe)")  # two transactions: one that creates and
    driver.execute_query("MATCH (p:SeederBenchProbe) DELETE p")  # deletes changes nothing
    waiting = LiveGraph(driver, dataset, khop="procedure",
                        procedure_options={"adjacency_wait": True, "node_copy_wait": True})
    t = time.perf_counter()
    waiting.khop_filter(q, seeds, budgets)
    assert (waiting.last_walked, waiting.last_scored) == ("copy", "copy"), waiting.last_walked
    return time.perf_counter() - t


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
    parser.add_argument("--khop", default="procedure,procedure-exact,procedure-store,cypher",
                        help="K-hop paths to time side by side: procedure (seeder-dgl's procedures, walking their "
                             "in-memory copy of the relationships), procedure-exact (the same from exact seeds), "
                             "procedure-store (walking the store), procedure-store-scores (not by default: on the "
                             "copy, survivors scored from the store, not the copy of the nodes) and cypher (once per --partitions setting); all "
                             "but procedure-exact seed through the vector index; procedure-exact-apart (not by "
                             "default) seeds exactly in a statement of its own, as before the two were one; "
                             "procedure-candidates (not by default) seeds exactly among --seed-candidates "
                             "preselected nodes, as the API does past 500,000 nodes")
    parser.add_argument("--partitions", default="1,2",
                        help="hop partitions of the Cypher path to time side by side (LiveGraph hop_partitions); "
                             "the last one also runs the concurrency test")
    parser.add_argument("--seed-candidates", type=int, default=SEED_CANDIDATES,
                        help="candidates of the procedure-candidates setting (config candidates of seeder.exactSeeds)")
    parser.add_argument("--tag", default=None, help="suffix of the results file, to keep several runs")
    parser.add_argument("--no-exact-seeding", dest="exact_seeding", action="store_false",
                        help="skip timing exact seeding alone (where the dataset's sketches exceed the "
                             "procedure's in-memory budget, each exact seeding reads the store for seconds)")
    parser.add_argument("--cypher-exact-queries", type=int, default=CYPHER_EXACT_QUERIES,
                        help="queries on which exact seeding alone is also timed through Cypher's scan "
                             "(at MAG scale one scan takes ~15 s)")
    parser.add_argument("--warmup-passes", type=int, default=1,
                        help="untimed passes over all queries first (the first one is reported on its own)")
    args = parser.parse_args()
    probe_before = cpu_probe()
    if args.profile:
        from seeder_dgl.datasets import retrieval_profile

        prof = retrieval_profile(args.dataset, args.profile)
        args.seeds, args.budgets, args.seeding = prof.seeds, ",".join(map(str, prof.budgets)), prof.seeding
    budgets = [int(b) for b in args.budgets.split(",")]
    engines = args.khop.split(",")
    if not engines or set(engines) - {"procedure", "procedure-exact", "procedure-exact-apart", "procedure-candidates",
                                      "procedure-store", "procedure-store-scores", "cypher"}:
        parser.error(f"--khop takes procedure, procedure-exact, procedure-exact-apart, procedure-candidates, "
                     f"procedure-store, procedure-store-scores and/or cypher, not {args.khop!r}")
    if args.seeding != "dense":
        engines = [e for e in engines if not e.startswith(("procedure-exact", "procedure-candidates"))]  # dense
    partitions = [int(p) for p in args.partitions.split(",")]

    driver = open_driver()
    graphs: dict[str, LiveGraph] = {}
    if any(e.startswith("procedure") for e in engines):
        khop_engine(driver, setting="procedure")  # a one-line error now when the server has none
    if "procedure" in engines:
        graphs["procedure"] = LiveGraph(driver, args.dataset, khop="procedure")
    for name in ("procedure-exact", "procedure-exact-apart"):
        if name in engines:
            graphs[name] = LiveGraph(driver, args.dataset, khop="procedure")
    if "procedure-candidates" in engines:
        graphs["procedure-candidates"] = LiveGraph(driver, args.dataset, khop="procedure",
                                                   procedure_options={"candidates": args.seed_candidates})
    if "procedure-store" in engines:
        graphs["procedure-store"] = LiveGraph(driver, args.dataset, khop="procedure",
                                              procedure_options={"adjacency": False})
    if "procedure-store-scores" in engines:
        graphs["procedure-store-scores"] = LiveGraph(driver, args.dataset, khop="procedure",
                                                     procedure_options={"node_copy": False})
    if "cypher" in engines:
        graphs.update({f"cypher-{p}": LiveGraph(driver, args.dataset, hop_partitions=p, khop="cypher")
                       for p in partitions})
    settings = list(graphs)
    # The concurrency run: the procedure, and Cypher with the last partition setting.
    loaded = [s for s in settings if s.startswith("procedure") or s == f"cypher-{partitions[-1]}"]
    live = graphs[settings[0]]
    live.check_ready()
    t0 = time.perf_counter()
    export = export_graph(driver, args.dataset, cache_root() / args.dataset / "export", progress=False)
    arrays = GraphArrays.from_arrays(export.num_nodes, export.src, export.dst, export.rel)
    print(f"export + CSR: {time.perf_counter() - t0:.1f} s", flush=True)
    texts, queries = query_embeddings(args.dataset, live, export.node_emb, args.queries, seed=0)

    exact_seeded = {id(g) for name, g in graphs.items() if name.startswith(("procedure-exact", "procedure-candidates"))}
    combined = {id(graphs[name]) for name in ("procedure-exact", "procedure-candidates") if name in graphs}

    def seeds_of(graph: LiveGraph, i: int):
        return seed(graph, texts[i], queries[i], args.seeds, args.seeding, exact=id(graph) in exact_seeded)

    def retrieve(graph: LiveGraph, i: int):
        """Seeds and subgraph of query i as the API gets them: exact dense seeds in the same
        statement as K-hop (one round trip), other seeds first."""
        if id(graph) in combined:
            return graph.exact_seeds_khop_filter(queries[i], args.seeds, budgets)
        seeds = seeds_of(graph, i)
        return seeds, graph.khop_filter(queries[i], seeds, budgets)

    # Warm-up: whole passes over the queries before anything is timed. Right after a restart the
    # JVM is still compiling the hot paths, and on two cores its compiler threads compete with the
    # queries (MetaQA: p50 40.9 ms in the first pass, 32.2 ms after it). The first pass is timed
    # too and reported on its own: it is what the first queries after a restart see.
    warmup_ms: dict[str, list[float]] = {s: [] for s in settings}
    for n in range(args.warmup_passes):
        for i in range(len(queries)):
            for name in settings:
                t = time.perf_counter()
                retrieve(graphs[name], i)
                if n == 0:
                    warmup_ms[name].append((time.perf_counter() - t) * 1000)
    if not args.warmup_passes:
        for i in range(min(10, len(queries))):  # at least the query plans
            for name in settings:
                retrieve(graphs[name], i)
    timed_ms: dict[str, list[float]] = {s: [] for s in settings}
    runs: dict[str, list] = {s: [] for s in settings}
    on_copy = scored_on_copy = exact_same = 0
    candidate_hits = 0
    # The live paths first, then the in-memory reference: interleaved per query, the reference's
    # scans of the whole embedding matrix would evict the server's working set from the CPU caches.
    for i in range(len(queries)):
        # Every setting runs each query in turn (rotating who goes first), so they share the load.
        for j in range(len(settings)):
            name = settings[(i + j) % len(settings)]
            t = time.perf_counter()
            seeds, got = retrieve(graphs[name], i)
            timed_ms[name].append((time.perf_counter() - t) * 1000)
            runs[name].append((seeds, got))
            on_copy += name == "procedure" and graphs[name].last_walked == "copy"
            scored_on_copy += name == "procedure" and graphs[name].last_scored == "copy"
    memory_ms, recall, sizes = [], [], []
    same_sets = {s: 0 for s in settings}
    for i, q in enumerate(queries):
        t = time.perf_counter()
        if args.seeding == "dense":
            ids, sims = dense_topk(export.node_emb, q, args.seeds)
        else:  # full-text hits come from Neo4j's index either way; the K-hop is what is compared
            seeds = runs[settings[0]][i][0]
            ids, sims = np.array([s for s, _ in seeds], np.int64), np.array([v for _, v in seeds])
        khop_filter(arrays, export.node_emb, export.relation_emb, q, ids, budgets, seed_scores=sims)
        memory_ms.append((time.perf_counter() - t) * 1000)
        if "procedure-exact" in runs:
            exact_same += [s for s, _ in runs["procedure-exact"][i][0]] == ids.tolist()
        if "procedure-candidates" in runs:
            candidate_hits += len({s for s, _ in runs["procedure-candidates"][i][0]} & set(ids.tolist()))
        live_seeds = runs[settings[0]][i][0]
        recall.append(len({s for s, _ in live_seeds} & set(ids.tolist())) / max(args.seeds, 1))
        for name in settings:  # exactness: the reference from the very seeds the live path had
            seeds, got = runs[name][i]
            ref = khop_filter(arrays, export.node_emb, export.relation_emb, q, [s for s, _ in seeds], budgets,
                              seed_scores=[v for _, v in seeds], with_edges=False)
            same_sets[name] += set(got.node_ids.tolist()) == set(ref.node_ids.tolist())
        sizes.append(runs[settings[0]][i][1].num_nodes)

    copy_read = copy_read_seconds(driver, args.dataset, queries[0], seeds_of(graphs["procedure"], 0), budgets) \
        if "procedure" in graphs else None
    exact = exact_seeding(graphs, export.node_emb, queries, args.seeds, args.cypher_exact_queries) \
        if "procedure" in graphs and args.exact_seeding else None
    loads = {name: concurrency(graphs[name], retrieve, queries, args.clients, args.seconds)
             for name in loaded}
    probe_after = cpu_probe()

    def p50_p95(values: list[float]) -> dict:
        return {"p50": percentile(values, 50), "p95": percentile(values, 95)}

    memory = p50_p95(memory_ms)
    latency = {name: p50_p95(v) for name, v in timed_ms.items()}
    first = {name: p50_p95(v) for name, v in warmup_ms.items()} if args.warmup_passes else None
    result = {
        "cpu_probe_ms": {"before": probe_before, "after": probe_after},
        "machine": machine(), "dataset": args.dataset, "queries": len(queries), "seeds": args.seeds,
        "seeding": args.seeding, "profile": args.profile,
        "budgets": budgets, "mean_subgraph_nodes": float(np.mean(sizes)),
        "khop_settings": settings, "warmup_passes": args.warmup_passes,
        "latency_ms": latency, "first_pass_ms": first, "memory_ms": memory,
        "ratio_p50_over_memory": {name: v["p50"] / memory["p50"] for name, v in latency.items()},
        "index_recall_at_k0": float(np.mean(recall)) if args.seeding == "dense" else None,
        "same_node_set_fraction": {name: n / len(queries) for name, n in same_sets.items()},
        "concurrency": loads, "exact_seeding": exact,
        "procedure_on_copy_fraction": on_copy / len(queries) if "procedure" in graphs else None,
        "procedure_scored_on_copy_fraction": scored_on_copy / len(queries) if "procedure" in graphs else None,
        "copy_read_seconds": copy_read,
        "exact_seeds_equal_scan_fraction": exact_same / len(queries) if "procedure-exact" in graphs else None,
        "seed_candidates": args.seed_candidates if "procedure-candidates" in graphs else None,
        "candidate_seeds_recall_at_k0": candidate_hits / (len(queries) * max(args.seeds, 1))
        if "procedure-candidates" in graphs else None,
    }
    command = (f"python benchmarks/bench_retrieval.py --dataset {args.dataset}"
               + (f" --profile {args.profile}" if args.profile else "")
               + (f" --khop {args.khop}" if args.khop != "procedure,procedure-exact,procedure-store,cypher" else "")
               + (f" --partitions {args.partitions}" if args.partitions != "1,2" else "")
               + (f" --queries {args.queries}" if args.queries != 500 else "")
               + (f" --seconds {args.seconds:g}" if args.seconds != 60.0 else "")
               + (f" --warmup-passes {args.warmup_passes}" if args.warmup_passes != 1 else "")
               + (f" --seed-candidates {args.seed_candidates}" if args.seed_candidates != SEED_CANDIDATES else "")
               + (f" --tag {args.tag}" if args.tag else "")
               + ("" if args.exact_seeding else " --no-exact-seeding")
               + (f" --cypher-exact-queries {args.cypher_exact_queries}"
                  if args.cypher_exact_queries != CYPHER_EXACT_QUERIES else ""))
    md = "\n".join([
        f"# Retrieval latency on {args.dataset} ({len(queries)} queries, {args.seeding} seeding, k0={args.seeds}, "
        f"budgets {budgets}, B={args.seeds + sum(budgets)})", "",
        f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores. Command: `{command}`.", "",
        "| seeding + K-hop-with-filtering | p50 ms | p95 ms | / in-memory (p50) |", "|---|---|---|---|",
        *[f"| {describe(name)} | {latency[name]['p50']:.1f} | {latency[name]['p95']:.1f} | "
          f"{result['ratio_p50_over_memory'][name]:.1f}x |" for name in settings],
        f"| in-memory reference (same queries) | {memory['p50']:.1f} | {memory['p95']:.1f} | |",
        *([f"| first pass after start-up, {short(name)} (warm-up, not in the rows above) | "
           f"{first[name]['p50']:.1f} | {first[name]['p95']:.1f} | |" for name in settings] if first else []), "",
        f"After {args.warmup_passes} warm-up pass{'es' if args.warmup_passes != 1 else ''} over all queries, "
        "each query ran once per setting, in rotating order, so the settings shared the same load; "
        "the in-memory reference then ran the same queries. Every row includes seeding (the same "
        "seeding statement on every path, except the exact-seeded rows') and reading the subgraph's relationships."
        + (f" The exact seeds equal the in-memory scan's for {result['exact_seeds_equal_scan_fraction']:.3f} of "
           "queries." if result["exact_seeds_equal_scan_fraction"] is not None else "")
        + (f" The seeds among {args.seed_candidates:,} candidates hold {result['candidate_seeds_recall_at_k0']:.3f} "
           f"of the in-memory scan's (recall@{args.seeds})." if result["seed_candidates"] is not None else ""), "",
        (f"Vector index recall@{args.seeds} against exact search: {result['index_recall_at_k0']:.3f}. "
         if args.seeding == "dense" else f"Seeds: {args.seeding} (no vector-index recall to measure). ") +
        "Same node set as the reference K-hop from the same seeds: "
        + ", ".join(f"{short(name)} {result['same_node_set_fraction'][name]:.3f}" for name in settings)
        + f" of queries. Mean subgraph: {result['mean_subgraph_nodes']:.0f} nodes.", "",
        *([f"The procedure row walked the server's in-memory copy of the relationships in "
           f"{result['procedure_on_copy_fraction']:.3f} of its timed queries (the copy is read in the background "
           f"after the first call, and again after every write of nodes, relationships or labels), and scored "
           f"survivors from its copy of the nodes in {result['procedure_scored_on_copy_fraction']:.3f}. "
           f"Reading both anew after a write, within one call that waits for them: {copy_read:.2f} s.", ""] if copy_read is not None else []),
        *([f"Exact dense seeding alone (k0={args.seeds}, the same queries, after one warm-up pass): procedure "
           f"(seeder.exactSeeds) p50 {exact['procedure']['p50']:.1f} ms, p95 {exact['procedure']['p95']:.1f} ms"
           + (f"; Cypher (seeding/exact.cypher, the first {min(args.cypher_exact_queries, len(queries))} queries) p50 "
              f"{exact['cypher']['p50']:.1f} ms, p95 {exact['cypher']['p95']:.1f} ms"
              if exact.get("cypher") else "")
           + f"; vector index p50 {exact['vector_index']['p50']:.1f} ms (recall@{args.seeds} "
           f"{exact['recall_at_k']['vector_index']:.3f})"
           + (f"; procedure among {args.seed_candidates:,} candidates p50 {exact['candidates']['p50']:.1f} ms, p95 "
              f"{exact['candidates']['p95']:.1f} ms (recall@{args.seeds} {exact['recall_at_k']['candidates']:.3f})"
              if "candidates" in exact else "")
           + f"; in-memory scan p50 "
           f"{exact['memory']['p50']:.1f} ms. The procedure's seeds equal the in-memory scan's for "
           f"{exact['same_seeds_fraction']:.3f} of queries.", ""] if exact else []),
        "\n\n".join(f"Concurrency, {short(name)}: {c['clients']} clients for {c['seconds']} s: {c['completed']} "
                     f"queries, {c['throughput_qps']:.1f} queries/s, p50 {c['p50_ms']:.1f} ms, p95 {c['p95_ms']:.1f} ms, "
                     f"{c['errors']} errors." for name, c in loads.items()), "",
        probe_line(probe_before, probe_after),
    ])
    print(md)
    write_result(f"retrieval-{args.dataset}" + (f"-{args.profile}" if args.profile else "")
                 + (f"-{args.tag}" if args.tag else ""), result, md)


if __name__ == "__main__":
    main()
