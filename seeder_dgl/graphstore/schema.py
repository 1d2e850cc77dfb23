"""Where a dataset keeps what retrieval reads: its label, the property names on its nodes, the
relationship types it may traverse. Resolved once per dataset from its record, never guessed.

Two kinds of dataset share every statement in ``cypher/``, which take these names as
``{{slots}}`` (validated identifiers, see ``graphstore.cypher``):

- **ingested** (``ingest``, and the copies older versions of ``adopt`` made): seeder-dgl owns the
  nodes, whose properties have the plain names ``id``, ``embedding``, ``sketch``, ... A record
  without a stored schema is one of these, so nothing ingested before this module changes.
- **adopted in place** (``adopt``): the nodes are the user's. seeder-dgl adds only its own label
  (``KG_<name>``, ``writer.dataset_label``) and properties named with that label as a prefix
  (``KG_<name>_id``, ``KG_<name>_embedding``, ...), so they cannot clash with the user's own
  properties (an ``id`` or ``embedding`` of the user's keeps its meaning) and ``drop`` can remove
  exactly them. Names and texts are read from the user's own properties, not copied: a node the
  user renames is shown renamed at once, and adopt writes (and drop removes) less. The user's id
  property is read as the node's ``key`` (questions may name answers by it); seeder-dgl's own id
  is an integer 0..n-1, the form every retrieval structure indexes by.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from loaders.kg import is_identifier
from seeder_dgl.errors import SeederError

IN_PLACE = "in_place"
INGESTED = "ingested"

# The slots a statement may name, besides {{dataset}} (the label): role -> property name.
ROLES = ("id", "embedding", "sketch", "sketch_error", "name", "text", "type", "key", "digest")
OWNED_IN_PLACE = ("id", "embedding", "sketch", "sketch_error", "type", "digest")
"""What an in-place adoption writes on the user's nodes (besides its label): each is named
``<label>_<role>``. ``digest``: a hash of what the node's embedding was made from (text, type,
given embedding), so adopting again re-embeds exactly the nodes whose inputs changed."""


class SchemaError(SeederError):
    """A stored schema is damaged, or a property name cannot be used."""


@dataclass(frozen=True)
class StoreSchema:
    label: str
    id: str = "id"
    embedding: str = "embedding"
    sketch: str = "sketch"
    sketch_error: str = "sketch_error"
    name: str = "name"
    text: str = "text"
    type: str = "type"
    key: str = "key"
    digest: str = "digest"
    """Only written by an in-place adoption; an ingested dataset has none."""
    relationship_types: tuple[str, ...] | None = None
    """The relationship types retrieval traverses; None: all of them."""
    mode: str = INGESTED

    def __post_init__(self):
        for role in ("label", *ROLES):
            value = getattr(self, role)
            if not isinstance(value, str) or not is_identifier(value):
                raise SchemaError(f"{role} property {value!r} is not a plain Neo4j name (letters, digits, '_'; "
                                  "a letter first)")
        for t in self.relationship_types or ():
            if not is_identifier(t):
                raise SchemaError(f"relationship type {t!r} is not a plain Neo4j name")
        if self.in_place:
            # The guarantee drop relies on: everything seeder-dgl writes is named after its own label.
            for role in OWNED_IN_PLACE:
                if getattr(self, role) != f"{self.label}_{role}":
                    raise SchemaError(f"the {role} property of an in-place dataset must be {self.label}_{role}")

    @classmethod
    def ingested(cls, label: str) -> "StoreSchema":
        return cls(label)

    @classmethod
    def in_place_for(cls, label: str, name_property: str, text_property: str | None, key_property: str,
                     relationship_types: list[str] | None) -> "StoreSchema":
        owned = {role: f"{label}_{role}" for role in OWNED_IN_PLACE}
        return cls(label, name=name_property, text=text_property or name_property, key=key_property,
                   relationship_types=tuple(relationship_types) if relationship_types else None, mode=IN_PLACE,
                   **owned)

    @property
    def in_place(self) -> bool:
        return self.mode == IN_PLACE

    @classmethod
    def from_record(cls, meta: dict) -> "StoreSchema":
        """The schema a dataset record stores (``store_schema``, JSON), else the ingested one."""
        text = meta.get("store_schema")
        if not text:
            return cls.ingested(str(meta["label"]))
        try:
            fields = json.loads(text)
            types = fields.pop("relationship_types", None)
            return cls(**fields, relationship_types=tuple(types) if types is not None else None)
        except (ValueError, TypeError) as exc:
            raise SchemaError(f"the stored schema of dataset {meta.get('name')!r} is damaged ({exc}): "
                              "adopt it again with --reset") from None

    def to_record(self) -> str:
        """JSON for the record (a Neo4j property cannot hold a map)."""
        fields = asdict(self)
        fields["relationship_types"] = list(self.relationship_types) if self.relationship_types else None
        return json.dumps(fields, sort_keys=True)

    def identifiers(self) -> dict[str, str]:
        """Every slot value a statement may need: ``{{dataset}}`` and the property names."""
        return {"dataset": self.label, **{role: getattr(self, role) for role in ROLES}}

    @property
    def types(self) -> list[str] | None:
        """The ``$types`` parameter of the statements that traverse: None means every type."""
        return list(self.relationship_types) if self.relationship_types is not None else None

    def procedure_config(self) -> dict:
        """The ``config`` map of seeder.khop, seeder.exactSeeds and seeder.nodeFeatures."""
        return {"id": self.id, "embedding": self.embedding, "sketch": self.sketch,
                "sketch_error": self.sketch_error, "type": self.type, "name": self.name, "types": self.types}

    def owned_properties(self) -> list[str]:
        """The properties seeder-dgl wrote on the user's nodes (in-place datasets only)."""
        if not self.in_place:
            raise SchemaError("an ingested dataset's nodes are seeder-dgl's own: drop deletes them")
        return [getattr(self, role) for role in OWNED_IN_PLACE]
