"""Is a graph's Hit@1-to-Hit@5 gap variance between trained policies, or an error they share?

Ranks a dataset's cached validation subgraphs (``extract``'s, as training validates on them) with
several trained checkpoints, then fuses their rankings by reciprocal rank fusion (each node scores
Σ 1 / (c + rank) over the checkpoints that ranked it). If the policies' misses were independent
(seeds, options), the fused ranking would put more answers first than any one of them; if they miss
the same questions, fusion gains nothing and the gap lies in what every reader of the question knows.
The last row bounds it: the questions on which at least one checkpoint ranks an answer first (its
Hit@5 column is the best single checkpoint's).

    python benchmarks/fused_checkpoints.py mlpq runs/mlpq/a/best.pt runs/mlpq/b/best.pt [...]

Needs Neo4j for the dataset's node embeddings (the cached export) as ``train`` does. Writes
benchmarks/results/fused-checkpoints-<name>.{json,md}.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402

FUSION_CONSTANTS = (1, 5, 60)
"""c of reciprocal rank fusion: 60 is the usual choice for search engines' long lists, 1 and 5 weigh
the first places more, as a Hit@1 asks."""


def fuse(rankings: list[list[int]], c: float) -> list[int]:
    """One question's rankings (node ids, best first) fused: by Σ 1 / (c + rank), rank from 0; ties
    keep the order in which nodes were first met (the first checkpoint's first)."""
    score: dict[int, float] = {}
    for ranked in rankings:
        for rank, node in enumerate(ranked):
            score[node] = score.get(node, 0.0) + 1.0 / (c + rank)
    return sorted(score, key=lambda node: -score[node])


def hit(rankings: list[list[int]], answers: list[set[int]], k: int) -> float:
    return float(np.mean([bool(a) and any(n in a for n in r[:k]) for r, a in zip(rankings, answers)]))


def rank_with(checkpoint: str, dataset: str, records, query_emb, features) -> list[list[int]]:
    import torch

    from seeder_dgl.inference import load_policy
    from seeder_dgl.model.ops import select_ops
    from seeder_dgl.training.ranking import rank_subgraphs

    loaded = load_policy(checkpoint, dataset=dataset)
    prep, cpu = loaded.preprocessing, torch.device("cpu")
    types = (prep.type_table(features.node_type, features.node_type_names)
             if prep.node_type_names is not None else None)
    rows = prep.node_rows(features.node_emb, records, node_types=types)
    ranked = rank_subgraphs(loaded.policy, prep, records, rows, prep.features(np.asarray(query_emb, np.float32)), cpu,
                            select_ops(cpu, loaded.cfg.ops), loaded.cfg.rollout_mode)
    return [ids for ids, _ in ranked]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--name", default=None, help="result file name suffix [default: the dataset]")
    args = parser.parse_args(argv)
    from seeder_dgl.datasets import resolve_profile
    from seeder_dgl.subgraph.cache import load_split
    from seeder_dgl.training.command import DatasetContext, load_features

    ds = DatasetContext.open(args.dataset, resolve_profile(args.dataset, None))
    records, query_emb = load_split(ds.subgraph_dir("val"))
    features = load_features(args.dataset, ds.cache, uses_prior=ds.retrieval.relation_prior)
    answers = [set(r.node_ids[r.labels].tolist()) for r in records]
    each = {c: rank_with(c, args.dataset, records, query_emb, features) for c in args.checkpoints}
    rows = [dict(rankings=c, hit1=hit(r, answers, 1), hit5=hit(r, answers, 5)) for c, r in each.items()]
    for c in FUSION_CONSTANTS:
        fused = [fuse(list(per_question), c) for per_question in zip(*each.values())]
        rows.append(dict(rankings=f"fused, c = {c}", hit1=hit(fused, answers, 1), hit5=hit(fused, answers, 5)))
    firsts = [any(r and r[0] in a for r in per_question) for per_question, a in zip(zip(*each.values()), answers)]
    rows.append(dict(rankings="any checkpoint's first (a bound, not a ranking)", hit1=float(np.mean(firsts)),
                     hit5=max(r["hit5"] for r in rows)))
    lines = ["| rankings | Hit@1 | Hit@5 | gap |", "|---|---:|---:|---:|"]
    lines += [f"| {r['rankings']} | {r['hit1']:.4f} | {r['hit5']:.4f} | {r['hit5'] - r['hit1']:.4f} |" for r in rows]
    name = args.name or args.dataset
    result = {"machine": machine(), "dataset": args.dataset, "questions": len(records), "rows": rows}
    write_result(f"fused-checkpoints-{name}", result,
                 "\n".join([f"# {args.dataset}: validation rankings of {len(each)} checkpoints and their fusion", "",
                            f"Command: `python benchmarks/fused_checkpoints.py {args.dataset} "
                            f"{' '.join(args.checkpoints)}`; {len(records):,} cached validation subgraphs, answers "
                            "as the subgraphs hold them (training's validation).", ""] + lines))
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
