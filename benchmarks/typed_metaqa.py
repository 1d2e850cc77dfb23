"""MetaQA validation questions typed in ways the training mix never generates, scored beside the same questions as written.

`eval --perturb` scores the kinds of typing the training mix also generates (``loaders.perturb``),
so it cannot show what a phrasing or a habit the mix does not know costs. This probe types
validation questions two ways the package never sees while it learns:

- ``chat``: an opening and/or a closing from this file's ``OPENINGS`` and ``CLOSINGS``, which share
  no phrase with ``loaders.perturb``'s (checked when it runs): "hi, what films did Tom Hanks star
  in", "what films did Tom Hanks star in thanks a lot";
- ``surname``: a person named by the last word of their name alone ("what films did Hanks star
  in"), for questions whose topic is an actor, director or writer with a name of two words or more.

It is a measurement, not a tuning set: nothing in the package reads it. Both forms go through the
Python API as a user's code calls it (``Retriever(...).retrieve_many``) on the live graph, so
``ingest metaqa``, ``extract metaqa`` and ``train metaqa`` must have run.

    python benchmarks/typed_metaqa.py [--per-hop 300]

Writes benchmarks/results/typed-metaqa.{json,md}: Hit@1 / Hit@5 per hop count and form.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result, written_and_typed  # noqa: E402

OPENINGS = ("hi,", "hello there,", "i was wondering", "could u tell me", "hey there, quick one:", "i need to know")
"""Chat before a question, none of them among ``loaders.perturb.OPENINGS``."""
CLOSINGS = ("thanks", "thanks a lot", "thank u", "much appreciated", "if possible", "ty")
"""Chat after a question, none of them among ``loaders.perturb.CLOSINGS``."""
PEOPLE = ("actor", "director", "writer")
"""MetaQA's relation-path labels that start at a person."""


def chat(text: str, rng: random.Random) -> str:
    body = text.strip().rstrip("?").rstrip()
    where = rng.randrange(3)
    if where != 1:
        body = f"{rng.choice(OPENINGS)} {body[0].lower() + body[1:] if body[1:2].islower() else body}"
    if where != 0:
        body = f"{body} {rng.choice(CLOSINGS)}"
    return body


def surname(text: str, name: str) -> str | None:
    words = name.split()
    if len(words) < 2 or not re.search(re.escape(name), text, flags=re.IGNORECASE):
        return None
    return re.sub(re.escape(name), words[-1], text, count=1, flags=re.IGNORECASE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-hop", type=int, default=300, help="validation questions per hop count and form")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--checkpoint", default=None, help="a policy checkpoint [default: the dataset's trained one]")
    parser.add_argument("--name", default="typed-metaqa", help="result file name under benchmarks/results/")
    args = parser.parse_args()

    from loaders import perturb
    from loaders.metaqa import load_metaqa
    from seeder_dgl.api import Retriever

    def phrases(items):
        return {" ".join(re.findall(r"[a-z']+", p.lower())) for p in items}

    shared = (phrases(OPENINGS) | phrases(CLOSINGS)) & (phrases(perturb.OPENINGS) | phrases(perturb.CLOSINGS))
    if shared:
        raise SystemExit(f"the probe's chat shares {sorted(shared)} with the training mix's: choose other phrases")

    kg, qa = load_metaqa()
    rng = np.random.default_rng(0)
    rows = []  # (form, hops, written, typed, answers)
    for hops in (1, 2, 3):
        val = [q for q in qa.split(f"val_{hops}hop") if len(q.topic) == 1 and q.answers]
        order = rng.permutation(len(val))
        made = {"chat": 0, "surname": 0}
        for i in order:
            q = val[i]
            if made["chat"] < args.per_hop:
                rows.append(("chat", hops, q.text, chat(q.text, random.Random(f"chat:{q.id}")), set(q.answers)))
                made["chat"] += 1
            if made["surname"] < args.per_hop and (q.qtype or "").split("_to_")[0] in PEOPLE:
                typed = surname(q.text, kg.node_names[q.topic[0]])
                if typed is not None:
                    rows.append(("surname", hops, q.text, typed, set(q.answers)))
                    made["surname"] += 1
            if min(made.values()) >= args.per_hop:
                break

    retriever = Retriever("metaqa", method="seeder", checkpoint=args.checkpoint)
    hits = written_and_typed(retriever, rows, "typed", args.k)
    table = {}
    for kind in ("chat", "surname"):
        for hops in (1, 2, 3):
            if any(r[0] == kind and r[1] == hops for r in rows):
                table[f"{kind} {hops}-hop"] = hits(lambda r, f=kind, h=hops: r[0] == f and r[1] == h)
    k = f"hit@{args.k}"
    payload = {"machine": machine(), "k": args.k, "per_hop": args.per_hop, "checkpoint": args.checkpoint,
               "openings": OPENINGS, "closings": CLOSINGS, "table": table}  # no question text of the dataset
    md = ["# MetaQA validation questions typed in ways the training mix does not generate", "",
          f"Command: `python benchmarks/typed_metaqa.py --per-hop {args.per_hop}"
          + (f" --checkpoint {args.checkpoint}" if args.checkpoint else "") + "`, through "
          "`Retriever('metaqa', method='seeder').retrieve_many`. `chat`: an opening and/or closing none of "
          "`loaders.perturb`'s (" + ", ".join(f'"{p}"' for p in OPENINGS + CLOSINGS) + "); `surname`: an actor, "
          "director or writer named by the last word of their name alone.", "",
          f"| form | questions | written Hit@1 | typed Hit@1 | written Hit@{args.k} | typed Hit@{args.k} |",
          "|---|---:|---:|---:|---:|---:|"]
    for name, row in table.items():
        w, t = row["as written"], row["typed"]
        md.append(f"| {name} | {w['questions']} | {w['hit@1']:.3f} | {t['hit@1']:.3f} | {w[k]:.3f} | {t[k]:.3f} |")
    text = "\n".join(md)
    print(text)
    write_result(args.name, payload, text)


if __name__ == "__main__":
    main()
