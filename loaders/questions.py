"""A user's own questions: a CSV/TSV or JSON-lines file of questions and their answers.

Columns (names matched without regard to case; common synonyms accepted):
``question``, ``answers`` (node names or ids: a JSON list, or one string with ``|`` between them),
optional ``split`` (train / val / test), ``topic`` (the entity the question is about),
``hops`` and ``qtype``. Without a ``split`` column the questions get a fixed seeded 70/10/20
train/val/test split. A question written MetaQA-style with its topic in ``[brackets]`` gives that
topic when there is no ``topic`` column.

Answers and topics are matched to nodes of the dataset's own graph (``NodeResolver``): by the
source's own node id, then by exact name, then by name ignoring case and repeated spaces. Names
that match no node are counted and reported, never guessed.
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loaders.files import match_columns, read_table
from loaders.kg import DataError, QASet, Query

QUESTION_COLUMNS = {
    "question": ("question", "query", "q", "question_text", "text"),
    "answers": ("answers", "answer", "answer_ids", "answer_names", "gold", "targets", "target"),
    "split": ("split", "set", "fold", "subset", "partition"),
    "topic": ("topic", "topics", "topic_entity", "entity", "seed"),
    "id": ("id", "qid", "question_id"),
    "hops": ("hops", "hop", "num_hops", "n_hops"),
    "qtype": ("qtype", "question_type", "type", "category", "template"),
}
SPLIT_NAMES = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
               "dev": "val", "test": "test", "testing": "test", "eval": "test"}
DEFAULT_FRACTIONS = (0.7, 0.1, 0.2)
_TOPIC = re.compile(r"\[([^\]]+)\]")


def _normal(name: str) -> str:
    return " ".join(name.casefold().split())


@dataclass
class NodeResolver:
    """Node ids of the dataset's own graph for an answer or topic as a question file writes it."""

    by_key: dict[str, int]
    by_name: dict[str, list[int]]
    by_normal: dict[str, list[int]]

    @classmethod
    def from_nodes(cls, ids, names, keys=None) -> "NodeResolver":
        by_key: dict[str, int] = {}
        by_name: dict[str, list[int]] = defaultdict(list)
        by_normal: dict[str, list[int]] = defaultdict(list)
        for i, (node, name) in enumerate(zip(ids, names)):
            key = keys[i] if keys is not None else ""
            if key:
                by_key[str(key)] = int(node)
            if name:
                by_name[name].append(int(node))
                by_normal[_normal(name)].append(int(node))
        return cls(by_key, dict(by_name), dict(by_normal))

    def resolve(self, token) -> list[int]:
        text = str(token).strip()
        if not text:
            return []
        if text in self.by_key:
            return [self.by_key[text]]
        if text in self.by_name:
            return list(self.by_name[text])
        return list(self.by_normal.get(_normal(text), []))


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def parse_answers(value, path: Path, row: int) -> list[str]:
    """An answers cell as a list of strings: a list, a JSON array string, or ``a|b|c``."""
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
    else:
        text = _cell(value)
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                raise DataError(f"{path}, row {row}: answers start with '[' but are not a JSON list") from None
            if not isinstance(items, list):
                raise DataError(f"{path}, row {row}: answers must be a list")
        else:
            items = text.split("|")
    answers = [_cell(a) for a in items if not isinstance(a, (list, dict))]
    return [a for a in answers if a]


def default_splits(n: int, seed: int = 0, fractions=DEFAULT_FRACTIONS) -> list[str]:
    """A fixed seeded train/val/test assignment of ``n`` questions (70/10/20); val and test get at
    least one question each once there are three."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * fractions[1]))
    n_test = int(round(n * fractions[2]))
    if n >= 3:
        n_val, n_test = max(n_val, 1), max(n_test, 1)
    out = ["train"] * n
    for rank, i in enumerate(order):
        if rank < n_val:
            out[i] = "val"
        elif rank < n_val + n_test:
            out[i] = "test"
    return out


def load_question_table(path: str | Path, resolver: NodeResolver, name: str, seed: int = 0) -> QASet:
    """Questions of a CSV/TSV/JSON-lines file, answers and topics matched through ``resolver``.

    Splits: 'train', 'val', 'test' (from the file or the seeded 70/10/20) and 'all'. A question
    whose answers all match no node keeps an empty answer list (the commands report and skip it).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} is missing: pass an existing question file (CSV or JSON lines)")
    frame = read_table(path)
    notes: list[str] = []
    cols = match_columns(frame, QUESTION_COLUMNS, ("question", "answers"), path, notes)
    records = frame.to_dict("records")
    if not records:
        raise DataError(f"{path} has no questions: add one question and its answers per row")
    unknown: list[str] = []
    queries: dict[int, Query] = {}
    given_splits: list[str] = []
    for row_no, row in enumerate(records, start=1):
        text = _cell(row[cols["question"]])
        if not text:
            raise DataError(f"{path}, row {row_no}: empty question")
        answer_tokens = parse_answers(row[cols["answers"]], path, row_no)
        if not answer_tokens:
            raise DataError(f"{path}, row {row_no}: no answers; give the answer names or ids ('a|b' or a JSON list)")
        if "topic" in cols:
            topic_tokens = parse_answers(row[cols["topic"]], path, row_no)
        else:
            topic_tokens = [t.strip() for t in _TOPIC.findall(text)]
        text = " ".join(_TOPIC.sub(lambda m: m.group(1), text).split())
        answers: set[int] = set()
        for token in answer_tokens:
            found = resolver.resolve(token)
            answers.update(found) if found else unknown.append(token)
        topics: list[int] = []
        for token in topic_tokens:
            found = resolver.resolve(token)
            topics.extend(found) if found else unknown.append(token)
        hops = None
        if "hops" in cols and _cell(row[cols["hops"]]):
            try:
                hops = int(float(_cell(row[cols["hops"]])))
            except ValueError:
                raise DataError(f"{path}, row {row_no}: hops {_cell(row[cols['hops']])!r} is not a number") from None
        qtype = _cell(row[cols["qtype"]]) if "qtype" in cols else ""
        if "split" in cols:
            raw = _cell(row[cols["split"]]).lower()
            if raw not in SPLIT_NAMES:
                raise DataError(f"{path}, row {row_no}: split {raw!r} is not train, val or test")
            given_splits.append(SPLIT_NAMES[raw])
        qid = row_no - 1
        queries[qid] = Query(id=qid, text=text, answers=sorted(answers), topic=sorted(set(topics)), hops=hops,
                             qtype=qtype or None)
    assigned = given_splits if "split" in cols else default_splits(len(queries), seed)
    splits: dict[str, list[int]] = {"train": [], "val": [], "test": []}
    for qid, split in zip(queries, assigned):
        splits[split].append(qid)
    splits["all"] = list(queries)
    return QASet(name=name, queries=queries, splits=splits, unknown_names=unknown)
