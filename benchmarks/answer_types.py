"""The answer-type product's share of SeedER's ranking: one trained retriever with and without it.

The relation prior's answer-type head (``RelationPrior.answer_types``) changes neither K-hop nor the
policy: ``training.ranking.with_answer_types`` multiplies it into the policy's scores. This asks
the same MetaQA validation questions twice through the Python API (``Retriever.retrieve_many``),
once as the package ranks them and once with that product left out (the policy's own ranking), so
the two columns differ in nothing else. The questions: 1- and 2-hop validation questions as
written, in lower case and reworded with ``reworded_metaqa.py``'s phrasings (none of them a
training wording), and 3-hop ones as written and in lower case. A measurement, not a tuning set.

    python benchmarks/answer_types.py [--per-hop 500]

Needs ``ingest``, ``extract`` and ``train metaqa`` (a prior fitted with its head: ``extract
--refit-prior`` after an older fit). Writes benchmarks/results/answer-types-metaqa.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402
from benchmarks.reworded_metaqa import reworded_rows  # noqa: E402

FORMS = ("written", "lower", "reworded")


def questions(qa, kg, per_hop: int) -> list[tuple[str, str, set]]:
    """(row, question, answer ids): ``reworded_rows``' 1- and 2-hop questions as written, in lower
    case and reworded, then ``per_hop`` 3-hop ones (as written and in lower case) drawn after them."""
    rng = np.random.default_rng(0)
    rows = []
    for hops, _, written, other, answers in reworded_rows(kg, qa, per_hop, rng):
        rows += [(f"{hops}-hop {form}", text, answers) for form, text in zip(FORMS, (written, written.lower(), other))]
    val = [q for q in qa.split("val_3hop") if len(q.topic) == 1 and q.answers]
    for i in rng.permutation(len(val))[:per_hop]:
        rows += [("3-hop written", val[i].text, set(val[i].answers)),
                 ("3-hop lower", val[i].text.lower(), set(val[i].answers))]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-hop", type=int, default=500, help="validation questions per hop count (seeded sample)")
    parser.add_argument("--checkpoint", default=None, help="a policy checkpoint [default: the dataset's trained one]")
    args = parser.parse_args()

    import seeder_dgl.training.ranking as ranking
    from loaders.metaqa import load_metaqa
    from seeder_dgl.api import Retriever

    kg, qa = load_metaqa()
    rows = questions(qa, kg, args.per_hop)
    retriever = Retriever("metaqa", method="seeder", checkpoint=args.checkpoint)
    product = ranking.with_answer_types
    table: dict[str, dict] = {}
    try:
        for way, rank in (("policy alone", lambda prep, record, feature_rows, ids, scores: (ids, scores)),
                          ("with answer types", product)):
            ranking.with_answer_types = rank
            found = retriever.retrieve_many([r[1] for r in rows], k=5)
            for (row, _, answers), got in zip(rows, found):
                ids = [n.id for n in got.nodes]
                cell = table.setdefault(row, {}).setdefault(way, [0, 0, 0])
                cell[0] += bool(ids) and ids[0] in answers
                cell[1] += any(i in answers for i in ids[:5])
                cell[2] += 1
    finally:
        ranking.with_answer_types = product
    result = {row: {way: {"hit@1": h1 / n, "hit@5": h5 / n, "questions": n} for way, (h1, h5, n) in ways.items()}
              for row, ways in table.items()}
    md = ["# The answer-type product's share of the ranking (MetaQA validation)", "",
          f"Command: `python benchmarks/answer_types.py --per-hop {args.per_hop}"
          + (f" --checkpoint {args.checkpoint}" if args.checkpoint else "") + "`. The same trained retriever "
          "through `Retriever('metaqa').retrieve_many`, with the policy's own ranking and with the relation prior's "
          "answer-type probabilities multiplied in (`training.ranking.with_answer_types`).", "",
          "| questions | n | policy alone Hit@1 | with answer types Hit@1 | policy alone Hit@5 | with answer types Hit@5 |",
          "|---|---:|---:|---:|---:|---:|"]
    for row in sorted(result):
        a, b = result[row]["policy alone"], result[row]["with answer types"]
        md.append(f"| {row} | {a['questions']} | {a['hit@1']:.3f} | {b['hit@1']:.3f} | {a['hit@5']:.3f} | {b['hit@5']:.3f} |")
    text = "\n".join(md)
    print(text)
    write_result("answer-types-metaqa", {"machine": machine(), "per_hop": args.per_hop, "checkpoint": args.checkpoint,
                                         "table": result}, text)


if __name__ == "__main__":
    main()
