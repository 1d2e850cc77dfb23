"""`seeder-dgl eval`: every retriever on the same questions, against the graph as stored in Neo4j.

Steps: read the questions (a split of the dataset, or a MetaQA-format ``--qa-file`` whose names
are mapped to node ids through the MetaQA graph), report names that match no node and leave out
questions with no mapped answer; embed the questions with the dataset's own encoder (the model
recorded in Neo4j); export the graph from Neo4j once (cached per dataset version); run the chosen
methods over that export (the ``retrieval.base.GraphRetriever`` classes ``query`` runs on the live
graph, with the profile's settings); print and save the comparison (``report``) and, with
``sweep=True``, the expansion figure (``plots``). ``run_eval`` reads as that list of steps.

The question handling (``load_questions`` / ``prepare_questions``) needs no Neo4j.
"""
from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from loaders.kg import QASet, Query
from loaders.metaqa import load_metaqa_qa_file
from loaders.perturb import check_kinds
from seeder_dgl.datasets import (
    DatasetContext,
    find_spec,
    get_spec,
    load_user_questions,
    profile_flag,
    profile_prefix,
    runs_root,
)
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.evaluation import plots, report, typed
from seeder_dgl.evaluation.diagnose import STAGES, diagnose, render_markdown, seeded_flags
from seeder_dgl.evaluation.evaluate import (
    BASELINES,
    SEEDER,
    EvalResult,
    build_baselines,
    cached_subgraphs,
    evaluate,
    find_ablations,
    resolve_methods,
)
from seeder_dgl.fileio import atomic_write_json, atomic_write_text
from seeder_dgl.graphstore.connection import open_driver
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.paths import results_dir
from seeder_dgl.retrieval.base import GraphRetriever
from seeder_dgl.retrieval.link_training import topic_names
from seeder_dgl.retrieval.linking import EntityLinker
from seeder_dgl.retrieval.memory import attach_labels
from seeder_dgl.retrieval.pipeline import MemoryGraph, RetrievalSettings, with_relation_prior
from seeder_dgl.retrieval.policy import PolicyRetriever
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.validation import check_output_folder

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
    spec = get_spec(dataset)
    if qa_file is None:
        if spec.load_questions is None:
            raise SeederError(f"{dataset} has no questions: pass --qa-file FILE (CSV or JSON lines: question, answers)")
        return prepare_questions(spec.load_questions(source, None), split, limit, sample)
    path = Path(qa_file).expanduser()
    if dataset == "metaqa" and path.suffix.lower() == ".txt":
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
                 runs_dir: Path | None = None, profile: str = "paper", served: Path | None = None) -> MethodPlan:
    """Validate ``methods`` against what can run; the default is every baseline plus every checkpoint found.

    SeedER uses ``checkpoint``, else ``served`` (the checkpoint ``query`` serves, when the record
    points to a run elsewhere), else ``<runs>/<dataset>/full/best.pt`` (``<profile>-full`` for another
    profile); each other run folder of the same profile is the method ``seeder-<ablation>``.
    """
    runs_dir = Path(runs_dir) if runs_dir else runs_root() / dataset
    main = Path(checkpoint) if checkpoint else served or runs_dir / f"{profile_prefix(profile)}full" / "best.pt"
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


def _served_checkpoint(ds: DatasetContext, live: Callable[[], LiveGraph]) -> Path | None:
    """The checkpoint ``query`` and ``serve`` use for ``ds``'s profile when the dataset's record
    (``live().info``, read only when a checkpoint can load) points to a run outside the profile's
    own folder (``train --out``), else None."""
    try:
        from seeder_dgl.training.artifact import active_run_dir
    except ImportError:  # no torch: no checkpoint loads at all (``_load_policies`` says so)
        return None
    info = live().info
    if not info.active_run:  # never trained, or trained before records pointed to runs
        return None
    folder = active_run_dir(ds, info)
    return folder / "best.pt" if folder != ds.run_dir() else None


def _has_trained_retriever(checkpoint: Path) -> bool:
    """Whether a checkpoint's run folder holds its trained retriever (``training.artifact``)."""
    try:
        from seeder_dgl.training.artifact import artifact_path
    except ImportError:  # no torch: no checkpoint loads at all (``_load_policies`` says so)
        return False
    return artifact_path(Path(checkpoint).parent).is_file()


def _load_policies(plan: MethodPlan, info, explicit: set[str], uses_prior: bool):
    """name -> LoadedPolicy, and name -> the settings of those that came with their trained retriever
    (``inference.load_trained_retriever``; the others rank the profile's subgraphs, with the record's
    prior); a checkpoint not asked for by name that fails to load is skipped with a note."""
    policies, trained, notes = {}, {}, []
    if not plan.checkpoints:
        return policies, trained, notes
    try:  # torch and the model: an install without them still evaluates the other methods
        from seeder_dgl.inference import load_policy, load_trained_retriever
    except ImportError as exc:
        if explicit & set(plan.checkpoints):
            raise SeederError(f"SeedER checkpoints cannot be loaded in this install ({exc})") from None
        return policies, trained, [f"skipped {', '.join(plan.checkpoints)}: no checkpoint loader ({exc})"]
    for name, path in plan.checkpoints.items():
        try:
            if _has_trained_retriever(path):
                loaded = load_trained_retriever(path.parent, info, checkpoint=path.name)
                policies[name], trained[name] = loaded.policy, loaded.settings
            else:
                policies[name] = load_policy(path, dataset=info.name, embedding_model=info.model,
                                             dimension=info.dimension, bound_to=info.bound_to(uses_prior))
        except Exception as exc:  # a stale ablation checkpoint must not stop the whole evaluation
            if name in explicit:
                raise
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            notes.append(f"skipped {name} ({path}): {type(exc).__name__}: {text}")
    return policies, trained, notes


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
    spec = find_spec(dataset)
    return results_dir() / folder if spec is not None and spec.builtin else runs_root() / dataset / folder


def sample_indices(n: int, size: int | None, seed: int = 0) -> np.ndarray:
    """A fixed random sample of ``size`` positions out of ``n`` (all when size is None or >= n), sorted."""
    if size is None or size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def diagnose_method(method: PolicyRetriever, queries: Sequence[Query], query_emb: np.ndarray):
    """The funnel of one SeedER method over exactly the subgraphs it ranks (reused or computed)."""
    found = [method.subgraph(q.text, e) for q, e in zip(queries, query_emb)]
    records = [attach_labels(sub, q.answers) for (_, sub), q in zip(found, queries)]
    graph = method.graph
    seeded = seeded_flags(graph.arrays, [[i for i, _ in seeds] for seeds, _ in found], [q.answers for q in queries],
                          len(method.settings.budgets))
    funnel = diagnose(method.policy, records, graph.node_emb, query_emb, node_types=graph.type_table(method.policy),
                      seeded=seeded)
    funnel.group("hops", [q.hops for q in queries])
    funnel.group("qtype", [q.qtype for q in queries])
    funnel.group("wording", [q.wording for q in queries])
    return funnel


def save_funnel(funnel, out_dir: Path, name: str, title: str) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / f"funnel-{name}.json", {"title": title, **funnel.to_dict(),
                                                        "losses": funnel.losses()})
    return atomic_write_text(out_dir / f"funnel-{name}.md", render_markdown(funnel, title))


def render_funnel(funnel, title: str):
    """A rich table of the funnel by hop count (or overall when the questions have no hop count)."""
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
             progress: bool = True, console=None, profile: str | None = None, diagnose: bool = False,
             perturb: str | Sequence[str] | None = None) -> EvalResult:
    """Evaluate the methods on one question set; prints the tables and writes the result files.

    ``depth``: nodes asked of each method, over which ``@any`` and ``size`` are measured
    (default: the K-hop budget B = k0 + sum of the per-hop budgets, at least ``k``).
    ``out``: result folder (default ``benchmarks/results/eval-<dataset>-<split or qa-file stem>/``,
    ``-<profile>`` appended for a profile other than 'paper').
    ``profile``: the retrieval settings (seeds, budgets, seeding) every graph method starts from
    (None: the dataset's default); full-text or hybrid seeding reads each question's names from
    Neo4j once, for all methods.
    ``diagnose``: also the funnel of every SeedER policy (``evaluation.diagnose``: where answers
    are lost), per hop count and question type, saved as ``funnel-<method>.{json,md}``.
    ``perturb``: also the same questions typed as people do (``evaluation.typed``: a comma list of
    ``loaders.perturb`` kinds), scored beside them in ``typed.{json,md}`` (with ``diagnose``, a
    funnel per kind too).
    """
    check_dataset_name(dataset)
    console = console or Console()
    started = time.perf_counter()
    ds, settings = _eval_settings(dataset, profile, k, depth)  # before any slow step: a typo fails at once
    kinds = _perturbations(perturb)
    if out:
        check_output_folder(out)
    depth = int(depth or max(k, settings.budget))
    with contextlib.ExitStack() as neo4j:
        @functools.cache
        def live() -> LiveGraph:
            """The dataset's record through the one driver eval opens, both on first need: planning
            the methods (which run ``query`` serves), else loading the graph."""
            return LiveGraph(neo4j.enter_context(open_driver()), ds.name)

        plan = plan_methods(dataset, methods, checkpoint, profile=ds.profile,
                            served=None if checkpoint else _served_checkpoint(ds, live))
        questions = load_questions(dataset, split=split, qa_file=qa_file, source=source, limit=limit, sample=sample)
        _notes(console, questions.messages() + plan.notes)
        if not questions.queries:
            raise SeederError(f"none of the {questions.total} questions of {questions.label} has an answer in the "
                              f"graph: nothing to score")
        queries = questions.queries
        explicit = set(plan.names) if methods else ({SEEDER} if checkpoint else set())

        graph, query_emb, export = _load_graph(live(), ds, queries, progress, console)
        # A SeedER policy without its trained retriever learned on subgraphs grown with the profile's
        # prior: then the record's must be there (one with it brings its own).
        settings = with_relation_prior(settings, graph, ds.retrieval.relation_prior,
                                       required=any(not _has_trained_retriever(p) for p in plan.checkpoints.values()))
        if split != "train" or qa_file:
            typed.mark_wording(graph, queries, _training_questions(dataset, source))
        info = graph.info
        policies, trained, skipped = _load_policies(plan, info, explicit, settings.relation_prior is not None)
        _notes(console, skipped)
        every_settings = [settings, *trained.values()]
        _link_names(graph, every_settings, queries, query_emb, progress)
        per_method = {name: trained.get(name, settings) for name in policies}
        chosen, method_info = _build_methods(plan, graph, settings, policies, per_method,
                                             _reusable(ds, split, qa_file, per_method, queries), queries)
        command = _command_line(dataset, split, qa_file, methods, k, limit, checkpoint, sweep, source,
                                depth if depth != max(k, settings.budget) else None, sample, ds.profile)
        meta = {"dataset": dataset, "split": questions.label, "profile": ds.profile, "seeding": settings.seeding,
                "qa_file": str(qa_file) if qa_file else None, "source": source, "model": info.model,
                "seeds": settings.seeds, "budgets": list(settings.budgets), "graph": _graph_size(graph, export),
                "questions": questions.summary(), "notes": plan.notes + skipped, "command": command,
                "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        result = evaluate(chosen, queries, query_emb, k, depth=depth, info=method_info, on_error="record",
                          progress=progress, meta=meta)
        suffix = ds.profile_flag and f"-{ds.profile}"
        out_dir = Path(out) if out else default_results_dir(dataset, f"eval-{dataset}-{questions.label}{suffix}")
        title = f"{dataset} {questions.label}"
        if kinds:
            _add_typed(result, kinds, graph, chosen, policies, queries, every_settings, k, depth, method_info,
                       out_dir, title, progress, console, diagnose)

    if sweep:
        _add_sweep(result, graph, queries, query_emb, settings, out_dir, title, sweep_budgets, sweep_queries, console)
    if diagnose:
        _add_funnels(result, {n: chosen[n] for n in policies}, queries, query_emb, out_dir, title, console)
    result.meta["seconds"] = round(time.perf_counter() - started, 2)
    _save_and_show(result, out_dir, per_query, sweep, console)
    return result


def _training_questions(dataset: str, source: str | None) -> list[Query]:
    """The dataset's training questions (none where it has no question set or no train split)."""
    try:
        spec = get_spec(dataset)
        qa = spec.load_questions(source, None) if spec.load_questions is not None else None
    except SeederError:
        return []
    return [q for q in qa.split("train") if q.answers] if qa is not None and "train" in qa.splits else []


def _perturbations(perturb) -> list[str]:
    """The ``--perturb`` kinds, checked before any slow step."""
    if not perturb:
        return []

    try:
        return check_kinds(perturb)
    except ValueError as exc:
        raise SeederError(f"--perturb: {exc}") from None


def _add_typed(result: EvalResult, kinds: list[str], graph: MemoryGraph, chosen: dict, policies: dict,
               queries: Sequence[Query], settings: Sequence[RetrievalSettings], k: int, depth: int,
               method_info: dict, out_dir: Path, title: str, progress: bool, console, diagnose: bool) -> None:
    """Every method again on the questions typed as each of ``kinds``; the table beside the written
    ones in ``typed.{json,md}`` and in ``result.meta['typed']``."""
    encoder = dataset_encoder(graph.info.model)
    names = topic_names(graph, queries)
    table = {typed.AS_WRITTEN: typed.summarise(result)}
    examples = {typed.AS_WRITTEN: typed.example_texts(queries)}
    for kind in kinds:
        variant = typed.typed_queries(queries, kind, names)
        with console.status(f"Questions typed as {kind}: embedding {len(variant):,}..."):
            emb = encoder.encode([q.text for q in variant], show_progress=False)
        _link_names(graph, settings, variant, emb, progress)
        found = evaluate(chosen, variant, emb, k, depth=depth, info=method_info, on_error="record",
                         progress=progress, meta={"perturbation": kind})
        table[kind] = typed.summarise(found)
        examples[kind] = typed.example_texts(variant)
        if diagnose:
            for name in policies:
                funnel = diagnose_method(chosen[name], variant, emb)
                saved = save_funnel(funnel, out_dir, f"{name}-{kind}", f"{name} on {title}, typed as {kind}")
                table[kind][name]["funnel"] = funnel.summary()
                console.print(render_funnel(funnel, f"Where {name} loses answers typed as {kind}"), highlight=False)
                result.meta.setdefault("funnels", {})[f"{name}-{kind}"] = {"overall": funnel.summary(),
                                                                           "file": str(saved)}
    atomic_write_json(Path(out_dir) / "typed.json", {"title": title, "kinds": kinds, "results": table,
                                                      "examples": examples})
    atomic_write_text(Path(out_dir) / "typed.md", typed.to_markdown(table, title, examples))
    result.meta["typed"] = {"file": str(Path(out_dir) / "typed.md"), "kinds": kinds,
                            "results": {v: {m: r["overall"] for m, r in t.items()} for v, t in table.items()}}
    console.print(typed.render(table, title), highlight=False)


def _notes(console, lines: Sequence[str]) -> None:
    for line in lines:
        console.print(f"[yellow]note:[/] {line}", highlight=False)


def _eval_settings(dataset: str, profile: str | None, k: int, depth: int | None
                   ) -> tuple[DatasetContext, RetrievalSettings]:
    """The dataset with its profile, and the settings every method starts from; one-line errors for bad options."""
    if k <= 0:
        raise SeederError(f"--k must be at least 1, not {k}")
    if depth is not None and depth < k:
        raise SeederError(f"--depth must be at least --k ({k}), not {depth}")
    ds = DatasetContext.open(dataset, profile)
    defaults = ds.retrieval
    return ds, RetrievalSettings(seeds=defaults.seeds, budgets=tuple(defaults.budgets), seeding=defaults.seeding)


def _load_graph(live: LiveGraph, ds: DatasetContext, queries: Sequence[Query], progress: bool,
                console) -> tuple[MemoryGraph, np.ndarray, object]:
    """The dataset's export (cached per dataset version) as the graph every method runs on, the
    questions embedded with the dataset's own encoder, and the export itself."""
    live.check_ready()
    encoder = dataset_encoder(live.info.model)
    with console.status(f"Embedding {len(queries):,} questions with {live.info.model}..."):
        query_emb = encoder.encode([q.text for q in queries], show_progress=False)
    export = export_graph(live.driver, ds.name, ds.export_dir, progress=progress)
    return MemoryGraph.from_export(export, live), query_emb, export


def _link_names(graph: MemoryGraph, settings: Sequence[RetrievalSettings], queries: Sequence[Query],
                query_emb: np.ndarray, progress: bool) -> None:
    """Full-text or hybrid seeding: each question's candidates read from Neo4j now, once for all
    methods that put the question to the name index alike (``settings``: theirs)."""
    read = set()
    for one in settings:
        words = (one.linker or EntityLinker.default()).name_query
        if one.seeding != "dense" and words not in read:
            read.add(words)
            graph.link_names([q.text for q in queries], query_emb, words=words, progress=progress)


def _graph_size(graph: MemoryGraph, export) -> dict:
    return {"nodes": int(graph.arrays.num_nodes), "edges": int(graph.arrays.num_edges),
            "relations": len(export.relation_types)}


def _reusable_subgraphs(ds: DatasetContext, split: str, qa_file, settings: RetrievalSettings,
                        queries: Sequence[Query]) -> tuple[dict[str, QuerySubgraph], str]:
    """Subgraphs ``extract`` cached for these questions with these settings, by question text, and
    where they come from (or why there are none)."""
    if qa_file is not None:
        return {}, "in-memory K-hop (a --qa-file has no extracted split)"
    by_id, why = cached_subgraphs(ds.subgraph_dir(split), settings)
    return {q.text: by_id[int(q.id)] for q in queries if int(q.id) in by_id}, why


def _reusable(ds: DatasetContext, split: str, qa_file, per_method: dict[str, RetrievalSettings],
              queries: Sequence[Query]) -> dict[str, tuple[dict[str, QuerySubgraph], str]]:
    """``_reusable_subgraphs`` of each SeedER method's settings, the cache read once per settings."""
    read: dict[str, tuple[dict[str, QuerySubgraph], str]] = {}
    out = {}
    for name, settings in per_method.items():
        key = repr(sorted(settings.describe().items()))
        if key not in read:
            read[key] = _reusable_subgraphs(ds, split, qa_file, settings, queries)
        out[name] = read[key]
    return out


def _build_methods(plan: MethodPlan, graph: MemoryGraph, settings: RetrievalSettings, policies: dict,
                   per_method: dict[str, RetrievalSettings], reusable: dict[str, tuple[dict[str, QuerySubgraph], str]],
                   queries: Sequence[Query]) -> tuple[dict[str, GraphRetriever], dict[str, dict]]:
    """Every planned method on ``graph`` (in table order), and how each is configured: the baselines
    with ``settings``, each SeedER policy with its own (``per_method``) and the subgraphs ``extract``
    cached with them (``reusable``)."""
    chosen, info = build_baselines(graph, [n for n in plan.names if n in BASELINES], settings)
    for name, policy in policies.items():
        mine, (expansions, why) = per_method[name], reusable[name]
        covered = sum(1 for q in queries if q.text in expansions)
        note = (f"subgraphs: {covered} of {len(queries)} from the extract cache (latency excludes their "
                f"K-hop extraction), the rest K-hop in memory" if covered else
                f"subgraphs: K-hop in memory, timed with the ranking ({why})")
        chosen[name] = PolicyRetriever(graph, mine, policy=policy, expansions=expansions)
        info[name] = {"checkpoint": str(plan.checkpoints[name]), "seeds": mine.seeds,
                      "budgets": list(mine.budgets), "cached_subgraphs": covered, "note": note}
    return {n: chosen[n] for n in plan.names if n in chosen}, info


def _add_sweep(result: EvalResult, graph: MemoryGraph, queries: Sequence[Query], query_emb: np.ndarray,
               settings: RetrievalSettings, out_dir: Path, title: str, sweep_budgets, sweep_queries, console) -> None:
    """The budget sweep and K-hop growth figures on a fixed sample of the questions."""
    pick = sample_indices(len(queries), sweep_queries)
    sub_q, sub_emb = [queries[i] for i in pick], query_emb[pick]
    with console.status(f"Budget sweep and k-hop growth on {len(pick)} questions..."):
        sweep_data = plots.budget_sweep(graph.arrays, graph.node_emb, graph.rel_emb, sub_q, sub_emb,
                                        seeds=settings.seeds, budgets=settings.budgets,
                                        sweep=sweep_budgets or plots.SWEEP_BUDGETS)
        growth = plots.khop_growth(graph.arrays, graph.node_emb, sub_emb, seeds=settings.seeds)
    figures = plots.save_figures(out_dir, growth, sweep_data, title=title)
    result.meta["sweep"] = {"queries": len(pick), "files": {k_: str(v) for k_, v in figures.items()}}


def _add_funnels(result: EvalResult, seeders: dict[str, PolicyRetriever], queries: Sequence[Query],
                 query_emb: np.ndarray, out_dir: Path, title: str, console) -> None:
    """Where each SeedER policy loses answers, printed and saved beside the results."""
    if not seeders:
        console.print("[yellow]note:[/] --diagnose needs a SeedER checkpoint: no funnel", highlight=False)
    for name, method in seeders.items():
        funnel = diagnose_method(method, queries, query_emb)
        saved = save_funnel(funnel, out_dir, name, f"{name} on {title}")
        console.print(render_funnel(funnel, f"Where {name} loses answers"), highlight=False)
        result.meta.setdefault("funnels", {})[name] = {"overall": funnel.summary(), "file": str(saved)}


def _save_and_show(result: EvalResult, out_dir: Path, per_query: bool, sweep: bool, console) -> None:
    paths = report.save(result, out_dir, per_query=per_query)
    report.render(result, console)
    console.print(f"results: {paths['json']} and {paths['markdown']}; STaRK-format predictions in "
                  f"{paths.get('predictions')}", highlight=False)
    if sweep:
        console.print(f"expansion figure: {out_dir / 'expansion.png'} (data: {out_dir / 'sweep.json'})",
                      highlight=False)
