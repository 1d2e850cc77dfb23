"""Where a graph of one's own loses Hit@1 against Hit@5: consistent labels, disagreeing labels, new wordings.

A retriever ranks the answers of the relation path a question's wording asks for. When training
questions worded the same way were labelled with different paths (``where is the alma mater of X
located`` answered by the university's city for some and by its country for others), no reader
of the wording can know which one a held-out question's label picked, and Hit@1 falls below
Hit@5 whatever the ranking does. This probe splits the evaluated questions by what the training
split says about their wording:

- ``topic garbled``: the topic's name is not in the question as written (a data-generation fault:
  the linker has nothing to find);
- ``seen, one path``: training questions with the same wording (the question with the topic's
  name masked, as ``eval``'s ``seen`` / ``new`` breakdown reads it: ``linking.wording_key``)
  reached their answers by one relation path in at least ``--agree`` of cases;
- ``seen, paths disagree``: the wording was seen, but its training labels split between paths;
- ``new wording``: no training question was worded this way (a question the policy never saw).

For the seen wordings it also scores the best reader of the wording alone (``ceiling``): from the
question's topic it takes, of the paths the wording's training questions were labelled with, the
one most of them took among those that exist from this topic in the graph, and counts a hit when
that path reaches one of the question's answers (also when none of them exists there: a bound,
not a reader). Where labels disagree, that is how far any ranking can go without knowing which
path the held-out label took.

Gold paths are every relation sequence of the question's hop count from its topic that reaches one
of its answers (inverse steps written ``^r``). It reads the dataset's files (``triples.tsv``,
``questions.csv`` with ``topic`` and ``hops`` columns, as ``benchmarks/dev_graph.py`` writes them) and
an evaluation's per-query metrics (``seeder-dgl eval <dataset> --per-query``), no Neo4j and no model.

    seeder-dgl eval mlpq --split val --methods seeder --per-query --out /tmp/eval-mlpq-val
    python benchmarks/label_agreement.py --source /work/devgraph/mlpq --results /tmp/eval-mlpq-val/results.json

Writes benchmarks/results/label-agreement-<name>.{json,md}.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402
from seeder_dgl.retrieval.linking import wording_key  # noqa: E402

MAX_PATHS = 200_000
"""Walks kept per hop from a topic (a hub's 3-hop neighbourhood is cut there)."""

GROUPS = ("topic garbled", "seen, one path", "seen, paths disagree", "new wording")


def read_graph(path: Path) -> dict[str, list[tuple[str, str]]]:
    adj: dict[str, list[tuple[str, str]]] = defaultdict(list)
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            adj[row["head"]].append((row["relation"], row["tail"]))
            adj[row["tail"]].append(("^" + row["relation"], row["head"]))
    return adj


def paths_from(adj, topic: str, hops: int) -> dict[tuple[str, ...], set[str]]:
    """Relation sequence -> the nodes it ends at, over every walk of ``hops`` steps from ``topic``."""
    frontier = [((), topic)]
    for _ in range(hops):
        frontier = [(p + (rel,), m) for p, n in frontier for rel, m in adj.get(n, ())][:MAX_PATHS]
    out: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for p, n in frontier:
        out[p].add(n)
    return out


def wording(question: str, topic: str) -> str:
    """The question's wording as ``eval``'s by-wording breakdown reads it (``wording_key``: the topic
    masked whatever its case, punctuation and underscores)."""
    return wording_key(question, [topic])


def garbled(question: str, topic: str) -> bool:
    q = question.lower()
    return topic.lower() not in q and topic.replace("_", " ").lower() not in q


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, help="folder with triples.tsv and questions.csv")
    ap.add_argument("--results", required=True, help="results.json of `seeder-dgl eval ... --per-query`")
    ap.add_argument("--method", default="seeder")
    ap.add_argument("--agree", type=float, default=0.8, help="share of one path that makes a wording consistent")
    ap.add_argument("--name", default=None, help="result name [default: the source folder's]")
    ap.add_argument("--out", default=None, help="result folder [default: benchmarks/results/]")
    args = ap.parse_args(argv)
    source = Path(args.source)
    for path in (source / "triples.tsv", source / "questions.csv", Path(args.results)):
        if not path.is_file():
            raise SystemExit(f"error: {path} is not a file (see this script's --help)")
    adj = read_graph(source / "triples.tsv")
    with (source / "questions.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    missing = {"question", "answers", "split", "topic", "hops"} - set(rows[0] if rows else ())
    if missing:
        raise SystemExit(f"error: {source / 'questions.csv'} has no column {', '.join(sorted(missing))}: "
                         f"write it as benchmarks/dev_graph.py does")

    counts: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        if r["split"] != "train":
            continue
        answers = set(r["answers"].split("|"))
        gold = [p for p, ends in paths_from(adj, r["topic"], int(r["hops"])).items() if ends & answers]
        for p in gold:  # a question reached by two paths counts half for each
            counts[wording(r["question"], r["topic"])][p] += 1 / len(gold)

    res = json.loads(Path(args.results).read_text(encoding="utf-8"))
    if args.method not in res.get("per_query", {}):
        raise SystemExit(f"error: {args.results} has no per-query results of {args.method!r}: run "
                         f"`seeder-dgl eval ... --methods {args.method} --per-query`")
    ids = res["queries"]["id"]
    per = res["per_query"][args.method]["metrics"]
    table: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for i, qid in enumerate(ids):
        r = rows[int(qid)]
        if str(res["queries"]["hops"][i]) != r["hops"]:
            raise SystemExit(f"query {qid}: the results do not follow {source / 'questions.csv'}'s rows")
        c = counts.get(wording(r["question"], r["topic"]))
        if garbled(r["question"], r["topic"]):
            group = GROUPS[0]
        elif not c:
            group = GROUPS[3]
        else:
            group = GROUPS[1] if max(c.values()) / sum(c.values()) >= args.agree else GROUPS[2]
        ceiling = 1.0
        if c:
            reach = paths_from(adj, r["topic"], int(r["hops"]))
            here = [p for p in c if p in reach]
            if here:
                ceiling = float(bool(reach[max(here, key=c.__getitem__)] & set(r["answers"].split("|"))))
        for key in ((r["hops"], group), ("all", group), ("all", "all")):
            table[key][0] += 1
            table[key][1] += per["hit@1"][i]
            table[key][2] += per["hit@5"][i]
            table[key][3] += ceiling

    order = {g: i for i, g in enumerate(GROUPS + ("all",))}
    keys = sorted(table, key=lambda k: (k[0] == "all", k[0], order[k[1]]))
    lines = ["| hops | questions' wording | questions | Hit@1 | Hit@5 | gap | the wording's best reader (Hit@1) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    out_rows = []
    for hops, group in keys:
        n, h1, h5, ceil = table[(hops, group)]
        seen = group.startswith("seen")
        out_rows.append(dict(hops=hops, group=group, questions=int(n), hit1=h1 / n, hit5=h5 / n,
                             reader_ceiling=ceil / n if seen else None))
        lines.append(f"| {hops} | {group} | {int(n)} | {h1 / n:.3f} | {h5 / n:.3f} | {(h5 - h1) / n:.3f} | "
                     f"{f'{ceil / n:.3f}' if seen else '–'} |")
    name = args.name or source.name
    write_result(f"label-agreement-{name}", {"machine": machine(), "source": str(source), "results": args.results,
                                             "method": args.method, "agree": args.agree,
                                             "train_wordings": len(counts), "rows": out_rows},
                 "\n".join([f"# Hit@1 against Hit@5 by what the training labels say ({name})", "",
                            f"Training wordings: {len(counts)}; a wording is consistent when one path has "
                            f"at least {args.agree} of its training questions.", ""] + lines), folder=Path(args.out) if args.out else None)
    print("\n".join(lines))
    return out_rows


if __name__ == "__main__":
    main()
