"""One exception family for everything a user can fix: the CLI prints its message on one line."""
import re as _re


class SeederError(Exception):
    """An error with a one-line message that says what went wrong and what to do."""


_DATASET_NAME = _re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}")
RESERVED_NAMES = frozenset({"embeddings"})
"""Folders of the cache that are not a dataset's (``$SEEDER_CACHE/embeddings``, the encoder's shared
cache): a dataset of that name would make ``drop`` a path to them."""


def check_dataset_name(name: object) -> str:
    """``name`` when it can name a dataset (it becomes a folder and, behind a prefix, a Neo4j label):
    1-48 letters, digits, '_' or '-', starting with a letter or digit, and not one of
    ``RESERVED_NAMES``; else a one-line SeederError."""
    # fullmatch: `$` would also match before a trailing newline ("tiny\n" a second dataset).
    if not isinstance(name, str) or not _DATASET_NAME.fullmatch(name):
        raise SeederError(f"{name!r} cannot name a dataset: use 1-48 letters, digits, '_' or '-', starting with a "
                          "letter or digit (e.g. my_kg)")
    if name.lower() in RESERVED_NAMES:
        raise SeederError(f"{name!r} cannot name a dataset: seeder-dgl's cache keeps a folder of its own under that "
                          "name; choose another (e.g. my_kg)")
    return name


def raised_from(exc: BaseException | None, types: type | tuple[type, ...]) -> bool:
    """Whether ``exc``, or anything it was raised from or while handling (``__cause__``,
    ``__context__``), is one of ``types``: the project wraps driver errors in its own, and an
    interrupt can surface as the error of the cleanup it cut short."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, types):
            return True
        exc = exc.__cause__ or exc.__context__
    return False

