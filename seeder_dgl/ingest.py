"""`seeder-dgl ingest`: a graph from a built-in loader or the user's files, embedded and written to Neo4j.

Loading and checking happen before the minutes of encoding (a bad question file or a label that
belongs to someone else fails first); the write itself is ``GraphWriter.ingest``'s, idempotent and
resumable under the dataset's writer lease. ``console`` is where progress and the summary go.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
from rich.table import Table

from loaders.files import find_graph_files, load_graph_files
from loaders.questions import NodeResolver, load_question_table
from seeder_dgl.datasets import (
    DATASETS,
    INGEST_RECORD,
    dataset_dir,
    model_label,
    node_resolver,
    read_manifest,
    resolve_model,
    write_manifest,
)
from seeder_dgl.embeddings import TextEncoder, load_precomputed
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.fileio import atomic_write_json
from seeder_dgl.graphstore.connection import open_driver
from seeder_dgl.graphstore.writer import EF_CONSTRUCTION, GraphWriter


def ingest_files(dataset: str, *, source: str | None, model: str | None, reset: bool = False, batch_size: int = 256,
                 quantization: bool = False, ef_construction: int = EF_CONSTRUCTION, name: str | None = None,
                 embeddings: str | None = None, questions: str | None = None, console) -> None:
    """Load ``dataset`` (a built-in name, or the user's own graph files under ``source``), embed
    its node texts and write it into Neo4j as ``name`` (default: ``dataset``); see `ingest --help`."""
    builtin = dataset in DATASETS
    if name is not None and not builtin:
        raise SeederError(f"--name stores a built-in format ({', '.join(DATASETS)}) under another name; for your "
                          f"own files the dataset argument is the name: seeder-dgl ingest {name} --source ...")
    stored_as = check_dataset_name(name or dataset)
    previous = read_manifest(stored_as)
    if not builtin:
        source = source or (previous or {}).get("source")
        if not source:
            raise SeederError(f"{dataset} is not a built-in dataset ({', '.join(DATASETS)}): pass --source with "
                              "your graph's folder or triples file")
    driver = open_driver()  # fail fast, before minutes of loading and encoding
    with driver:  # closed on every way out, errors in loading and encoding included
        t0 = time.perf_counter()
        given = None
        if builtin:
            spec = DATASETS[dataset]
            with console.status(f"Loading {spec.description}..."):
                kg = spec.load_graph(source)
            manifest = None
            if stored_as != dataset:
                manifest = {"name": stored_as, "format": dataset,
                            "source": str(Path(source).resolve()) if source else None}
        else:
            files = find_graph_files(source)
            with console.status(f"Loading {files.describe()}..."):
                loaded = load_graph_files(files, stored_as)
            kg, given = loaded.kg, loaded.embeddings
            for note in loaded.notes:
                console.print(f"note: {note}")
            question_file = Path(questions).expanduser() if questions else files.questions
            manifest = {"name": stored_as, "format": "files", "kind": files.kind,
                        "source": str(Path(source).expanduser().resolve()),
                        "files": {k: str(p.resolve()) for k, p in files.paths.items()},
                        "questions": str(question_file.resolve()) if question_file else None}
            if question_file:
                check_questions(question_file, kg, stored_as, console)
            else:
                console.print(f"note: no questions.csv/.jsonl beside {files.describe()}: retrieval works, training "
                              "and evaluation need one (ingest again with --questions FILE)")
        load_seconds = time.perf_counter() - t0
        console.print(f"Loaded {stored_as}: {kg.num_nodes:,} nodes, {kg.num_edges:,} triples, "
                      f"{len(kg.relation_names)} relations, {len(kg.node_type_names)} node types "
                      f"({load_seconds:.1f} s)")
        write_dataset(driver, stored_as, kg, given, manifest, previous, load_seconds, console, model=model,
                      embeddings=embeddings, batch_size=batch_size, reset=reset, quantization=quantization,
                      ef_construction=ef_construction, fmt=dataset if builtin else "files")


def write_dataset(driver, stored_as: str, kg, given, manifest: dict | None, previous: dict | None,
                  load_seconds: float, console, *, model: str | None, embeddings: str | None = None,
                  batch_size: int = 256, reset: bool = False, quantization: bool = False,
                  ef_construction: int = EF_CONSTRUCTION, fmt: str = "files") -> None:
    """Encode (or take) the node embeddings, write the graph, its record and manifest, print the summary."""
    writer = GraphWriter(driver, stored_as)
    writer.refuse_foreign_nodes()  # before minutes of encoding
    t0 = time.perf_counter()
    encoder = TextEncoder(resolve_model(model))
    if embeddings:
        node_emb = load_precomputed(embeddings, num_nodes=kg.num_nodes)
        console.print(f"Imported {node_emb.shape[0]:,} precomputed {node_emb.shape[1]}-d embeddings from {embeddings}")
    elif given is not None:
        node_emb = complete_embeddings(given, kg, encoder, batch_size)
    else:
        node_emb = encoder.encode(kg.node_texts, batch_size=batch_size, show_progress=True)
    rel_emb = encoder.encode_relations(kg.relation_names)
    if rel_emb.shape[1] != node_emb.shape[1]:
        raise SeederError(f"the precomputed embeddings are {node_emb.shape[1]}-d but {model_label(model)} gives "
                          f"{rel_emb.shape[1]}-d vectors: pass the --model that made them")
    encode_seconds = time.perf_counter() - t0
    summary = writer.ingest(
        kg, node_emb, rel_emb, model_label(model), reset=reset, quantization=quantization,
        ef_construction=ef_construction)
    if manifest is not None:
        if summary.skipped and previous and previous.get("retrieval"):
            manifest["retrieval"] = previous["retrieval"]  # same data: the tuned settings still hold
        write_manifest(stored_as, manifest)
    record = {"dataset": stored_as, "format": fmt, "nodes": summary.nodes, "relationships": summary.relationships,
              "duplicates_removed": summary.duplicates_removed, "model": summary.model,
              "dimension": summary.dimension, "load_seconds": round(load_seconds, 2),
              "encode_seconds": round(encode_seconds, 2), "write_seconds": round(summary.seconds, 2),
              "node_seconds": round(summary.node_seconds, 2),
              "relationship_seconds": round(summary.relationship_seconds, 2),
              "index_seconds": round(summary.index_seconds, 2),
              "nodes_per_second": round(summary.nodes_per_second), "relationships_per_second":
              round(summary.relationships_per_second), "resumed": summary.resumed, "skipped": summary.skipped}
    atomic_write_json(dataset_dir(stored_as) / INGEST_RECORD, record)
    if summary.skipped:
        sketched = summary.extra.get("sketched", 0)
        console.print(f"{stored_as} is already in Neo4j with the same data and model "
                      f"({summary.nodes:,} nodes, {summary.relationships:,} relationships): "
                      + (f"added the K-hop sketch to {sketched:,} nodes." if sketched else "nothing to do."))
        return
    table = Table(title=f"ingest {stored_as}" + (" (resumed)" if summary.resumed else ""))
    for column in ("nodes", "relationships", "duplicates removed", "dim", "encode s", "write s",
                   "nodes/s", "rels/s"):
        table.add_column(column, justify="right")
    table.add_row(f"{summary.nodes:,}", f"{summary.relationships:,}", f"{summary.duplicates_removed:,}",
                  str(summary.dimension), f"{encode_seconds:.1f}", f"{summary.seconds:.1f}",
                  f"{summary.nodes_per_second:,.0f}", f"{summary.relationships_per_second:,.0f}")
    console.print(table)


def check_questions(path, kg, name: str, console) -> None:
    """Read the question file against the graph just loaded: bad rows fail before minutes of encoding."""
    report_questions(path, name, console,
                     lambda: NodeResolver.from_nodes(range(kg.num_nodes), kg.node_names, kg.node_keys))


def report_questions(path, name: str, console, resolver: Callable | None = None) -> None:
    """Match the question file to the graph (``resolver()``; default: the dataset's nodes as Neo4j
    holds them) and print how many questions there are and how many match nothing."""
    if path.suffix.lower() == ".txt":
        return  # MetaQA-format questions are matched when they are used
    qa = load_question_table(path, resolver() if resolver else node_resolver(name), name)
    unmatched = sum(1 for q in qa.queries.values() if not q.answers)
    line = (f"Questions {path.name}: {len(qa.queries):,} ({len(qa.splits['train']):,} train / "
            f"{len(qa.splits['val']):,} val / {len(qa.splits['test']):,} test)")
    if qa.unknown_names:
        shown = ", ".join(repr(n) for n in list(dict.fromkeys(qa.unknown_names))[:5])
        line += f"; {len(qa.unknown_names):,} answer/topic names match no node (e.g. {shown})"
    if unmatched:
        line += f"; {unmatched:,} questions have no answer in the graph and will be skipped"
    console.print(line)


def complete_embeddings(given, kg, encoder, batch_size: int):
    """The table's own embeddings, with the nodes that have none encoded by the model."""
    missing = np.flatnonzero(np.isnan(given).any(axis=1))
    if missing.size == 0:
        return given
    encoded = encoder.encode([kg.node_texts[i] for i in missing], batch_size=batch_size, show_progress=True)
    if encoded.shape[1] != given.shape[1]:
        raise SeederError(f"the nodes table's embeddings are {given.shape[1]}-d but {missing.size:,} nodes have none "
                          f"and the model gives {encoded.shape[1]}-d vectors: give every node an embedding, or pass "
                          "the --model that made them")
    out = given.copy()
    out[missing] = encoded
    return out
