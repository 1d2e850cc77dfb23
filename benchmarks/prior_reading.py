"""How well a relation prior reads each step of a question's relation path, before any policy trains.

    python benchmarks/prior_reading.py [--dataset mlpq] [--train 5000] [--steps 400]

For validation questions with a marked topic, the relation paths from the topic that best explain
the answers give each hop's gold relations (``retrieval.relation_prior.path_relations``, as the
prior's fit labels them); the question with its topic masked is the template. Reports, per hop,
how often the prior's most likely relation is a gold one, for two priors fitted on the same
training templates with the same loss and steps:

- ``sentence`` — the package's prior (``fit_relation_prior``: one ReLU layer on the template's
  sentence embedding, an output per hop and relation);
- ``token attention`` — an experiment, not in the package: the same layer, plus per hop an
  attention over the template's token embeddings (the encoder's contextual ones) whose pooled
  vector goes through a ReLU layer of its own, so that each hop can read the words that name its
  step ("the east of X's southern region": hop 1 'southern region', hop 2 'east').

Writes benchmarks/results/prior-reading-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
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


def token_embeddings(model, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    vectors = model.encode(texts, batch_size=128, output_value="token_embeddings")
    width = max(v.shape[0] for v in vectors)
    x = np.zeros((len(texts), width, vectors[0].shape[1]), np.float32)
    mask = np.zeros((len(texts), width), bool)
    for i, v in enumerate(vectors):
        x[i, :len(v)] = np.asarray(v.cpu() if hasattr(v, "cpu") else v)
        mask[i, :len(v)] = True
    return x, mask


def fit_token_attention(sent, tokens, mask, labels, hidden: int = 64, weight_decay: float = 2.7e-4,
                        steps: int = 400, lr: float = 0.01, seed: int = 0):
    """Full-batch Adam on the prior's summed binary cross-entropy; returns a scorer of
    (sentence embeddings, tokens, mask) -> probabilities [Q, hops, R]."""
    import torch

    torch.manual_seed(seed)
    q, hops, relations = labels.shape
    d = sent.shape[1]
    s, x, m = torch.tensor(sent), torch.tensor(tokens), torch.tensor(mask)
    y = torch.tensor(labels.reshape(q, -1), dtype=torch.float32)
    hidden_weight = (torch.randn(d, hidden) / d ** 0.5).requires_grad_()
    hidden_bias = torch.zeros(hidden, requires_grad=True)
    query = torch.zeros(hops, d, requires_grad=True)  # per-hop attention over tokens, uniform at first
    pooled_weight = (torch.randn(hops, d, hidden) / d ** 0.5).requires_grad_()
    out_weight = torch.zeros(hops, 2 * hidden, relations, requires_grad=True)
    rate = y.mean(0).clamp(1e-4, 1 - 1e-4)
    out_bias = torch.log(rate / (1 - rate)).reshape(hops, relations).clone().requires_grad_()

    def logits(s, x, m):
        sentence = torch.relu(s @ hidden_weight + hidden_bias).unsqueeze(1).expand(-1, hops, -1)
        attention = torch.einsum("qtd,hd->qht", x, query).masked_fill(~m.unsqueeze(1), -1e9).softmax(-1)
        pooled = torch.relu(torch.einsum("qhd,hdk->qhk", torch.einsum("qht,qtd->qhd", attention, x), pooled_weight))
        return torch.einsum("qhk,hkr->qhr", torch.cat([sentence, pooled], -1), out_weight) + out_bias

    opt = torch.optim.Adam([hidden_weight, hidden_bias, query, pooled_weight, out_weight, out_bias], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits(s, x, m).reshape(q, -1), y,
                                                                    reduction="sum") / q
        loss = loss + weight_decay * (hidden_weight.pow(2).sum() + pooled_weight.pow(2).sum() + out_weight.pow(2).sum())
        loss.backward()
        opt.step()

    def score(s2, x2, m2):
        with torch.no_grad():
            return torch.sigmoid(logits(torch.tensor(s2), torch.tensor(x2), torch.tensor(m2))).numpy()
    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mlpq")
    parser.add_argument("--train", type=int, default=5000, help="training templates (a seeded sample)")
    parser.add_argument("--val", type=int, default=4000, help="validation templates at most")
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()

    from seeder_dgl.datasets import DatasetContext, get_spec
    from seeder_dgl.embeddings import dataset_encoder
    from seeder_dgl.graphstore.connection import open_driver
    from seeder_dgl.graphstore.export import export_graph
    from seeder_dgl.graphstore.live import LiveGraph
    from seeder_dgl.retrieval.memory import GraphArrays
    from seeder_dgl.retrieval.relation_prior import fit_relation_prior

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
    train_s, val_s = encoder.encode(train_t, show_progress=False), encoder.encode(val_t, show_progress=False)
    rows = {}
    t0 = time.perf_counter()
    prior = fit_relation_prior(train_s, train_y, relations, input="template", steps=args.steps)
    rows["sentence (the package's prior)"] = (hop_accuracy(np.stack([prior.scores(e) for e in val_s]), val_y),
                                              time.perf_counter() - t0)
    t0 = time.perf_counter()
    train_x, train_m = token_embeddings(encoder.model, train_t)
    val_x, val_m = token_embeddings(encoder.model, val_t)
    score = fit_token_attention(train_s, train_x, train_m, train_y, steps=args.steps)
    rows["token attention (experiment)"] = (hop_accuracy(score(val_s, val_x, val_m), val_y), time.perf_counter() - t0)
    payload = {"machine": machine(), "dataset": args.dataset, "train_templates": len(train_t),
               "val_templates": len(val_t), "relations": len(relations), "steps": args.steps,
               "questions_per_hop": [int(val_y[:, h].any(1).sum()) for h in range(val_y.shape[1])],
               "rows": {k: {"hop_accuracy": v[0], "fit_seconds": round(v[1], 1)} for k, v in rows.items()},
               "seconds": round(time.perf_counter() - start, 1)}
    md = "\n".join([
        f"# How well the relation prior reads each hop ({args.dataset})", "",
        f"Command: `python benchmarks/prior_reading.py --dataset {args.dataset} --train {args.train} --steps "
        f"{args.steps}`. {len(train_t)} training and {len(val_t)} validation templates (topic masked), "
        f"{len(relations)} relations; validation questions with a gold relation at hop 1/2/3: "
        f"{' / '.join(map(str, payload['questions_per_hop']))}. A hop's accuracy: the share of those questions "
        "whose most likely relation at that hop is on a gold path.", "",
        "| prior | " + " | ".join(f"hop {h + 1}" for h in range(val_y.shape[1])) + " | fit s |",
        "|---|" + "---:|" * (val_y.shape[1] + 1),
        *[f"| {name} | " + " | ".join(f"{a:.3f}" if a is not None else "-" for a in acc) + f" | {sec:.0f} |"
          for name, (acc, sec) in rows.items()],
    ])
    print(md)
    write_result(f"prior-reading-{args.dataset}", payload, md)


if __name__ == "__main__":
    main()
