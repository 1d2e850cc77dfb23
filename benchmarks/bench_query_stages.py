"""Where a live SeedER query spends its time: each stage of the pipeline timed apart.

    python benchmarks/bench_query_stages.py [--dataset metaqa] [--queries 300] [--warmup 20]

Runs the stages `Retriever.retrieve` runs, on the live graph, one question at a time (the
validation questions ``bench_live_query.py`` draws, every hop count): embedding the question,
seeding (full-text hits or dense; the linker's reading of hop 1 embeds the question's template on
a miss), the relation prior, K-hop-with-filtering in Neo4j, reading the node features of the
subgraph, and the policy ranking it. Validation questions, each asked once after ``--warmup`` others, then
all asked again (the encoder's question cache and Neo4j's page cache now warm). Writes
benchmarks/results/query-stages-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seeder_dgl.threads import configure_threads  # noqa: E402

THREADS = configure_threads()

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402

STAGES = ("embed question", "seeding", "relation prior", "K-hop in Neo4j", "node features", "policy ranking")
"""With seeder-dgl's procedures, "K-hop in Neo4j" also reads the nodes' features, and "node features" is ~0."""


def time_stages(retriever, question: str, before: bool = False) -> list[float]:
    """Milliseconds of each of ``STAGES`` for one question. ``before``: as queries ran before the
    procedures kept a copy of the relationships and returned the features with K-hop (the store
    walked, the features read by a call of their own)."""
    from seeder_dgl.retrieval.seeding import seed_linked

    graph, settings = retriever.graph, retriever.settings
    options = getattr(graph, "procedure_options", None)
    if options is not None:
        options.pop("adjacency", None)
        if before:
            options["adjacency"] = False
    ticks = [time.perf_counter()]
    emb = retriever.encoder.encode_queries([question])[0]
    ticks.append(time.perf_counter())
    seeds, names, relations = seed_linked(graph, question, emb, settings.seeds, settings.seeding,
                                          exact=settings.exact_seeds, linker=settings.linker)
    ticks.append(time.perf_counter())
    scores = settings.relation_scores(emb, question, names, relations)
    ticks.append(time.perf_counter())
    # As PolicyRetriever asks: the nodes' features with the subgraph where the procedures read them
    # in the same call (then the next stage costs nothing), else in a call of their own.
    sub = graph.khop_filter(emb, seeds, list(settings.budgets), relation_scores=scores, with_features=not before)
    if scores is not None:
        sub.relation_scores = scores.astype(np.float32)
    ticks.append(time.perf_counter())
    node_emb, types, _ = sub.features if sub.features is not None else graph.node_features(sub.node_ids)
    ticks.append(time.perf_counter())
    retriever.policy.rank([sub], [node_emb], emb[None], k=20, node_types=[types])
    ticks.append(time.perf_counter())
    return [(b - a) * 1000 for a, b in zip(ticks, ticks[1:])]


def summarise(rows: list[list[float]]) -> dict:
    table = np.asarray(rows)
    out = {stage: {"p50_ms": percentile(table[:, i], 50), "p95_ms": percentile(table[:, i], 95)}
           for i, stage in enumerate(STAGES)}
    after_embedding = table[:, 1:].sum(axis=1)
    out["total, question embedding excluded"] = {"p50_ms": percentile(after_embedding, 50),
                                                 "p95_ms": percentile(after_embedding, 95)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()

    from seeder_dgl.api import Retriever
    from seeder_dgl.datasets import get_spec

    # The questions bench_live_query.py asks (the same seeded draw over every hop count): the split's
    # first ones are all of one hop count (MetaQA's val lists 1-hop first, whose few wordings keep
    # the relation prior's template cache warm), which left out what most users' calls pay.
    questions = [q.text for q in get_spec(args.dataset).load_questions(None, None).split("val")]
    pick = np.random.default_rng(0).permutation(len(questions))[: args.warmup + args.queries]
    questions = [questions[i] for i in pick]
    probe_before = cpu_probe()
    with Retriever(args.dataset) as retriever:
        for q in questions[: args.warmup]:
            time_stages(retriever, q)
        timed = questions[args.warmup:]
        first = [time_stages(retriever, q) for q in timed]
        again, before = [], []
        for i, q in enumerate(timed):  # the two flows alternate, each going first every other question
            for flow in ((False, True) if i % 2 == 0 else (True, False)):
                (before if flow else again).append(time_stages(retriever, q, before=flow))
        profile = retriever.profile
    probe_after = cpu_probe()
    passes = {"first": summarise(first), "again": summarise(again), "before": summarise(before)}
    payload = {"machine": machine(), "dataset": args.dataset, "profile": profile, "queries": len(timed),
               "threads": THREADS, "passes": passes, "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    lines = [f"# A live SeedER query on {args.dataset}, stage by stage", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores; Neo4j on the same "
             f"machine. Profile {profile}, k = 20, {len(timed)} validation questions of every hop count "
             f"(drawn as `bench_live_query.py` draws them), one at a time (after "
             f"{args.warmup} others), then the same again. Command: `python benchmarks/bench_query_stages.py "
             f"--dataset {args.dataset}`.", "",
             "| stage | first p50 ms | first p95 ms | again p50 ms | again p95 ms | before, again: p50 ms | p95 ms |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for stage in passes["first"]:
        f, a, b = passes["first"][stage], passes["again"][stage], passes["before"][stage]
        lines.append(f"| {stage} | {f['p50_ms']:.1f} | {f['p95_ms']:.1f} | {a['p50_ms']:.1f} | {a['p95_ms']:.1f} | "
                     f"{b['p50_ms']:.1f} | {b['p95_ms']:.1f} |")
    lines += ["", "p50 and p95 are taken per stage; the total's are of the per-question sums. \"before\": the "
              "same questions in the same pass, alternating with \"again\" question by question, as queries ran "
              "before K-hop walked the procedures' copy of the relationships and returned the nodes' features "
              "(the store walked, the features read by a call of their own).", "",
              probe_line(probe_before, probe_after)]
    md = "\n".join(lines)
    print(md)
    write_result(f"query-stages-{args.dataset}", payload, md)


if __name__ == "__main__":
    main()
