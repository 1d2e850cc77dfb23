"""A user's own knowledge graph from files: a triples file, or node and edge tables.

Two shapes are read, found by ``find_graph_files`` in a folder (or named directly):

- **triples**: one ``head, relation, tail`` per line in a ``.tsv``, ``.csv`` or ``.txt`` file; the
  separator (tab, ``|`` or comma) is detected, a header row is optional, and node names are the
  node ids. Every node has the type ``entity``.
- **tables**: a nodes table ``id, name[, type][, text][, embedding]`` and an edges table
  ``source, relation, target`` (CSV, TSV, JSON lines or Parquet). Ids may be strings or integers;
  they are kept as given (``KnowledgeGraph.node_keys``) and numbered ``0..N-1`` in file order.

Node types come from the data (the ``type`` column) or are ``entity``; nothing is inferred from
another dataset's rules. Every problem is a one-line ``DataError`` naming the file and the row.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from loaders.kg import DataError, KnowledgeGraph, TripleSet

DEFAULT_TYPE = "entity"
DEFAULT_RELATION = "related_to"
"""The relation of edges from an edges table without a relation column."""
TABLE_SUFFIXES = (".csv", ".tsv", ".tab", ".jsonl", ".ndjson", ".json", ".parquet", ".pq")
TRIPLE_SUFFIXES = (".tsv", ".csv", ".txt", ".tab")
QUESTION_STEMS = ("questions", "qa", "queries")
QUESTION_SUFFIXES = (".csv", ".tsv", ".jsonl", ".ndjson", ".json")
SNIFF_BYTES = 64 * 1024

# Column names people use, lower case; the first of each tuple is the canonical one.
NODE_COLUMNS = {
    "id": ("id", "node_id", "nodeid", "key", ":id", "identifier"),
    "name": ("name", "title", "label", "node_name"),
    "type": ("type", "node_type", "category", "kind", ":label"),
    "text": ("text", "description", "document", "doc", "content"),
    "embedding": ("embedding", "vector", "embeddings", "emb"),
}
EDGE_COLUMNS = {
    "source": ("source", "src", "head", "subject", "from", "start", ":start_id", "source_id", "h"),
    "relation": ("relation", "rel", "predicate", "relationship", "type", ":type", "edge_type", "label", "r"),
    "target": ("target", "dst", "tail", "object", "to", "end", ":end_id", "target_id", "t"),
}
_HEADS = set(EDGE_COLUMNS["source"])
_RELATIONS = set(EDGE_COLUMNS["relation"])
_TAILS = set(EDGE_COLUMNS["target"])


@dataclass
class GraphFiles:
    """What ``find_graph_files`` found: the graph's files and the question file beside them."""

    kind: str
    """'triples' or 'tables'."""
    paths: dict[str, Path]
    """triples: {'triples': path}; tables: {'nodes': path, 'edges': path}."""
    questions: Path | None = None

    def describe(self) -> str:
        return ", ".join(f"{k} {p}" for k, p in self.paths.items())


@dataclass
class LoadedGraph:
    kg: KnowledgeGraph
    embeddings: np.ndarray | None = None
    """float32 [N, d] from an ``embedding`` column, NaN rows where a node has none; None when no
    node has one."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know (ignored columns, duplicate triples dropped)."""


# ---------------------------------------------------------------------------------------------
# Finding the files
# ---------------------------------------------------------------------------------------------
def _by_stem(folder: Path, stems: tuple[str, ...], suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.stem.lower() in stems and p.suffix.lower() in suffixes)


def find_questions(folder: Path) -> Path | None:
    found = _by_stem(folder, QUESTION_STEMS, QUESTION_SUFFIXES)
    if len(found) > 1:
        raise DataError(f"{folder} holds several question files ({', '.join(p.name for p in found)}): "
                        "keep one, or name it with --questions FILE")
    return found[0] if found else None


def find_graph_files(source: str | Path) -> GraphFiles:
    """The graph files of ``source``: a triples file itself, or a folder holding ``nodes.*`` and
    ``edges.*`` tables or one triples file (``triples.*``, ``kb.txt``, or the only table-like file
    that is not a question file)."""
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(f"{path} does not exist: pass --source with your graph's folder or triples file")
    if path.is_file():
        return GraphFiles("triples", {"triples": path}, find_questions(path.parent))
    nodes = _by_stem(path, ("nodes", "node", "entities"), TABLE_SUFFIXES)
    edges = _by_stem(path, ("edges", "edge", "relationships", "relations", "triples"), TABLE_SUFFIXES)
    questions = find_questions(path)
    if len(nodes) > 1 or len(edges) > 1:
        many = nodes if len(nodes) > 1 else edges
        raise DataError(f"{path} holds several tables of one kind ({', '.join(p.name for p in many)}): keep one")
    if nodes:
        if not edges:
            raise DataError(f"{path} has {nodes[0].name} but no edges table: add edges.csv (source, relation, "
                            "target) or another edges.* file")
        return GraphFiles("tables", {"nodes": nodes[0], "edges": edges[0]}, questions)
    if edges:
        return GraphFiles("triples", {"triples": edges[0]}, questions)
    named = _by_stem(path, ("kb", "kg", "graph"), TRIPLE_SUFFIXES)
    others = named or sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in TRIPLE_SUFFIXES
                             and p != questions and not p.name.startswith("."))
    if len(others) == 1:
        return GraphFiles("triples", {"triples": others[0]}, questions)
    if not others:
        raise DataError(f"{path} holds no graph file: add a triples file (head, relation, tail per line) or "
                        "nodes.csv and edges.csv")
    raise DataError(f"{path} holds several possible triples files ({', '.join(p.name for p in others[:5])}): "
                    "pass the one to ingest as --source FILE")


def load_graph_files(files: GraphFiles, name: str) -> LoadedGraph:
    if files.kind == "tables":
        return load_tables(files.paths["nodes"], files.paths["edges"], name)
    return load_triples(files.paths["triples"], name)


# ---------------------------------------------------------------------------------------------
# Text files
# ---------------------------------------------------------------------------------------------
def read_text(path: Path) -> str:
    """The file as text: UTF-8 (a byte-order mark dropped); one-line errors for binary or other encodings."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"\x00" in raw[:SNIFF_BYTES]:
        raise DataError(f"{path} is a binary file, not text: give a UTF-8 text file (or a .parquet table)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}, line {line}: not UTF-8 text; save the file as UTF-8") from None


def _split_rows(text: str, delimiter: str) -> list[list[str]]:
    if delimiter == ",":
        return list(csv.reader(io.StringIO(text)))
    return [line.split(delimiter) for line in text.splitlines()]


def detect_delimiter(text: str, path: Path, fields: int = 3) -> str:
    """The separator (tab, then ``|``, then comma) that splits every sampled line into ``fields``."""
    sample = "\n".join([line for line in text.splitlines() if line.strip()][:200])
    if not sample:
        raise DataError(f"{path} is empty: add one head, relation, tail per line")
    for delimiter in ("\t", "|", ","):
        rows = [r for r in _split_rows(sample, delimiter) if any(c.strip() for c in r)]
        if rows and all(len(r) == fields for r in rows):
            return delimiter
    first = sample.splitlines()[0]
    raise DataError(f"{path}, line 1: expected head, relation, tail separated by tabs, '|' or commas "
                    f"(the same on every line), got {first[:80]!r}")


def _is_header(row: list[str]) -> bool:
    h, r, t = (c.strip().lower() for c in row)
    return h in _HEADS and r in _RELATIONS and t in _TAILS


def load_triples(path: str | Path, name: str) -> LoadedGraph:
    """A triples file: node names are ids; duplicate triples are dropped (and counted)."""
    path = Path(path)
    text = read_text(path)
    delimiter = detect_delimiter(text, path)
    ids: dict[str, int] = {}
    triples = TripleSet()
    for line_no, row in enumerate(_split_rows(text, delimiter), start=1):
        if not any(c.strip() for c in row):
            continue
        if len(row) != 3:
            raise DataError(f"{path}, line {line_no}: expected 3 fields separated by {delimiter!r}, got {len(row)}")
        if line_no == 1 and _is_header(row):
            continue
        head, relation, tail = (c.strip() for c in row)
        if not head or not relation or not tail:
            raise DataError(f"{path}, line {line_no}: empty head, relation or tail in {delimiter.join(row)[:80]!r}")
        h = ids.setdefault(head, len(ids))
        triples.add(h, relation, ids.setdefault(tail, len(ids)))
    if not len(triples):
        raise DataError(f"{path} holds no triples: add one head, relation, tail per line")
    names = list(ids)
    src, dst, rel = triples.arrays()
    kg = KnowledgeGraph(name=name, node_names=names, node_texts=list(names),
                        node_type=np.zeros(len(names), dtype=np.int64), node_type_names=[DEFAULT_TYPE],
                        edge_src=src, edge_dst=dst, edge_rel=rel, relation_names=triples.relation_names)
    duplicates = triples.duplicates
    notes = [f"{duplicates:,} repeated triples of {path.name} were dropped"] if duplicates else []
    return LoadedGraph(kg, None, notes)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------
def read_table(path: Path, header: bool = True):
    """A CSV / TSV / JSON-lines / Parquet table as a pandas DataFrame of objects (ids as given);
    ``header=False`` reads a CSV/TSV whose first row is data (columns 0, 1, ...)."""
    import pandas as pd

    suffix = path.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            try:
                return pd.read_parquet(path)
            except ImportError:
                raise DataError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
        text = read_text(path)
        if suffix in (".jsonl", ".ndjson", ".json"):
            stripped = text.lstrip()
            # dtype=object: each value stays what JSON made it. Inferred, a column of ints and
            # floats (or ints and nulls) becomes float64, and ids past 2**53 lose their last digits.
            if stripped.startswith("["):  # a JSON array of objects
                return pd.DataFrame(json.loads(stripped), dtype=object)
            rows = []
            for line_no, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    raise DataError(f"{path}, line {line_no}: not a JSON object: {line[:80]!r}") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}, line {line_no}: expected a JSON object, got {type(row).__name__}")
                rows.append(row)
            return pd.DataFrame(rows, dtype=object)
        sep = "\t" if suffix in (".tsv", ".tab") else ","
        return pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False,
                           header=0 if header else None)
    except DataError:
        raise
    except (ValueError, OSError) as exc:  # pandas' parser errors are ValueErrors
        raise DataError(f"{path}: cannot read it as a {suffix.lstrip('.') or 'text'} table ({str(exc).splitlines()[0]})"
                        ) from None


def match_columns(frame, wanted: dict[str, tuple[str, ...]], required: tuple[str, ...], path: Path,
                  notes: list[str]) -> dict[str, str]:
    """Canonical column -> the table's column, by the names people use; one-line error when a
    required one is missing; unrecognised columns are named in ``notes``."""
    lowered = {str(c).strip().lower(): c for c in frame.columns}
    found: dict[str, str] = {}
    for canonical, aliases in wanted.items():
        for alias in aliases:
            if alias in lowered and lowered[alias] not in found.values():
                found[canonical] = lowered[alias]
                break
    missing = [c for c in required if c not in found]
    if missing:
        raise DataError(f"{path}: no {' or '.join(repr(c) for c in missing)} column (columns: "
                        f"{', '.join(map(str, frame.columns)) or 'none'}); expected {', '.join(wanted)}")
    ignored = [str(c) for c in frame.columns if c not in found.values()]
    if ignored:
        notes.append(f"{path.name}: columns {', '.join(ignored)} are not used")
    return found


def read_columns(path: Path, wanted: dict[str, tuple[str, ...]], required: tuple[str, ...],
                 positional: tuple[str, ...], notes: list[str]):
    """The table and its columns; a CSV/TSV without a header row (no column named like any of
    ``wanted``) is read again with ``positional`` meaning of its columns (e.g. id, name, type)."""
    frame = read_table(path)
    known = {a for aliases in wanted.values() for a in aliases}
    headerless = (path.suffix.lower() in (".csv", ".tsv", ".tab")
                  and not any(str(c).strip().lower() in known for c in frame.columns)
                  and len(required) <= len(frame.columns) <= len(positional))
    if headerless:
        frame = read_table(path, header=False)
        frame.columns = list(positional[:len(frame.columns)])
        notes.append(f"{path.name} has no header row: its columns are read as {', '.join(frame.columns)}")
    return frame, match_columns(frame, wanted, required, path, notes)


def node_key(value, path, row: int | None, column: str) -> str:
    """An id as given, as text: 7 and '7' are the same node; floats must be whole numbers. Errors
    name ``path`` and ``row`` (None: ``path`` names the row already)."""
    where = f"{path}, row {row}" if row is not None else str(path)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise DataError(f"{where}: empty {column}")
    if isinstance(value, (bool, np.bool_)):
        raise DataError(f"{where}: {column} {value!r} is a boolean, not an id")
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise DataError(f"{where}: {column} {value!r} is not a whole number or a string")
        value = int(value)
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (list, dict, tuple, np.ndarray)):
        raise DataError(f"{where}: {column} is a {type(value).__name__}, not an id")
    text = str(value).strip()
    if not text:
        raise DataError(f"{where}: empty {column}")
    return text


def _text(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip()


def _vector(value, path, row: int) -> np.ndarray | None:
    """An embedding cell: a list, a JSON array string, or numbers separated by spaces or commas."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        text = value.strip().strip("[]")
        if not text:
            return None
        parts = text.replace(",", " ").split()
    elif isinstance(value, (list, tuple, np.ndarray)):
        parts = list(value)
    else:
        raise DataError(f"{path}, row {row}: the embedding is not a list of numbers")
    try:
        vec = np.asarray([float(p) for p in parts], dtype=np.float32)
    except (TypeError, ValueError):
        raise DataError(f"{path}, row {row}: the embedding is not a list of numbers") from None
    if not np.isfinite(vec).all():
        raise DataError(f"{path}, row {row}: the embedding has NaN or infinite values")
    return vec


def load_tables(nodes_path: str | Path, edges_path: str | Path, name: str) -> LoadedGraph:
    """Node and edge tables: ids kept as given (``node_keys``), numbered in node-table order."""
    nodes_path, edges_path = Path(nodes_path), Path(edges_path)
    notes: list[str] = []
    nodes, cols = read_columns(nodes_path, NODE_COLUMNS, ("id",), ("id", "name", "type", "text"), notes)
    edges, ecols = read_columns(edges_path, EDGE_COLUMNS, ("source", "target"), ("source", "relation", "target"),
                                notes)
    node_rows = [{c: row[col] for c, col in cols.items()} for row in nodes.to_dict("records")]
    edge_rows = [{c: row[col] for c, col in ecols.items()} for row in edges.to_dict("records")]
    return graph_from_rows(node_rows, edge_rows, name, str(nodes_path), str(edges_path), notes)


def graph_from_rows(node_rows: list[dict], edge_rows: list[dict], name: str, nodes_where: str, edges_where: str,
                    notes: list[str] | None = None) -> LoadedGraph:
    """Nodes ``{id, name?, type?, text?, embedding?}`` and edges ``{source, relation?, target}`` as a
    graph; errors name ``nodes_where`` / ``edges_where`` and the row (a file, or Neo4j nodes)."""
    notes = [] if notes is None else notes
    if not node_rows:
        raise DataError(f"{nodes_where} has no rows: add one node per row")
    keys: list[str] = []
    index: dict[str, int] = {}
    names: list[str] = []
    texts: list[str] = []
    type_ids: dict[str, int] = {}
    node_type: list[int] = []
    vectors: list[np.ndarray | None] = []
    for row_no, row in enumerate(node_rows, start=1):
        key = node_key(row.get("id"), nodes_where, row_no, "id")
        if key in index:
            raise DataError(f"{nodes_where}, row {row_no}: id {key!r} repeats row {index[key] + 1}; ids must be unique")
        index[key] = len(keys)
        keys.append(key)
        names.append(_text(row.get("name")) or key)
        texts.append(_text(row.get("text")) or names[-1])
        type_name = _text(row.get("type")) or DEFAULT_TYPE
        node_type.append(type_ids.setdefault(type_name, len(type_ids)))
        vectors.append(_vector(row["embedding"], nodes_where, row_no) if "embedding" in row else None)

    embeddings = None
    given = [v for v in vectors if v is not None]
    if given:
        dim = given[0].shape[0]
        embeddings = np.full((len(keys), dim), np.nan, dtype=np.float32)
        for i, v in enumerate(vectors):
            if v is None:
                continue
            if v.shape[0] != dim:
                raise DataError(f"{nodes_where}, row {i + 1}: the embedding has {v.shape[0]} numbers but earlier "
                                f"rows have {dim}; all embeddings need one dimension")
            embeddings[i] = v

    triples = TripleSet()
    for row_no, row in enumerate(edge_rows, start=1):
        ends = []
        for column in ("source", "target"):
            key = node_key(row.get(column), edges_where, row_no, column)
            if key not in index:
                raise DataError(f"{edges_where}, row {row_no}: {column} {key!r} is not a node id of {nodes_where}")
            ends.append(index[key])
        relation = _text(row.get("relation")) if "relation" in row else DEFAULT_RELATION
        if not relation:
            raise DataError(f"{edges_where}, row {row_no}: empty relation")
        triples.add(ends[0], relation, ends[1])
    if not len(triples):
        raise DataError(f"{edges_where} has no edges: add one source, relation, target per row")
    if triples.duplicates:
        notes.append(f"{triples.duplicates:,} repeated edges of {edges_where} were dropped")
    src, dst, rel = triples.arrays()
    kg = KnowledgeGraph(name=name, node_names=names, node_texts=texts,
                        node_type=np.asarray(node_type, dtype=np.int64), node_type_names=list(type_ids),
                        edge_src=src, edge_dst=dst, edge_rel=rel, relation_names=triples.relation_names,
                        node_keys=keys)
    return LoadedGraph(kg, embeddings, notes)
