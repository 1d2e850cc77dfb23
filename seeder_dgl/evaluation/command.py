"""`seeder-dgl eval`: every retriever on the same questions, against the graph as stored in Neo4j.

Steps: read the questions (a split of the dataset, or a MetaQA-format ``--qa-file`` whose names
are mapped to node ids through the MetaQA graph), report names that match no node and leave out
questions with no mapped answer; embed the questions with the dataset's own encoder (the model
recorded in Neo4j); export the graph from Neo4j once (cached per dataset version); run the chosen
methods in memory over that export; print and save the comparison (``report``) and, with
``sweep=True``, the expansion figure (``plots``).

The question handling (``load_questions`` / ``prepare_questions``) needs no Neo4j.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from loaders.kg import QASet, Query
from seeder_dgl.datasets import profile_flag, profile_prefix, subgraph_dir
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.graphstore.backend import MemoryGraph
from seeder_dgl.paths import results_dir
from seeder_dgl.evaluation.evaluate import (
    BASELINES,
    SEEDER,
    EvalResult,
    SeederMethod,
    build_baselines,
    cached_subgraphs,
    evaluate,
    find_ablations,
    resolve_methods,
)

EXAMPLES = 5
"""Unknown names / dropped query ids shown in the messages."""
SWEEP_QUERIES = 500
"""Questions (a fixed random sample) the budget sweep and the k-hop growth run on."""


# ---------------------------------------------------------------------------------------------
# Questions (no Neo4j)
# ---------------------------------------------------------------------------------------------
@dataclass
class PreparedQuestions:
    queries: list[Query]
    """The questions that are scored: at least one answer mapped to a node."""
    label: str
    """Where they come from ('val', or the --qa-file stem)."""
    total: int
    """Questions read (after ``limit``)."""
    dropped: list[int] = field(default_factory=list)
    """Ids of the questions left out: no answer maps to a node."""
    unknown_names: list[str] = field(default_factory=list)
    """Answer/topic names of the question file that match no node (as read, repeats included)."""

    @property
    def unknown_distinct(self) -> list[str]:
        return list(dict.fromkeys(self.unknown_names))

    def summary(self) -> dict:
        distinct = self.unknown_distinct
        return {"label": self.label, "read": self.total, "scored": len(self.queries),
                "dropped_no_answers": len(self.dropped), "dropped_examples": self.dropped[:EXAMPLES],
                "unknown_names": len(self.unknown_names), "unknown_distinct": len(distinct),
                "unknown_examples": distinct[:EXAMPLES]}

    def messages(self) -> list[str]:
        """One line per thing the user should know (empty when all is well)."""
        lines = []
        distinct = self.unknown_distinct
        if distinct:
            shown = ", ".join(repr(n) for n in distinct[:EXAMPLES])
            more = f" and {len(distinct) - EXAMPLES} more" if len(distinct) > EXAMPLES else ""
            lines.append(f"{len(self.unknown_names)} answer/topic names in the questions match no node "
                         f"({len(distinct)} distinct: {shown}{more}); they are not counted as answers")
        if self.dropped:
            lines.append(f"{len(self.dropped)} of {self.total} questions have no answer in the graph and are "
                         f"left out of the scores (e.g. ids {', '.join(map(str, self.dropped[:EXAMPLES]))})")
        return lines


def prepare_questions(qa: QASet, split: str, limit: int | None = None,
                      sample: int | None = None) -> PreparedQuestions:
    """The questions of ``split`` (a seeded ``sample``, then the first ``limit``), those without a
    mapped answer set aside."""
    if limit is not None and limit <= 0:
        raise SeederError(f"--limit must be at least 1, not {limit}")
    if sample is not None and sample <= 0:
        raise SeederError(f"--sample must be at least 1, not {sample}")
    try:
        queries = qa.sample(split, sample)
    except KeyError:
        raise SeederError(f"{qa.name} has no question split {split!r}: choose one of "
                          f"{', '.join(sorted(qa.splits))}") from None
    if limit:
        queries = queries[:limit]
    scored = [q for q in queries if q.answers]
    dropped = [int(q.id) for q in queries if not q.answers]
    return PreparedQuestions(scored, split, len(queries), dropped, list(qa.unknown_names))


def load_questions(dataset: str, *, split: str = "val", qa_file: str | Path | None = None,
                   source: str | None = None, limit: int | None = None,
                   sample: int | None = None) -> PreparedQuestions:
    """Questions of a dataset split, or of a question file matched to the dataset's own graph: MetaQA
    through its kb.txt, any other dataset through the names and ids Neo4j holds for it."""
    from seeder_dgl.datasets import get_spec, load_user_questions

    spec = get_spec(dataset)
    if qa_file is None:
        if spec.load_questions is None:
            raise SeederError(f"{dataset} has no questions: pass --qa-file FILE (CSV or JSON lines: question, answers)")
        return prepare_questions(spec.load_questions(source, None), split, limit, sample)
    path = Path(qa_file).expanduser()
    if dataset == "metaqa" and path.suffix.lower() == ".txt":
        from loaders.metaqa import load_metaqa_qa_file

        qa = load_metaqa_qa_file(path, spec.load_graph(source))
    else:
        qa = load_user_questions(dataset, path)
    prepared = prepare_questions(qa, split if split in qa.splits and split != "val" else "all", limit, sample)
    prepared.label = path.stem
    return prepared


# ---------------------------------------------------------------------------------------------
# Methods
# ---------------------------------------------------------------------------------------------
@dataclass
class MethodPlan:
    names: list[str]
    """Methods to run, in table order."""
    checkpoints: dict[str, Path]
    """SeedER method name -> checkpoint."""
    notes: list[str] = field(default_factory=list)


def plan_methods(dataset: str, methods: str | Sequence[str] | None, checkpoint: str | Path | None,
                 runs_dir: Path | None = None, profile: str = "paper") -> MethodPlan:
    """Validate ``methods`` against what can run; the default is every baseline plus every checkpoint found.

    SeedER uses ``checkpoint`` or ``<runs>/<dataset>/full/best.pt`` (``<profile>-full`` for another
    profile); each other run folder of the same profile is the method ``seeder-<ablation>``.
    """
    from seeder_dgl.datasets import runs_root

    runs_dir = Path(runs_dir) if runs_dir else runs_root() / dataset
    main = Path(checkpoint) if checkpoint else runs_dir / f"{profile_prefix(profile)}full" / "best.pt"
    if checkpoint and not main.is_file():
        raise SeederError(f"no checkpoint at {main}: pass the best.pt written by `seeder-dgl train`")
    ablations = find_ablations(runs_dir, main, profile)
    available = [*BASELINES, SEEDER, *ablations]
    default = [*BASELINES, *([SEEDER] if main.is_file() else []), *ablations]
    names = resolve_methods(methods, available, default)
    if SEEDER in names and not main.is_file():
        how = f"seeder-dgl train {dataset}{profile_flag(profile)}"
        raise SeederError(f"method seeder needs a trained policy and there is none at {main}: run "
                          f"`{how}` or pass --checkpoint")
    checkpoints = {n: (main if n == SEEDER else ablations[n]) for n in names if n == SEEDER or n in ablations}
    notes = [] if main.is_file() or methods else [f"no SeedER checkpoint at {main}: evaluating the baselines only"]
    return MethodPlan(names, checkpoints, notes)


def _load_policies(plan: MethodPlan, dataset: str, model: str, dimension: int, explicit: set[str]):
    """name -> LoadedPolicy; a checkpoint not asked for by name that fails to load is skipped with a note."""
    policies, notes = {}, []
    if not plan.checkpoints:
        return policies, notes
    try:
        from seeder_dgl.inference import load_policy
    except ImportError as exc:
        if explicit & set(plan.checkpoints):
            raise SeederError(f"SeedER checkpoints cannot be loaded in this install ({exc})") from None
        return policies, [f"skipped {', '.join(plan.checkpoints)}: no checkpoint loader ({exc})"]
    for name, path in plan.checkpoints.items():
        try:
            policies[name] = load_policy(path, dataset=dataset, embedding_model=model, dimension=dimension)
        except Exception as exc:  # a stale ablation checkpoint must not stop the whole evaluation
            if name in explicit:
                raise
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            notes.append(f"skipped {name} ({path}): {type(exc).__name__}: {text}")
    return policies, notes


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------
def _command_line(dataset, split, qa_file, methods, k, limit, checkpoint, sweep, source, depth, sample=None,
                  profile="paper") -> str:
    parts = ["seeder-dgl eval", dataset]
    parts += [f"--qa-file {qa_file}"] if qa_file else [f"--split {split}"]
    for flag, value in (("--methods", methods if isinstance(methods, str) or methods is None else ",".join(methods)),
                        ("--limit", limit), ("--sample", sample), ("--checkpoint", checkpoint), ("--source", source), ("--depth", depth)):
        if value:
            parts.append(f"{flag} {value}")
    if k != 20:
        parts.append(f"--k {k}")
    if profile_flag(profile):
        parts.append(profile_flag(profile).strip())
    if sweep:
        parts.append("--sweep")
    return " ".join(parts)


def default_results_dir(dataset: str, folder: str) -> Path:
    """benchmarks/results/<folder> for the built-in datasets (the project's own results);
    runs/<dataset>/<folder> for a graph of your own."""
    from seeder_dgl.datasets import find_spec, runs_root

    spec = find_spec(dataset)
    return results_dir() / folder if spec is not None and spec.builtin else runs_root() / dataset / folder


def sample_indices(n: int, size: int | None, seed: int = 0) -> np.ndarray:
    """A fixed random sample of ``size`` positions out of ``n`` (all when size is None or >= n), sorted."""
    if size is None or size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def linked_seeds(live, queries, query_emb: np.ndarray, k: int, mode: str,
                 progress: bool = True) -> dict[bytes, tuple[np.ndarray, np.ndarray]]:
    """Seeds of every question from Neo4j (full-text or hybrid linking), keyed by ``seed_key``."""
    from tqdm.auto import tqdm

    from seeder_dgl.graphstore.seeding import seed
    from seeder_dgl.retrieval.baselines import seed_key

    out = {}
    for q, emb in tqdm(list(zip(queries, query_emb)), desc=f"{mode} seeding in Neo4j", disable=not progress,
                       unit="q"):
        found = seed(live, q.text, emb, k, mode)
        out[seed_key(emb)] = (np.asarray([i for i, _ in found], dtype=np.int64),
                              np.asarray([s for _, s in found], dtype=np.float32))
    return out


def diagnose_method(method: SeederMethod, queries: Sequence[Query]):
    """The funnel of one SeedER method over exactly the subgraphs it ranked (cached or computed)."""
    from seeder_dgl.evaluation.diagnose import diagnose
    from seeder_dgl.retrieval.memory import attach_labels

    records = [attach_labels(method.subgraph(i), q.answers) for i, q in enumerate(queries)]
    funnel = diagnose(method.policy, records, method.graph.node_emb, method.query_emb, node_types=method.node_types)
    funnel.group("hops", [q.hops for q in queries])
    funnel.group("qtype", [q.qtype for q in queries])
    return funnel


def save_funnel(funnel, out_dir: Path, name: str, title: str) -> Path:
    from seeder_dgl.evaluation.diagnose import render_markdown
    from seeder_dgl.fileio import atomic_write_json, atomic_write_text

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / f"funnel-{name}.json", {"title": title, **funnel.to_dict(),
                                                        "losses": funnel.losses()})
    return atomic_write_text(out_dir / f"funnel-{name}.md", render_markdown(funnel, title))


def render_funnel(funnel, title: str):
    """A rich table of the funnel by hop count (or overall when the questions have no hop count)."""
    from rich.table import Table

    from seeder_dgl.evaluation.diagnose import STAGES

    table = Table(title=title)
    for column in ("questions", "group", *STAGES):
        table.add_column(column, justify="right")
    rows = {"all": funnel.summary(), **funnel.groups.get("hops", {})}
    for group, values in rows.items():
        label = group if group == "all" else f"{group}-hop"
        table.add_row(str(int(values["questions"])), label, *(f"{values[s]:.3f}" for s in STAGES))
    return table


def run_eval(dataset: str, *, split: str = "val", qa_file: str | Path | None = None,
             methods: str | Sequence[str] | None = None, k: int = 20, limit: int | None = None,
             sample: int | None = None,
             checkpoint: str | Path | None = None, out: str | Path | None = None, sweep: bool = False,
             source: str | None = None, depth: int | None = None, per_query: bool = False,
             sweep_budgets: Sequence[int] | None = None, sweep_queries: int | None = SWEEP_QUERIES,
             progress: bool = True, console=None, profile: str | None = None, diagnose: bool = False) -> EvalResult:
    """Evaluate the methods on one question set; prints the tables and writes the result files.

    ``depth``: nodes asked of each method, over which ``@any`` and ``size`` are measured
    (default: the K-hop budget B = k0 + sum of the per-hop budgets, at least ``k``).
    ``out``: result folder (default ``benchmarks/results/eval-<dataset>-<split or qa-file stem>/``,
    ``-<profile>`` appended for a profile other than 'paper').
    ``profile``: the retrieval settings (seeds, budgets, seeding) every graph method starts from
    (None: the dataset's default); full-text or hybrid seeds come from Neo4j once per question and
    are shared by all methods.
    ``diagnose``: also the funnel of every SeedER policy (``evaluation.diagnose``: where answers
    are lost), per hop count and question type, saved as ``funnel-<method>.{json,md}``.
    """
    from rich.console import Console

    from seeder_dgl.datasets import cache_root, resolve_model, resolve_profile, retrieval_profile
    from seeder_dgl.embeddings import TextEncoder
    from seeder_dgl.evaluation import plots, report
    from seeder_dgl.graphstore.connection import open_driver
    from seeder_dgl.graphstore.export import export_graph
    from seeder_dgl.graphstore.live import LiveGraph

    check_dataset_name(dataset)
    console = console or Console()
    started = time.perf_counter()
    profile = resolve_profile(dataset, profile)
    if k <= 0:
        raise SeederError(f"--k must be at least 1, not {k}")
    if depth is not None and depth < k:
        raise SeederError(f"--depth must be at least --k ({k}), not {depth}")
    defaults = retrieval_profile(dataset, profile)  # before any slow step: a typo fails at once
    plan = plan_methods(dataset, methods, checkpoint, profile=profile)
    questions = load_questions(dataset, split=split, qa_file=qa_file, source=source, limit=limit, sample=sample)
    for line in questions.messages() + plan.notes:
        console.print(f"[yellow]note:[/] {line}", highlight=False)
    if not questions.queries:
        raise SeederError(f"none of the {questions.total} questions of {questions.label} has an answer in the "
                          f"graph: nothing to score")
    seeds, budgets = defaults.seeds, tuple(defaults.budgets)
    depth = int(depth or max(k, seeds + sum(budgets)))
    queries = questions.queries

    with open_driver() as driver:
        live = LiveGraph(driver, dataset)
        live.check_ready()
        info = live.info
        encoder = TextEncoder(resolve_model(info.model))
        with console.status(f"Embedding {len(queries):,} questions with {info.model}..."):
            query_emb = encoder.encode([q.text for q in queries], show_progress=False)
        preset = (linked_seeds(live, queries, query_emb, seeds, defaults.seeding, progress)
                  if defaults.seeding != "dense" else {})
        export = export_graph(driver, dataset, cache_root() / dataset / "export", progress=progress)
    graph = MemoryGraph.from_export(export)

    methods_run, method_info = build_baselines(graph, [n for n in plan.names if n in BASELINES],
                                               seeds=seeds, budgets=budgets)
    for method in methods_run.values():
        if hasattr(method, "preset_seeds"):
            method.preset_seeds = preset
    explicit = set(plan.names) if methods else ({SEEDER} if checkpoint else set())
    policies, skipped = _load_policies(plan, dataset, info.model, info.dimension, explicit)
    for line in skipped:
        console.print(f"[yellow]note:[/] {line}", highlight=False)
    if policies:
        cached, why = ({}, "in-memory K-hop (a --qa-file has no extracted split)")
        if qa_file is None:
            cached, why = cached_subgraphs(subgraph_dir(dataset, profile, split), seeds, budgets)
            wanted = {int(q.id) for q in queries}
            cached = {qid: r for qid, r in cached.items() if qid in wanted}
        for name, policy in policies.items():
            methods_run[name] = SeederMethod(policy, graph, queries, query_emb, seeds=seeds, budgets=budgets,
                                             depth=depth, cached=cached, preset_seeds=preset)
            covered = len(cached)
            note = (f"subgraphs: {covered} of {len(queries)} from the extract cache (latency excludes their "
                    f"K-hop extraction), the rest K-hop in memory" if covered else
                    f"subgraphs: K-hop in memory, timed with the ranking ({why})")
            method_info[name] = {"checkpoint": str(plan.checkpoints[name]), "seeds": seeds,
                                 "budgets": list(budgets), "cached_subgraphs": covered, "note": note}
    order = [n for n in plan.names if n in methods_run]
    meta = {"dataset": dataset, "split": questions.label, "profile": profile, "seeding": defaults.seeding, "qa_file": str(qa_file) if qa_file else None,
            "source": source, "model": info.model, "seeds": seeds, "budgets": list(budgets),
            "graph": {"nodes": int(graph.arrays.num_nodes), "edges": int(graph.arrays.num_edges),
                      "relations": len(export.relation_types)},
            "questions": questions.summary(), "notes": plan.notes + skipped,
            "command": _command_line(dataset, split, qa_file, methods, k, limit, checkpoint, sweep, source,
                                     depth if depth != max(k, seeds + sum(budgets)) else None, sample, profile),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    result = evaluate({n: methods_run[n] for n in order}, queries, query_emb, k, depth=depth, info=method_info,
                      on_error="record", progress=progress, meta=meta)

    suffix = profile_flag(profile) and f"-{profile}"
    out_dir = Path(out) if out else default_results_dir(dataset, f"eval-{dataset}-{questions.label}{suffix}")
    if sweep:
        pick = sample_indices(len(queries), sweep_queries)
        sub_q, sub_emb = [queries[i] for i in pick], query_emb[pick]
        with console.status(f"Budget sweep and k-hop growth on {len(pick)} questions..."):
            sweep_data = plots.budget_sweep(graph.arrays, graph.node_emb, graph.rel_emb, sub_q, sub_emb,
                                            seeds=seeds, budgets=budgets,
                                            sweep=sweep_budgets or plots.SWEEP_BUDGETS)
            growth = plots.khop_growth(graph.arrays, graph.node_emb, sub_emb, seeds=seeds)
        figures = plots.save_figures(out_dir, growth, sweep_data, title=f"{dataset} {questions.label}")
        result.meta["sweep"] = {"queries": len(pick), "files": {k_: str(v) for k_, v in figures.items()}}
    if diagnose:
        if not policies:
            console.print("[yellow]note:[/] --diagnose needs a SeedER checkpoint: no funnel", highlight=False)
        for name in policies:
            funnel = diagnose_method(methods_run[name], queries)
            saved = save_funnel(funnel, out_dir, name, f"{name} on {dataset} {questions.label}")
            console.print(render_funnel(funnel, f"Where {name} loses answers"), highlight=False)
            result.meta.setdefault("funnels", {})[name] = {"overall": funnel.summary(), "file": str(saved)}
    result.meta["seconds"] = round(time.perf_counter() - started, 2)
    paths = report.save(result, out_dir, per_query=per_query)
    report.render(result, console)
    console.print(f"results: {paths['json']} and {paths['markdown']}; STaRK-format predictions in "
                  f"{paths.get('predictions')}", highlight=False)
    if sweep:
        console.print(f"expansion figure: {out_dir / 'expansion.png'} (data: {out_dir / 'sweep.json'})",
                      highlight=False)
    return result
