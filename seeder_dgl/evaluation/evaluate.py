"""Run several retrievers on the same queries and score them the same way (``seeder-dgl eval``).

A *method* is either a ``retrieval.base.GraphRetriever`` (asked ``search(question, embedding,
depth)``: the very object ``query`` and the API use, here on the in-memory export) or a callable
``f(query_index) -> [(id, score), ...]``. Every method gets every query; its ranking, the STaRK
metrics of ``seeder_dgl.metrics`` and its wall time (``time.perf_counter`` around the one call)
are kept per query, then averaged overall and per group (MetaQA's hop count, the question type).

Metric conventions are those of ``metrics``: ``@k`` on the first k of the ranking, MRR over the
whole ranking, ``@any`` and ``size`` over everything the method returned. A retriever is asked
for ``depth`` nodes (default ``k``): with ``depth = k`` Hit@any equals Hit@k; ``run_eval`` asks
for the K-hop budget B so that ``@any`` compares the methods' retrieved sets at equal size.

``build_baselines`` builds the non-learned methods (dense, K-hop-with-filtering, PPR, PPR+MMR,
beam, PCST) on a graph with one profile's settings; SeedER is ``retrieval.policy.PolicyRetriever``.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from rich.progress import Progress

from loaders.kg import Query
from seeder_dgl.datasets import profile_prefix
from seeder_dgl.errors import SeederError
from seeder_dgl.metrics import batch_metrics, metric_names
from seeder_dgl.retrieval.base import GraphRetriever
from seeder_dgl.retrieval.methods import BASELINES, make_retriever
from seeder_dgl.retrieval.pipeline import GraphBackend, RetrievalSettings
from seeder_dgl.subgraph.cache import load_split
from seeder_dgl.subgraph.record import QuerySubgraph

Ranking = list[tuple[int, float]]
MethodLike = Callable[[int], Sequence] | GraphRetriever
"""A retriever, or a callable ``f(query_index) -> ranking``."""

KS = (1, 5, 20)
SEEDER = "seeder"
ABLATION_PREFIX = "seeder-"
BREAKDOWNS = ("hops", "qtype", "wording")
"""Query attributes results are grouped by (where at least one query has a value)."""


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass
class MethodResult:
    name: str
    ids: list[np.ndarray]
    """Per query: int64 node ids the method returned, in its order (arrays: a full split stays small)."""
    scores: list[np.ndarray]
    """Per query: float64 score of each returned id."""
    per_query: dict[str, np.ndarray]
    """metric -> float64 [Q] (``metrics.metric_names`` plus ``latency_ms``)."""
    summary: dict[str, float]
    """Means over all queries, ``latency_p50_ms``/``latency_p95_ms`` and ``num_queries``."""
    groups: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """breakdown ('hops', 'qtype') -> group value (as a string) -> means over its queries."""
    info: dict = field(default_factory=dict)
    """How the method was configured (seeds, budgets, checkpoint, notes)."""
    error: str | None = None
    """Set when the method failed (``on_error='record'``); its metrics are then all zero."""

    @property
    def rankings(self) -> list[Ranking]:
        """Per query: ``[(node id, score), ...]`` in the method's order."""
        return [list(zip(i.tolist(), s.tolist())) for i, s in zip(self.ids, self.scores)]


@dataclass
class EvalResult:
    methods: dict[str, MethodResult]
    query_ids: list[int]
    hops: list[int | None]
    qtypes: list[str | None]
    k: int
    depth: int
    metrics: list[str]
    """Metric names in display order (without latency)."""
    meta: dict = field(default_factory=dict)
    """Dataset, split, question counts, unknown names, and anything else the caller records."""

    @property
    def num_queries(self) -> int:
        return len(self.query_ids)

    def summary_table(self) -> dict[str, dict[str, float]]:
        """method -> its summary."""
        return {name: m.summary for name, m in self.methods.items()}


# ---------------------------------------------------------------------------------------------
# The evaluation loop
# ---------------------------------------------------------------------------------------------
def _as_arrays(items) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids, float64 scores) of a ranking given as (id, score) pairs or bare ids (score -rank)."""
    items = list(items) if items is not None else []
    if not items:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    if isinstance(items[0], (tuple, list)):
        ids = np.asarray([int(it[0]) for it in items], dtype=np.int64)
        scores = np.asarray([float(it[1]) if len(it) > 1 else float(-p) for p, it in enumerate(items)],
                            dtype=np.float64)
        return ids, scores
    ids = np.asarray(items, dtype=np.int64).reshape(-1)
    return ids, -np.arange(ids.shape[0], dtype=np.float64)


def _runner(method: MethodLike, queries: Sequence[Query], query_emb: np.ndarray,
            depth: int) -> Callable[[int], Sequence]:
    if isinstance(method, GraphRetriever):
        return lambda i: method.search(queries[i].text, query_emb[i], depth).ranking
    if callable(method):
        return method
    raise TypeError(f"a method must be a GraphRetriever or callable, not {type(method).__name__}")


def _means(per_query: Mapping[str, np.ndarray], index: np.ndarray | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    n = None
    for name, values in per_query.items():
        v = values if index is None else values[index]
        n = v.shape[0]
        out[name] = float(v.mean()) if v.size else 0.0
    lat = per_query["latency_ms"] if index is None else per_query["latency_ms"][index]
    out["latency_p50_ms"] = float(np.percentile(lat, 50)) if lat.size else 0.0
    out["latency_p95_ms"] = float(np.percentile(lat, 95)) if lat.size else 0.0
    out["num_queries"] = float(n or 0)
    return out


def group_index(values: Sequence) -> dict[str, np.ndarray]:
    """Group value (as a string; None left out) -> positions of the queries with it, sorted by value."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, v in enumerate(values):
        if v is not None:
            groups[str(v)].append(i)

    def key(g: str):
        return (0, int(g), g) if g.lstrip("-").isdigit() else (1, 0, g)

    return {g: np.asarray(groups[g], dtype=np.int64) for g in sorted(groups, key=key)}


def score_rankings(rankings: Sequence, queries: Sequence[Query], latency_ms: Sequence[float],
                   ks: Sequence[int] = KS) -> tuple[dict[str, np.ndarray], dict[str, float],
                                                    dict[str, dict[str, dict[str, float]]]]:
    """(per-query metrics, summary, breakdowns) of one method's rankings (id arrays or (id, score) lists)."""
    per_query = batch_metrics(list(rankings), [q.answers for q in queries], ks)
    per_query["latency_ms"] = np.asarray(latency_ms, dtype=np.float64).reshape(-1)
    summary = _means(per_query)
    groups: dict[str, dict[str, dict[str, float]]] = {}
    for attr in BREAKDOWNS:
        index = group_index([getattr(q, attr, None) for q in queries])
        if index:
            groups[attr] = {g: _means(per_query, idx) for g, idx in index.items()}
    return per_query, summary, groups


def evaluate(methods: Mapping[str, MethodLike], queries: Sequence[Query], query_emb: np.ndarray, k: int = 20,
             *, depth: int | None = None, ks: Sequence[int] = KS, info: Mapping[str, dict] | None = None,
             on_error: str = "raise", progress: bool = False, meta: dict | None = None) -> EvalResult:
    """Run every method on every query and score it (see the module docstring).

    ``query_emb`` [Q, d] is row i for ``queries[i]``. ``depth``: nodes asked of retriever objects
    (default ``k``); callables return what they like. ``on_error='record'`` keeps going when a
    method raises: the error is stored on its result and its queries score 0.
    """
    if on_error not in ("raise", "record"):
        raise ValueError("on_error is 'raise' or 'record'")
    if len(queries) != len(query_emb):
        raise ValueError(f"{len(queries)} queries but {len(query_emb)} query embeddings")
    ks = tuple(sorted(set(int(x) for x in ks) | {int(k)}))
    depth = int(depth or k)
    info = dict(info or {})
    results: dict[str, MethodResult] = {}
    with Progress(disable=not progress, transient=True) as bars:
        for name, method in methods.items():
            run = _runner(method, queries, query_emb, depth)
            ids: list[np.ndarray] = []
            scores: list[np.ndarray] = []
            latency: list[float] = []
            error = None
            task = bars.add_task(name, total=len(queries))
            for i in range(len(queries)):
                start = time.perf_counter()
                try:
                    out = run(i)
                except Exception as exc:
                    if on_error == "raise":
                        raise
                    error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                    break
                latency.append((time.perf_counter() - start) * 1000.0)
                i_ids, i_scores = _as_arrays(out)
                ids.append(i_ids)
                scores.append(i_scores)
                bars.advance(task)
            if error is not None:
                ids, scores = [_as_arrays([])[0] for _ in queries], [_as_arrays([])[1] for _ in queries]
                latency = [0.0] * len(queries)
            per_query, summary, groups = score_rankings(ids, queries, latency, ks)
            results[name] = MethodResult(name, ids, scores, per_query, summary, groups, dict(info.get(name, {})),
                                         error)
    return EvalResult(methods=results, query_ids=[int(q.id) for q in queries], hops=[q.hops for q in queries],
                      qtypes=[q.qtype for q in queries], k=int(k), depth=depth,
                      metrics=[m for m in metric_names(ks)], meta=dict(meta or {}))


# ---------------------------------------------------------------------------------------------
# The project's methods
# ---------------------------------------------------------------------------------------------
def cached_subgraphs(folder: Path, settings: RetrievalSettings) -> tuple[dict[int, QuerySubgraph], str]:
    """Subgraphs of ``seeder-dgl extract`` in ``folder`` by query id, when built with these settings
    (seeds, budgets and relation prior).

    Returns ({}, why) when there is no usable cache (missing, other settings, damaged).
    """
    folder = Path(folder)
    manifest = folder / "manifest.json"
    if not manifest.exists():
        return {}, f"no extracted subgraphs in {folder}"
    try:
        whole = json.loads(manifest.read_text())
        found = whole.get("settings") or {}
    except (OSError, ValueError, AttributeError):
        return {}, f"{manifest} is unreadable"
    if whole.get("typed"):
        return {}, f"{folder} holds subgraphs of questions typed as people do, not of these questions"
    seeds, budgets = settings.seeds, list(settings.budgets)
    if int(found.get("seeds", -1)) != int(seeds) or list(found.get("budgets") or []) != budgets:
        return {}, (f"{folder} was extracted with seeds={found.get('seeds')} budgets={found.get('budgets')}, "
                    f"not seeds={seeds} budgets={budgets}")
    wanted = settings.describe()
    for part in ("relation_prior", "linker"):
        if found.get(part) != wanted.get(part):
            return {}, (f"{folder} was extracted with {part.replace('_', ' ')} {found.get(part)}, not "
                        f"{wanted.get(part)}: run `seeder-dgl extract` again")
    try:
        records, _ = load_split(folder)
    except SeederError as exc:
        return {}, str(exc)
    return {int(r.query_id): r for r in records}, f"cached subgraphs from {folder}"


def run_profile(run_dir: Path) -> str:
    """The retrieval profile a run folder was trained on (its config.json; 'paper' before profiles existed)."""
    try:
        return json.loads((Path(run_dir) / "config.json").read_text())["config"].get("profile", "paper")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "paper"


def find_ablations(runs_dir: Path, main: Path | None = None, profile: str = "paper") -> dict[str, Path]:
    """``seeder-<name>`` -> ``runs_dir/<name>/best.pt`` for every run folder of ``profile`` but the main one.

    Runs of another profile's subgraphs are left out: they rank other subgraphs. A non-paper
    profile's folders are named ``<profile>-<ablation>``; the method name drops that prefix.
    """
    runs_dir = Path(runs_dir)
    out: dict[str, Path] = {}
    if not runs_dir.is_dir():
        return out
    main_resolved = Path(main).resolve() if main else None
    prefix = profile_prefix(profile)
    main_name = f"{prefix}full"
    for sub in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        path = sub / "best.pt"
        if sub.name == main_name or not path.is_file() or path.resolve() == main_resolved:
            continue
        if run_profile(sub) != profile:
            continue
        name = sub.name[len(prefix):] if prefix and sub.name.startswith(prefix) else sub.name
        out[f"{ABLATION_PREFIX}{name}"] = path
    return out


def resolve_methods(requested: str | Sequence[str] | None, available: Sequence[str],
                    default: Sequence[str] | None = None) -> list[str]:
    """The method names to run, validated: a comma list or sequence; None -> ``default`` (or all)."""
    if requested is None or requested == "" or (not isinstance(requested, str) and not list(requested)):
        return list(default if default is not None else available)
    names = requested.split(",") if isinstance(requested, str) else list(requested)
    names = [n.strip() for n in names if n and n.strip()]
    unknown = [n for n in names if n not in available]
    if unknown:
        raise SeederError(f"unknown method{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: "
                          f"choose from {', '.join(available)}")
    return list(dict.fromkeys(names))


def build_baselines(graph: GraphBackend, names: Sequence[str], settings: RetrievalSettings
                    ) -> tuple[dict[str, GraphRetriever], dict[str, dict]]:
    """The retrievers of ``names`` (a subset of ``BASELINES``) on ``graph``, and how each is configured."""
    methods, info = {}, {}
    for name in names:
        if name not in BASELINES:
            raise SeederError(f"{name!r} is not a baseline: choose from {', '.join(BASELINES)}")
        methods[name] = make_retriever(name, graph, settings)
        info[name] = methods[name].describe()
    return methods, info
