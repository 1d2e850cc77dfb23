"""A graph of your own, end to end with no flags: MetaQA's knowledge base as a plain triples file
and MetaQA questions without their topic marks, through the four commands a new user runs.

    python benchmarks/bench_own_graph.py [--per-hop 1200] [--name moviekg] [--keep]

It writes a folder like the one the README's "Your own graph" section describes (`triples.txt`:
`head|relation|tail`; `questions.csv`: `question,answers` with answers by name, no topic, no
split), drops any earlier dataset of that name (and replaces its runs/<name> folder), then times `seeder-dgl ingest NAME --source DIR`,
`extract NAME`, `train NAME` and `eval NAME --split test --diagnose`, as subprocesses of the
installed CLI. The questions come from `../shared/data/metaqa/qa/<h>-hop/dev.txt` (a fixed seeded
sample per hop count, brackets removed); the split is the CLI's own seeded 70/10/20, so the test
questions were never trained or tuned on. Writes benchmarks/results/own-graph-<name>.{json,md}
and copies the evaluation's results.md and the training history beside them.
"""
from __future__ import annotations

import argparse
import csv
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_probe, machine, probe_line, write_result  # noqa: E402
from seeder_dgl.reporting import RESULTS  # noqa: E402

METAQA = ROOT.parent / "shared" / "data" / "metaqa"


def write_folder(folder: Path, per_hop: int, seed: int) -> int:
    """triples.txt and questions.csv as a user would hand them over; returns the question count."""
    shutil.copyfile(METAQA / "kb.txt", folder / "triples.txt")
    rng = random.Random(seed)
    rows = []
    for hops in (1, 2, 3):
        lines = (METAQA / "qa" / f"{hops}-hop" / "dev.txt").read_text().splitlines()
        rng.shuffle(lines)
        for line in lines[:per_hop]:
            question, answers = line.split("\t")
            rows.append((re.sub(r"\[([^\]]+)\]", r"\1", question), answers))
    rng.shuffle(rows)
    with open(folder / "questions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["question", "answers"])
        writer.writerows(rows)
    return len(rows)


def run(step: str, args: list[str], log: Path) -> float:
    """One CLI command, its output appended to ``log``; returns its wall seconds."""
    cli = Path(sys.executable).with_name("seeder-dgl")
    start = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"\n$ seeder-dgl {' '.join(args)}\n")
        out.flush()
        done = subprocess.run([str(cli), *args], stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{step} failed (exit {done.returncode}): see {log}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="moviekg", help="dataset name (dropped first if it exists)")
    parser.add_argument("--per-hop", type=int, default=1200, help="questions per hop count")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the dataset in Neo4j afterwards")
    args = parser.parse_args()
    if not (METAQA / "kb.txt").is_file():
        raise SystemExit(f"MetaQA is not at {METAQA}: this benchmark reads ../shared")

    out = RESULTS / f"own-graph-{args.name}"
    out.mkdir(parents=True, exist_ok=True)
    log = out / "commands.log"
    log.write_text("")
    probe_before = cpu_probe()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / args.name
        folder.mkdir()
        questions = write_folder(folder, args.per_hop, args.seed)
        if _exists(args.name):
            run("drop", ["drop", args.name, "--yes"], log)
        shutil.rmtree(ROOT / "runs" / args.name, ignore_errors=True)
        seconds = {
            "ingest": run("ingest", ["ingest", args.name, "--source", str(folder)], log),
            "extract": run("extract", ["extract", args.name], log),
            "train": run("train", ["train", args.name], log),
            "eval": run("eval", ["eval", args.name, "--split", "test", "--diagnose"], log),
        }
    probe_after = cpu_probe()
    runs = ROOT / "runs" / args.name
    evaluation = json.loads(next(runs.glob("eval-*-test-*/results.json")).read_text())
    shutil.copyfile(next(runs.glob("eval-*-test-*/results.md")), out / "results.md")
    train_dir = next(p for p in runs.glob("*-full") if (p / "metrics.json").is_file())
    for name in ("history.csv", "metrics.json", "config.json"):
        shutil.copyfile(train_dir / name, out / name)
    metrics = json.loads((train_dir / "metrics.json").read_text())
    if not args.keep:
        run("drop", ["drop", args.name, "--yes"], log)

    methods = evaluation["methods"]
    payload = {"machine": machine(), "dataset": args.name, "questions": questions, "per_hop": args.per_hop,
               "seed": args.seed, "seconds": seconds, "epochs_run": len(metrics.get("epochs", [])),
               "best_epoch": metrics.get("best_epoch"), "evaluation": methods,
               "cpu_probe_ms": [probe_before, probe_after]}
    lines = [f"# A graph of your own, end to end: MetaQA's KB as `{args.name}`", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. Command: "
             f"`python benchmarks/bench_own_graph.py --name {args.name} --per-hop {args.per_hop}`. "
             + probe_line(probe_before, probe_after), "",
             f"{questions:,} questions ({args.per_hop} per hop count), answers by name, no topic marked, no split "
             "given; the CLI's seeded 70/10/20 split. Four commands, no flags:", "",
             "| command | seconds |", "|---|---:|",
             *[f"| `seeder-dgl {step} {args.name}{' --split test' if step == 'eval' else ''}` | {s:.0f} |"
               for step, s in seconds.items()], "",
             f"Training ran {payload['epochs_run']} epochs (best: {payload['best_epoch']}; it stops after 3 "
             "epochs without a better validation score).", "",
             "Test split, every method side by side (from the evaluation's results.md in this folder):", ""]
    table = (out / "results.md").read_text().split("\n\n")
    lines += [next((block for block in table if block.startswith("| method")), "(see results.md)"), ""]
    write_result(f"own-graph-{args.name}", payload, "\n".join(lines))
    print("\n".join(lines))


def _exists(name: str) -> bool:
    from seeder_dgl.graphstore.connection import open_driver
    from seeder_dgl.graphstore.cypher import query

    with open_driver() as driver:
        return bool(driver.execute_query(query("dataset/get"), name=name).records)


if __name__ == "__main__":
    main()
