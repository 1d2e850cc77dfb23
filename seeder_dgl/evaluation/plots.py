"""The paper's expansion figure: naive k-hop growth and dense vs K-hop-with-filtering over budgets.

* ``khop_growth``: per query, the number of nodes within h hops (h = 1..3, both edge
  directions, seeds included) of the top-k0 dense seeds; mean, median and max over queries.
* ``budget_sweep``: Hit@any, Recall@any and MRR of dense top-B and of K-hop-with-filtering with
  total budget B (k0 seeds + per-hop budgets scaled from the dataset's, see ``scale_budgets``),
  both ranked by their own scores, for each B.

``save_figures`` writes ``khop_growth.png``, ``budget_sweep.png``, ``expansion.png`` (the two
side by side, like the paper) and ``sweep.json`` with the numbers. Matplotlib runs headless (Agg).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
from rich.progress import Progress

from loaders.kg import Query, atomic_write
from seeder_dgl.metrics import batch_metrics
from seeder_dgl.retrieval.memory import GraphArrays, dense_topk, khop_select, rank_desc

SWEEP_BUDGETS = (10, 20, 50, 100, 150, 200, 300, 500)
SWEEP_METRICS = ("hit@any", "recall@any", "mrr")


def scale_budgets(default: Sequence[int], seeds: int, total: int) -> tuple[int, ...]:
    """Per-hop budgets summing to ``total - seeds``, in the proportions of ``default``.

    Largest-remainder rounding; a zero budget would stop the expansion, so from the first zero on the
    hops are dropped and their nodes go to the last hop kept (or to hop 1).
    ``total <= seeds`` gives no hops (the seeds alone, cut to ``total`` by the ranking).
    """
    rest = int(total) - int(seeds)
    default = [max(int(b), 0) for b in default]
    if rest <= 0 or not default or sum(default) == 0:
        return ()
    share = np.asarray(default, dtype=np.float64) * rest / sum(default)
    out = np.floor(share).astype(np.int64)
    for i in np.argsort(-(share - out), kind="stable")[: rest - int(out.sum())]:
        out[i] += 1
    budgets = list(out)
    if 0 in budgets:
        cut = budgets.index(0)
        lost = sum(budgets[cut:])
        budgets = budgets[:cut] or [0]
        budgets[-1] += lost
    return tuple(int(b) for b in budgets)


def khop_growth(graph: GraphArrays, node_emb: np.ndarray, query_emb: np.ndarray, seeds: int = 3,
                hops: int = 3) -> dict:
    """Size of the naive h-hop neighbourhood of the top-``seeds`` dense nodes, per query and hop."""
    sizes = np.zeros((len(query_emb), hops), dtype=np.int64)
    seen = np.zeros(graph.num_nodes, dtype=bool)
    for qi, q in enumerate(query_emb):
        start, _ = dense_topk(node_emb, q, seeds)
        seen[:] = False
        seen[start] = True
        frontier, total = start, int(start.shape[0])
        for h in range(hops):
            if frontier.size:
                _, nbr, _ = graph.gather(frontier)
                nbr = nbr[~seen[nbr]]
                if nbr.size:
                    seen[nbr] = True
                    frontier = np.unique(nbr)
                    total += int(frontier.shape[0])
                else:
                    frontier = nbr
            sizes[qi, h] = total
    has = sizes.shape[0] > 0
    return {
        "seeds": int(seeds), "hops": list(range(1, hops + 1)), "num_queries": int(sizes.shape[0]),
        "num_nodes": int(graph.num_nodes),
        "mean": [float(sizes[:, h].mean()) if has else 0.0 for h in range(hops)],
        "median": [float(np.median(sizes[:, h])) if has else 0.0 for h in range(hops)],
        "max": [int(sizes[:, h].max()) if has else 0 for h in range(hops)],
    }


def budget_sweep(graph: GraphArrays, node_emb: np.ndarray, rel_emb: np.ndarray, queries: Sequence[Query],
                 query_emb: np.ndarray, *, seeds: int, budgets: Sequence[int],
                 sweep: Sequence[int] = SWEEP_BUDGETS, progress: bool = False) -> dict:
    """Dense top-B vs K-hop-with-filtering at budget B, for each B in ``sweep`` (see the module doc)."""
    sweep = sorted(set(int(b) for b in sweep if int(b) > 0))
    answers = [q.answers for q in queries]
    scaled = {b: scale_budgets(budgets, seeds, b) for b in sweep}
    out = {"budgets": sweep, "seeds": int(seeds), "default_budgets": [int(b) for b in budgets],
           "khop_budgets": {str(b): list(scaled[b]) for b in sweep}, "num_queries": len(queries),
           "dense": {m: [] for m in (*SWEEP_METRICS, "size")}, "khop": {m: [] for m in (*SWEEP_METRICS, "size")}}
    if not sweep:
        return out
    top = max(sweep)
    dense_ranked = [dense_topk(node_emb, q, top)[0] for q in query_emb]
    seeded = [dense_topk(node_emb, q, seeds) for q in query_emb]
    with Progress(disable=not progress, transient=True) as bars:
        task = bars.add_task("budget sweep", total=len(sweep))
        for b in sweep:
            khop_ranked = []
            for q, (seed_ids, sims) in zip(query_emb, seeded):
                # KHopRetriever's ranking: seeds by similarity, the rest by K-hop score, one list.
                sel = khop_select(graph, node_emb, rel_emb, q, seed_ids, scaled[b], seed_scores=sims)
                khop_ranked.append(sel.node_ids[rank_desc(sel.score, sel.node_ids, b)])
            for name, ranked in (("dense", [r[:b] for r in dense_ranked]), ("khop", khop_ranked)):
                m = batch_metrics(ranked, answers)
                for metric in (*SWEEP_METRICS, "size"):
                    out[name][metric].append(float(m[metric].mean()) if len(queries) else 0.0)
            bars.advance(task)
    return out


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


_LABELS = {"dense": "Dense (cosine)", "khop": "K-hop-with-filtering"}
_TITLES = {"hit@any": "Hit@Any", "recall@any": "Recall@Any", "mrr": "MRR"}


def _draw_growth(ax, growth: dict) -> None:
    hops = growth["hops"]
    ax.plot(hops, growth["mean"], marker="o", label="mean")
    ax.plot(hops, growth["max"], marker="s", linestyle="--", label="max")
    if growth.get("num_nodes"):
        ax.axhline(growth["num_nodes"], color="grey", linewidth=0.8, linestyle=":", label="all nodes")
    ax.set_yscale("log")
    ax.set_xticks(hops)
    ax.set_xlabel("hops from the seeds")
    ax.set_ylabel("neighbourhood size (nodes)")
    ax.set_title(f"Naive k-hop growth (top-{growth['seeds']} seeds)")
    ax.legend(fontsize=8)


def _draw_sweep(ax, sweep: dict, metric: str) -> None:
    for name in ("dense", "khop"):
        ax.plot(sweep["budgets"], sweep[name][metric], marker="o", label=_LABELS[name])
    ax.set_xscale("log")
    ax.set_xticks(sweep["budgets"])
    ax.set_xticklabels([str(b) for b in sweep["budgets"]], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("retrieval budget (nodes)")
    ax.set_title(_TITLES.get(metric, metric))
    ax.set_ylim(bottom=0, top=1.02 if metric in ("hit@any", "recall@any") else None)
    ax.legend(fontsize=8)


def plot_growth(growth: dict, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.2, 3.4))
    _draw_growth(ax, growth)
    return _save(fig, plt, path)


def plot_sweep(sweep: dict, path: Path, metrics: Sequence[str] = SWEEP_METRICS) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.0 * len(metrics), 3.4))
    for ax, metric in zip(np.atleast_1d(axes), metrics):
        _draw_sweep(ax, sweep, metric)
    return _save(fig, plt, path)


def plot_expansion(growth: dict | None, sweep: dict | None, path: Path, title: str | None = None) -> Path:
    """The paper's figure: (a) naive k-hop growth, (b) Hit@Any and (c) Recall@Any over budgets."""
    plt = _pyplot()
    panels = ([("growth", None)] if growth else []) + ([("sweep", "hit@any"), ("sweep", "recall@any")]
                                                       if sweep else [])
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.0 * max(len(panels), 1), 3.4))
    for ax, (kind, metric) in zip(np.atleast_1d(axes), panels):
        _draw_growth(ax, growth) if kind == "growth" else _draw_sweep(ax, sweep, metric)
    if title:
        fig.suptitle(title)
    return _save(fig, plt, path)


def _save(fig, plt, path: Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    with atomic_write(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
    path.chmod(0o644)
    return path


def save_figures(out_dir: str | Path, growth: dict | None, sweep: dict | None, title: str | None = None) -> dict[str, Path]:
    """Write the PNGs and ``sweep.json`` into ``out_dir``; returns the paths by name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    if growth:
        paths["khop_growth"] = plot_growth(growth, out_dir / "khop_growth.png")
    if sweep:
        paths["budget_sweep"] = plot_sweep(sweep, out_dir / "budget_sweep.png")
    if growth or sweep:
        paths["expansion"] = plot_expansion(growth, sweep, out_dir / "expansion.png", title)
    with atomic_write(out_dir / "sweep.json") as tmp:
        tmp.write_text(json.dumps({"growth": growth, "sweep": sweep}, indent=2) + "\n")
    paths["data"] = out_dir / "sweep.json"
    paths["data"].chmod(0o644)
    return paths
