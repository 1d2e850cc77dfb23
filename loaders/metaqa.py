"""MetaQA (vanilla): the WikiMovies knowledge base and its 1/2/3-hop questions.

``kb.txt`` holds ``head|relation|tail`` lines; entities are identified by their exact name.
Questions are ``text with the [topic entity]<TAB>answer1|answer2`` with one relation-path
label per line in the matching ``*_qtype.txt``.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np

from loaders.files import read_text
from loaders.kg import DataError, KnowledgeGraph, Query, QASet, TripleSet
from seeder_dgl.paths import shared_data_dir

log = logging.getLogger(__name__)
DEFAULT_ROOT = shared_data_dir() / "metaqa"
HOP_ID_BASE = 1_000_000
"""Query id = hops * HOP_ID_BASE + line index (0-based) in that hop's file."""

# Tail types by relation, in priority order: a node that is the tail of several relations takes
# the type of the first one listed here. Heads of any triple are movies.
TAIL_TYPES: tuple[tuple[str, str], ...] = (
    ("directed_by", "person"),
    ("written_by", "person"),
    ("starred_actors", "person"),
    ("release_year", "year"),
    ("in_language", "language"),
    ("has_genre", "genre"),
    ("has_tags", "tag"),
    ("has_imdb_votes", "rating"),
    ("has_imdb_rating", "rating"),
)
NODE_TYPES = ("movie", "person", "year", "language", "genre", "tag", "rating", "entity")
_TOPIC = re.compile(r"\[([^\]]*)\]")


class MetaQAFormatError(DataError):
    """A MetaQA file is missing or has a malformed line."""


def default_root() -> Path | None:
    """``../shared/data/metaqa`` next to the project root (seeder_dgl.paths) when it is there."""
    return DEFAULT_ROOT if DEFAULT_ROOT.is_dir() else None


def load_metaqa_kb(path: str | os.PathLike, text_format: str = "name") -> tuple[KnowledgeGraph, int]:
    """Read ``kb.txt`` into a KnowledgeGraph; returns it and the number of duplicate lines dropped.

    Node ids follow first appearance (head before tail, line by line), so they are deterministic.
    ``text_format`` 'name' embeds the bare entity name; 'name_type' appends the type ("Tom Hanks
    (person)"). The name always comes first: questions quote it verbatim.
    """
    path = Path(path)
    if not path.is_file():
        raise MetaQAFormatError(f"{path} is missing: pass --source DIR holding MetaQA's kb.txt and qa/")
    ids: dict[str, int] = {}
    triples = TripleSet()
    # read_text: a byte-order mark is dropped (else it is part of the first name), and a binary or
    # non-UTF-8 file is a one-line error.
    for line_no, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise MetaQAFormatError(f"{path}, line {line_no}: expected head|relation|tail, got {line[:80]!r}")
        head, relation, tail = (f.strip() for f in fields)
        h = ids.setdefault(head, len(ids))
        triples.add(h, relation, ids.setdefault(tail, len(ids)))
    if not ids:
        raise MetaQAFormatError(f"{path} has no triples: pass the WikiMovies kb.txt")
    relation_names = triples.relation_names
    edge_src, edge_dst, edge_rel = triples.arrays()
    duplicates = triples.duplicates
    node_type = _infer_types(len(ids), edge_src, edge_dst, edge_rel, relation_names)
    names = list(ids)
    if text_format == "name":
        texts = list(names)
    elif text_format == "name_type":
        texts = [f"{n} ({NODE_TYPES[t]})" for n, t in zip(names, node_type.tolist())]
    else:
        raise ValueError(f"text_format must be 'name' or 'name_type', not {text_format!r}")
    # Keep only the types that occur (in NODE_TYPES order), so every label names some nodes.
    used = np.flatnonzero(np.bincount(node_type, minlength=len(NODE_TYPES)))
    remap = np.full(len(NODE_TYPES), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    kg = KnowledgeGraph(name="metaqa", node_names=names, node_texts=texts, node_type=remap[node_type],
                        node_type_names=[NODE_TYPES[t] for t in used], edge_src=edge_src, edge_dst=edge_dst,
                        edge_rel=edge_rel, relation_names=relation_names)
    kg.validate()
    return kg, duplicates


def _infer_types(n: int, src: np.ndarray, dst: np.ndarray, rel: np.ndarray, relation_names: list[str]) -> np.ndarray:
    entity = NODE_TYPES.index("entity")
    node_type = np.full(n, entity, dtype=np.int64)
    # Apply rules from lowest to highest priority so the first matching rule wins.
    for relation, type_name in reversed(TAIL_TYPES):
        if relation in relation_names:
            mask = rel == relation_names.index(relation)
            node_type[dst[mask]] = NODE_TYPES.index(type_name)
    node_type[src] = NODE_TYPES.index("movie")
    return node_type


def _hops_from_path(path: Path) -> int | None:
    match = re.search(r"([123])-hop", str(path))
    return int(match.group(1)) if match else None


def _qtype_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}_qtype{path.suffix}")


def _read_questions(path: Path, hops: int | None, lookup: dict[str, int],
                    unknown: list[str], id_base: int) -> list[Query]:
    qtype_path = _qtype_path(path)
    qtypes = read_text(qtype_path).splitlines() if qtype_path.is_file() else None
    queries = []
    lines = read_text(path).splitlines()
    if qtypes is not None and len(qtypes) != len(lines):
        raise MetaQAFormatError(f"{qtype_path} has {len(qtypes)} lines but {path} has {len(lines)}: "
                                f"they must match line by line")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        question, sep, answer_field = line.partition("\t")
        if not sep:
            raise MetaQAFormatError(f"{path}, line {index + 1}: expected 'question<TAB>ans1|ans2', no tab found")
        topic_names = _TOPIC.findall(question)
        answers, topics = [], []
        for name in (a.strip() for a in answer_field.split("|")):
            if not name:
                continue
            if name in lookup:
                answers.append(lookup[name])
            else:
                unknown.append(name)
        for name in (t.strip() for t in topic_names):
            if name in lookup:
                topics.append(lookup[name])
            else:
                unknown.append(name)
        qtype = qtypes[index].strip() if qtypes is not None else None
        hop = hops if hops is not None else (qtype.count("_to_") if qtype else None)
        text = " ".join(_TOPIC.sub(lambda m: m.group(1), question).split())
        queries.append(Query(id=id_base + index, text=text, answers=sorted(set(answers)), topic=topics,
                             hops=hop, qtype=qtype))
    return queries


def _name_lookup(kg: KnowledgeGraph) -> dict[str, int]:
    lookup: dict[str, int] = {}
    for i, name in enumerate(kg.node_names):
        lookup.setdefault(name, i)
    return lookup


def load_metaqa_qa_file(path: str | os.PathLike, kg: KnowledgeGraph | None, hops: int | None = None,
                        lookup: dict[str, int] | None = None) -> QASet:
    """Questions of any file in MetaQA's format (e.g. ``--qa-file test.txt``), matched to ``kg`` by name
    (or through ``lookup``, name -> node id, e.g. another dataset's names read from Neo4j).

    ``hops`` defaults to the ``N-hop`` folder in the path, else to the length of each qtype label.
    Splits: the file's stem (e.g. 'test') and 'all', both holding every question.
    """
    path = Path(path)
    if not path.is_file():
        raise MetaQAFormatError(f"{path} is missing: pass an existing question file in MetaQA's format")
    hops = hops if hops is not None else _hops_from_path(path)
    unknown: list[str] = []
    lookup = lookup if lookup is not None else _name_lookup(kg)
    queries = _read_questions(path, hops, lookup, unknown, (hops or 0) * HOP_ID_BASE)
    ids = [q.id for q in queries]
    return QASet(name=f"metaqa:{path.stem}", queries={q.id: q for q in queries},
                 splits={path.stem: ids, "all": list(ids)}, unknown_names=unknown)


def split_ids(ids: list[int], hop: int, val_fraction: float = 0.2, seed: int = 0) -> tuple[list[int], list[int]]:
    """Fixed 80/20 train/val split of one hop's question ids (its own seeded stream per hop)."""
    rng = np.random.default_rng([seed, hop])
    order = rng.permutation(len(ids))
    n_val = int(round(len(ids) * val_fraction))
    val = sorted(ids[i] for i in order[:n_val])
    train = sorted(ids[i] for i in order[n_val:])
    return train, val


def load_metaqa(root: str | os.PathLike | None = None, hops: tuple[int, ...] = (1, 2, 3),
                text_format: str = "name", val_fraction: float = 0.2, seed: int = 0,
                ) -> tuple[KnowledgeGraph, QASet]:
    """MetaQA's knowledge graph and its dev questions with a fixed train/val split.

    Splits: 'train', 'val' (all hops), 'train_1hop', 'val_1hop', ... and 'dev_1hop', ... (every
    dev question of that hop). The official test questions are not read here.
    """
    base = Path(root) if root is not None else default_root()
    if base is None:
        raise MetaQAFormatError(f"no MetaQA folder found (looked for {DEFAULT_ROOT}): pass --source DIR holding "
                                f"kb.txt and qa/{{1,2,3}}-hop/dev.txt")
    kg, duplicates = load_metaqa_kb(base / "kb.txt", text_format=text_format)
    if duplicates:
        log.info("%s: dropped %d duplicate triple lines", base / "kb.txt", duplicates)
    lookup = _name_lookup(kg)
    unknown: list[str] = []
    queries: dict[int, Query] = {}
    splits: dict[str, list[int]] = {"train": [], "val": []}
    for hop in hops:
        if hop not in (1, 2, 3):
            raise MetaQAFormatError(f"MetaQA has 1-, 2- and 3-hop questions, not {hop}-hop")
        path = base / "qa" / f"{hop}-hop" / "dev.txt"
        if not path.is_file():
            raise MetaQAFormatError(f"{path} is missing: pass --source DIR holding qa/{hop}-hop/dev.txt")
        hop_queries = _read_questions(path, hop, lookup, unknown, hop * HOP_ID_BASE)
        queries.update((q.id, q) for q in hop_queries)
        ids = [q.id for q in hop_queries]
        train, val = split_ids(ids, hop, val_fraction, seed)
        splits[f"dev_{hop}hop"] = ids
        splits[f"train_{hop}hop"], splits[f"val_{hop}hop"] = train, val
        splits["train"] += train
        splits["val"] += val
    return kg, QASet(name="metaqa", queries=queries, splits=splits, unknown_names=unknown)


def kb_stats(kg: KnowledgeGraph) -> dict[str, int]:
    """Entity, triple and relation counts (for the ingest report)."""
    return {"entities": kg.num_nodes, "triples": kg.num_edges, "relations": len(kg.relation_names)}
