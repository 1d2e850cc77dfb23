"""A live query's stages in this checkout against another one, alternated in one run.

    python benchmarks/compare_query_stages.py --baseline DIR [--rounds 5] [--queries 300] [--dataset metaqa]
                                              [--baseline-python PYTHON] [--tag NAME]

``DIR`` is a checkout of the commit to compare with (e.g. ``git worktree add /tmp/base <commit>``).
Each round runs that checkout's ``benchmarks/bench_query_stages.py`` and then this one's, each in a
fresh process against the same Neo4j, dataset, checkpoint and cache (``SEEDER_CACHE``,
``SEEDER_RUNS`` and ``SEEDER_EMBEDDINGS`` point at this checkout's), and reads the per-stage
percentiles each wrote. The VM's speed drifts by tens of percent within minutes, so the two are
compared by the medians over rounds of their alternated runs. Writes
benchmarks/results/query-stages-compare-<dataset>[-TAG].{json,md}. With ``--baseline .`` and
``--baseline-python`` (another venv) the same code runs on two Python stacks.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_probe, machine, probe_line, stack_line, stack_versions, write_result  # noqa: E402

TOTAL = "total, question embedding excluded"
ORDER = ("embed question", "seeding", "relation prior", "K-hop in Neo4j", "node features", "policy ranking", TOTAL)
"""The stages in pipeline order (the result files keep them sorted by name)."""


def run_once(tree: Path, args: argparse.Namespace, python: str = sys.executable) -> dict:
    """One run of ``tree``'s stage benchmark; its result file's passes."""
    from seeder_dgl.datasets import cache_root, runs_root

    env = {**os.environ, "SEEDER_CACHE": str(cache_root()), "SEEDER_RUNS": str(runs_root()),
           "SEEDER_EMBEDDINGS": os.environ.get("SEEDER_EMBEDDINGS", str(cache_root() / "embeddings"))}
    command = [python, str(tree / "benchmarks" / "bench_query_stages.py"), "--dataset", args.dataset,
               "--queries", str(args.queries)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(tree))
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"the run in {tree} failed: {tail[0]}")
    return json.loads((tree / "benchmarks" / "results" / f"query-stages-{args.dataset}.json").read_text())["passes"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="checkout of the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--tag", default=None, help="appended to the result file's name")
    parser.add_argument("--baseline-python", default=sys.executable,
                        help="the Python (venv) that runs the baseline: with --baseline . it compares two stacks")
    args = parser.parse_args()
    pythons = {"baseline": args.baseline_python, "this": sys.executable}
    stacks = {name: stack_versions(python) for name, python in pythons.items()}
    baseline = Path(args.baseline).resolve()
    if not (baseline / "benchmarks" / "bench_query_stages.py").is_file():
        raise SystemExit(f"{baseline} is not a seeder-dgl checkout with benchmarks/bench_query_stages.py")
    commits = {}
    for name, tree in (("baseline", baseline), ("this", REPO)):
        commits[name] = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip()
    probe_before = cpu_probe()
    rounds: dict[str, list[dict]] = {"baseline": [], "this": []}
    for r in range(args.rounds):
        for name, tree in (("baseline", baseline), ("this", REPO)):
            rounds[name].append(run_once(tree, args, pythons[name]))
            total = rounds[name][-1]["first"][TOTAL]["p50_ms"]
            print(f"round {r + 1}: {name} first-pass total p50 {total:.1f} ms", flush=True)
    probe_after = cpu_probe()

    def median(name: str, run: str, stage: str, key: str = "p50_ms") -> float | None:
        values = [p[run][stage][key] for p in rounds[name] if stage in p[run]]
        return statistics.median(values) if values else None

    found = list(rounds["this"][0]["first"])
    stages = [s for s in ORDER if s in found] + [s for s in found if s not in ORDER]
    summary = {run: {stage: {name: {"p50_ms": median(name, run, stage), "p95_ms": median(name, run, stage, "p95_ms")}
                             for name in rounds} for stage in stages}
               for run in ("first", "again")}
    payload = {"machine": machine(), "dataset": args.dataset, "queries": args.queries, "rounds": args.rounds,
               "commits": commits, "stacks": stacks, "summary": summary, "runs": rounds,
               "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    lines = [f"# A live query's stages, {commits['this']} against {commits['baseline']} ({args.dataset})", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. {args.rounds} rounds, each "
             f"the baseline's `bench_query_stages.py --queries {args.queries}` then this checkout's, in fresh "
             f"processes on the same Neo4j, data and checkpoint. Medians over rounds of each run's p50 / p95. "
             f"Command: `python benchmarks/compare_query_stages.py --baseline DIR --rounds {args.rounds}"
             + (f" --baseline-python {args.baseline_python}" if args.baseline_python != sys.executable else "")
             + "`.", "", f"Stacks: baseline {stack_line(stacks['baseline'])}; this {stack_line(stacks['this'])}.", ""]
    if commits["baseline"] == commits["this"]:  # one checkout, two stacks: name the columns by role
        commits = {"baseline": "baseline", "this": "this"}
    for run, label in (("first", "each question asked once"), ("again", "the same questions again")):
        lines += [f"## {label}", "", f"| stage | {commits['baseline']} p50 ms | {commits['this']} p50 ms | "
                  f"{commits['baseline']} p95 ms | {commits['this']} p95 ms |", "|---|---:|---:|---:|---:|"]
        for stage in stages:
            b, t = summary[run][stage]["baseline"], summary[run][stage]["this"]
            cells = [f"{v:.1f}" if v is not None else "-" for v in (b["p50_ms"], t["p50_ms"], b["p95_ms"], t["p95_ms"])]
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
        b, t = summary[run][TOTAL]["baseline"]["p50_ms"], summary[run][TOTAL]["this"]["p50_ms"]
        lines += ["", f"Total p50: {t:.1f} against {b:.1f} ms ({t - b:+.1f} ms, {t / b:.2f}x).", ""]
    lines.append(probe_line(probe_before, probe_after))
    md = "\n".join(lines)
    print(md)
    name = f"query-stages-compare-{args.dataset}"
    write_result(f"{name}-{args.tag}" if args.tag else name, payload, md)


if __name__ == "__main__":
    main()
