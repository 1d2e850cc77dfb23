"""A dataset's store schema (graphstore/schema.py): property names resolved from its record, and
statements that read a graph adopted in place through seeder-dgl's own names only."""
from __future__ import annotations

import re

import pytest

from seeder_dgl.graphstore.adopt import AdoptError, AdoptSource
from seeder_dgl.graphstore.cypher import degree_counts, all_statements, query
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
        text = query(name, **IN_PLACE.identifiers(), label="Film", degrees=degree_counts("node", ["ACTED_IN"]))
        code = "\n".join(line.split("//")[0] for line in text.splitlines())
        found = [m.group(0) for m in plain.finditer(code) if not m.group(0).startswith(("f.", "row.", "p.", "c."))]
        assert not found, (name, found)


def test_what_an_adopted_node_is_embedded_from():
    """Text, else name, else the user's id; type property, else the first other label that is not a
    dataset's, else 'entity'; a given embedding only when usable. The digest changes with any of them."""
    import numpy as np

    from seeder_dgl.graphstore.adopt import InPlaceAdopter, _given_vector

    source = AdoptSource("Film", "uid", "title", text_property="plot", embedding_property="vec")
    page = [{"key": "4:a:1", "user_id": 7, "name": "Heat", "text": None, "type": None, "embedding": [0, 0],
             "labels": ["Film", "KG_films", "Movie", "Crime"]},
            {"key": "4:a:2", "user_id": "u-8", "name": None, "text": "  ", "type": "noir", "embedding": [1, 2],
             "labels": ["Film"]},
            {"key": "4:a:3", "user_id": 9, "name": "Ran", "text": "A warlord", "type": None, "embedding": None,
             "labels": ["Film"]}]
    nodes = InPlaceAdopter._inputs(page, [0, 1, 2], source, {"KG_films"})
    assert [(n.text, n.type) for n in nodes] == [("Heat", "Crime"), ("u-8", "noir"), ("A warlord", "entity")]
    assert nodes[0].given is None and nodes[1].given.tolist() == [1.0, 2.0] and nodes[2].given is None
    renamed = InPlaceAdopter._inputs([{**page[0], "name": "Heat (1995)"}], [0], source, {"KG_films"})
    assert renamed[0].digest != nodes[0].digest
    assert InPlaceAdopter._inputs(page[:1], [0], source, {"KG_films"})[0].digest == nodes[0].digest
    for bad in (None, [], "1 2", [float("nan"), 1.0], [0.0, 0.0], [[1.0]]):
        assert _given_vector(bad) is None
    assert np.array_equal(_given_vector((3, 4)), [3.0, 4.0])
