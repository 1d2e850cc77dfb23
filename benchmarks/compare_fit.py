"""The entity linker's and relation prior's fit (what `extract --refit-prior` runs before any
subgraph) in this checkout against another one, alternated in one run.

    python benchmarks/compare_fit.py --baseline DIR [--dataset metaqa] [--rounds 2] [--tag NAME]

``DIR`` is a checkout of the commit to compare with (e.g. ``git worktree add /tmp/base <commit>``).
Each round runs the baseline's fit and then this checkout's, each in a fresh process against the
same Neo4j dataset and its in-memory export, with the dataset's profile settings (as
``retrieval.extract.ensure_linking`` calls ``fit_linking``), and stores nothing: the dataset's
record keeps its linker and prior. Reports each fit's seconds, and whether the two fitted the same
prior and linker (their JSON, byte for byte). Writes
benchmarks/results/fit-compare-<dataset>[-TAG].{json,md}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import cpu_probe, machine, probe_line, write_result  # noqa: E402

FIT = r"""
import hashlib, json, sys, time
sys.path.insert(0, sys.argv[1])
from seeder_dgl.threads import configure_threads
configure_threads()
import pathlib, seeder_dgl
# As every `seeder-dgl` command sets it. A checkout before seeder_dgl.allocator has none (the
# editable install's finder would import this checkout's module into it: look in its folder).
if (pathlib.Path(seeder_dgl.__path__[0]) / "allocator.py").exists():
    from seeder_dgl.allocator import configure_allocator
    configure_allocator()
from seeder_dgl.datasets import DatasetContext, get_spec
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.graphstore.connection import open_driver
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.retrieval.extract import FIT_HOPS, LinkerFit
from seeder_dgl.retrieval.link_training import fit_linking
from seeder_dgl.retrieval.pipeline import MemoryGraph
name = sys.argv[2]
ds = DatasetContext.open(name, None)
qa = get_spec(name).load_questions(None, None)
fit = LinkerFit.of(ds.retrieval)
with open_driver() as driver:  # the export's name index asks Neo4j's full-text index
    live = LiveGraph(driver, name)
    encoder = dataset_encoder(live.info.model)
    memory = MemoryGraph.from_export(export_graph(driver, name, ds.export_dir), live)
    start = time.perf_counter()
    fitted = fit_linking(memory, qa.split("train"), lambda texts: encoder.encode(texts, show_progress=False),
                         encode_tokens=encoder.encode_query_tokens, hops=max(len(ds.retrieval.budgets), FIT_HOPS),
                         require_prior=ds.retrieval.relation_prior, typed=fit.typed, progress=False,
                         partial_names=fit.partial_names, synonyms=fit.synonyms)
    seconds = time.perf_counter() - start
digest = lambda text: hashlib.sha256((text or "").encode()).hexdigest()[:16]
print(json.dumps({"seconds": seconds, "prior": digest(fitted.prior.to_json() if fitted.prior else ""),
                  "linker": digest(fitted.linker.to_json())}))
"""


def run_once(tree: Path, dataset: str) -> dict:
    done = subprocess.run([sys.executable, "-c", FIT, str(tree), dataset], capture_output=True, text=True,
                          cwd=tree, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the fit in {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, type=Path, help="a checkout of the commit to compare with")
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tag", default=None)
    args = parser.parse_args()

    trees = {"baseline": args.baseline.resolve(), "this checkout": REPO}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    probe_before = cpu_probe()
    for r in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(run_once(tree, args.dataset))
            print(f"round {r + 1}, {name}: {runs[name][-1]['seconds']:.1f} s", flush=True)
    probe_after = cpu_probe()
    medians = {name: statistics.median(x["seconds"] for x in rows) for name, rows in runs.items()}
    same = {part: all(a[part] == b[part] for a, b in zip(runs["baseline"], runs["this checkout"]))
            for part in ("prior", "linker")}
    payload = {"machine": machine(), "dataset": args.dataset, "rounds": args.rounds, "baseline": str(args.baseline),
               "runs": runs, "median_seconds": medians, "same_fit": same,
               "cpu_probe_ms": {"before": probe_before, "after": probe_after}}
    ratio = medians["baseline"] / medians["this checkout"]
    lines = [f"# The linker's and relation prior's fit on {args.dataset}, two checkouts side by side", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores. Command: `python "
             f"benchmarks/compare_fit.py --baseline DIR --dataset {args.dataset} --rounds {args.rounds}"
             + (f" --tag {args.tag}" if args.tag else "") + "`. Each round "
             "runs the baseline's `fit_linking` and then this checkout's, each in a fresh process, with the dataset's "
             "profile settings; nothing is stored.", "",
             "| checkout | seconds per round | median |", "|---|---|---:|"]
    for name, rows in runs.items():
        seconds = ", ".join(f"{x['seconds']:.1f}" for x in rows)
        lines.append(f"| {name} | {seconds} | {medians[name]:.1f} |")
    lines += ["", f"Baseline / this checkout: {ratio:.2f}x. The same prior: {same['prior']}; the same linker: "
              f"{same['linker']} (their JSON, byte for byte).", "", probe_line(probe_before, probe_after)]
    md = "\n".join(lines)
    print(md)
    write_result(f"fit-compare-{args.dataset}" + (f"-{args.tag}" if args.tag else ""), payload, md)


if __name__ == "__main__":
    main()
