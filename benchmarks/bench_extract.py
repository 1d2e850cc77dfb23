"""Extraction's per-question cost, with and without a batch's names and templates read up front.

    python benchmarks/bench_extract.py [--dataset metaqa] [--queries 600] [--batch 256] [--rounds 3]

Seeds and expands validation questions of an ingested dataset on its in-memory export (what
`seeder-dgl extract --engine memory` runs) in two ways, alternating round by round on cold
question caches: one question at a time (each template embedded alone), and as `extract` does, a batch
of `--batch` questions prepared by `prefetch_linking` first. Counts the questions whose subgraphs
hold the same nodes both ways; writes benchmarks/results/extract-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_probe, machine, probe_line, write_result  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from dataclasses import replace

    from seeder_dgl.api import Retriever
    from seeder_dgl.datasets import DatasetContext, get_spec
    from seeder_dgl.embeddings import dataset_encoder
    from seeder_dgl.retrieval.pipeline import MemoryGraph, prefetch_linking, seed_and_expand
    from seeder_dgl.graphstore.export import export_graph
    from seeder_dgl.retrieval.linking import EntityLinker

    probe_before = cpu_probe()
    with Retriever(args.dataset, method="khop") as retriever:
        context = DatasetContext.open(args.dataset, None)
        questions = [q.text for q in get_spec(args.dataset).load_questions(None, None).split("val")][: args.queries]
        embeddings = retriever.embed_many(questions)
        export = export_graph(retriever.driver, args.dataset, context.export_dir, progress=False)
        graph = MemoryGraph.from_export(export, retriever.graph)
        graph.link_names(questions, embeddings, words=(retriever.settings.linker or EntityLinker.default()).name_query)

        def settings_with_cold_encoder():
            # No template is cached from the round before.
            encoder = dataset_encoder(retriever.graph.info.model)
            encoder.forget_queries()
            s = retriever.settings
            prior = s.relation_prior.bind_encoder(encoder) if s.relation_prior is not None else None
            linker = s.linker.with_prior(prior) if s.linker is not None else None
            return replace(s, relation_prior=prior, linker=linker)

        rounds = {"one at a time": [], "batched": []}
        subgraphs = {}
        for r in range(args.rounds):
            for way in (("one at a time", "batched") if r % 2 == 0 else ("batched", "one at a time")):
                settings = settings_with_cold_encoder()
                if settings.relation_prior is not None:
                    settings.relation_prior.features(["the model loads before the clock starts"])
                start, out = time.perf_counter(), []
                for lo in range(0, len(questions), args.batch):
                    qs, es = questions[lo:lo + args.batch], embeddings[lo:lo + args.batch]
                    batch = prefetch_linking(graph, qs, es, settings) if way == "batched" else graph
                    out += [seed_and_expand(batch, q, e, settings)[1] for q, e in zip(qs, es)]
                rounds[way].append(1000 * (time.perf_counter() - start) / len(questions))
                subgraphs[way] = out
        pairs = list(zip(subgraphs["one at a time"], subgraphs["batched"]))
        same = sum(a.node_ids.tolist() == b.node_ids.tolist() for a, b in pairs) / len(pairs)
        # A batch pads its templates to one length: their embeddings differ in the last float bits.
        drift = max((float(np.abs(a.relation_scores - b.relation_scores).max()) for a, b in pairs
                     if a.relation_scores.size), default=0.0)
        profile = retriever.profile
    probe_after = cpu_probe()
    medians = {way: statistics.median(times) for way, times in rounds.items()}
    payload = {"machine": machine(), "dataset": args.dataset, "profile": profile, "queries": len(questions),
               "batch": args.batch, "ms_per_question": rounds, "median_ms_per_question": medians,
               "speedup": medians["one at a time"] / medians["batched"], "same_nodes": same,
               "relation_score_drift": drift,
               "cpu_probe_ms": [probe_before, probe_after]}
    md = "\n".join([
        f"# Extraction per question on {args.dataset}, one at a time and batched", "",
        f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. Command: `python "
        f"benchmarks/bench_extract.py --dataset {args.dataset} --queries {args.queries} --batch {args.batch} "
        f"--rounds {args.rounds}`. Profile {profile}; {len(questions)} validation questions seeded and expanded on "
        "the in-memory export (names read from Neo4j before timing, as `eval` does), the two ways alternating "
        "round by round, each round with the encoder's question cache emptied. " + probe_line(probe_before, probe_after), "",
        "| way | ms per question, per round | median |", "|---|---|---:|",
        *[f"| {way} | {', '.join(f'{t:.1f}' for t in times)} | {medians[way]:.1f} |" for way, times in rounds.items()],
        "", f"Batched / one at a time: {payload['speedup']:.2f}x faster. Subgraphs with the same nodes: {same:.4f} "
        f"of the questions; relation terms apart by at most {drift:.1e} (a batch pads its templates).",
    ])
    print(md)
    write_result(f"extract-{args.dataset}", payload, md)


if __name__ == "__main__":
    main()
