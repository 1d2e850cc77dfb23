"""Every Cypher statement lives in ``cypher/<group>/<name>.cypher``; this module reads them.

Values always travel as ``$parameters``. Labels, relationship types and index names cannot be
parameters in Cypher, so a statement may contain ``{{placeholder}}`` slots; ``query`` fills them
only with names that pass ``is_identifier`` (letters, digits, underscore), and refuses anything else.
"""
from __future__ import annotations

import re
from functools import lru_cache

from loaders.kg import is_identifier
from seeder_dgl.paths import CYPHER_DIR

_SLOT = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


class CypherTemplateError(ValueError):
    """A statement is missing, or a spliced name is unsafe or missing."""


class Fragment(str):
    """Cypher text built in this module from validated identifiers only (``degree_counts``): the
    one kind of value besides an identifier that ``query`` puts into a slot."""


MAX_COUNTED_TYPES = 32
"""Up to this many relationship types, ``degree_counts`` counts each; past it, it lists the types."""


def degree_counts(variable: str, types) -> Fragment:
    """The relationships of the node ``variable`` by type, either direction.

    Up to ``MAX_COUNTED_TYPES`` types: ``[COUNT { (v)-[:`A`]-() }, ...]``, one count per type in
    ``types`` order, each answered from the node's degree store (no relationship is read), so a hub
    costs what a leaf does. Past that (a graph of hundreds of relation types), the counts would
    cost more than the node's relationships: ``COLLECT { ... RETURN DISTINCT type(r) }``, the names
    of the types it has. Every type is checked with ``is_identifier`` before it is written in."""
    for name in (variable, *types):
        if not isinstance(name, str) or not is_identifier(name):
            raise CypherTemplateError(f"{name!r} is not a safe Cypher identifier")
    if len(types) > MAX_COUNTED_TYPES:
        return Fragment(f"COLLECT {{ MATCH ({variable})-[r]-() RETURN DISTINCT type(r) }}")
    return Fragment("[" + ", ".join(f"COUNT {{ ({variable})-[:`{t}`]-() }}" for t in types) + "]")


@lru_cache(maxsize=None)
def _read(name: str) -> str:
    path = CYPHER_DIR / f"{name}.cypher"
    if not path.is_file():
        raise CypherTemplateError(f"no Cypher statement {name!r} (expected {path})")
    # Comments (// ...) stay: Neo4j ignores them, and they make query logs readable.
    return path.read_text().strip().rstrip(";")


def slots(name: str) -> set[str]:
    """The ``{{placeholder}}`` names a statement needs."""
    return set(_SLOT.findall(_read(name)))


def query(name: str, /, **identifiers: str) -> str:
    """The statement ``cypher/<name>.cypher`` with its identifier slots filled and validated.

    Values for slots the statement does not have are ignored, so a dataset's whole
    ``StoreSchema.identifiers()`` can be passed to any statement (positional-only ``name``: a
    statement may have a ``{{name}}`` slot)."""
    text = _read(name)
    needed = set(_SLOT.findall(text))
    missing = needed - identifiers.keys()
    if missing:
        raise CypherTemplateError(f"{name}: no value for {sorted(missing)}")
    for key in needed:
        value = identifiers[key]
        if isinstance(value, Fragment):
            continue
        if not isinstance(value, str) or not is_identifier(value):
            raise CypherTemplateError(f"{name}: {key}={value!r} is not a safe Cypher identifier")
    return _SLOT.sub(lambda m: identifiers[m.group(1)], text)


class QuietList(list):
    """A parameter list that the driver sends as it is, but whose repr is a few characters.

    The neo4j driver (5.28) formats ``repr`` of every RUN's parameters into a debug line even when
    nothing logs it. For a batch of 5,000 nodes with 384-float embeddings that took 70% of the
    node phase of an ingest (profiled), and about 0.4 ms of every retrieval statement that
    carries a query embedding. Packing is unchanged: it checks ``isinstance(value, list)``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<{len(self)} values>"


def quiet(parameters: dict) -> dict:
    """``parameters`` with every list or tuple value wrapped in ``QuietList`` (see there)."""
    return {key: QuietList(value) if isinstance(value, (list, tuple)) else value
            for key, value in parameters.items()}


def all_statements() -> list[str]:
    """Names of every statement file, for tests that check them all."""
    return sorted(str(p.relative_to(CYPHER_DIR).with_suffix("")) for p in CYPHER_DIR.rglob("*.cypher"))
