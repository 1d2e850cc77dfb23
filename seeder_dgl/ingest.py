"""A graph into Neo4j and out again: `ingest` (a built-in loader or the user's files, embedded and
written), `adopt` (a graph that lives in Neo4j, used in place) and `drop`.

Loading and checking happen before the minutes of encoding (a bad question file or a label that
belongs to someone else fails first); the writes are ``GraphWriter``'s and ``InPlaceAdopter``'s,
idempotent and resumable under the dataset's writer lease. ``console`` is where progress and the
summary go.
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
    remove_dataset_folder,
    resolve_model,
    write_manifest,
)
from seeder_dgl.embeddings import TextEncoder, load_precomputed
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.fileio import atomic_write_json
from seeder_dgl.graphstore.adopt import AdoptSource, InPlaceAdopter
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


def adopt_graph(dataset: str, *, label: str | None, id_property: str | None, name_property: str | None,
                text_property: str | None = None, embedding_property: str | None = None,
                type_property: str | None = None, relationship_types: str | None = None, questions: str | None = None,
                model: str | None = None, reset: bool = False, batch_size: int = 256, console) -> None:
    """Adopt (or bring up to date) a graph that lives in Neo4j under ``label``, in place; see `adopt --help`."""
    check_dataset_name(dataset)
    if dataset in DATASETS:  # every later command would read it with the built-in loader's questions and profile
        raise SeederError(f"{dataset!r} is the name of a built-in dataset: adopt your graph under a name of its "
                          "own (e.g. my_kg)")
    types = [t.strip() for t in relationship_types.split(",") if t.strip()] if relationship_types else None
    given = {"label": label, "id_property": id_property, "name_property": name_property,
             "text_property": text_property, "embedding_property": embedding_property,
             "type_property": type_property, "relationship_types": tuple(types) if types else None}
    # Names are checked before connecting: a bad one fails at once, in one line.
    source = AdoptSource(**given) if label is not None and id_property and name_property else None
    with open_driver() as driver:
        adopter = InPlaceAdopter(driver, dataset)
        stored = adopter.stored_source()
        if source is None and stored is not None:  # adopting again: the options it had, unless given
            source = AdoptSource(**{k: v if v is not None else getattr(stored, k) for k, v in given.items()})
        elif source is None:
            raise SeederError(f"{dataset} is not adopted in place yet: give --label, --id-property and "
                              "--name-property")
        record = adopter.writer.record()
        # The model it was embedded with, unless another is asked for (--reset: any model).
        chosen = model if model is not None or stored is None else (record or {}).get("model")
        encoder = TextEncoder(resolve_model(chosen))
        summary = adopter.adopt(
            source, lambda texts: encoder.encode(texts, batch_size=batch_size, show_progress=False),
            encoder.encode_relations, model_label(chosen), encoder.dimension, reset=reset,
            progress=lambda line: console.print(line, highlight=False))
    previous = read_manifest(dataset) or {}
    question_file = str(Path(questions).expanduser().resolve()) if questions else previous.get("questions")
    manifest = {"name": dataset, "format": "neo4j", "in_place": True,
                "adopted": {"label": source.label, **source.properties(),
                            "relationship_types": list(source.relationship_types or []) or None},
                "questions": question_file}
    if previous.get("retrieval") and not summary.created:
        manifest["retrieval"] = previous["retrieval"]
    write_manifest(dataset, manifest)
    verb = "adopted" if summary.created else "brought up to date"
    console.print(f"{dataset} {verb} in place: {summary.nodes:,} :{source.label} nodes carry {summary.label} "
                  f"({summary.added:,} new, {summary.reembedded:,} embedded again, {summary.released:,} released), "
                  f"{summary.relationships:,} relationships of {summary.relation_types} types are followed where "
                  f"they are; {summary.seconds:.1f} s", highlight=False)
    if question_file:
        report_questions(Path(question_file), dataset, console)


def drop_dataset(dataset: str, *, confirm: Callable[[str], bool] | None, console) -> bool:
    """Remove what seeder-dgl wrote for ``dataset`` in Neo4j and its cache folder; False when
    ``confirm`` (asked with what will go; None: do not ask) declines."""
    check_dataset_name(dataset)
    folder = dataset_dir(dataset)
    with open_driver() as driver:
        writer = GraphWriter(driver, dataset)
        record = writer.record()
        if record is None and not folder.exists():
            raise SeederError(f"there is no dataset {dataset!r} in Neo4j or in {folder.parent}: nothing to drop")
        in_place = record is not None and writer.schema.in_place
        nodes = f"{(record or {}).get('num_nodes', 0):,} nodes"
        what = (f"seeder-dgl's label and properties from {nodes} of your graph (they stay)" if in_place
                else f"dataset {dataset!r} ({nodes})")
        if confirm is not None and not confirm(f"Remove {what} from Neo4j, and {folder}?"):
            return False
        done = writer.drop() if record is not None else 0
    left = remove_dataset_folder(dataset)
    removed = (f"{folder} removed" if not left else
               f"seeder-dgl's files removed from {folder}, which keeps what is not seeder-dgl's: {', '.join(left[:5])}")
    if in_place:
        console.print(f"dropped {dataset}: seeder-dgl's label and properties taken off {done:,} nodes, which stay "
                      f"with their relationships; {removed}")
    else:
        console.print(f"dropped {dataset}: {done:,} nodes deleted from Neo4j, {removed}")
    return True
