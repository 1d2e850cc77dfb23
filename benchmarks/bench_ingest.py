"""Ingest throughput at STaRK-Prime scale: 129,375 nodes, 4.05M undirected relationships,
384-d embeddings given (synthetic heavy-tailed typed graph), into the running Neo4j.

    python benchmarks/bench_ingest.py [--nodes 129375 --relationships 4050000]
    python benchmarks/bench_ingest.py --dataset metaqa      # MetaQA with MiniLM on the CPU, no cache

Reports nodes/s, relationships/s, index build time, total time, the client's peak memory and
the server's store size; writes benchmarks/results/ingest.{json,md}.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_probe, folder_size, machine, probe_line, write_result  # noqa: E402
from loaders.synthetic import embed_synthetic, typed_graph  # noqa: E402
from seeder_dgl.graphstore.connection import Neo4jSettings, open_driver  # noqa: E402
from seeder_dgl.graphstore.server import LocalNeo4j  # noqa: E402
from seeder_dgl.graphstore.writer import EF_CONSTRUCTION, GraphWriter  # noqa: E402


# Sizes of the STaRK graphs the synthetic generator imitates (undirected relationships; the
# degree distribution is heavy-tailed, see loaders.synthetic.typed_graph).
SHAPES = {
    "prime": dict(title="Prime", nodes=129_375, relationships=4_050_000, types=10),
    # MAG: 1,872,968 nodes of 4 types, average degree 10.6.
    "mag": dict(title="MAG", nodes=1_872_968, relationships=9_926_730, types=4),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="prime", choices=sorted(SHAPES),
                        help="STaRK graph whose size and node-type count the synthetic graph takes")
    parser.add_argument("--nodes", type=int, default=None, help="[default: the shape's]")
    parser.add_argument("--relationships", type=int, default=None, help="[default: the shape's]")
    parser.add_argument("--name", default=None, help="[default: synthetic_<shape>_scale]")
    parser.add_argument("--keep", action="store_true", help="leave the graph in Neo4j (the retrieval benchmark uses it)")
    parser.add_argument("--dataset", default="synthetic", choices=["synthetic", "metaqa"])
    parser.add_argument("--ef-construction", type=int, default=EF_CONSTRUCTION,
                        help="HNSW build width of the vector index (results go to ingest-ef<N> when not the default)")
    parser.add_argument("--tag", default=None, help="suffix of the results file, to keep several runs")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    args.nodes = args.nodes or shape["nodes"]
    args.relationships = args.relationships or shape["relationships"]
    args.name = args.name or f"synthetic_{args.shape}_scale"
    probe_before = cpu_probe()

    t0 = time.perf_counter()
    if args.dataset == "metaqa":
        from loaders.metaqa import load_metaqa_kb
        from seeder_dgl.embeddings import TextEncoder

        kg = load_metaqa_kb(Path(__file__).resolve().parents[2] / "shared" / "data" / "metaqa" / "kb.txt")[0]
        encoder = TextEncoder(cache_dir=False)  # measure the encoding itself, not the cache
        emb = encoder.encode(kg.node_texts, show_progress=sys.stderr.isatty())
        rel_emb = encoder.encode_relations(kg.relation_names)
        args.name = "metaqa_bench"
        model = "sentence-transformers/all-MiniLM-L6-v2"
    else:
        kg = typed_graph(args.nodes, args.relationships, num_types=shape["types"], seed=0)
        emb = embed_synthetic(kg, dim=384, seed=0)
        rel_emb = embed_synthetic(kg, dim=384, seed=1, rows=len(kg.relation_names))
        model = "synthetic-384"
    generate_seconds = time.perf_counter() - t0
    print(f"{args.dataset}: {kg.num_nodes:,} nodes / {kg.num_edges:,} triples, embeddings ready in "
          f"{generate_seconds:.1f} s", flush=True)

    driver = open_driver()
    writer = GraphWriter(driver, args.name)
    writer.reset()
    summary = writer.ingest(kg, emb, rel_emb, model, progress=sys.stderr.isatty(), ef_construction=args.ef_construction)
    probe_after = cpu_probe()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    settings = Neo4jSettings.from_env()
    store = None if settings.external else folder_size(LocalNeo4j().settings.data_dir / "databases" / "neo4j")
    result = {
        "machine": machine(), "nodes": summary.nodes, "relationships": summary.relationships,
        "dimension": summary.dimension, "node_seconds": round(summary.node_seconds, 1),
        "relationship_seconds": round(summary.relationship_seconds, 1),
        "index_seconds": round(summary.index_seconds, 1), "total_seconds": round(summary.seconds, 1),
        "nodes_per_second": round(summary.nodes_per_second), "relationships_per_second":
        round(summary.relationships_per_second), "client_peak_rss_mb": round(peak_mb),
        "server_store_mb": round(store / 2**20) if store else None, "dataset": args.dataset,
        "embedding_seconds" if args.dataset == "metaqa" else "generate_seconds": round(generate_seconds, 1),
        "end_to_end_seconds": round(generate_seconds + summary.seconds, 1),
        "ef_construction": args.ef_construction,
        "cpu_probe_ms": {"before": probe_before, "after": probe_after},
    }
    title = ("MetaQA with all-MiniLM-L6-v2 on the CPU" if args.dataset == "metaqa"
             else f"STaRK-{shape['title']} scale")
    first = ([f"| MiniLM encoding of {kg.num_nodes:,} names (no cache) | {generate_seconds:.1f} | "
              f"{kg.num_nodes / generate_seconds:,.0f} texts/s |"] if args.dataset == "metaqa" else [])
    md = "\n".join([
        f"# Ingest, {title} ({summary.nodes:,} nodes, {summary.relationships:,} relationships, 384-d)",
        "", f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, "
            f"{result['machine']['memory_gb']} GB. Command: `python benchmarks/bench_ingest.py"
            + (" --dataset metaqa" if args.dataset == "metaqa" else "")
            + (f" --shape {args.shape}" if args.shape != "prime" and args.dataset != "metaqa" else "")
            + (f" --ef-construction {args.ef_construction}" if args.ef_construction != EF_CONSTRUCTION else "")
            + "`. Server memory: heap " + os.environ.get("SEEDER_NEO4J_HEAP", "2g") + ", page cache "
            + os.environ.get("SEEDER_NEO4J_PAGECACHE", "2g") + " (SEEDER_NEO4J_HEAP / SEEDER_NEO4J_PAGECACHE).", "",
        "| phase | seconds | rate |", "|---|---|---|", *first,
        f"| nodes + embeddings | {result['node_seconds']} | {result['nodes_per_second']:,} nodes/s |",
        f"| relationships | {result['relationship_seconds']} | {result['relationships_per_second']:,} rels/s |",
        f"| vector + full-text index (ONLINE, ef_construction {args.ef_construction}) | {result['index_seconds']} | |",
        f"| **whole ingest** (writes + indexes) | **{result['total_seconds']}** | |",
        *([f"| **end to end with encoding** | **{result['end_to_end_seconds']}** | |"] if args.dataset == "metaqa" else []),
        "",
        f"Client peak RSS: {result['client_peak_rss_mb']} MB (includes the generated graph). "
        f"Server store: {result['server_store_mb']} MB.", "", probe_line(probe_before, probe_after),
    ])
    print(md)
    name = ("ingest" if args.shape == "prime" else f"ingest-{args.shape}") if args.dataset == "synthetic" \
        else "ingest-metaqa"
    write_result(name + (f"-ef{args.ef_construction}" if args.ef_construction != EF_CONSTRUCTION else "")
                 + (f"-{args.tag}" if args.tag else ""), result, md)
    if not args.keep:
        writer.reset()


if __name__ == "__main__":
    main()
