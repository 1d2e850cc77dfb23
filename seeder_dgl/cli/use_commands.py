"""`query`, `serve`, `mcp`, `eval`: using a trained retriever."""
from __future__ import annotations

import typer

from seeder_dgl.cli.base import (
    BudgetsOption,
    ProfileOption,
    SeedingOption,
    SeedsOption,
    app,
    console,
    err_console,
    one_line_errors,
    parse_budgets,
)
from seeder_dgl.errors import SeederError


# ---- query ------------------------------------------------------------------------------------
@app.command("query")
@one_line_errors
def query_command(
    dataset: str = typer.Argument(..., help="An ingested dataset."),
    question: str = typer.Argument(..., help="The question, in natural language."),
    k: int = typer.Option(20, "--k", help="How many nodes to return."),
    method: str = typer.Option("seeder", help="seeder (trained policy), dense, khop or ppr."),
    output: str = typer.Option("table", "--format", help="table, json, triples or cypher."),
    checkpoint: str = typer.Option(None, help="Policy checkpoint \\[default: the dataset's active run, set by train, "
                                              "else runs/<dataset>/<profile>-full/best.pt; runs/<dataset>/full/"
                                              "best.pt for the paper profile]."),
    seeds: SeedsOption = None,
    budgets: BudgetsOption = None,
    profile: ProfileOption = None,
    seeding: SeedingOption = None,
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
                   budgets=parse_budgets(budgets)) as retriever:
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
                                           "shuffle-case, keywords (function words dropped), phrase (question words "
                                           "cut off at either end), filler (chat words "
                                           "around it), surname (a person by the last word of the name), word-typo "
                                           "(in a word outside the name), or combinations such as lower+typo; "
                                           "fixed seed."),
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
