"""`seeder-dgl tune`: choose a dataset's retrieval settings on its own validation questions.

The policy can only pick nodes the K-hop subgraph holds, so the settings that decide the ceiling
(seeding mode, k0, per-hop budgets) are chosen by the coverage report: every candidate below is run
on the validation questions, and the one whose subgraphs hold an answer most often wins. A setting
within ``TOLERANCE`` of the best with smaller subgraphs (then earlier in the list) is preferred.
The choice is stored in the dataset record in Neo4j and in its manifest, so that `extract`, `train`,
`eval` and `query` all use it (profile 'tuned').
"""
from __future__ import annotations

import json
import time
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from loaders.kg import Query
from seeder_dgl.datasets import (TUNED, TUNE_RECORD, RetrievalDefaults, dataset_dir, get_spec, read_manifest,
                                 write_manifest)
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.errors import SeederError
from seeder_dgl.evaluation.command import sample_indices
from seeder_dgl.evaluation.coverage import CANDIDATES, CoverageSetting, coverage
from seeder_dgl.fileio import atomic_write_json
from seeder_dgl.graphstore import lease
from seeder_dgl.graphstore.connection import open_driver
from seeder_dgl.graphstore.export import export_graph
from seeder_dgl.graphstore.live import LiveGraph
from seeder_dgl.retrieval.extract import LinkerFit, ensure_linking, extract_dataset
from seeder_dgl.retrieval.pipeline import MemoryGraph

MIN_PRIOR_QUESTIONS = 100
"""Training questions with an answer needed before a relation prior is fitted and tried."""
TOLERANCE = 0.01
"""Subgraph Hit@any a cheaper setting may give up against the best one."""
MAX_QUESTIONS = 500
"""Validation questions (a fixed sample) the candidates run on."""
MIN_QUESTIONS = 50
"""Fewer validation questions than this: training questions are added (never test questions)."""


def tuning_questions(qa, seed: int = 0) -> tuple[list[Query], str]:
    """A fixed sample of validation questions with an answer; training ones added when too few."""
    val = [q for q in qa.split("val") if q.answers] if "val" in qa.splits else []
    used = "val"
    if len(val) < MIN_QUESTIONS and "train" in qa.splits:
        val = val + [q for q in qa.split("train") if q.answers]
        used = "val+train"
    if not val:
        raise SeederError(f"{qa.name} has no validation or training question with an answer in the graph: "
                          "check that the answers name nodes of this graph")

    return [val[i] for i in sample_indices(len(val), MAX_QUESTIONS, seed)], used


def choose(rows: list[dict], candidates=CANDIDATES) -> dict:
    """The row (group 'all') of the setting to use: the best subgraph Hit@any, or the first
    candidate within ``TOLERANCE`` of it with the fewest nodes (then the earliest)."""
    overall = [r for r in rows if r["group"] == "all"]
    best = max(r["subgraph_hit_any"] for r in overall)
    order = {c.name: i for i, c in enumerate(candidates)}
    eligible = [r for r in overall if r["subgraph_hit_any"] >= best - TOLERANCE]
    return min(eligible, key=lambda r: (round(r["mean_nodes"]), order.get(r["setting"], len(order))))


def choose_with_prior(rows: list[dict], prior_rows: list[dict], candidates=CANDIDATES) -> dict:
    """``choose`` over ``rows`` and the chosen setting's ``prior_rows``, keeping the relation prior
    whenever its subgraphs hold an answer within ``TOLERANCE`` of the best: beside K-hop, it gives
    the policy the relation-path score of every node (``path_prior``): on MetaQA's validation split
    the same policy's Hit@1 went from 0.754 without a prior to 0.985 with the template prior
    (``training/config.py``)."""
    with_prior = next(r for r in prior_rows if r["group"] == "all")
    best = max(r["subgraph_hit_any"] for r in rows + prior_rows if r["group"] == "all")
    return with_prior if with_prior["subgraph_hit_any"] >= best - TOLERANCE else choose(rows + prior_rows, candidates)


def _setting(row: dict) -> CoverageSetting:
    return CoverageSetting(row["mode"], int(row["seeds"]), tuple(int(b) for b in row["budgets"]))


def _fit_linking(driver, graph, qa, console):
    """The entity linker and relation prior fitted on the training questions (``extract`` would fit
    the same; they are stored with the dataset), or (None, None) with too few training questions."""
    train = [q for q in qa.split("train") if q.answers] if "train" in qa.splits else []
    if len(train) < MIN_PRIOR_QUESTIONS:
        return None, None
    # Linked as the profile tune stores will link (``tuned_settings`` keeps the defaults' linking),
    # so that extract finds this linker fitted its way and does not fit it again.
    try:
        learned = ensure_linking(driver, graph, train, dataset_encoder(graph.info.model),
                                 CANDIDATES[-1].retrieval, with_prior=False, fit=LinkerFit.of(RetrievalDefaults()),
                                 refit=True)
    except SeederError as exc:  # too few topics within reach of an answer: hand-set linking
        console.print(f"[yellow]note:[/] no learned entity linking: {exc}")
        return None, None
    return learned.linker, learned.linker.prior


def _with_prior(graph, sample: list[Query], emb, chosen: dict, linker, prior) -> list[dict]:
    """Coverage rows of the chosen setting with the relation prior fitted on the training questions
    (``retrieval.relation_prior``); whether retrieval follows it is decided by the rows, like every
    other setting."""
    setting = _setting(chosen)
    with_prior = CoverageSetting(setting.mode, setting.seeds, setting.budgets, relation_prior=prior, linker=linker)
    return coverage(graph, sample, emb, [with_prior], group_by="hops", progress=True)


def run_tune(dataset: str, *, questions: str | None = None, console=None, seed: int = 0) -> dict:
    """Run the candidates, store the choice, return it (also written to ``<cache>/<dataset>/tune.json``)."""
    console = console or Console()
    spec = get_spec(dataset)
    if spec.load_questions is None:
        raise SeederError(f"{dataset} has no questions to tune on")
    qa = spec.load_questions(questions, None)
    sample, used = tuning_questions(qa, seed)
    start = time.perf_counter()
    with open_driver() as driver:
        live = LiveGraph(driver, dataset)
        live.check_ready()
        lease.check_free(driver, dataset, "tune", live.database)  # before minutes of work, not after
        emb = dataset_encoder(live.info.model).encode([q.text for q in sample], show_progress=False)
        graph = MemoryGraph.from_export(export_graph(driver, dataset, dataset_dir(dataset) / "export", progress=False),
                                        live)
        linker, prior = _fit_linking(driver, graph, qa, console)
        rows = coverage(graph, sample, emb, [replace(c, linker=linker) for c in CANDIDATES], group_by="hops",
                        progress=True)
        chosen = choose(rows)
        prior_rows = _with_prior(graph, sample, emb, chosen, linker, prior) if prior is not None else []
        if prior_rows:
            chosen = choose_with_prior(rows, prior_rows)
            rows += prior_rows
        settings = {"seeds": chosen["seeds"], "budgets": list(chosen["budgets"]), "seeding": chosen["mode"],
                    "relation_prior": bool(chosen.get("relation_prior")),
                    "subgraph_hit_any": round(chosen["subgraph_hit_any"], 4), "questions": len(sample),
                    "chosen_on": used}
        lease.write_record(driver, dataset, "tune", "dataset/set_retrieval", "storing the tuned settings",
                           live.database, retrieval=json.dumps(settings))
    manifest = read_manifest(dataset) or {"name": dataset, "format": dataset}
    manifest["retrieval"] = settings
    write_manifest(dataset, manifest)
    atomic_write_json(dataset_dir(dataset) / TUNE_RECORD, {"dataset": dataset, "chosen": settings, "rows": rows,
                                                         "seconds": round(time.perf_counter() - start, 2)})
    table = Table(title=f"retrieval settings for {dataset} ({len(sample)} {used} questions)")
    for column in ("setting", "group", "answer in subgraph", "topic in seeds", "nodes", "ms"):
        table.add_column(column, justify="left" if column in ("setting", "group") else "right")
    for r in rows:
        mark = " *" if r["setting"] == chosen["setting"] else ""
        topic = "-" if r["topic_in_seeds"] is None else f"{r['topic_in_seeds']:.3f}"
        table.add_row(r["setting"] + mark, r["group"], f"{r['subgraph_hit_any']:.3f}", topic,
                      f"{r['mean_nodes']:.0f}", f"{r['p50_ms']:.1f}")
    console.print(table)
    console.print(f"chosen for {dataset}: {chosen['setting']} (answer in subgraph {chosen['subgraph_hit_any']:.3f}); "
                  f"extract, train, eval and query use it")
    return settings



def extract_chosen(dataset: str, *, splits: list[str], source: str | None = None, seeds: int | None = None,
                   budgets: tuple[int, ...] | None = None, profile: str | None = None, **options) -> None:
    """`seeder-dgl extract`: ``retrieval.extract.extract_dataset`` with the dataset's retrieval
    settings, chosen first on its validation questions (``run_tune``, profile 'tuned') where the
    dataset has none yet and the command names neither a profile nor seeds or budgets."""
    console = options["console"]
    spec = get_spec(dataset)
    if spec.load_questions is None:
        raise SeederError(f"{dataset} has no questions to extract subgraphs for")
    if profile is None and spec.untuned and seeds is None and not budgets:
        console.print(f"{dataset} has no retrieval settings yet: choosing them on its validation questions "
                      f"(seeder-dgl tune {dataset})")
        run_tune(dataset, questions=options.get("questions"), console=console)
        profile = TUNED
    extract_dataset(dataset, splits=splits, source=source, seeds=seeds, budgets=budgets, profile=profile, **options)
