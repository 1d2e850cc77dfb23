"""MetaQA validation questions reworded as people might ask them, scored beside the same questions as written.

MetaQA's validation questions share their wordings with its training questions (`eval` marks every
one 'seen'), so they cannot show how a trained retriever reads a question worded some other way.
This probe rewords 1- and 2-hop validation questions with phrasings of its own, written for it and
kept only if no MetaQA training question is worded the same way ("which films feature X" for
"what films did X star in"; "who was behind the camera for the films X appeared in"), from the
question's relation-path label (``dev_qtype.txt``) and its topic entity. It is a measurement, not
a tuning set: nothing in the package reads it.

Both forms go through the Python API as a user's code calls it (``Retriever(...).retrieve_many``)
on the live graph, so ``ingest metaqa``, ``extract metaqa`` and ``train metaqa`` must have run.

    python benchmarks/reworded_metaqa.py [--per-hop 500]

Writes benchmarks/results/reworded-metaqa.{json,md}: Hit@1 / Hit@5 per hop count for the
questions as written and reworded, and per phrasing (the phrasing with ``{x}`` for the topic:
no question text of the dataset is written out).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result, written_and_typed  # noqa: E402

# The films a topic entity is linked to, by its role: how a 2-hop question names its first hop.
FILMS_OF = {
    "actor": ["the films featuring {x}", "the movies {x} was cast in"],
    "director": ["the films {x} made", "the pictures made by {x}"],
    "writer": ["the films scripted by {x}", "the movies whose screenplay {x} penned"],
}
# What a question asks of some films, by the answer's role: its second hop.
ASK_OF = {
    "actor": ["who appears in {f}", "which performers were in {f}"],
    "director": ["who was behind the camera for {f}", "which filmmakers were responsible for {f}"],
    "writer": ["who did the screenplays of {f}", "which screenwriters worked on {f}"],
    "year": ["in what years did {f} come out", "which years saw {f} hit theaters"],
    "genre": ["what kinds of pictures are {f}", "which categories do {f} belong to"],
    "language": ["which languages are {f} in", "what tongues do {f} use"],
}
REWORDINGS = {
    # 1-hop: a relation-path label -> phrasings
    "actor_to_movie": ["which films feature {x}", "list the pictures {x} had a role in",
                       "in which movies can you see {x}"],
    "director_to_movie": ["which films were made by the filmmaker {x}", "list the pictures {x} was behind the camera for",
                          "what has {x} directed"],
    "movie_to_actor": ["who is in the cast of {x}", "name the performers of {x}", "which actors appear in {x}"],
    "movie_to_director": ["who made the film {x}", "name the filmmaker behind {x}", "who was behind the camera for {x}"],
    "movie_to_genre": ["which category of film does {x} belong to", "how would you classify {x}",
                       "{x} is what kind of picture"],
    "movie_to_imdbrating": ["how is {x} rated on imdb", "what score does {x} get"],
    "movie_to_imdbvotes": ["how many people voted for {x}", "how well known is {x}"],
    "movie_to_language": ["which language do they speak in {x}", "in what tongue was {x} made",
                          "{x} is in which language"],
    "movie_to_tags": ["what keywords fit {x}", "which tags does {x} have", "what is {x} tagged with"],
    "movie_to_writer": ["who penned {x}", "who did the screenplay of {x}", "name the screenwriter of {x}"],
    "movie_to_year": ["what year did {x} come out", "when did {x} premiere", "{x} came out in which year"],
    "tag_to_movie": ["which films are tagged {x}", "recommend some pictures about {x}", "films on the topic of {x}"],
    "writer_to_movie": ["which films have a screenplay by {x}", "what has {x} written for the screen",
                        "list the pictures {x} penned"],
    # 2-hop: the films of another film's people
    "movie_to_actor_to_movie": ["what else has the cast of {x} been in", "which other films feature actors from {x}"],
    "movie_to_director_to_movie": ["what other films did the filmmaker behind {x} make",
                                   "which pictures come from the director of {x} too"],
    "movie_to_writer_to_movie": ["what else did the screenwriter of {x} pen",
                                 "which other films were scripted by the writer of {x}"],
}


def reworded(qtype: str, topic: str, rng: np.random.Generator) -> tuple[str, str] | None:
    """(question, phrasing) for a question with relation path ``qtype`` about ``topic``."""
    if qtype in REWORDINGS:
        pattern = REWORDINGS[qtype][rng.integers(len(REWORDINGS[qtype]))]
        return pattern.format(x=topic), pattern
    match = re.fullmatch(r"(actor|director|writer)_to_movie_to_(\w+)", qtype)
    if match is None or match.group(2) not in ASK_OF:
        return None
    films = FILMS_OF[match.group(1)][rng.integers(2)]
    ask = ASK_OF[match.group(2)][rng.integers(2)]
    return ask.format(f=films.format(x=topic)), ask.format(f=films.format(x="{x}"))


def reworded_rows(kg, qa, per_hop: int, rng: np.random.Generator) -> list[tuple]:
    """(hops, phrasing, written, reworded, answer ids): per hop count (1, 2) the first ``per_hop``
    validation questions of a seeded order that a phrasing rewords unlike any training question."""
    from seeder_dgl.retrieval.linking import wording_key

    train_keys = {wording_key(q.text, [kg.node_names[t] for t in q.topic]) for q in qa.split("train") if q.topic}
    rows = []
    for hops in (1, 2):
        val = [q for q in qa.split(f"val_{hops}hop") if len(q.topic) == 1 and q.answers and q.qtype]
        for i in rng.permutation(len(val)):
            q = val[i]
            topic = kg.node_names[q.topic[0]]
            made = reworded(q.qtype, topic, rng)
            if made is None or wording_key(made[0], [topic]) in train_keys:
                continue
            rows.append((hops, made[1], q.text, made[0], set(q.answers)))
            if sum(r[0] == hops for r in rows) >= per_hop:
                break
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-hop", type=int, default=500, help="validation questions per hop count (seeded sample)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--checkpoint", default=None, help="a policy checkpoint [default: the dataset's trained one]")
    parser.add_argument("--name", default="reworded-metaqa", help="result file name under benchmarks/results/")
    args = parser.parse_args()

    from loaders.metaqa import load_metaqa
    from seeder_dgl.api import Retriever

    kg, qa = load_metaqa()
    rows = reworded_rows(kg, qa, args.per_hop, np.random.default_rng(0))

    retriever = Retriever("metaqa", method="seeder", checkpoint=args.checkpoint)
    hits = written_and_typed(retriever, rows, "reworded", args.k)
    table = {f"{hops}-hop": hits(lambda r, h=hops: r[0] == h) for hops in (1, 2)}
    by_phrasing = {phrasing: hits(lambda r, p=phrasing: r[1] == p) for phrasing in sorted({r[1] for r in rows})}
    payload = {"machine": machine(), "k": args.k, "per_hop": args.per_hop, "checkpoint": args.checkpoint, "table": table,
               "by_phrasing": by_phrasing}
    k = f"hit@{args.k}"
    md = ["# MetaQA validation questions reworded", "",
          f"Command: `python benchmarks/reworded_metaqa.py --per-hop {args.per_hop}"
          + (f" --checkpoint {args.checkpoint}" if args.checkpoint else "") + "`. The same validation questions "
          "as written and reworded with phrasings no MetaQA training question has (`benchmarks/reworded_metaqa.py`), "
          "through `Retriever('metaqa', method='seeder').retrieve_many`.", "",
          f"| hops | questions | written Hit@1 | reworded Hit@1 | written Hit@{args.k} | reworded Hit@{args.k} |",
          "|---|---:|---:|---:|---:|---:|"]
    for name, row in table.items():
        w, r = row["as written"], row["reworded"]
        md.append(f"| {name} | {w['questions']} | {w['hit@1']:.3f} | {r['hit@1']:.3f} | {w[k]:.3f} | {r[k]:.3f} |")
    md += ["", "## By phrasing", "", f"| phrasing | questions | written Hit@1 | reworded Hit@1 | reworded Hit@{args.k} |",
           "|---|---:|---:|---:|---:|"]
    for phrasing, row in sorted(by_phrasing.items(), key=lambda kv: kv[1]["reworded"]["hit@1"]):
        w, r = row["as written"], row["reworded"]
        md.append(f"| {phrasing} | {w['questions']} | {w['hit@1']:.3f} | {r['hit@1']:.3f} | {r[k]:.3f} |")
    text = "\n".join(md)
    print(text)
    write_result(args.name, payload, text)


if __name__ == "__main__":
    main()
