"""Checks shared by the command line and the Python API: one place decides what a valid ``k``,
seed count, budget list, question or node id is, and every violation is a ``ValidationError``
(a ``SeederError`` and a ``ValueError``) whose one-line message says what to pass instead."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable

from seeder_dgl.errors import SeederError

MAX_K = 100_000
"""Most nodes one retrieval returns."""
MAX_BUDGET = 1_000_000
"""Most nodes one K-hop hop may add."""
MAX_NODE_ID = 2**31 - 1
"""Node ids are array indexes in the in-memory graph: a larger id would allocate that many rows."""


class ValidationError(SeederError, ValueError):
    """An argument or a row field is out of range or of the wrong kind."""


def whole_number(value: Any, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int when it is a whole number (an int, or a float/str holding one) in [lo, hi]."""
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = int(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        number = int(value.strip())
    if number is None:
        raise ValidationError(f"{what} must be a whole number, not {value!r}")
    if lo is not None and number < lo:
        raise ValidationError(f"{what} must be at least {lo}, not {number}")
    if hi is not None and number > hi:
        raise ValidationError(f"{what} must be at most {hi:,}, not {number:,}")
    return number


def check_k(k: Any) -> int:
    return whole_number(k, "k", 1, MAX_K)


def check_seeds(seeds: Any) -> int:
    return whole_number(seeds, "seeds (k0)", 1, 1000)


def check_budgets(budgets: Any) -> tuple[int, ...]:
    """Per-hop budgets from a sequence of whole numbers or a '50,97' string."""
    if isinstance(budgets, str):
        parts: Iterable[Any] = [p for p in budgets.split(",") if p.strip()]
    elif isinstance(budgets, (list, tuple)):
        parts = budgets
    else:
        raise ValidationError(f"budgets must be whole numbers per hop, e.g. (50, 97) or '50,97', not {budgets!r}")
    values = tuple(whole_number(b, "each budget", 0, MAX_BUDGET) for b in parts)
    if not values or not any(values):
        raise ValidationError(f"budgets need at least one hop with a positive budget, not {budgets!r}")
    return values


MAX_QUESTION_CHARS = 100_000
"""Longer text is refused, not truncated: the encoder reads only its first few hundred tokens, and
the name search its first few dozen words, so a question this long is a mistake (a file pasted in)."""
MAX_WORD_CHARS = 200
"""Each word of the question becomes a (fuzzy) clause of the full-text query on names: a word longer
than any name is a request Lucene refuses (too many clauses), not a question."""


def check_question(question: Any) -> str:
    """The question, stripped; one-line errors for a question that is not text, empty, longer than
    ``MAX_QUESTION_CHARS`` or with a word longer than ``MAX_WORD_CHARS`` (the CLI, the Python API,
    the HTTP server and the MCP server all check it here)."""
    if not isinstance(question, str):
        raise ValidationError(f"the question must be text, not {type(question).__name__}")
    question = question.strip()
    if not question:
        raise ValidationError("the question is empty: ask something")
    if len(question) > MAX_QUESTION_CHARS:
        raise ValidationError(f"the question is {len(question):,} characters long: ask in at most "
                              f"{MAX_QUESTION_CHARS:,}")
    longest = max(question.split(), key=len)
    if len(longest) > MAX_WORD_CHARS:
        raise ValidationError(f"the question has a word of {len(longest):,} characters: words of at most "
                              f"{MAX_WORD_CHARS} are searched for")
    return question


def check_node_id(value: Any, what: str = "id") -> int:
    return whole_number(value, what, 0, MAX_NODE_ID)


def check_text(value: Any, what: str, required: bool = True) -> str | None:
    """A non-empty string field (``None`` allowed when not ``required``)."""
    if value is None and not required:
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value).strip():
        raise ValidationError(f"{what} must be non-empty text, not {value!r}")
    return str(value).strip()


def check_output_folder(path: Any, option: str = "--out") -> Path:
    """``path`` as a folder results can be written into: a folder, or nothing yet (created later);
    a one-line error for an existing file, or a file on the way to it."""
    folder = Path(path).expanduser()
    for part in (folder, *folder.parents):
        if part.exists() and not part.is_dir():
            raise ValidationError(f"{option} {path}: {part} is a file, not a folder: name a folder")
    return folder
