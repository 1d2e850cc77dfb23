"""`ingest`, `status`, `adopt`, `drop`, `upsert`: graphs into Neo4j and out of it."""
from __future__ import annotations

import typer

from seeder_dgl.cli.base import app, console, one_line_errors, query_encoder
from seeder_dgl.errors import SeederError


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
        encoder = query_encoder(LiveGraph(driver, dataset))
        result = live_update.upsert(driver, dataset, node_rows, edge_rows,
                                    encode=lambda texts: encoder.encode(texts, show_progress=False))
    new = f", new relations: {', '.join(result['new_relations'])}" if result["new_relations"] else ""
    console.print(f"upserted {result['nodes_written']} nodes and {result['edges_written']} edges into {dataset}; "
                  f"it now has {result['nodes']:,} nodes and {result['relationships']:,} relationships{new}")
