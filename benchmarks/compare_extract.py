"""`seeder-dgl extract` in this checkout against another one, alternated in one run.

    python benchmarks/compare_extract.py --baseline DIR [--dataset metaqa] [--split val] [--limit 1500]
                                         [--rounds 3] [--engine memory] [--source DIR] [--tag NAME]

``DIR`` is a checkout of the commit to compare with (e.g. ``git worktree add /tmp/base <commit>``).
Each round runs that checkout's ``seeder-dgl extract DATASET --split SPLIT --limit N`` and then
this one's, each in a fresh process against the same Neo4j, dataset and embedding cache, each into
a cache folder of its own (a copy of the dataset's export, so neither reads the graph from Neo4j
in the timed part), and reads the seconds the command's manifest records for the subgraphs, with
the whole command's wall time. The stored entity linker and relation prior are used, never
refitted. The subgraphs of the two are compared node for node. Writes
benchmarks/results/extract-compare-<dataset>[-TAG].{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_probe, machine, probe_line, write_result  # noqa: E402


def prepared_cache(root: Path, dataset: str) -> Path:
    """A cache folder holding a copy of the dataset's export and records, without subgraphs."""
    from seeder_dgl.datasets import cache_root

    source = cache_root() / dataset
    target = root / dataset
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name == "subgraphs":
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, target / item.name)
    return root


def run_once(tree: Path, cache: Path, args: argparse.Namespace) -> dict:
    """One ``extract`` of ``tree`` into ``cache`` (its subgraphs removed first); its manifest and wall time."""
    from seeder_dgl.datasets import cache_root

    shutil.rmtree(cache / args.dataset / "subgraphs", ignore_errors=True)
    env = {**os.environ, "SEEDER_CACHE": str(cache),
           "SEEDER_EMBEDDINGS": os.environ.get("SEEDER_EMBEDDINGS", str(cache_root() / "embeddings"))}
    command = [sys.executable, "-m", "seeder_dgl.cli", "extract", args.dataset, "--split", args.split,
               "--limit", str(args.limit), "--engine", args.engine]
    if args.source:
        command += ["--source", str(Path(args.source).resolve())]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(tree))
    wall = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"the extract in {tree} failed: {tail[0]}")
    manifests = list((cache / args.dataset / "subgraphs").glob(f"*-{args.split}/manifest.json"))
    if len(manifests) != 1:
        raise SystemExit(f"expected one {args.split} cache in {cache}, found {len(manifests)}")
    return {"manifest": json.loads(manifests[0].read_text()), "wall_s": round(wall, 2), "folder": str(manifests[0].parent)}


def describe(tree: Path) -> str:
    """The checkout's commit, with "+ changes" when its working tree differs from it."""
    def git(*args):
        return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (" + changes" if git("status", "--porcelain", "--untracked-files=no")
                                                  else "")


def same_subgraphs(a: str, b: str) -> tuple[int, int]:
    """(questions whose subgraphs hold the same nodes, questions) of two cache folders."""
    from seeder_dgl.subgraph import cache

    same = total = 0
    for path in sorted(Path(a).glob("shard-*.npz")):
        left, _ = cache.load_shard(path)
        right, _ = cache.load_shard(Path(b) / path.name)
        for x, y in zip(left, right):
            total += 1
            same += int(x.query_id == y.query_id and np.array_equal(np.sort(x.node_ids), np.sort(y.node_ids)))
    return same, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="checkout of the commit to compare with")
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--split", default="val")
    parser.add_argument("--limit", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", default="memory", choices=("memory", "cypher"))
    parser.add_argument("--source", default=None, help="the dataset's question folder, for both checkouts "
                                                            "(MetaQA: ../shared/data/metaqa of this one)")
    parser.add_argument("--tag", default=None, help="appended to the result file's name")
    args = parser.parse_args()
    if args.source is None and args.dataset == "metaqa":
        args.source = str(REPO.parent / "shared" / "data" / "metaqa")
    baseline = Path(args.baseline).resolve()
    if not (baseline / "seeder_dgl" / "retrieval" / "extract.py").is_file():
        raise SystemExit(f"{baseline} is not a seeder-dgl checkout")
    commits = {name: describe(tree) for name, tree in (("baseline", baseline), ("this", REPO))}
    with tempfile.TemporaryDirectory(prefix="seeder-extract-compare-") as scratch:
        caches = {name: prepared_cache(Path(scratch) / name, args.dataset) for name in commits}
        probe_before = cpu_probe()
        rounds: dict[str, list[dict]] = {"baseline": [], "this": []}
        for r in range(args.rounds):
            for name, tree in (("baseline", baseline), ("this", REPO)):
                rounds[name].append(run_once(tree, caches[name], args))
                print(f"round {r + 1}: {name} {rounds[name][-1]['manifest']['seconds']:.1f} s for the subgraphs, "
                      f"{rounds[name][-1]['wall_s']:.1f} s in all", flush=True)
        probe_after = cpu_probe()
        same, total = same_subgraphs(rounds["baseline"][-1]["folder"], rounds["this"][-1]["folder"])
    summary = {name: {"subgraph_seconds": statistics.median(r["manifest"]["seconds"] for r in runs),
                      "wall_seconds": statistics.median(r["wall_s"] for r in runs),
                      "hit_any": runs[-1]["manifest"]["subgraph_hit_any"]} for name, runs in rounds.items()}
    payload = {"machine": machine(), "dataset": args.dataset, "split": args.split, "limit": args.limit,
               "engine": args.engine, "rounds": args.rounds, "commits": commits, "summary": summary,
               "same_subgraphs": [same, total],
               "runs": {k: [{"seconds": r["manifest"]["seconds"], "wall_s": r["wall_s"]} for r in v]
                        for k, v in rounds.items()},
               "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    b, t = summary["baseline"], summary["this"]
    per_round = {k: ", ".join(f"{r['manifest']['seconds']:.1f}" for r in v) for k, v in rounds.items()}
    lines = [f"# `extract {args.dataset} --split {args.split} --limit {args.limit} --engine {args.engine}`, "
             f"{commits['this']} against {commits['baseline']}", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. {args.rounds} rounds, each "
             f"the baseline's command then this checkout's, in fresh processes on the same Neo4j, stored linker "
             f"and prior, each into a cache of its own holding the dataset's export. Command: "
             f"`python benchmarks/compare_extract.py --baseline DIR --dataset {args.dataset} --split {args.split} "
             f"--limit {args.limit} --rounds {args.rounds}`.", "",
             "| checkout | subgraphs s, per round | median | whole command s (median) | Hit@any |",
             "|---|---|---:|---:|---:|",
             f"| {commits['baseline']} | {per_round['baseline']} | {b['subgraph_seconds']:.1f} | "
             f"{b['wall_seconds']:.1f} | {b['hit_any']:.3f} |",
             f"| {commits['this']} | {per_round['this']} | {t['subgraph_seconds']:.1f} | {t['wall_seconds']:.1f} | "
             f"{t['hit_any']:.3f} |", "",
             f"Subgraphs: {b['subgraph_seconds'] / t['subgraph_seconds']:.2f}x as fast "
             f"({args.limit / t['subgraph_seconds']:.0f} against {args.limit / b['subgraph_seconds']:.0f} questions/s); "
             f"the same nodes for {same} of {total} questions.", "", probe_line(probe_before, probe_after)]
    md = "\n".join(lines)
    print(md)
    name = f"extract-compare-{args.dataset}"
    write_result(f"{name}-{args.tag}" if args.tag else name, payload, md)


if __name__ == "__main__":
    main()
