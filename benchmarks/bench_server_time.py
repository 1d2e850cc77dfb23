"""How much of each Neo4j statement of a live SeedER query is the server's own work.

    python benchmarks/bench_server_time.py [--dataset metaqa] [--queries 300] [--warmup 50]
        [--option node_copy=false] [--tag T]

``Retriever.retrieve(question, k=20)`` on validation questions, one at a time after ``--warmup``
others, with every statement the live graph sends timed twice: by the client, from sending it to
holding its last record (``LiveGraph._run``'s session, run and read), and by the server, from the
result summary Neo4j returns with the last record (``result_available_after`` plus
``result_consumed_after``: planning, running and streaming the rows). What is left (client minus
server) is the Bolt round trip, the driver's decoding and Python. A plain ``RETURN`` with the
query's 384 numbers as a parameter gives the round trip's own floor. ``--option KEY=VALUE`` (repeated)
sets one of the procedures' settings (``LiveGraph``'s ``procedure_options``: ``node_copy``,
``adjacency``, ...; true, false or a whole number) for the run, so that two runs compare a switch
on one server. Writes benchmarks/results/server-time-<dataset>[-<tag>].{json,md}.
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


def time_statements(live_graph_class) -> dict[str, list[tuple[float, float]]]:
    """Wraps ``live_graph_class._run`` (the one place a live graph sends a statement) so that each
    call appends (client ms, server ms) under the statement's name; returns that table."""
    from neo4j import READ_ACCESS

    from seeder_dgl.graphstore.connection import ID_FUNCTION_SESSION
    from seeder_dgl.graphstore.cypher import query, quiet

    table: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def _run(self, statement: str, what: str, **params) -> list:
        # LiveGraph._run's session and statement as it sends them, plus the summary read after
        # the last record (it came with that record: no further round trip).
        text = query(statement, **self._identifiers)
        with self.driver.session(database=self.database, default_access_mode=READ_ACCESS,
                                 **ID_FUNCTION_SESSION) as session:
            start = time.perf_counter()
            result = session.run(text, quiet(params))
            rows = list(result)
            client = (time.perf_counter() - start) * 1000
            summary = result.consume()
        server = float((summary.result_available_after or 0) + (summary.result_consumed_after or 0))
        table[statement].append((client, server))
        return rows

    live_graph_class._run = _run
    return table


def round_trip_floor(driver, dimension: int, repeats: int = 300) -> float:
    """p50 ms of ``RETURN size($v)`` with ``dimension`` numbers: one round trip and nothing else."""
    vector = [0.1] * dimension
    times = []
    with driver.session() as session:
        for _ in range(repeats):
            start = time.perf_counter()
            session.run("RETURN size($v) AS n", {"v": vector}).consume()
            times.append((time.perf_counter() - start) * 1000)
    return percentile(times, 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a procedure setting for this run (e.g. node_copy=false); repeatable")
    parser.add_argument("--tag", default=None, help="suffix of the results file, to keep several runs")
    args = parser.parse_args()
    options = {}
    for option in args.option:
        key, sep, value = option.partition("=")
        if not sep or not key:
            parser.error(f"--option takes KEY=VALUE, not {option!r}")
        options[key] = {"true": True, "false": False}.get(value.lower(), int(value) if value.isdigit() else value)

    from seeder_dgl.api import Retriever
    from seeder_dgl.datasets import get_spec
    from seeder_dgl.graphstore.live import LiveGraph

    questions = get_spec(args.dataset).load_questions(None, None).split("val")
    pick = np.random.default_rng(0).permutation(len(questions))[: args.warmup + args.queries]
    questions = [questions[i].text for i in pick]
    table = time_statements(LiveGraph)
    probe_before = cpu_probe()
    whole = []
    with Retriever(args.dataset, method="seeder") as retriever:
        retriever.graph.procedure_options.update(options)
        for q in questions[: args.warmup]:
            retriever.retrieve(q, k=args.k)
        table.clear()
        for q in questions[args.warmup:]:
            start = time.perf_counter()
            retriever.retrieve(q, k=args.k)
            whole.append((time.perf_counter() - start) * 1000)
        floor = round_trip_floor(retriever.graph.driver, retriever.graph.info.dimension)
        profile = retriever.profile
    probe_after = cpu_probe()
    rows = {}
    for statement, times in table.items():
        client, server = np.asarray(times).T
        rows[statement] = {"calls": len(times), "client_p50_ms": percentile(client, 50),
                           "server_p50_ms": percentile(server, 50),
                           "rest_p50_ms": percentile(client - server, 50),
                           "client_p95_ms": percentile(client, 95), "server_p95_ms": percentile(server, 95)}
    payload = {"machine": machine(), "dataset": args.dataset, "profile": profile, "queries": args.queries,
               "threads": THREADS, "options": options, "statements": rows, "round_trip_p50_ms": floor,
               "retrieve_p50_ms": percentile(whole, 50), "retrieve_p95_ms": percentile(whole, 95),
               "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    lines = [f"# The Neo4j statements of a live SeedER query on {args.dataset}: the server's share", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores; Neo4j on the same machine. "
             f"`Retriever('{args.dataset}', method='seeder').retrieve(question, k={args.k})`, profile {profile}, "
             f"{args.queries} validation questions one at a time (after {args.warmup} others). Command: "
             f"`python benchmarks/bench_server_time.py --dataset {args.dataset} --queries {args.queries} "
             f"--warmup {args.warmup}"
             + "".join(f" --option {o}" for o in args.option) + (f" --tag {args.tag}" if args.tag else "") + "`.",
             "",
             "| statement | calls | client p50 ms | server p50 ms | rest p50 ms | client p95 ms | server p95 ms |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for statement, r in sorted(rows.items(), key=lambda item: -item[1]["client_p50_ms"]):
        lines.append(f"| `{statement}` | {r['calls']} | {r['client_p50_ms']:.1f} | {r['server_p50_ms']:.1f} | "
                     f"{r['rest_p50_ms']:.1f} | {r['client_p95_ms']:.1f} | {r['server_p95_ms']:.1f} |")
    lines += ["", "client: from sending the statement to holding its last record; server: Neo4j's own "
              "`result_available_after + result_consumed_after` (whole milliseconds); rest: their difference per "
              "call (the round trip, the driver's decoding). A bare round trip (`RETURN size($v)` with "
              f"{retriever.graph.info.dimension} numbers) takes {floor:.2f} ms p50. The whole "
              f"`retrieve` call: {payload['retrieve_p50_ms']:.1f} ms p50, {payload['retrieve_p95_ms']:.1f} ms p95.",
              "",
              probe_line(probe_before, probe_after)]
    md = "\n".join(lines)
    print(md)
    write_result(f"server-time-{args.dataset}" + (f"-{args.tag}" if args.tag else ""), payload, md)


if __name__ == "__main__":
    main()
