"""MetaQA validation questions asked as search phrases, scored beside the same questions as written.

People type a phrase into a search box more often than a question: "movies written by Stephen
King", "Jaws director", "actors in Steven Spielberg's films". This probe asks 1- and 2-hop
validation questions as phrases of its own (``PHRASES``, chosen per relation-path label, half of
them in lower case) and scores them beside the questions as written.

``loaders.perturb.phrase`` (an ``eval --perturb`` kind, not in the training mix) cuts the question
words and auxiliaries at either end of a question ("what is a movie written by X" -> "movie
written by X"). Some of this probe's phrases are such a cut of a training question (up to the singular and plural of a
word they are not); the table marks them ``cut of a training question`` by comparing their
wording with every training question's ``phrase`` form, so the others show phrasings that training
never saw in any form. It is a measurement, not a tuning set: nothing in the package reads it.

Both forms go through the Python API as a user's code calls it (``Retriever(...).retrieve_many``)
on the live graph, so ``ingest metaqa``, ``extract metaqa`` and ``train metaqa`` must have run.

    python benchmarks/phrased_metaqa.py [--per-hop 400] [--checkpoint PATH]

Writes benchmarks/results/phrased-metaqa.{json,md}: Hit@1 / Hit@5 per hop count and per phrase
(the phrase with ``{x}`` for the topic: no question text of the dataset is written out).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result, written_and_typed  # noqa: E402

PHRASES = {
    # a relation-path label -> search phrases
    "movie_to_director": ["who is the director of {x}", "{x} director", "{x} was directed by whom"],
    "movie_to_actor": ["who acted in {x}", "cast of {x}", "{x} actors"],
    "movie_to_writer": ["who is the writer of {x}", "{x} writer", "who wrote the script of {x}"],
    "movie_to_year": ["when was {x} released", "{x} release year", "what year is {x} from"],
    "movie_to_genre": ["{x} genre", "what type of movie is {x}"],
    "movie_to_language": ["{x} language", "what language is {x} in"],
    "movie_to_tags": ["{x} tags", "what is {x} about"],
    "actor_to_movie": ["{x} movies", "films with {x}", "movies starring {x}"],
    "director_to_movie": ["movies directed by {x}", "{x} films", "what did {x} direct"],
    "writer_to_movie": ["movies written by {x}", "what did {x} write"],
    "tag_to_movie": ["movies about {x}", "{x} movies"],
    "movie_to_director_to_movie": ["other movies by the director of {x}", "more films from {x}'s director"],
    "movie_to_actor_to_movie": ["other movies with the actors of {x}"],
    "movie_to_writer_to_movie": ["other films by the writer of {x}"],
    "actor_to_movie_to_director": ["directors of {x} movies", "who directed films starring {x}"],
    "actor_to_movie_to_year": ["when were {x}'s movies released"],
    "director_to_movie_to_actor": ["actors in {x}'s films", "who acted in movies directed by {x}"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-hop", type=int, default=400, help="validation questions per hop count (seeded sample)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--checkpoint", default=None, help="a policy checkpoint [default: the dataset's trained one]")
    parser.add_argument("--name", default="phrased-metaqa", help="result file name under benchmarks/results/")
    args = parser.parse_args()

    from loaders.metaqa import load_metaqa
    from loaders.perturb import phrase
    from seeder_dgl.api import Retriever
    from seeder_dgl.retrieval.linking import wording_key

    def singular(key: str) -> str:
        return " ".join(w[:-1] if w.endswith("s") and len(w) > 3 else w for w in key.split())

    kg, qa = load_metaqa()
    cuts = set()
    for q in qa.split("train"):
        if q.topic:
            names = [kg.node_names[t] for t in q.topic]
            cuts.add(singular(wording_key(phrase(q.text, names), names)))
    rng = np.random.default_rng(0)
    rows = []  # (hops, phrase, written, phrased, answers)
    for hops in (1, 2):
        val = [q for q in qa.split(f"val_{hops}hop") if len(q.topic) == 1 and q.answers and q.qtype in PHRASES]
        for i in rng.permutation(len(val))[:args.per_hop]:
            q = val[i]
            pattern = PHRASES[q.qtype][rng.integers(len(PHRASES[q.qtype]))]
            text = pattern.format(x=kg.node_names[q.topic[0]])
            rows.append((hops, pattern, q.text, text.lower() if rng.random() < 0.5 else text, set(q.answers)))
    seen = {p: singular(wording_key(p.format(x="X"), ["X"])) in cuts for p in {r[1] for r in rows}}

    retriever = Retriever("metaqa", method="seeder", checkpoint=args.checkpoint)
    hits = written_and_typed(retriever, rows, "phrased", args.k)
    table = {f"{hops}-hop": hits(lambda r, h=hops: r[0] == h) for hops in (1, 2)}
    table["cut of a training question"] = hits(lambda r: seen[r[1]])
    table["never seen in any form"] = hits(lambda r: not seen[r[1]])
    by_phrase = {pattern: hits(lambda r, p=pattern: r[1] == p) for pattern in sorted(seen)}
    payload = {"machine": machine(), "k": args.k, "per_hop": args.per_hop, "checkpoint": args.checkpoint,
               "table": table, "by_phrase": by_phrase, "cut_of_training": seen}
    k = f"hit@{args.k}"
    md = ["# MetaQA validation questions asked as search phrases", "",
          f"Command: `python benchmarks/phrased_metaqa.py --per-hop {args.per_hop}"
          + (f" --checkpoint {args.checkpoint}" if args.checkpoint else "") + "`. The same validation questions "
          "as written and as search phrases of the benchmark's own (`PHRASES`, half of them in lower case), through "
          "`Retriever('metaqa', method='seeder').retrieve_many`. A phrase is a cut of a training question when it "
          "words like a training question with its question words cut off (`loaders.perturb.phrase`), up to "
          "plurals.", "",
          f"| questions | n | written Hit@1 | phrased Hit@1 | written Hit@{args.k} | phrased Hit@{args.k} |",
          "|---|---:|---:|---:|---:|---:|"]
    for name, row in table.items():
        w, p = row["as written"], row["phrased"]
        md.append(f"| {name} | {w['questions']} | {w['hit@1']:.3f} | {p['hit@1']:.3f} | {w[k]:.3f} | {p[k]:.3f} |")
    md += ["", "## By phrase", "",
           f"| phrase | cut of a training question | questions | written Hit@1 | phrased Hit@1 | phrased Hit@{args.k} |",
           "|---|---|---:|---:|---:|---:|"]
    for pattern, row in sorted(by_phrase.items(), key=lambda kv: (kv[1]["phrased"]["hit@1"], kv[0])):
        w, p = row["as written"], row["phrased"]
        md.append(f"| {pattern} | {'yes' if seen[pattern] else 'no'} | {w['questions']} | {w['hit@1']:.3f} | "
                  f"{p['hit@1']:.3f} | {p[k]:.3f} |")
    text = "\n".join(md)
    print(text)
    write_result(args.name, payload, text)


if __name__ == "__main__":
    main()
