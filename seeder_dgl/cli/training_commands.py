"""`extract`, `tune`, `train`: from a graph in Neo4j to a trained policy."""
from __future__ import annotations

import typer

from seeder_dgl.cli.base import (
    BudgetsOption,
    ProfileOption,
    SeedingOption,
    SeedsOption,
    app,
    console,
    one_line_errors,
    parse_budgets,
)
from seeder_dgl.errors import SeederError


# ---- extract ----------------------------------------------------------------------------------
@app.command()
@one_line_errors
def extract(
    dataset: str = typer.Argument(..., help="An ingested dataset with questions (metaqa, prime, ...)."),
    split: list[str] = typer.Option(["train", "val"], help="Question split(s) to extract; repeat the option."),
    source: str = typer.Option(None, help="Folder of the dataset's question files \\[default: ../shared]."),
    seeds: SeedsOption = None,
    budgets: BudgetsOption = None,
    profile: ProfileOption = None,
    seeding: SeedingOption = None,
    limit: int = typer.Option(None, min=1, help="Only the first N questions of each split (quick runs)."),
    sample: int = typer.Option(None, min=1, help="A fixed random sample of N questions of each split (seed 0)."),
    overwrite: bool = typer.Option(False, help="Replace a cache built with other settings."),
    engine: str = typer.Option("cypher", help="cypher: every query through Cypher on the live graph; memory: "
                                              "read the graph from Neo4j once, then the same K-hop in memory (faster)."),
    questions: str = typer.Option(None, help="Question file of your own graph (CSV or JSON lines) "
                                             "\\[default: the one recorded at ingest]."),
    refit_prior: bool = typer.Option(False, help="Fit the entity linker and the relation prior again on the "
                                                 "training questions, e.g. after the graph changed."),
):
    """Extract K-hop-with-filtering subgraphs of question splits from the live graph into the cache.

    Training reads this cache and never queries Neo4j; a killed run resumes at the next shard.
    """
    from seeder_dgl.evaluation.tune import extract_chosen

    if engine not in ("cypher", "memory"):
        raise SeederError(f"--engine is cypher or memory, not {engine!r}")
    extract_chosen(dataset, splits=split, source=source, seeds=seeds, budgets=parse_budgets(budgets),
                   profile=profile, seeding=seeding, limit=limit, sample=sample, overwrite=overwrite, engine=engine,
                   questions=questions, refit_prior=refit_prior, console=console)


@app.command()
@one_line_errors
def tune(
    dataset: str = typer.Argument(..., help="An ingested dataset with questions."),
    questions: str = typer.Option(None, help="Question file to tune on \\[default: the dataset's]."),
):
    """Choose the dataset's retrieval settings (seeding mode, k0, per-hop budgets) on its validation questions.

    Every candidate setting runs on the validation questions; the one whose K-hop subgraphs hold an
    answer most often (the cheaper one within 0.01) is stored with the dataset, and extract, train,
    eval and query use it (profile 'tuned'). `extract` runs this when nothing was chosen yet.
    """
    from seeder_dgl.evaluation.tune import run_tune

    run_tune(dataset, questions=questions, console=console)


# ---- train ------------------------------------------------------------------------------------
@app.command()
@one_line_errors
def train(
    dataset: str = typer.Argument(..., help="A dataset whose train/val subgraphs are extracted (seeder-dgl extract)."),
    epochs: int = typer.Option(None, min=1, help="Epochs \\[default: the dataset's, from docs/method.md's table]."),
    device: str = typer.Option("auto", help="auto (CUDA when there is one), cpu, cuda, cuda:1, ..."),
    out: str = typer.Option(None, help="Run folder \\[default: runs/<dataset>/<ablation>]."),
    resume: bool = typer.Option(False, help="Continue an interrupted run exactly (from last.pt)."),
    seed: int = typer.Option(0, help="Random seed: the same seed gives the same run on CPU."),
    ablation: str = typer.Option("full", help="full, rerank, greedy_baseline, single_trajectory, no_baseline, no_aux."),
    limit: int = typer.Option(None, min=1, help="Only the first N questions of each split (quick runs)."),
    threads: int = typer.Option(None, min=1, help="CPU threads when OMP_NUM_THREADS is unset \\[default: 1 on <= 2 cores]."),
    workers: int = typer.Option(None, min=1, help="Training processes on the CPU, one thread each, every batch "
                                                  "split between them and the gradients summed by torch's "
                                                  "DistributedDataParallel (2 on 2 cores: about 1.4 times as fast); "
                                                  "the result depends on it \\[default: 2 for MetaQA's deep "
                                                  "profile and graphs of your own, else 1]. Under torchrun the "
                                                  "processes are torchrun's."),
    lr: float = typer.Option(None, help="Learning rate override."),
    batch_size: int = typer.Option(None, min=1, help="Queries per step override."),
    dropout: float = typer.Option(None, help="Dropout in the encoder and heads, override \\[default: the "
                                             "profile's: 0 for MetaQA's deep profile, else 0.1]."),
    patience: int = typer.Option(None, min=1, help="Stop after N epochs (past the warm-up) without a better "
                                                   "validation score \\[default: 3 for graphs of your own, "
                                                   "off for built-in datasets]."),
    profile: str = typer.Option(None, help="Retrieval profile whose subgraphs were extracted "
                                           "(seeder-dgl extract --profile): paper, or MetaQA's deep "
                                           "\\[default: the dataset's best: MetaQA deep, others paper]."),
):
    """Train the SeedER expansion policy and scoring head on the cached K-hop subgraphs.

    Saves best.pt (by validation MRR, ties broken by Recall@20), last.pt, config.json, metrics.json,
    history.csv and curves.png in the run folder.

    On several GPUs or machines, start one process per device with torchrun, e.g.
    `torchrun --nproc-per-node 4 -m seeder_dgl.cli train metaqa --device cuda` (every machine needs
    the extracted subgraphs; rank 0 writes the run folder).
    """
    from seeder_dgl.training.command import run_training

    overrides = {k: v for k, v in {"lr": lr, "batch_size": batch_size, "dropout": dropout, "patience": patience,
                                   "workers": workers}.items() if v is not None}
    result = run_training(dataset, epochs=epochs, device=device, out=out, resume=resume, seed=seed,
                          ablation=ablation, limit=limit, overrides=overrides or None, threads=threads,
                          profile=profile)
    if result is not None:  # None: a torchrun process other than rank 0, which followed rank 0's run
        console.print(result.summary())
