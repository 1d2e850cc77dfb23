"""Policy variants side by side on the validation split: metrics per hop count and the funnel.

    python benchmarks/policy_variants.py --variants base,types [--train 8000 --epochs 2 --val 1500]
    python benchmarks/policy_variants.py --report          # merge every saved variant into one table

Each variant is the dataset's default training config with some fields overridden (``VARIANTS``),
trained on the same fixed sample of training subgraphs (seed 0) of a retrieval profile and scored
on the same fixed sample of validation subgraphs: Hit@1 / Hit@5 / MRR / R@20 per hop count and
the funnel of ``seeder_dgl.evaluation.diagnose`` (where answers are lost). Variants can run in
separate processes (one per core); each writes ``benchmarks/results/policy-variants/<name>.json``
and ``--report`` merges them into ``policy-variants-<dataset>.{json,md}``. Model selection and
every choice made from this table use the validation split only.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seeder_dgl.threads import configure_threads  # noqa: E402

configure_threads()

import numpy as np  # noqa: E402

from benchmarks.common import machine, write_result  # noqa: E402
from seeder_dgl.reporting import RESULTS  # noqa: E402

# name -> TrainConfig overrides on top of the dataset/profile defaults. Every variant starts from
# BASE, the paper's model and loss (docs/method.md), so rows compare with each other whatever the
# profile's current defaults are.
BASE = {"node_types": False, "query_relations": False, "query_injection": "concat", "rank_loss": "bpr",
        "lr": 1e-3, "ops": "auto", "frontier_caps": (20, 30, 50)}
CHANGES: dict[str, dict] = {
    "base": {},
    "types": {"node_types": True},
    "qrel": {"query_relations": True},
    "product": {"query_injection": "product"},
    "all": {"node_types": True, "query_relations": True, "query_injection": "product"},
    "listwise": {"rank_loss": "listwise"},
    "lr3": {"lr": 3e-3},
    "caps": {"frontier_caps": (40, 80, 120)},
    "combined": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3},
    "combined_w32": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                     "hidden_dim": 32},
    "combined_caps": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                      "frontier_caps": (40, 80, 120)},
    "combined_steps": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                       "expansion_sizes": (9, 10, 10)},
    "combined_caps_steps": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                            "frontier_caps": (40, 80, 120), "expansion_sizes": (9, 10, 10)},
    "combined_caps_path": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                           "frontier_caps": (40, 80, 120), "path_reward": 0.5},
    "combined_caps_path1": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                            "frontier_caps": (40, 80, 120), "path_reward": 1.0},
    "combined_caps_4steps": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                             "frontier_caps": (40, 80, 120, 120), "expansion_sizes": (6, 6, 6, 6)},
    "combined_caps_lookahead": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                                "frontier_caps": (40, 80, 120), "lookahead": True},
    "lookahead_wide": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                       "frontier_caps": (80, 160, 240), "lookahead": True},
    "lookahead_nocap": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                        "frontier_caps": (600, 600, 600), "lookahead": True},
    # Rows named prior_* run on subgraphs extracted with the learned relation prior (the deep
    # profile since 2026-11-24); their "subgraphs" field records the extraction settings.
    "prior_caps_lookahead": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                             "frontier_caps": (40, 80, 120), "lookahead": True},
    "prior_wide": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                   "frontier_caps": (80, 160, 240), "lookahead": True},
    "prior_path": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                   "frontier_caps": (40, 80, 120), "lookahead": True, "path_prior": True},
    # Rows named template_* run on subgraphs grown with the relation prior on question templates
    # (the linked entity's name masked; the deep profile's prior since 2026-11-24, later that day).
    "template_path": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                      "frontier_caps": (40, 80, 120), "lookahead": True, "path_prior": True},
    "template_path_end": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                          "frontier_caps": (40, 80, 120), "lookahead": True, "path_prior": True, "path_end": True},
    "template_w32": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                     "frontier_caps": (40, 80, 120), "lookahead": True, "path_prior": True, "hidden_dim": 32},
    "template_m4": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                    "frontier_caps": (40, 80, 120), "lookahead": True, "path_prior": True, "num_trajectories": 4},
    # Cheaper models for training throughput (issue: 300 training questions/s on two cores): two
    # layers instead of three, smaller frontier caps after the first step, batches of 32.
    "template_l2": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                    "frontier_caps": (40, 80, 120), "lookahead": True, "path_prior": True, "num_trajectories": 4,
                    "num_layers": 2},
    "template_caps60": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                        "frontier_caps": (40, 60, 60), "lookahead": True, "path_prior": True,
                        "num_trajectories": 4},
    "template_fast": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                      "frontier_caps": (40, 60, 60), "lookahead": True, "path_prior": True, "num_trajectories": 4,
                      "num_layers": 2, "batch_size": 32},
    "lookahead_picks": {"node_types": True, "query_relations": True, "rank_loss": "listwise", "lr": 3e-3,
                        "frontier_caps": (40, 80, 120), "expansion_sizes": (9, 10, 10), "lookahead": True},
}
VARIANTS: dict[str, dict] = {name: {**BASE, **change} for name, change in CHANGES.items()}
METRICS = ("hit@1", "hit@5", "mrr", "recall@20", "hit@any")
FOLDER = RESULTS / "policy-variants"


def load_data(dataset: str, profile: str, train_n: int, val_n: int):
    from seeder_dgl.datasets import get_spec, subgraph_dir
    from seeder_dgl.subgraph.cache import load_split
    from seeder_dgl.training.command import load_features

    train_r, train_q = load_split(subgraph_dir(dataset, profile, "train"))
    val_r, val_q = load_split(subgraph_dir(dataset, profile, "val"))
    rng = np.random.default_rng(0)
    t = np.sort(rng.choice(len(train_r), size=min(train_n, len(train_r)), replace=False))
    v = np.sort(np.random.default_rng(1).choice(len(val_r), size=min(val_n, len(val_r)), replace=False))
    spec = get_spec(dataset)
    questions = dict(spec.load_questions(None, None).queries) if spec.load_questions else {}
    return ([train_r[i] for i in t], train_q[t], [val_r[i] for i in v], val_q[v], load_features(dataset),
            questions)


def run_variant(name: str, args) -> dict:
    from seeder_dgl.datasets import subgraph_dir
    from seeder_dgl.evaluation.diagnose import diagnose
    from seeder_dgl.inference import load_policy
    from seeder_dgl.training.command import build_config
    from seeder_dgl.training.trainer import evaluate_rankings, train

    train_r, train_q, val_r, val_q, feats, questions = load_data(args.dataset, args.profile, args.train, args.val)
    overrides = dict(VARIANTS[name])
    overrides.setdefault("warmup_epochs", min(1, args.epochs - 1))
    cfg = build_config(args.dataset, epochs=args.epochs, device="cpu", overrides=overrides, profile=args.profile)
    out_dir = Path(args.runs) / name
    start = time.perf_counter()
    result = train(cfg, train_r, train_q, val_r, val_q, feats.node_emb, len(feats.relation_types), out_dir,
                   progress=False, relation_types=feats.relation_types, relation_emb=feats.relation_emb,
                   node_types=feats.node_type, node_type_names=feats.node_type_names,
                   dataset_meta={"name": args.dataset})
    seconds = time.perf_counter() - start
    loaded = load_policy(result.best_path)
    table = (loaded.preprocessing.type_table(feats.node_type, feats.node_type_names)
             if loaded.preprocessing.node_type_names is not None else None)
    ranked = loaded.rank(val_r, feats.node_emb, val_q, k=1000, node_types=table)
    funnel = diagnose(loaded, val_r, feats.node_emb, val_q, node_types=table)
    hops = [getattr(questions.get(int(r.query_id)), "hops", None) for r in val_r]
    funnel.group("hops", hops)
    by_hop = {}
    for h in sorted({x for x in hops if x is not None}):
        idx = [i for i, x in enumerate(hops) if x == h]
        m = evaluate_rankings([[i for i, _ in ranked[j]] for j in idx], [val_r[j] for j in idx])
        by_hop[str(h)] = {k: m[k] for k in METRICS}
    overall = evaluate_rankings([[i for i, _ in r] for r in ranked], val_r)
    manifest = json.loads((subgraph_dir(args.dataset, args.profile, "train") / "manifest.json").read_text())
    return {"name": name, "overrides": CHANGES[name], "subgraphs": manifest.get("settings"),
            "train_questions": len(train_r), "val_questions": len(val_r),
            "epochs": args.epochs, "profile": args.profile, "best_epoch": result.best_epoch,
            "parameters": result.num_parameters, "train_seconds": round(seconds, 1),
            "queries_per_s": float(np.mean([h["queries_per_s"] for h in result.history])),
            "overall": {k: overall[k] for k in METRICS}, "by_hop": by_hop, "funnel": funnel.to_dict(),
            "history": [{"epoch": h["epoch"], "reward": h["reward"], **{k: h["val"][k] for k in METRICS}}
                        for h in result.history]}


def report(dataset: str) -> None:
    rows = [json.loads(p.read_text()) for p in sorted(FOLDER.glob("*.json"))]
    rows = [r for r in rows if r.get("dataset", dataset) == dataset]
    if not rows:
        raise SystemExit(f"no variant results in {FOLDER}")
    hops = sorted({h for r in rows for h in r["by_hop"]})
    lines = [f"# Policy variants on {dataset} (validation sample)", "",
             "Same training and validation samples for every row. Each variant changes the paper's model and "
             "loss (BPR, lr 1e-3, no node types, relations not conditioned on the query) as listed below. "
             "With ~500 questions per hop count, differences under ~0.03 are within noise. "
             "'prior': the subgraphs were grown with the learned relation prior (seeder_dgl/retrieval/"
             "relation_prior.py). q/s depends on how many runs shared the 2-core machine: compare it only "
             "between rows run side by side.", "",
             "| variant | subgraphs | params | q/s | " + " | ".join(f"H@1 {h}h | H@5 {h}h | picked {h}h" for h in hops)
             + " | H@1 all | R@20 all |",
             "|---|---|---:|---:|" + "---:|---:|---:|" * len(hops) + "---:|---:|"]
    for r in sorted(rows, key=lambda r: r["name"]):
        cells = []
        for h in hops:
            m = r["by_hop"].get(h, {})
            f = r["funnel"]["groups"].get("hops", {}).get(h, {})
            cells += [f"{m.get('hit@1', 0):.3f}", f"{m.get('hit@5', 0):.3f}", f"{f.get('picked', 0):.3f}"]
        grown = "prior" if (r.get("subgraphs") or {}).get("relation_prior") else "sim(q, r)"
        if r["name"].startswith("template_"):
            grown = "template prior"
        lines.append(f"| {r['name']} | {grown} | {r['parameters']:,} | {r['queries_per_s']:.0f} | " + " | ".join(cells)
                     + f" | {r['overall']['hit@1']:.3f} | {r['overall']['recall@20']:.3f} |")
    lines += ["", "Settings: " + "; ".join(f"{r['name']} = {r['overrides'] or 'defaults'} "
                                          f"({r['train_questions']} train q, {r['epochs']} epochs, "
                                          f"{r['val_questions']} val q, profile {r['profile']})" for r in rows), ""]
    write_result(f"policy-variants-{dataset}", {"dataset": dataset, "machine": machine(), "variants": rows},
                 "\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--profile", default="deep")
    parser.add_argument("--variants", default="base", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--train", type=int, default=8000, help="training questions (fixed sample)")
    parser.add_argument("--val", type=int, default=1500, help="validation questions (fixed sample)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--runs", default="runs/variants", help="where the variants' checkpoints go")
    parser.add_argument("--report", action="store_true", help="merge the saved variants into one table")
    args = parser.parse_args()
    if args.report:
        report(args.dataset)
        return
    FOLDER.mkdir(parents=True, exist_ok=True)
    for name in args.variants.split(","):
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}: choose from {', '.join(VARIANTS)}")
        row = {"dataset": args.dataset, **run_variant(name, args)}
        (FOLDER / f"{name}.json").write_text(json.dumps(row, indent=1))
        print(json.dumps({k: row[k] for k in ("name", "overall", "by_hop", "train_seconds")}, indent=1), flush=True)


if __name__ == "__main__":
    main()
