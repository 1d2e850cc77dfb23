"""The whole live SeedER query as a user's code sees it: ``Retriever.retrieve(question, k=20)``,
timed around the call, and split into the parts it runs.

    python benchmarks/bench_live_query.py [--dataset metaqa] [--queries 300] [--warmup 20] [--checkpoint PATH]

``bench_query_stages.py`` times the retrieval stages one by one. A user's call does more: it
embeds the question (``embed_many``), builds the method, runs it (seeding, the relation prior,
K-hop in Neo4j with the nodes' features, the policy), checks for relation types added since the
Retriever opened (``graph.refresh``: no time of its own where K-hop's statement read their
count), then reads the ranked nodes' names, types and keys and the triples among them from Neo4j
(``describe_with_edges``, one round trip). Each part is timed inside the
real call (the Retriever's own objects, wrapped), so the parts add up to the call. Validation
questions, each asked once after ``--warmup`` others (the question is new: its embedding is
computed), then all asked again (its embedding is in the encoder's memory). Also reports Hit@1
of the first pass. Writes benchmarks/results/live-query-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seeder_dgl.threads import configure_threads  # noqa: E402

THREADS = configure_threads()

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402

PARTS = ("embed question", "refresh relation types", "retrieval method", "nodes and triples", "other")
""""retrieval method": seeding, the relation prior, K-hop in Neo4j with the nodes' features and the
policy (``bench_query_stages.py``'s stages after the embedding); "other": what is left of the call."""


class PartTimer:
    """Wraps the Retriever's parts so that each call's time lands in ``self.now[part]``."""

    def __init__(self, retriever):
        self.now: dict[str, float] = defaultdict(float)
        self._wrap(retriever, "embed_many", "embed question")
        self._wrap(retriever, "_describe", "nodes and triples")
        self._wrap(retriever.graph, "refresh", "refresh relation types")
        import seeder_dgl.api as api

        make = api.make_retriever

        def timed_make(*args, **kwargs):
            method = make(*args, **kwargs)
            self._wrap(method, "search", "retrieval method")
            return method

        api.make_retriever = timed_make

    def _wrap(self, owner, name: str, part: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.now[part] += (time.perf_counter() - start) * 1000

        setattr(owner, name, timed)

    def ask(self, retriever, question: str, k: int):
        self.now.clear()
        start = time.perf_counter()
        result = retriever.retrieve(question, k=k)
        whole = (time.perf_counter() - start) * 1000
        row = {part: self.now.get(part, 0.0) for part in PARTS[:-1]}
        row["other"] = whole - sum(row.values())
        row["whole call"] = whole
        row["Retrieval.seconds"] = result.seconds * 1000
        return row, result


def summarise(rows: list[dict]) -> dict:
    return {key: {"p50_ms": percentile([r[key] for r in rows], 50), "p95_ms": percentile([r[key] for r in rows], 95)}
            for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--checkpoint", default=None, help="a policy checkpoint [default: the dataset's active run]")
    parser.add_argument("--name", default=None, help="result file name [default: live-query-<dataset>]")
    args = parser.parse_args()

    from seeder_dgl.api import Retriever
    from seeder_dgl.datasets import get_spec

    queries = get_spec(args.dataset).load_questions(None, None).split("val")
    pick = np.random.default_rng(0).permutation(len(queries))[: args.warmup + args.queries]
    queries = [queries[i] for i in pick]
    probe_before = cpu_probe()
    with Retriever(args.dataset, method="seeder", checkpoint=args.checkpoint) as retriever:
        timer = PartTimer(retriever)
        for q in queries[: args.warmup]:
            timer.ask(retriever, q.text, args.k)
        timed = queries[args.warmup:]
        first, hits = [], []
        for q in timed:
            row, result = timer.ask(retriever, q.text, args.k)
            first.append(row)
            hits.append(bool(result.nodes) and result.nodes[0].id in set(int(a) for a in q.answers))
        again = [timer.ask(retriever, q.text, args.k)[0] for q in timed]
        profile = retriever.profile
        backend = getattr(retriever.encoder, "backend", "torch")
    probe_after = cpu_probe()
    passes = {"new question": summarise(first), "asked again": summarise(again)}
    payload = {"machine": machine(), "dataset": args.dataset, "profile": profile, "queries": len(timed), "k": args.k,
               "checkpoint": args.checkpoint, "encoder_backend": backend, "threads": THREADS, "hit@1": float(np.mean(hits)), "passes": passes,
               "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    lines = [f"# The whole live SeedER query on {args.dataset}", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores; Neo4j on the same machine. "
             f"`Retriever('{args.dataset}', method='seeder').retrieve(question, k={args.k})`, profile {profile}, "
             f"{len(timed)} validation questions one at a time (after {args.warmup} others), then the same again; "
             f"questions embedded by {backend} (`SEEDER_ENCODER_BACKEND`); "
             f"Hit@1 of the first pass {payload['hit@1']:.3f}. Command: `python benchmarks/bench_live_query.py "
             f"--dataset {args.dataset} --queries {args.queries}`.", "",
             "| part of the call | new question p50 ms | p95 ms | asked again p50 ms | p95 ms |",
             "|---|---:|---:|---:|---:|"]
    for key in passes["new question"]:
        a, b = passes["new question"][key], passes["asked again"][key]
        lines.append(f"| {key} | {a['p50_ms']:.1f} | {a['p95_ms']:.1f} | {b['p50_ms']:.1f} | {b['p95_ms']:.1f} |")
    lines += ["", "p50 and p95 per part; \"whole call\" is timed around `retrieve`, \"Retrieval.seconds\" is what "
              "the result reports (the call without the question's embedding).", "", probe_line(probe_before, probe_after)]
    md = "\n".join(lines)
    print(md)
    write_result(args.name or f"live-query-{args.dataset}", payload, md)


if __name__ == "__main__":
    main()
