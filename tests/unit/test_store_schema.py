"""A dataset's store schema (graphstore/schema.py): property names resolved from its record, and
statements that read a graph adopted in place through seeder-dgl's own names only."""
from __future__ import annotations

import re

import pytest

from seeder_dgl.graphstore.adopt import AdoptError, AdoptSource
from seeder_dgl.graphstore.cypher import all_statements, query
from seeder_dgl.graphstore.schema import OWNED_IN_PLACE, SchemaError, StoreSchema

IN_PLACE = StoreSchema.in_place_for("KG_films", "title", None, "uid", ["ACTED_IN", "DIRECTED"])


def test_a_record_without_a_schema_is_an_ingested_dataset_with_the_plain_names():
    schema = StoreSchema.from_record({"name": "films", "label": "KG_films"})
    assert schema == StoreSchema.ingested("KG_films") and not schema.in_place and schema.types is None
    assert schema.identifiers() == {"dataset": "KG_films", "id": "id", "embedding": "embedding", "sketch": "sketch",
                                    "sketch_error": "sketch_error", "name": "name", "text": "text", "type": "type",
                                    "key": "key", "digest": "digest"}
    assert schema.procedure_config()["types"] is None


def test_an_in_place_schema_round_trips_and_owns_only_prefixed_properties():
    again = StoreSchema.from_record({"label": "KG_films", "store_schema": IN_PLACE.to_record()})
    assert again == IN_PLACE and again.in_place and again.types == ["ACTED_IN", "DIRECTED"]
    assert IN_PLACE.owned_properties() == [f"KG_films_{role}" for role in OWNED_IN_PLACE]
    assert (IN_PLACE.name, IN_PLACE.text, IN_PLACE.key) == ("title", "title", "uid")  # the user's, read only
    with pytest.raises(SchemaError, match="ingested dataset"):
        StoreSchema.ingested("KG_films").owned_properties()


@pytest.mark.parametrize("change", [{"id": "id"}, {"embedding": "KG_other_embedding"}])
def test_an_in_place_schema_cannot_own_a_property_outside_its_prefix(change):
    fields = {**IN_PLACE.__dict__, **change}
    with pytest.raises(SchemaError, match="must be KG_films_"):
        StoreSchema(**fields)


@pytest.mark.parametrize("bad", ["first name", "x) DETACH DELETE (n", "", "1st"])
def test_unsafe_names_are_refused(bad):
    with pytest.raises(SchemaError):
        StoreSchema.in_place_for("KG_films", bad, None, "uid", None)
    with pytest.raises(AdoptError, match="not a plain Neo4j name"):
        AdoptSource("Film", "uid", bad)
    with pytest.raises(SchemaError):
        StoreSchema.from_record({"label": "KG_films", "store_schema": '{"label": "KG_films", "id": "%s"}' % bad})


def test_a_damaged_stored_schema_is_one_line():
    with pytest.raises(SchemaError, match="adopt it again with --reset"):
        StoreSchema.from_record({"name": "films", "label": "KG_films", "store_schema": "{oops"})


# Statement groups that serve every dataset; ingest/, upsert/ and dataset/ write or delete
# ingested datasets only.
SHARED = ("retrieval/", "seeding/", "export/", "schema/", "procedure/", "adopt/")


def test_no_shared_statement_reads_a_plain_property_name_of_an_adopted_graph():
    """Filled with an in-place schema, no statement that reads a dataset names ``id``,
    ``embedding``, ``sketch``, ``type`` or ``name`` itself: the user's properties of those names
    (with other meanings) are never read or written."""
    plain = re.compile(r"\b[a-z]\w*\.(id|embedding|sketch|sketch_error|type|name|text|key)\b")
    for name in all_statements():
        if not name.startswith(SHARED):
            continue
        text = query(name, **IN_PLACE.identifiers(), label="Film")
        code = "\n".join(line.split("//")[0] for line in text.splitlines())
        found = [m.group(0) for m in plain.finditer(code) if not m.group(0).startswith(("f.", "row.", "p.", "c."))]
        assert not found, (name, found)
