"""A question's embedding, sentence-transformers on torch beside the same model on ONNX Runtime.

    python benchmarks/bench_query_encoder.py [--questions 200] [--rounds 5]

What a live query pays before seeding: the question's embedding (``TextEncoder.encode_queries``)
and its template's token embeddings for the relation prior (``encode_query_tokens``), one question
at a time, and, for scale, batches of 64 as ``extract`` encodes them. The two backends
(``SEEDER_ENCODER_BACKEND``) alternate round by round on the same MetaQA validation questions,
each new to the encoder's question cache, on the threads the package configures for queries
(one on up to two cores). Also reports the largest difference between their embeddings.

With ``--whole-query`` (MetaQA ingested, extracted and trained), the whole live SeedER query stage
by stage (``bench_query_stages.time_stages``) through two Retrievers that differ only in their
encoder's backend, alternating question by question. Writes benchmarks/results/query-encoder.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402

CASES = ("question", "question and its tokens", "batch of 64, per question")


def time_case(encoder, case: str, questions: list[str]) -> list[float]:
    """Milliseconds per question of ``case`` over ``questions`` (each new to the question cache)."""
    encoder.forget_queries()
    out = []
    if case == "batch of 64, per question":
        for lo in range(0, len(questions) - 63, 64):
            start = time.perf_counter()
            encoder.encode_query_tokens(questions[lo:lo + 64])
            out.append((time.perf_counter() - start) * 1000 / 64)
        return out
    for q in questions:
        start = time.perf_counter()
        encoder.encode_queries([q])
        if case == "question and its tokens":
            encoder.encode_query_tokens([q])
        out.append((time.perf_counter() - start) * 1000)
    return out


def whole_queries(encoders: dict, questions: list[str]) -> dict:
    """Per backend, p50 / p95 ms of each stage of ``bench_query_stages`` and of the whole query."""
    from benchmarks.bench_query_stages import STAGES, time_stages
    from seeder_dgl.api import Retriever

    retrievers = {b: Retriever("metaqa", encoder=e) for b, e in encoders.items()}
    rows = {b: [] for b in retrievers}
    try:
        for q in questions[:20]:  # warm both: the policy, the prior's and the linker's caches
            for r in retrievers.values():
                time_stages(r, q + " ")
        for e in encoders.values():
            e.forget_queries()
        for i, q in enumerate(questions):
            for b in (list(retrievers) if i % 2 == 0 else list(retrievers)[::-1]):
                rows[b].append(time_stages(retrievers[b], q))
    finally:
        for r in retrievers.values():
            r.close()
    out = {}
    for b, table in rows.items():
        t = np.asarray(table)
        out[b] = {stage: {"p50_ms": percentile(t[:, i], 50), "p95_ms": percentile(t[:, i], 95)}
                  for i, stage in enumerate(STAGES)}
        out[b]["whole query"] = {"p50_ms": percentile(t.sum(1), 50), "p95_ms": percentile(t.sum(1), 95)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--whole-query", action="store_true", help="also time whole live queries (needs MetaQA trained)")
    args = parser.parse_args()

    from seeder_dgl.datasets import get_spec
    from seeder_dgl.embeddings import TextEncoder
    from seeder_dgl.threads import configure_threads

    configure_threads()
    questions = [q.text for q in get_spec("metaqa").load_questions(None, None).split("val")]
    questions = questions[:args.questions + 64]
    encoders = {backend: TextEncoder(backend=backend) for backend in ("torch", "onnx")}
    for encoder in encoders.values():  # load, export and warm both before any timing
        encoder.encode_query_tokens(questions[-64:])
        encoder.encode_queries(questions[-64:])
    timed = questions[:args.questions]
    diff = float(np.abs(encoders["torch"].encode_queries(timed) - encoders["onnx"].encode_queries(timed)).max())
    probe_before = cpu_probe()
    samples = {(b, c): [] for b in encoders for c in CASES}
    round_medians = {(b, c): [] for b in encoders for c in CASES}
    for r in range(args.rounds):
        order = list(encoders) if r % 2 == 0 else list(encoders)[::-1]
        for case in CASES:
            for backend in order:
                got = time_case(encoders[backend], case, timed)
                samples[backend, case] += got
                round_medians[backend, case].append(statistics.median(got))
    whole = whole_queries(encoders, timed) if args.whole_query else None
    probe_after = cpu_probe()
    rows = {case: {b: {"p50_ms": percentile(samples[b, case], 50), "p95_ms": percentile(samples[b, case], 95),
                       "round_p50s": [round(x, 3) for x in round_medians[b, case]]} for b in encoders}
            for case in CASES}
    for case in CASES:
        rows[case]["ratio"] = round(rows[case]["torch"]["p50_ms"] / max(rows[case]["onnx"]["p50_ms"], 1e-9), 2)
    payload = {"machine": machine(), "questions": len(timed), "rounds": args.rounds, "max_abs_difference": diff,
               "rows": rows, "whole_query": whole, "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    lines = ["# A question's embedding: torch beside ONNX Runtime", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. Command: "
             f"`python benchmarks/bench_query_encoder.py --questions {len(timed)} --rounds {args.rounds}`: "
             f"{len(timed)} MetaQA validation questions, each new to the question cache, the two backends "
             "alternating round by round; all-MiniLM-L6-v2.", "",
             "| what | torch p50 ms | torch p95 ms | ONNX p50 ms | ONNX p95 ms | torch / ONNX |",
             "|---|---:|---:|---:|---:|---:|"]
    for case in CASES:
        t, o = rows[case]["torch"], rows[case]["onnx"]
        lines.append(f"| {case} | {t['p50_ms']:.2f} | {t['p95_ms']:.2f} | {o['p50_ms']:.2f} | {o['p95_ms']:.2f} | "
                     f"{rows[case]['ratio']:.2f}x |")
    if whole is not None:
        lines += ["", "The whole live query (`Retriever('metaqa')`, profile deep, k = 20; each question new to both "
                  "retrievers, the two alternating question by question), p50 / p95 ms:", "",
                  "| stage | torch | ONNX |", "|---|---:|---:|"]
        lines += [f"| {stage} | {whole['torch'][stage]['p50_ms']:.1f} / {whole['torch'][stage]['p95_ms']:.1f} | "
                  f"{whole['onnx'][stage]['p50_ms']:.1f} / {whole['onnx'][stage]['p95_ms']:.1f} |" for stage in whole["torch"]]
    lines += ["", f"Largest difference between the two backends' question embeddings: {diff:.1e}.", "",
              probe_line(probe_before, probe_after)]
    md = "\n".join(lines)
    print(md)
    write_result("query-encoder", payload, md)


if __name__ == "__main__":
    main()
