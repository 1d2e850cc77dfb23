"""Where one K-hop hop spends its time in Cypher: growing prefixes of cypher/retrieval/khop_hop.cypher
timed on the real hop-2 parameters of one query (one partition, medians, prefixes interleaved).

    python benchmarks/profile_hop.py --dataset synthetic_prime_scale   # after bench_ingest.py --keep
    python benchmarks/profile_hop.py --dataset synthetic_prime_scale --pollute

Each prefix adds one step to the one before: walking and grouping the frontier's relationships,
reading the sketch, reading sketch_error, the int8 cosine, then the whole statement. With
--pollute, the same steps are timed again after three vector.similarity.cosine calls over float
embeddings on the same server (how the JVM's compiled similarity loop reacts to other array types).
Restart the server before a run. Writes benchmarks/results/hop-profile-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_retrieval import query_embeddings  # noqa: E402
from benchmarks.common import cpu_probe, machine, probe_line, write_result  # noqa: E402
from seeder_dgl.datasets import cache_root  # noqa: E402
from seeder_dgl.graphstore.connection import open_driver  # noqa: E402
from seeder_dgl.graphstore.cypher import query, quiet  # noqa: E402
from seeder_dgl.graphstore.export import export_graph  # noqa: E402
from seeder_dgl.graphstore.live import LiveGraph  # noqa: E402
from seeder_dgl.retrieval.seeding import seed  # noqa: E402

# Each step ends the statement's own walk (everything before its pass 1) in another way.
STEPS = {
    "walk and group by node": "RETURN count(*) AS n",
    "+ read the sketch": "RETURN max(size(u.sketch)) AS n",
    "+ read sketch_error": "RETURN max(size(u.sketch) + u.sketch_error) AS n",
    "+ int8 cosine": "RETURN max(vector.similarity.cosine(u.sketch, $query_sketch) + u.sketch_error) AS n",
}
POLLUTER = "RETURN max(vector.similarity.cosine(u.embedding, $embedding)) AS n"


def hop_parameters(graph: LiveGraph, text: str, q, seeds: int, budgets: list[int]) -> dict:
    """The parameters K-hop sends for its last hop on this query (captured, not rebuilt)."""
    captured: list[dict] = []
    original = graph.hop_neighbours

    def capture(partitions, what, selected, limit, **params):
        captured.append(dict(params, limit=limit + len(selected), partitions=1, partition=0))
        return original(partitions, what, selected, limit, **params)

    graph.hop_neighbours = capture
    graph.khop_filter(q, seed(graph, text, q, seeds, "dense"), budgets, with_edges=False)
    graph.hop_neighbours = original
    return captured[-1]


def time_statements(driver, statements: dict[str, str], params: dict, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in statements}
    with driver.session() as session:
        for run in range(runs + 2):  # two warm-up rounds
            for name, text in statements.items():
                t = time.perf_counter()
                rows = list(session.run(text, quiet(params)))
                if run >= 2:
                    times[name].append((time.perf_counter() - t) * 1000)
                if name == "walk and group by node":
                    neighbours = rows[0]["n"]
    return {"neighbours": neighbours, **{name: statistics.median(v) for name, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synthetic_prime_scale")
    parser.add_argument("--query", type=int, default=0, help="which of the benchmark's queries")
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--pollute", action="store_true")
    args = parser.parse_args()
    probe_before = cpu_probe()
    driver = open_driver()
    graph = LiveGraph(driver, args.dataset, hop_partitions=1)
    graph.check_ready()
    export = export_graph(driver, args.dataset, cache_root() / args.dataset / "export", progress=False)
    texts, queries = query_embeddings(args.dataset, graph, export.node_emb, args.query + 1, seed=0)
    params = hop_parameters(graph, texts[args.query], queries[args.query], 3, [50, 97])
    whole = query("retrieval/khop_hop", dataset=graph.label)
    if whole.count("// Pass 1") != 1:
        raise SystemExit("cypher/retrieval/khop_hop.cypher needs one '// Pass 1' line to split its walk at")
    walk = whole.split("// Pass 1")[0]
    statements = {name: walk + ending for name, ending in STEPS.items()}
    statements["whole statement"] = whole
    results = {"clean": time_statements(driver, statements, params, args.runs)}
    if args.pollute:
        with driver.session() as session:
            for _ in range(3):
                session.run(walk + POLLUTER, quiet(params)).consume()
        results["after float cosines"] = time_statements(driver, statements, params, args.runs)
    driver.close()
    probe_after = cpu_probe()
    frontier = len(params["frontier"])
    neighbours = results["clean"]["neighbours"]
    facts = machine()
    md = [f"# One K-hop hop in Cypher, step by step: {args.dataset}", "",
          f"Machine: {facts['cpu']}, {facts['cores']} cores. Command: `python benchmarks/profile_hop.py --dataset {args.dataset}"
          + (" --pollute" if args.pollute else "") + "`.", "",
          f"Hop 2 of query {args.query} (k0 = 3, budgets 50/97), one partition: {frontier} frontier nodes, "
          f"{neighbours:,} distinct neighbours. Medians of {args.runs} runs; each row adds one step to the row "
          "above it.", "",
          "| step | " + " | ".join(f"{k} ms" for k in results) + " |",
          "|---|" + "---|" * len(results)]
    for name in statements:
        md.append(f"| {name} | " + " | ".join(f"{r[name]:.1f}" for r in results.values()) + " |")
    md += ["", probe_line(probe_before, probe_after)]
    write_result(f"hop-profile-{args.dataset}", {"machine": facts, "dataset": args.dataset, "query": args.query, "frontier": frontier,
                                                 "neighbours": neighbours, "runs": args.runs, "results": results,
                                                 "cpu_probe_ms": [probe_before, probe_after]}, "\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
