"""Where SeedER loses answers: a per-question funnel through the stages of one retrieval.

For every question with a labelled subgraph, the funnel asks, in pipeline order:

0. ``seeded`` — an answer lies within the profile's hop count of a seed: linking found a node
   from which the expansion can reach an answer (eval measures this on the graph; without the
   graph, as for a cache, it is taken to be ``in_subgraph``);
1. ``in_subgraph`` — K-hop-with-filtering kept an answer in the query subgraph;
2. ``reachable`` — an answer was a seed or a neighbour of the growing selection at some step
   (the uncapped frontier ``N(V_t) \\ V_t``): the expansion could have seen it;
3. ``candidate`` — an answer was a seed or survived the frontier cap at some step (``U_t``):
   the policy was shown it;
4. ``picked`` — an answer is in the final selection ``V_T``;
5. ``hit@5`` / ``hit@1`` — the scoring head (times the answer types, where the prior has them) ranked
   an answer in the top 5 / first.

Each stage implies the one before it, so the drop between neighbouring stages says which part of
the method lost the answer: the seeds (0), the K-hop budget (0→1), the horizon (2), the frontier cap (2→3), the
expansion policy (3→4) or the scoring head (4→5). The rollout that produces it is the
deterministic one of inference (top-c_t), identical to what ``LoadedPolicy.rank`` serves.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from seeder_dgl.model.ops import select_ops
from seeder_dgl.model.policy import capped_frontier
from seeder_dgl.retrieval.relation_prior import UNREACHED, bfs_distances
from seeder_dgl.training.ranking import with_answer_types
from seeder_dgl.training.rollout import rollout

STAGES = ("seeded", "in_subgraph", "reachable", "candidate", "picked", "hit@5", "hit@1")
"""Funnel stages in pipeline order; every stage implies the previous one."""


@dataclass
class Funnel:
    """Per-question stage flags (bool [Q] per stage) and the means over groups of questions."""

    query_ids: list[int]
    flags: dict[str, np.ndarray]
    """stage -> bool [Q]."""
    selected_size: np.ndarray
    """int64 [Q]: |V_T| of each question."""
    groups: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """breakdown ('hops', 'qtype') -> group value -> stage -> fraction (plus 'questions')."""

    def summary(self) -> dict[str, float]:
        out = {s: float(self.flags[s].mean()) if len(self.query_ids) else 0.0 for s in STAGES}
        out["questions"] = float(len(self.query_ids))
        out["mean_selected"] = float(self.selected_size.mean()) if len(self.query_ids) else 0.0
        return out

    def group(self, name: str, values: Sequence) -> None:
        """Add the breakdown ``name``: ``values[i]`` is question i's group (None: left out)."""
        members: dict[str, list[int]] = defaultdict(list)
        for i, v in enumerate(values):
            if v is not None:
                members[str(v)].append(i)
        if not members:
            return
        key = (lambda g: (0, int(g), g) if g.lstrip("-").isdigit() else (1, 0, g))
        table = {}
        for g in sorted(members, key=key):
            idx = np.asarray(members[g], dtype=np.int64)
            table[g] = {s: float(self.flags[s][idx].mean()) for s in STAGES}
            table[g]["questions"] = float(idx.shape[0])
        self.groups[name] = table

    def to_dict(self) -> dict:
        return {"stages": list(STAGES), "overall": self.summary(), "groups": self.groups}

    def losses(self) -> dict[str, float]:
        """The fraction of questions lost between neighbouring stages (what each part costs)."""
        s = self.summary()
        return {f"{a}->{b}": s[a] - s[b] for a, b in zip(STAGES[:-1], STAGES[1:])}


def funnel_flags(batch, ranked_ids: list[list[int]], trace, selected: torch.Tensor,
                 expanded: bool = True) -> dict[str, np.ndarray]:
    """Stage flags of the graphs of one deterministic rollout (``rollout(..., keep_trace=True)``).

    ``ranked_ids``: per graph, global ids of V_T by decreasing score; ``trace``: the rollout's
    per-step frontiers and picks; ``selected``: V_T. ``expanded=False`` (the 'rerank' ablation
    scores the whole subgraph): every node was reachable and a candidate.
    """
    g = batch.graph_index
    num_graphs = batch.num_graphs
    labels = batch.labels

    def any_per_graph(mask: torch.Tensor) -> np.ndarray:
        hits = torch.zeros(num_graphs, dtype=torch.int64, device=mask.device).index_add(0, g, mask.to(torch.int64))
        return (hits > 0).cpu().numpy()

    seeds = batch.seed_mask if expanded else selected
    reachable = seeds.clone()
    candidate = seeds.clone()
    current = seeds.clone()
    for step in trace or []:
        reachable[capped_frontier(batch, current, None).nodes] = True
        candidate[step.frontier] = True
        current = current.clone()
        current[step.chosen] = True
    gold_ids = [set() for _ in range(num_graphs)]
    for node, graph in zip(batch.node_ids[labels].tolist(), g[labels].tolist()):
        gold_ids[graph].add(node)
    hit5 = np.asarray([any(i in gold for i in r[:5]) for r, gold in zip(ranked_ids, gold_ids)], dtype=bool)
    hit1 = np.asarray([bool(r) and r[0] in gold for r, gold in zip(ranked_ids, gold_ids)], dtype=bool)
    return {
        "in_subgraph": any_per_graph(labels),
        "reachable": any_per_graph(labels & reachable),
        "candidate": any_per_graph(labels & candidate),
        "picked": any_per_graph(labels & selected),
        "hit@5": hit5,
        "hit@1": hit1,
    }


@torch.no_grad()
def diagnose(loaded, records: Sequence, node_features, query_emb: np.ndarray, *, node_types=None,
             batch_size: int = 64, seeded: np.ndarray | None = None) -> Funnel:
    """The funnel of a trained policy (``inference.LoadedPolicy``) over labelled subgraphs.

    ``records``: ``QuerySubgraph`` with ``labels`` and ``num_answers`` (``seeder-dgl extract``'s
    cache, or ``memory.attach_labels``); ``node_features``/``node_types``/``query_emb`` as for
    ``LoadedPolicy.rank``. The 'rerank' ablation has no expansion: every node counts as reachable,
    candidate and picked. ``seeded``: bool [Q], an answer within reach of a seed (``seeded_flags``);
    None: taken to be ``in_subgraph``.
    """
    prep = loaded.preprocessing
    rows = prep.node_rows(node_features, records, node_types=node_types)
    query = prep.features(np.asarray(query_emb, np.float32).reshape(len(records), -1))
    ops = select_ops(loaded.device, loaded.cfg.ops)
    loaded.policy.eval()
    mode = loaded.cfg.rollout_mode
    flags = {s: np.zeros(len(records), dtype=bool) for s in STAGES}
    sizes = np.zeros(len(records), dtype=np.int64)
    todo = [i for i, r in enumerate(records) if r.num_nodes > 0]
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        batch = prep.batch([records[i] for i in chunk], rows, query[chunk], loaded.device)
        out = rollout(loaded.policy, batch, sample=False, mode=mode, ops=ops, keep_trace=True)
        ids, scores = out.ranked()
        # Ranked as LoadedPolicy.rank serves it: the answer-type product included.
        ids = [with_answer_types(prep, records[i], rows, node_ids, node_scores)[0]
               for i, node_ids, node_scores in zip(chunk, ids, scores)]
        part = funnel_flags(batch, ids, out.trace, out.selected, expanded=mode != "rerank")
        for s, values in part.items():
            flags[s][chunk] = values
        sizes[chunk] = torch.bincount(batch.graph_index[out.selected], minlength=batch.num_graphs).numpy()
    flags["seeded"] = flags["in_subgraph"] | (np.asarray(seeded, dtype=bool) if seeded is not None else False)
    return Funnel([int(r.query_id) for r in records], flags, sizes)


def seeded_flags(arrays, seeds: Sequence[Sequence[int]], answers: Sequence[Sequence[int]], hops: int) -> np.ndarray:
    """bool [Q]: an answer of question i lies within ``hops`` hops of one of its ``seeds`` in the
    graph ``arrays`` (``retrieval.memory.GraphArrays``): what the expansion could reach at best."""
    out = np.zeros(len(seeds), dtype=bool)
    for i, (s, a) in enumerate(zip(seeds, answers)):
        if len(s) and len(a):
            dist = bfs_distances(arrays, np.asarray(s, dtype=np.int64), hops)
            out[i] = bool((dist[np.asarray(a, dtype=np.int64)] != UNREACHED).any())
    return out


def render_markdown(funnel: Funnel, title: str = "Funnel") -> str:
    """The funnel as Markdown tables: overall, then per breakdown."""
    header = "| group | questions | " + " | ".join(STAGES) + " |"
    rule = "|---|---:|" + "---:|" * len(STAGES)

    def row(name: str, values: dict) -> str:
        return f"| {name} | {int(values['questions'])} | " + " | ".join(f"{values[s]:.3f}" for s in STAGES) + " |"

    lines = [f"## {title}", "", "Each stage implies the previous one (see `seeder_dgl/evaluation/diagnose.py`).", "",
             header, rule, row("all", funnel.summary())]
    for name, table in funnel.groups.items():
        lines += ["", f"### by {name}", "", header, rule]
        lines += [row(g, values) for g, values in table.items()]
    lines += ["", f"Mean |V_T|: {funnel.summary()['mean_selected']:.1f}", ""]
    return "\n".join(lines)
