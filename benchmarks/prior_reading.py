"""How well a relation prior reads each step of a question's relation path, before any policy trains.

    python benchmarks/prior_reading.py [--dataset mlpq] [--train 20000]

For validation questions with a marked topic, the relation paths from the topic that best explain
the answers give each hop's gold relations (``retrieval.relation_prior.path_relations``, as the
prior's fit labels them); the question with its topic masked is the template. Reports, per hop,
how often the prior's most likely relation is a gold one, for the package's two priors fitted on
the same training templates with the same loss, each with its default steps:

- ``template`` (``fit_relation_prior``): one ReLU layer on the template's sentence embedding, an
  output per hop and relation;
- ``tokens`` (``fit_token_prior``, what ``extract`` fits): the same layer, plus per hop an
  attention over the template's token embeddings (the encoder's contextual ones) whose pooled
  vector goes through a ReLU layer of its own, so that each hop can read the words that name its
  step ("the east of X's southern region": hop 1 'southern region', hop 2 'east'), with a learned
  bias on where a token stands relative to the masked topic; each relation's output weights partly
  read from its name's embedding. ``tokens, no topic positions`` is the same fit without that bias.

Writes benchmarks/results/prior-reading-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402


def labelled_templates(queries, graph, names_of, relations: int, hops: int, limit: int, seed: int = 0):
    """(templates, labels bool [Q, hops, R]) of up to ``limit`` questions (a seeded sample) whose topic
    reaches an answer within ``hops``."""
    from seeder_dgl.retrieval.linking import question_template
    from seeder_dgl.retrieval.relation_prior import path_relations

    order = np.random.default_rng(seed).permutation(len(queries))
    templates, labels = [], []
    for i in order:
        q = queries[i]
        if not q.topic or not q.answers:
            continue
        label = path_relations(graph, q.topic, q.answers, hops, relations)
        if label is None:
            continue
        templates.append(question_template(q.text, [names_of[t] for t in q.topic]))
        labels.append(label)
        if len(templates) >= limit:
            break
    return templates, np.stack(labels)


def hop_accuracy(scores: np.ndarray, labels: np.ndarray) -> list[float]:
    """Per hop: the share of questions with a gold relation at that hop whose top-scored relation is one."""
    out = []
    for h in range(labels.shape[1]):
        has = labels[:, h].any(1)
        top = scores[has, h].argmax(1)
        out.append(round(float(labels[has, h][np.arange(int(has.sum())), top].mean()), 3) if has.any() else None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mlpq")
    parser.add_argument("--train", type=int, default=20000,
                        help="training templates (a seeded sample; extract's prior reads up to 20,000)")
    parser.add_argument("--val", type=int, default=4000, help="validation templates at most")
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--skip-template", action="store_true",
                        help="leave out the sentence-embedding prior (its fit takes minutes on MLPQ)")
    args = parser.parse_args()

    from seeder_dgl.datasets import DatasetContext, get_spec
    from seeder_dgl.embeddings import dataset_encoder
    from seeder_dgl.graphstore.connection import open_driver
    from seeder_dgl.graphstore.export import export_graph
    from seeder_dgl.graphstore.live import LiveGraph
    from seeder_dgl.retrieval.memory import GraphArrays
    from seeder_dgl.retrieval.relation_prior import fit_relation_prior, fit_token_prior, topic_positions

    qa = get_spec(args.dataset).load_questions(None, None)
    with open_driver() as driver:
        live = LiveGraph(driver, args.dataset)
        export = export_graph(driver, args.dataset, DatasetContext.open(args.dataset, None).export_dir, progress=False)
        keep = np.asarray(export.rel) >= 0
        graph = GraphArrays.from_arrays(export.num_nodes, export.src[keep], export.dst[keep], export.rel[keep])
        topics = sorted({t for split in ("train", "val") for q in qa.split(split) for t in q.topic})
        names_of = dict(zip(topics, live.describe(topics)[1]))
        relations = list(live.info.relation_types)
        encoder = dataset_encoder(live.info.model)
    start = time.perf_counter()
    train_t, train_y = labelled_templates(qa.split("train"), graph, names_of, len(relations), args.hops, args.train)
    val_t, val_y = labelled_templates(qa.split("val"), graph, names_of, len(relations), args.hops, args.val)
    train_s, train_k, train_spans = encoder.encode_query_tokens(train_t)
    positions = [topic_positions(t, s, len(k)) for t, k, s in zip(train_t, train_k, train_spans)]
    rows = {}
    # 'new': no training template has the same words (a rewording, or a new combination of steps)
    known = {" ".join(re.findall(r"\w+", t)) for t in train_t}
    new = np.asarray([" ".join(re.findall(r"\w+", t)) not in known for t in val_t])

    def read(prior, name, t0):
        scores = np.stack([prior.scores(f) for f in prior.features(val_t)])
        seconds = time.perf_counter() - t0
        rows[name] = (hop_accuracy(scores, val_y), seconds)
        rows[f"{name}, new wordings ({int(new.sum())})"] = (hop_accuracy(scores[new], val_y[new]), None)

    if not args.skip_template:
        t0 = time.perf_counter()
        read(fit_relation_prior(train_s, train_y, relations, input="template").bind(encoder.encode_queries),
             "template", t0)
    t0 = time.perf_counter()
    read(fit_token_prior(train_s, train_k, train_y, relations,
                         relation_emb=np.asarray(export.relation_emb)).bind_encoder(encoder),
         "tokens, no topic positions", t0)
    t0 = time.perf_counter()
    read(fit_token_prior(train_s, train_k, train_y, relations, positions=positions,
                         relation_emb=np.asarray(export.relation_emb)).bind_encoder(encoder), "tokens (extract's)", t0)
    payload = {"machine": machine(), "dataset": args.dataset, "train_templates": len(train_t),
               "val_templates": len(val_t), "relations": len(relations),
               "questions_per_hop": [int(val_y[:, h].any(1).sum()) for h in range(val_y.shape[1])],
               "new_wordings": int(new.sum()),
               "rows": {k: {"hop_accuracy": v[0], "fit_seconds": round(v[1], 1) if v[1] is not None else None}
                        for k, v in rows.items()},
               "seconds": round(time.perf_counter() - start, 1)}
    md = "\n".join([
        f"# How well the relation prior reads each hop ({args.dataset})", "",
        f"Command: `python benchmarks/prior_reading.py --dataset {args.dataset} --train {args.train}"
        f"{' --skip-template' if args.skip_template else ''}`. "
        f"{len(train_t)} training and {len(val_t)} validation templates (topic masked), "
        f"{len(relations)} relations; validation questions with a gold relation at hop 1/2/3: "
        f"{' / '.join(map(str, payload['questions_per_hop']))}. A hop's accuracy: the share of those questions "
        "whose most likely relation at that hop is on a gold path. fit s: fitting and reading the validation "
        "templates.", "",
        "| prior | " + " | ".join(f"hop {h + 1}" for h in range(val_y.shape[1])) + " | fit s |",
        "|---|" + "---:|" * (val_y.shape[1] + 1),
        *[f"| {name} | " + " | ".join(f"{a:.3f}" if a is not None else "-" for a in acc)
          + (f" | {sec:.0f} |" if sec is not None else " | |") for name, (acc, sec) in rows.items()],
        "", "New wordings: validation templates whose words no training template has (a rewording, or a "
        "new combination of steps).",
    ])
    print(md)
    write_result(f"prior-reading-{args.dataset}", payload, md)


if __name__ == "__main__":
    main()
