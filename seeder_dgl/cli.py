"""The `seeder-dgl` command line.

Every command that fails for a reason the user can fix prints one line (``error: ...``) and
exits 1; tracebacks are for bugs only.

Each command imports what it runs inside its own body: `seeder-dgl --help` and `neo4j status`
answer in a fraction of a second instead of loading torch, sentence-transformers and the driver
(the only function-local imports of the package besides optional extras and `seeder_dgl.__init__`'s
lazy `Retriever`).
"""
from __future__ import annotations

import functools
import sys
from typing import Callable, Optional

import typer
from rich.console import Console

from seeder_dgl.errors import SeederError, raised_from

app = typer.Typer(
    name="seeder-dgl",
    help="SeedER retrieval on knowledge graphs kept in Neo4j: ingest, extract, train, query, evaluate.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
neo4j_app = typer.Typer(help="Manage the project's local Neo4j Community server (5.26 LTS or the calendar line).",
                        no_args_is_help=True)
app.add_typer(neo4j_app, name="neo4j")

console = Console()
err_console = Console(stderr=True)


INTERRUPTED_HINTS = {
    # A new `train` without --resume starts the run over; --resume continues from last.pt.
    "train": "run it again with --resume to continue after the last finished epoch",
}
"""What to do after Ctrl-C, for commands where running the same command again does not continue."""


def one_line_errors(func: Callable) -> Callable:
    """Turn the project's user-facing errors into one red line and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except SeederError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        except Exception as exc:
            if raised_from(exc, KeyboardInterrupt):  # Ctrl-C in the driver can surface as its cleanup's error
                err_console.print(f"[yellow]interrupted[/]: what was committed to Neo4j or disk is kept; "
                                  f"{INTERRUPTED_HINTS.get(func.__name__, 'run the same command again to continue')}",
                                  soft_wrap=True)
                raise typer.Exit(130)
            # A driver error no layer below turned into a SeederError (a statement the command runs
            # itself): the server's reason, on one line, never the driver's traceback.
            if not type(exc).__module__.startswith("neo4j."):
                raise
            from seeder_dgl.graphstore.connection import describe_neo4j_error

            err_console.print(f"[bold red]error:[/] {describe_neo4j_error(exc, 'Neo4j')}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(1)
        except KeyboardInterrupt:
            hint = INTERRUPTED_HINTS.get(func.__name__, "run the same command again to continue")
            err_console.print(f"[yellow]interrupted[/]: what was committed to Neo4j or disk is kept; {hint}",
                              soft_wrap=True)
            raise typer.Exit(130)

    return wrapper


# ---- neo4j ------------------------------------------------------------------------------------
def _local_server():
    from seeder_dgl.graphstore.connection import Neo4jSettings
    from seeder_dgl.graphstore.server import LocalNeo4j

    settings = Neo4jSettings.from_env()
    if settings.external:
        return settings, None
    return settings, LocalNeo4j()


@neo4j_app.command("start")
@one_line_errors
def neo4j_start(timeout: float = typer.Option(180.0, help="Seconds to wait for Bolt to answer."),
                version: Optional[str] = typer.Option(
                    None, "--version", help="Neo4j release: 5.26.30 (default, LTS, Java 17+), 2026.08.1 (the calendar "
                    "line, Java 21+), or the aliases lts / calendar (SEEDER_NEO4J_VERSION). An instance keeps the "
                    "version its store was made with.")):
    """Fetch Neo4j Community from Maven Central (first time only) and start it on 127.0.0.1."""
    from seeder_dgl.graphstore.versions import check_version

    settings, server = _local_server()
    if server is None:
        console.print(f"NEO4J_URI is set ({settings.uri}): using that server, starting nothing.")
        return
    if version is not None:
        server.settings.version = check_version(version)
    server.preflight()
    if not server.jars_present():
        with console.status(f"Fetching Neo4j {server.settings.version} jars from Maven Central (first run only)..."):
            server.fetch()
    with console.status(f"Starting Neo4j on {server.settings.uri}..."):
        pid, started = server.start(timeout=timeout)
    verb = "started" if started else "already running"
    console.print(f"Neo4j {server.settings.version} {verb}: pid {pid}, {server.settings.uri}, "
                  f"data in {server.settings.data_dir}")
    if server.procedures_problem:
        err_console.print(f"[yellow]warning:[/] {server.procedures_problem}; K-hop runs through Cypher",
                          highlight=False, soft_wrap=True)


@neo4j_app.command("plugin")
@one_line_errors
def neo4j_plugin(version: Optional[str] = typer.Option(
        None, "--version", help="The Neo4j release the jar is for (5.26.x or the calendar line; default "
        "SEEDER_NEO4J_VERSION, else 5.26.30).")):
    """Build seeder-dgl's Neo4j procedures (once per version) and print the jar's path.

    `neo4j start` installs them in the local server itself. For a server of your own, copy the jar
    into its plugins/ folder and restart it: K-hop then runs inside the server (SEEDER_KHOP).
    """
    from seeder_dgl.graphstore.procedures import build_jar
    from seeder_dgl.graphstore.server import ServerSettings, java_for
    from seeder_dgl.graphstore.versions import check_version

    settings = ServerSettings.from_env()
    target = check_version(version) if version is not None else settings.version
    with err_console.status(f"Building the seeder-dgl procedures for Neo4j {target} with Maven..."):
        jar = build_jar(settings.plugins_cache, target, java_for(target))
    typer.echo(str(jar))


@neo4j_app.command("stop")
@one_line_errors
def neo4j_stop():
    """Stop the local server started by `seeder-dgl neo4j start`."""
    settings, server = _local_server()
    if server is None:
        console.print(f"NEO4J_URI is set ({settings.uri}): that server is not managed here; nothing stopped.")
        return
    if server.stop():
        console.print("Neo4j stopped.")
    else:
        console.print("No local Neo4j server is running.")


@neo4j_app.command("status")
@one_line_errors
def neo4j_status():
    """Say whether the server answers, its version and edition, and whether it has seeder-dgl's procedures."""
    from seeder_dgl.graphstore.connection import open_driver, server_components
    from seeder_dgl.graphstore.procedures import server_has_procedures
    from seeder_dgl.graphstore.versions import version_supported

    settings, server = _local_server()
    if server is not None and not server.is_running():
        console.print(f"No local Neo4j server is running (would listen on {server.settings.uri}).")
        raise typer.Exit(3)
    with open_driver(settings) as driver:
        info = server_components(driver)
        procedures = "with" if server_has_procedures(driver, settings.database) else "without"
    pid = f", pid {server.pid()}" if server is not None else ""
    console.print(f"Neo4j {info['versions'][0]} {info['edition']} answers at {settings.uri}{pid}, "
                  f"{procedures} seeder-dgl's procedures")
    if not version_supported(info["versions"][0]):
        err_console.print(f"[yellow]warning:[/] seeder-dgl needs Neo4j 5.26 or newer (5.26 LTS or the calendar line "
                          f"2025.x and later); this server is {info['versions'][0]}", highlight=False)


# ---- shared option helpers ---------------------------------------------------------------------
def _budgets(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    from seeder_dgl.validation import check_budgets

    return check_budgets(text) if text else default


@app.command()
@one_line_errors
def ingest(
    dataset: str = typer.Argument(..., help="prime, mag, amazon, metaqa or synthetic; or a name of your own for "
                                            "your graph's files (--source)."),
    source: str = typer.Option(None, help="Local folder (or processed.zip) with the dataset's files; "
                                          "STaRK graphs are downloaded from the Hugging Face hub without it. "
                                          "Your own graph: a triples file (head, relation, tail) or a folder "
                                          "with one, or with nodes.* and edges.* tables (CSV, TSV, JSON lines, "
                                          "Parquet), and questions.csv/.jsonl beside them."),
    model: str = typer.Option(None, help="sentence-transformers model name or path for node embeddings "
                                         "\\[default: all-MiniLM-L6-v2, packaged offline]."),
    reset: bool = typer.Option(False, help="Delete the dataset from Neo4j first and ingest it anew."),
    batch_size: int = typer.Option(256, min=1, help="Texts per encoder batch."),
    quantization: bool = typer.Option(False, help="Quantize the vector index (less memory, approximate order)."),
    ef_construction: int = typer.Option(
        100, "--index-ef-construction", min=1, max=3200,  # writer.EF_CONSTRUCTION, Neo4j's default
        help="HNSW build width of the vector index: lower builds faster with lower seeding recall "
             "(Prime scale: 50 took 58 s instead of 89 s, recall@3 0.836 instead of 0.876)."),
    name: str = typer.Option(None, help="Store a built-in format under this dataset name (e.g. your own graph in "
                                        "MetaQA's format: ingest metaqa --name mykg --source DIR) "
                                        "\\[default: the dataset argument]."),
    embeddings: str = typer.Option(None, help="Precomputed node embeddings: a torch-saved dict node id -> vector "
                                              "(STaRK's candidate_emb_dict.pt); --model must name the model that "
                                              "made them, so questions are encoded in the same space."),
    questions: str = typer.Option(None, help="Your graph's question file (CSV or JSON lines: question, answers, "
                                             "optional split and topic) \\[default: questions.csv/.jsonl beside "
                                             "the graph files]."),
):
    """Load a knowledge graph, embed its node texts and write it into Neo4j with a vector index.

    Re-running changes nothing; a killed run continues where it stopped.
    """
    from seeder_dgl.ingest import ingest_files

    ingest_files(dataset, source=source, model=model, reset=reset, batch_size=batch_size, quantization=quantization,
                 ef_construction=ef_construction, name=name, embeddings=embeddings, questions=questions,
                 console=console)


@app.command()
@one_line_errors
def status():
    """List the datasets in Neo4j with their counts, model and state."""
    from rich.table import Table

    from seeder_dgl.graphstore.connection import Neo4jSettings, open_driver
    from seeder_dgl.graphstore.cypher import query

    settings = Neo4jSettings.from_env()
    with open_driver(settings) as driver:
        rows = driver.execute_query(query("dataset/list"), database_=settings.database).records
    if not rows:
        console.print(f"No dataset is ingested in {settings.uri}: run `seeder-dgl ingest metaqa`.")
        return
    table = Table(title=f"datasets in {settings.uri}")
    for column in ("name", "label", "status", "nodes", "relationships", "model", "dim", "tuned retrieval"):
        table.add_column(column)
    for r in rows:
        tuned = ""
        if r["retrieval"]:
            import json

            chosen = json.loads(r["retrieval"])
            tuned = f"{chosen['seeding']} k0={chosen['seeds']} b={'/'.join(map(str, chosen['budgets']))}"
        table.add_row(r["name"], str(r["label"]), str(r["status"]), f"{r['num_nodes'] or 0:,}",
                      f"{r['num_relationships'] or 0:,}", str(r["model"]), str(r["dimension"]), tuned)
    console.print(table)


@app.command()
@one_line_errors
def adopt(
    dataset: str = typer.Argument(..., help="The name to give the adopted graph in seeder-dgl."),
    label: str = typer.Option(None, help="Label of the graph's nodes in Neo4j (e.g. Movie, or Entity); needed the "
                                         "first time \\[default: the one adopted before]."),
    id_property: str = typer.Option(None, help="Property holding each node's unique id; needed the first time."),
    name_property: str = typer.Option(None, help="Property holding each node's name (what questions mention); "
                                                 "needed the first time."),
    text_property: str = typer.Option(None, help="Property holding the text to embed \\[default: the name]."),
    embedding_property: str = typer.Option(None, help="Property holding an embedding made by --model; nodes "
                                                      "without a usable one are encoded."),
    type_property: str = typer.Option(None, help="Property holding the node type \\[default: the node's other "
                                                 "labels, else entity]."),
    relationship_types: str = typer.Option(None, help="Comma list of relationship types between those nodes that "
                                                      "retrieval follows \\[default: all]."),
    questions: str = typer.Option(None, help="Question file (CSV or JSON lines: question, answers as names or "
                                             "ids, optional split and topic)."),
    model: str = typer.Option(None, help="sentence-transformers model for the embeddings \\[default: the one "
                                         "adopted with, else all-MiniLM-L6-v2]."),
    reset: bool = typer.Option(False, help="Take everything seeder-dgl added off the nodes first and adopt anew "
                                           "(other options, another model; or a copy an older version made)."),
    batch_size: int = typer.Option(256, min=1, help="Texts per encoder batch."),
):
    """Use a graph that already lives in Neo4j [bold]in place[/]: retrieval reads your nodes and
    relationships as they are now, and never changes or deletes them.

    On each node with --label, seeder-dgl adds only its own label KG_<dataset> and properties
    named KG_<dataset>_id, _embedding, _sketch, _sketch_error, _type and _digest (so none clashes
    with yours), plus an id constraint, a vector index and a full-text index (on your name
    property) for that label. Names and texts are read from your properties. Relationships you
    add between adopted nodes are followed by the next query. Run `adopt <dataset>` again after
    adding nodes (they get embedded), changing texts (re-embedded) or taking the label off nodes
    (released). `seeder-dgl drop <dataset>` removes exactly what seeder-dgl added; your data stays.
    Then extract, train, eval and query work as for any dataset.
    """
    from seeder_dgl.ingest import adopt_graph

    adopt_graph(dataset, label=label, id_property=id_property, name_property=name_property,
                text_property=text_property, embedding_property=embedding_property, type_property=type_property,
                relationship_types=relationship_types, questions=questions, model=model, reset=reset,
                batch_size=batch_size, console=console)


@app.command()
@one_line_errors
def drop(
    dataset: str = typer.Argument(..., help="An ingested dataset."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
):
    """Remove a dataset: exactly what seeder-dgl wrote for it in Neo4j (nodes, relationships, indexes,
    id constraint, record) and its cache folder (exports, subgraphs). Trained runs are kept.

    A graph adopted in place keeps its nodes and relationships: only seeder-dgl's label
    KG_<dataset> and its KG_<dataset>_* properties come off them, and its indexes, constraint and
    record go. Other datasets are never touched; a drop cut off half way finishes when run again.
    """
    from seeder_dgl.ingest import drop_dataset

    if not drop_dataset(dataset, confirm=None if yes else typer.confirm, console=console):
        raise typer.Exit(1)


# ---- extract ----------------------------------------------------------------------------------
@app.command()
@one_line_errors
def extract(
    dataset: str = typer.Argument(..., help="An ingested dataset with questions (metaqa, prime, ...)."),
    split: list[str] = typer.Option(["train", "val"], help="Question split(s) to extract; repeat the option."),
    source: str = typer.Option(None, help="Folder of the dataset's question files \\[default: ../shared]."),
    seeds: int = typer.Option(None, help="k0 seeds per query \\[default: the profile's]."),
    budgets: str = typer.Option(None, help="Nodes added per hop, comma-separated, e.g. 50,97 \\[default: the profile's]."),
    profile: str = typer.Option(None, help="Retrieval settings: paper (the paper's: dense seeds, k0=3, B=150), or a "
                                           "dataset's own (MetaQA: deep) \\[default: the dataset's best: MetaQA "
                                           "deep, others paper]."),
    seeding: str = typer.Option(None, help="dense, fulltext or hybrid \\[default: the profile's]."),
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
    from seeder_dgl.datasets import TUNED, get_spec
    from seeder_dgl.evaluation.tune import run_tune
    from seeder_dgl.retrieval.extract import extract_dataset

    if engine not in ("cypher", "memory"):
        raise SeederError(f"--engine is cypher or memory, not {engine!r}")
    spec = get_spec(dataset)
    if spec.load_questions is None:
        raise SeederError(f"{dataset} has no questions to extract subgraphs for")
    if profile is None and not spec.builtin and spec.default_profile != TUNED and seeds is None and not budgets:
        console.print(f"{dataset} has no retrieval settings yet: choosing them on its validation questions "
                      f"(seeder-dgl tune {dataset})")
        run_tune(dataset, questions=questions, console=console)
        profile = TUNED
    extract_dataset(dataset, splits=split, source=source, seeds=seeds, budgets=_budgets(budgets, None),
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


def _query_encoder(graph):
    """The encoder the dataset was ingested with: query and node embeddings must share a space."""
    from seeder_dgl.embeddings import dataset_encoder

    return dataset_encoder(graph.info.model)


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
                                                  "split between them (2 on 2 cores: about 1.4 times as fast); the "
                                                  "result depends on it \\[default: 2 for MetaQA's deep profile "
                                                  "and graphs of your own, else 1]."),
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
    """
    from seeder_dgl.training.command import run_training

    overrides = {k: v for k, v in {"lr": lr, "batch_size": batch_size, "dropout": dropout, "patience": patience,
                                   "workers": workers}.items() if v is not None}
    result = run_training(dataset, epochs=epochs, device=device, out=out, resume=resume, seed=seed,
                          ablation=ablation, limit=limit, overrides=overrides or None, threads=threads,
                          profile=profile)
    console.print(result.summary())


# ---- query ------------------------------------------------------------------------------------
@app.command("query")
@one_line_errors
def query_command(
    dataset: str = typer.Argument(..., help="An ingested dataset."),
    question: str = typer.Argument(..., help="The question, in natural language."),
    k: int = typer.Option(20, "--k", help="How many nodes to return."),
    method: str = typer.Option("seeder", help="seeder (trained policy), dense, khop or ppr."),
    output: str = typer.Option("table", "--format", help="table, json, triples or cypher."),
    checkpoint: str = typer.Option(None, help="Policy checkpoint \\[default: runs/<dataset>/<profile>-full/best.pt; "
                                              "runs/<dataset>/full/best.pt for the paper profile]."),
    seeds: int = typer.Option(None, help="k0 seeds \\[default: the profile's]."),
    budgets: str = typer.Option(None, help="K-hop nodes per hop, e.g. 50,97 \\[default: the profile's]."),
    profile: str = typer.Option(None, help="Retrieval settings: paper (dense, k0=3, B=150) or a dataset's "
                                           "own, e.g. deep for MetaQA (full-text seed, 3 hops, B=500) "
                                           "\\[default: the dataset's best: MetaQA deep, others paper]."),
    seeding: str = typer.Option(None, help="dense, fulltext or hybrid \\[default: the profile's]."),
):
    """Retrieve from the live graph: embed the question, seed and expand in Neo4j, rank.

    [bold]--format triples[/] prints the retrieved subgraph as text triples a language model can read.
    [bold]--format cypher[/] prints a read-only Cypher statement that draws it in Neo4j Browser or Bloom.
    """
    import json

    from rich.table import Table

    from seeder_dgl.threads import configure_threads

    configure_threads()  # torch's and DGL's OpenMP pools fight on few cores (16 ms vs >100 ms a query)
    from seeder_dgl.api import Retriever
    from seeder_dgl.datasets import DatasetContext

    from seeder_dgl.validation import check_k, check_question

    if output not in ("table", "json", "triples", "cypher"):
        raise SeederError(f"--format is table, json, triples or cypher (a statement for Neo4j Browser), "
                          f"not {output!r}")
    check_k(k)  # before connecting: what is wrong with the input comes first
    check_question(question)
    ds = DatasetContext.open(dataset, profile)
    with Retriever(dataset, method=method, checkpoint=checkpoint, seeds=seeds, profile=ds.profile, seeding=seeding,
                   budgets=_budgets(budgets, ds.retrieval.budgets)) as retriever:
        result = retriever.retrieve(question, k=k)
    if output == "json":
        print(json.dumps(result.to_dict(), indent=2))
        return
    if output == "cypher":
        print(result.to_cypher())  # plain print: rich would wrap lines and read [..] as markup
        return
    if output == "triples":
        for line in result.triples():
            print(line)
        if not result.triples():
            print("\n".join(f"{n.name} ({n.type})" for n in result.nodes))
        return
    table = Table(title=f"{method} on {dataset}: {result.subgraph_size} nodes considered, "
                        f"{result.seconds * 1000:.0f} ms")
    for column in ("rank", "id", "type", "name", "score"):
        table.add_column(column, justify="right" if column in ("rank", "id", "score") else "left")
    for rank, node in enumerate(result.nodes, start=1):
        table.add_row(str(rank), str(node.id), node.type, node.name, f"{node.score:.4f}")
    console.print(table)


# ---- serve ------------------------------------------------------------------------------------
@app.command("serve")
@one_line_errors
def serve_command(
    datasets: list[str] = typer.Argument(None, help="Datasets to serve; the first is the default "
                                                    "\\[default: every completely ingested one]."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, help="Port to listen on."),
    method: str = typer.Option("seeder", help="Default method: seeder, dense, khop or ppr (a dataset without "
                                              "a trained checkpoint defaults to khop)."),
    profile: str = typer.Option(None, help="Retrieval settings for every dataset served, as for query "
                                           "\\[default: each dataset's best: MetaQA deep, others paper]."),
    allowed_host: list[str] = typer.Option(None, "--allowed-host", help="Another Host header name to answer "
                                           "(e.g. this machine's name with --host 0.0.0.0); localhost's and "
                                           "--host's are always answered, others get 400 (DNS rebinding)."),
    api_key: str = typer.Option(None, "--api-key", envvar="SEEDER_API_KEY", show_default=False,
                                help="A secret that /retrieve and /datasets require (Authorization: Bearer KEY "
                                     "or X-API-Key: KEY; the page asks for it) \\[default: none, for a server "
                                     "only this machine reaches]."),
):
    """Serve retrieval over HTTP: a JSON API and a page that draws the retrieved subgraph.

    POST /retrieve answers with the JSON of `query --format json`; GET /datasets, GET /health, and the
    API's documentation at /docs. The page at / asks a question and draws the nodes and relationships
    found. The encoder, the policy and Neo4j's query plans are loaded and warmed before the first request.
    """
    from seeder_dgl.threads import configure_threads

    configure_threads()  # as for query: one OpenMP thread per pool on few cores
    import uvicorn

    from seeder_dgl.serving.app import allowed_host_names, check_address, check_api_key, create_app, open_retrievers

    check_api_key(api_key)  # before loading anything
    check_address(host, port)
    with console.status("Loading the encoder and policy, warming Neo4j's query plans..."):
        retrievers, driver = open_retrievers(datasets or [], method=method, profile=profile)
        try:
            web = create_app(retrievers, default_method=method, on_shutdown=driver.close,
                             allowed_hosts=allowed_host_names(host, allowed_host or ()), api_key=api_key)
        except BaseException:
            driver.close()
            raise
    for served in web.state.served.values():
        why = "".join(f"; {m} unavailable: {reason}" for m, reason in served.unavailable.items())
        console.print(f"{served.name}: default method {served.default_method}{why}", markup=False, highlight=False)
    console.print(f"Serving on http://{host}:{port}/ (API documentation at /docs); Ctrl-C stops.")
    uvicorn.run(web, host=host, port=port, log_level="info")


# ---- mcp --------------------------------------------------------------------------------------
@app.command("mcp")
@one_line_errors
def mcp_command(
    datasets: list[str] = typer.Argument(None, help="Datasets to serve; the first is the default "
                                                    "\\[default: every completely ingested one]."),
    transport: str = typer.Option("stdio", help="stdio (an MCP client starts this command) or http "
                                                "(streamable HTTP at http://HOST:PORT/mcp)."),
    host: str = typer.Option("127.0.0.1", help="With --transport http: address to listen on."),
    port: int = typer.Option(8001, help="With --transport http: port to listen on."),
    allowed_host: list[str] = typer.Option(None, "--allowed-host", help="With --transport http: another Host "
                                           "header to accept (DNS-rebinding protection accepts localhost only)."),
    method: str = typer.Option("seeder", help="Default method of retrieve: seeder, dense, khop or ppr."),
    profile: str = typer.Option(None, help="Retrieval settings for every dataset served, as for query."),
):
    """Serve retrieval to LLM agents over the Model Context Protocol (read-only tools).

    Tools: retrieve (a question -> ranked nodes with their texts and the triples among them),
    subgraph (node ids -> the relationships among them) and datasets (what is served: node and
    relation types, methods). Needs `pip install 'seeder-dgl[mcp]'`. Over stdio nothing but the
    protocol goes to stdout; progress and errors go to stderr.
    """
    from seeder_dgl.threads import configure_threads

    configure_threads()
    try:
        from seeder_dgl.serving import mcp as mcp_server
    except ImportError as exc:
        raise SeederError(str(exc)) from None
    if transport not in mcp_server.TRANSPORTS:
        raise SeederError(f"unknown transport {transport!r}: choose one of {', '.join(mcp_server.TRANSPORTS)}")
    if transport == "http":
        from seeder_dgl.serving.app import check_address

        check_address(host, port)
    with err_console.status("Loading the encoder and policy, warming Neo4j's query plans..."):
        served, driver = mcp_server.open_datasets(datasets or [], method=method, profile=profile)
    try:
        where = "stdio" if transport == "stdio" else f"http://{host}:{port}/mcp"
        err_console.print(f"MCP server for {', '.join(served.served)} on {where}; Ctrl-C stops.", highlight=False)
        mcp_server.run(mcp_server.build_server(served), transport, host=host, port=port,
                       allowed_hosts=allowed_host or ())
    finally:
        driver.close()


# ---- eval -------------------------------------------------------------------------------------
@app.command("eval")
@one_line_errors
def eval_command(
    dataset: str = typer.Argument(..., help="An ingested dataset with questions."),
    split: str = typer.Option("val", help="Question split to score (MetaQA also val_1hop, val_2hop, ...)."),
    qa_file: str = typer.Option(None, "--qa-file", help="Questions in the dataset's format (MetaQA: matched to the "
                                                        "graph by name; unknown names are reported)."),
    methods: str = typer.Option(None, help="Comma list: dense,khop,ppr,ppr_mmr,beam,pcst,seeder,seeder-<ablation> "
                                           "\\[default: all found]."),
    k: int = typer.Option(20, "--k", help="Cut-off of Hit@k/Recall@k."),
    depth: int = typer.Option(None, min=1, help="Nodes asked of each method; @any/size over them \\[default: K-hop budget B]."),
    limit: int = typer.Option(None, min=1, help="Only the first N questions."),
    sample: int = typer.Option(None, min=1, help="A fixed random sample of N questions (seed 0), in split order."),
    checkpoint: str = typer.Option(None, help="SeedER checkpoint \\[default: runs/<dataset>/<profile>-full/best.pt; "
                                              "runs/<dataset>/full/best.pt for the paper profile]."),
    out: str = typer.Option(None, help="Result folder \\[default: benchmarks/results/eval-<dataset>-<split>/; "
                                       "your own graph: runs/<dataset>/eval-<split>/]."),
    sweep: bool = typer.Option(False, help="Also the budget sweep and k-hop growth plots."),
    sweep_queries: int = typer.Option(500, help="Questions (fixed sample) for --sweep."),
    per_query: bool = typer.Option(False, "--per-query", help="Keep per-query metrics and rankings in results.json."),
    source: str = typer.Option(None, help="Folder of the question files (MetaQA: also kb.txt for --qa-file)."),
    coverage: bool = typer.Option(False, help="Instead: seed and subgraph coverage per hop for each seeding mode "
                                              "and budget (the seeding/depth report)."),
    per_hop: int = typer.Option(300, help="With --coverage: questions sampled per hop count."),
    engine: str = typer.Option("memory", help="With --coverage: K-hop through cypher, or in memory over an export."),
    profile: str = typer.Option(None, help="Retrieval settings every graph method starts from: paper (dense, "
                                           "k0=3, B=150) or a dataset's own (MetaQA: deep); SeedER then uses "
                                           "runs/<dataset>/<profile>-full \\[default: the dataset's best: MetaQA "
                                           "deep, others paper]."),
    diagnose: bool = typer.Option(False, help="Also where SeedER loses answers: per question, is an answer within "
                                              "reach of a seed, in the subgraph, reachable, shown to the policy, "
                                              "picked, ranked top 5 / first; per hop count and question type "
                                              "(funnel-seeder.md)."),
    perturb: str = typer.Option(None, help="Also the same questions as people type them, scored beside them "
                                           "(typed.md): a comma list of lower, typo (in the topic's name), nopunct, "
                                           "shuffle-case, keywords (function words dropped), or combinations "
                                           "such as lower+typo; fixed seed."),
):
    """Score every retriever on the same questions: table, results.json/.md, STaRK-format predictions, plots."""
    if coverage:
        from seeder_dgl.evaluation.coverage import run_coverage

        if engine not in ("cypher", "memory"):
            raise SeederError(f"--engine is cypher or memory, not {engine!r}")
        run_coverage(dataset, split=split, per_group=per_hop, engine=engine, source=source, out=out)
        return
    from seeder_dgl.threads import configure_threads

    configure_threads()
    from seeder_dgl.evaluation.command import run_eval

    run_eval(dataset, split=split, qa_file=qa_file, methods=methods, k=k, depth=depth, limit=limit, sample=sample,
             checkpoint=checkpoint, out=out, sweep=sweep, sweep_queries=sweep_queries,
             per_query=per_query, source=source, console=console, profile=profile, diagnose=diagnose,
             perturb=perturb)


# ---- upsert -----------------------------------------------------------------------------------
@app.command()
@one_line_errors
def upsert(
    dataset: str = typer.Argument(..., help="An ingested dataset."),
    nodes: str = typer.Option(None, help="JSON-lines file: {\"id\", \"name\", \"type\", \"text\"?, \"embedding\"?} per line."),
    edges: str = typer.Option(None, help="JSON-lines file: {\"source\", \"target\", \"relation\"} per line."),
):
    """Add or change nodes and relationships in the live graph; the next query sees them.

    Ids are those of your node table (a new id adds a node, a known one changes it, its type included); a dataset without ids of its own (MetaQA, a triples file) takes the ids `query` prints.

    Missing embeddings are encoded with the dataset's model. All rows commit together or not at all.
    """
    from seeder_dgl.graphstore import upsert as live_update
    from seeder_dgl.graphstore.connection import open_driver
    from seeder_dgl.graphstore.live import LiveGraph

    if not nodes and not edges:
        raise SeederError("give --nodes FILE and/or --edges FILE (JSON lines)")
    node_rows = live_update.parse_nodes(live_update.read_jsonl(nodes)) if nodes else []
    edge_rows = live_update.parse_edges(live_update.read_jsonl(edges)) if edges else []
    with open_driver() as driver:
        encoder = _query_encoder(LiveGraph(driver, dataset))
        result = live_update.upsert(driver, dataset, node_rows, edge_rows,
                                    encode=lambda texts: encoder.encode(texts, show_progress=False))
    new = f", new relations: {', '.join(result['new_relations'])}" if result["new_relations"] else ""
    console.print(f"upserted {result['nodes_written']} nodes and {result['edges_written']} edges into {dataset}; "
                  f"it now has {result['nodes']:,} nodes and {result['relationships']:,} relationships{new}")


def exit_after_interrupt(command: Callable[[], object]) -> None:
    """Run ``command`` as the process's last act; after Ctrl-C (exit code 130, "interrupted" already
    printed) flush the output and leave without the interpreter's teardown.

    A backward pass cut off by Ctrl-C (training, or the relation prior's fit in ``extract``) leaves
    autograd nodes in a thread-local queue; some hold tensors made with ``torch.from_numpy``, whose
    release needs the GIL, which an exiting interpreter no longer hands out: with torch 2.2 the
    process hung at exit about once in twenty Ctrl-Cs. Everything a command keeps is committed or
    written atomically before this point."""
    import os

    try:
        command()
    except SystemExit as exc:
        if exc.code == 130:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise


def main() -> None:  # pragma: no cover - console entry point
    exit_after_interrupt(app)


if __name__ == "__main__":  # pragma: no cover
    main()
