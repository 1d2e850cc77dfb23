"""How well any retriever can do when a person is named by the surname alone: MetaQA's ambiguity ceiling.

``eval --perturb surname`` names the topic ("Tom Tryon") by its last word ("Tryon"). Where several
of the graph's nodes end in that word, the question no longer says which one it means, and no
linker can know. This probe counts, on the same validation sample ``eval --sample N`` scores,
how often that happens and what the best guesses that cannot see the hidden name would score:

- ``candidates``: every node whose name's last word (or whole one-word name) is the surname,
  matched without case, as the linker's partial match reads it;
- ``compatible``: those that have the relation the question's first step needs (its relation-path
  label, e.g. ``actor_to_movie`` needs an actor: a ``starred_actors`` tail), so the question's
  wording cannot tell them apart either;
- the Hit@1 of a guess that picks one compatible candidate (uniformly, or the one with most edges)
  and then answers that candidate's question perfectly: its first answer is right with the share
  of its answers that are also the true candidate's (two actors may share a film).

The sum over questions (unchanged ones count as answered) is an estimate of the ceiling, not a
bound: a reader that uses what the answers look like could beat it a little. It reads files
only (MetaQA's ``kb.txt`` and dev questions), no Neo4j and no model.

    python benchmarks/surname_ceiling.py [--sample 3000]

Writes benchmarks/results/surname-ceiling-metaqa.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402

RELATION_OF = {"actor": "starred_actors", "director": "directed_by", "writer": "written_by",
               "genre": "has_genre", "year": "release_year", "language": "in_language", "tags": "has_tags", "tag": "has_tags",
               "imdbrating": "has_imdb_rating", "imdbvotes": "has_imdb_votes"}
"""The relation behind each word of MetaQA's relation-path labels; ``movie`` is every triple's head."""


class Paths:
    """A MetaQA graph walked along relation-path labels (``actor_to_movie_to_director``)."""

    def __init__(self, kg):
        rel = {name: i for i, name in enumerate(kg.relation_names)}
        self.fwd: dict[tuple[int, int], list[int]] = defaultdict(list)  # (movie, rel) -> tails
        self.back: dict[tuple[int, int], list[int]] = defaultdict(list)  # (tail, rel) -> movies
        for s, d, r in zip(kg.edge_src.tolist(), kg.edge_dst.tolist(), kg.edge_rel.tolist()):
            self.fwd[(s, r)].append(d)
            self.back[(d, r)].append(s)
        self.rel = rel
        self.tail_rels: dict[int, set[int]] = defaultdict(set)
        for (d, r) in self.back:
            self.tail_rels[d].add(r)
        self.heads = {s for (s, _r) in self.fwd}

    def has_first_step(self, node: int, qtype: str) -> bool:
        first = qtype.split("_to_")[0]
        return node in self.heads if first == "movie" else self.rel[RELATION_OF[first]] in self.tail_rels[node]

    def answers(self, node: int, qtype: str) -> set[int]:
        """The nodes at the end of ``qtype``'s path from ``node``, less ``node`` (as MetaQA's answers)."""
        words = qtype.split("_to_")
        frontier = {node}
        for a, b in zip(words, words[1:]):
            step = set()
            for x in frontier:
                if a == "movie":
                    step.update(self.fwd.get((x, self.rel[RELATION_OF[b]]), ()))
                else:
                    step.update(self.back.get((x, self.rel[RELATION_OF[a]]), ()))
            frontier = step
        return frontier - {node}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=3000, help="validation questions, as eval --sample draws them")
    parser.add_argument("--name", default="surname-ceiling-metaqa", help="result file name under benchmarks/results/")
    args = parser.parse_args()

    from loaders.metaqa import load_metaqa
    from loaders.perturb import NAME_WORD, surname

    kg, qa = load_metaqa()
    names = kg.node_names
    degree = np.bincount(np.concatenate([kg.edge_src, kg.edge_dst]), minlength=len(names))
    by_last: dict[str, list[int]] = defaultdict(list)
    for i, name in enumerate(names):
        words = NAME_WORD.findall(name)
        if words:
            by_last[words[-1].lower()].append(i)
    paths = Paths(kg)

    questions = [q for q in qa.sample("val", args.sample)]
    changed = unique = unique_compatible = 0
    uniform = most_edges = 0.0
    by_hops: dict[int, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])  # questions, changed, uniform, most edges
    for q in questions:
        row = by_hops[q.hops]
        row[0] += 1
        topic = q.topic[0] if q.topic else None
        if topic is None or surname(q.text, [names[topic]]) == q.text:
            row[2] += 1
            row[3] += 1
            continue
        changed += 1
        row[1] += 1
        last = NAME_WORD.findall(names[topic])[-1].lower()
        candidates = by_last[last]
        compatible = [c for c in candidates if paths.has_first_step(c, q.qtype)]
        if topic not in compatible:
            compatible.append(topic)
        unique += len(candidates) == 1
        unique_compatible += len(compatible) == 1
        truth = set(q.answers)

        def first_right(c: int) -> float:
            if c == topic:  # MetaQA's own answers differ from the path's for some 3-hop labels
                return 1.0
            got = paths.answers(c, q.qtype)
            return len(got & truth) / len(got) if got else 0.0

        u = float(np.mean([first_right(c) for c in compatible]))
        m = first_right(max(compatible, key=lambda c: (degree[c], -c)))
        uniform += u
        most_edges += m
        row[2] += u
        row[3] += m

    n = len(questions)
    table = {
        "questions": n, "changed": changed,
        "surname names one node": unique / max(changed, 1),
        "surname names one compatible node": unique_compatible / max(changed, 1),
        "ceiling, uniform guess": (n - changed + uniform) / n,
        "ceiling, most edges": (n - changed + most_edges) / n,
        "by hops": {h: {"questions": r[0], "changed": r[1], "uniform": r[2] / r[0], "most edges": r[3] / r[0]}
                    for h, r in sorted(by_hops.items())},
    }
    md = ["# A person named by the surname alone: MetaQA's ambiguity ceiling", "",
          f"Command: `python benchmarks/surname_ceiling.py --sample {args.sample}` (the validation sample "
          f"`eval --sample {args.sample}` scores; files only). Of {n} questions, {changed} change under "
          "`--perturb surname`.", "",
          "| | share |", "|---|---:|",
          f"| changed questions whose surname ends one node's name | {table['surname names one node']:.3f} |",
          f"| ... one node with the question's first relation | {table['surname names one compatible node']:.3f} |",
          f"| Hit@1 ceiling, a compatible node picked uniformly (all {n} questions) | {table['ceiling, uniform guess']:.3f} |",
          f"| Hit@1 ceiling, the compatible node with most edges | {table['ceiling, most edges']:.3f} |", "",
          "| hops | questions | changed | ceiling (uniform) | ceiling (most edges) |", "|---:|---:|---:|---:|---:|"]
    for h, r in table["by hops"].items():
        md.append(f"| {h} | {r['questions']} | {r['changed']} | {r['uniform']:.3f} | {r['most edges']:.3f} |")
    text = "\n".join(md)
    print(text)
    write_result(args.name, {"machine": machine(), "sample": args.sample, "table": table}, text)


if __name__ == "__main__":
    main()
