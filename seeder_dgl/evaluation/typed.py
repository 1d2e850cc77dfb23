"""`eval --perturb`: the same questions as people type them, scored beside the questions as written.

Each perturbation (``loaders.perturb``: ``lower``, ``typo``, ``nopunct``, ``shuffle-case``,
``keywords``, ``phrase``, ``filler``, ``surname``, ``word-typo`` and their ``+`` combinations) turns every evaluated question into a typed
one, from a fixed seed; the typo (and the surname) goes into the question's topic entity where the dataset marks it. Every method then runs
on the typed questions exactly as on the written ones (embedded again, linked again, expanded
again), and ``typed.md`` / ``typed.json`` put the two side by side, overall and per hop count.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
from rich.table import Table

from loaders.kg import Query
from loaders.perturb import perturb_all
from seeder_dgl.retrieval.link_training import topic_names
from seeder_dgl.retrieval.linking import wording_key

AS_WRITTEN = "as written"
COLUMNS = ("hit@1", "hit@5", "recall@20", "mrr")


def mark_wording(graph, queries: Sequence[Query], train: Sequence[Query]) -> int:
    """Set each of ``queries``' ``wording``: 'seen' where a training question has the same words with
    its topic masked, else 'new' (questions worded otherwise than any training question: how the
    policy and the relation prior read rewordings). Only where the dataset marks topics; returns
    how many were marked."""
    if not train or not any(q.topic for q in queries):
        return 0
    seen = {wording_key(q.text, n) for q, n in zip(train, topic_names(graph, train)) if n}
    marked = 0
    for q, n in zip(queries, topic_names(graph, queries)):
        if n:
            q.wording = "seen" if wording_key(q.text, n) in seen else "new"
            marked += 1
    return marked


def typed_queries(queries: Sequence[Query], kind: str, names: Sequence[Sequence[str]], seed: int = 0) -> list[Query]:
    """``queries`` with their text perturbed by ``kind`` (``loaders.perturb.perturb_all``)."""
    texts = perturb_all([q.text for q in queries], kind, seed, names)
    return [replace(q, text=t) for q, t in zip(queries, texts)]


def summarise(result) -> dict:
    """method -> {'overall': COLUMNS means, 'hops': {h: hit@1}} of an ``EvalResult``."""
    out = {}
    for name, m in result.methods.items():
        hops = m.groups.get("hops", {})
        out[name] = {"overall": {c: m.summary.get(c) for c in COLUMNS},
                     "hops": {h: values.get("hit@1") for h, values in hops.items()},
                     "questions": int(m.summary.get("num_queries", 0))}
        if m.error:
            out[name]["error"] = m.error
    return out


def to_markdown(table: dict[str, dict], title: str, examples: dict[str, list[str]]) -> str:
    """``table``: variant -> ``summarise`` output."""
    hops = sorted({h for variant in table.values() for m in variant.values() for h in m["hops"]},
                  key=lambda h: (not h.isdigit(), int(h) if h.isdigit() else 0, h))
    header = ["questions as", "method", *(c.capitalize() if c != "mrr" else "MRR" for c in COLUMNS),
              *(f"{h}-hop Hit@1" for h in hops)]
    lines = [f"# {title}: questions as people type them", "",
             "Each row scores the same questions, typed as its first column says (`loaders/perturb.py`, seed 0; "
             "`typo` goes into the topic entity's name where the dataset marks it, `word-typo` into a word outside "
             "it).", "",
             "| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for variant, methods in table.items():
        for name, m in methods.items():
            cells = [f"{m['overall'][c]:.3f}" if m["overall"][c] is not None else "-" for c in COLUMNS]
            cells += [f"{m['hops'][h]:.3f}" if h in m["hops"] else "-" for h in hops]
            lines.append(f"| {variant} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "Examples:", ""]
    for variant, texts in examples.items():
        lines += [f"- {variant}: " + "; ".join(f"“{t}”" for t in texts)]
    return "\n".join(lines) + "\n"


def render(table: dict[str, dict], title: str):
    out = Table(title=f"{title}: questions as people type them")
    for column in ("questions as", "method", "Hit@1", "Hit@5", "Recall@20", "MRR"):
        out.add_column(column, justify="left" if column in ("questions as", "method") else "right")
    for variant, methods in table.items():
        for name, m in methods.items():
            out.add_row(variant, name, *(f"{m['overall'][c]:.3f}" if m["overall"][c] is not None else "-"
                                         for c in COLUMNS))
    return out


def example_texts(queries: Sequence[Query], count: int = 3) -> list[str]:
    pick = np.linspace(0, len(queries) - 1, num=min(count, len(queries)), dtype=int) if queries else []
    return [queries[i].text for i in pick]
