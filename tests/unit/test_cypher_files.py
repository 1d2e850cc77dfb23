"""Every statement file loads; spliced names are validated; values are parameters."""
from __future__ import annotations

import re

import pytest

from seeder_dgl.graphstore.cypher import CypherTemplateError, all_statements, query, slots


def test_every_statement_loads_with_safe_identifiers():
    names = all_statements()
    assert "schema/vector_index" in names and "seeding/dense" in names
    for name in names:
        text = query(name, **{slot: "Safe_Name1" for slot in slots(name)})
        assert "{{" not in text


@pytest.mark.parametrize("bad", ["Movie) DETACH DELETE (n", "a b", "1abc", "", "x`y", "Ünïcode"])
def test_unsafe_identifiers_are_refused(bad):
    with pytest.raises(CypherTemplateError):
        query("schema/vector_index", dataset=bad)


def test_degree_counts_splice_only_validated_relationship_types():
    from seeder_dgl.graphstore.cypher import degree_counts

    text = query("seeding/fulltext", **{slot: "X" for slot in slots("seeding/fulltext") - {"degrees"}},
                 degrees=degree_counts("node", ["DIRECTED_BY", "HAS_TAGS"]))
    assert "collect([COUNT { (node)-[:`DIRECTED_BY`]-() }, COUNT { (node)-[:`HAS_TAGS`]-() }]) AS degrees" in text
    assert "collect([]) AS degrees" in query("seeding/fulltext", **{s: "X" for s in slots("seeding/fulltext") - {"degrees"}},
                                             degrees=degree_counts("node", []))
    many = [f"R{i}" for i in range(40)]  # past MAX_COUNTED_TYPES: the names of the types a node has
    assert degree_counts("node", many) == "COLLECT { MATCH (node)-[r]-() RETURN DISTINCT type(r) }"
    with pytest.raises(CypherTemplateError):
        degree_counts("node", many[:-1] + ["bad name"])
    for bad in ("A]-() } ] RETURN 1 //", "x`y", "", "1A"):
        with pytest.raises(CypherTemplateError):
            degree_counts("node", ["OK", bad])
    with pytest.raises(CypherTemplateError):  # a plain string is not a fragment: still checked as a name
        query("seeding/fulltext", **{s: "X" for s in slots("seeding/fulltext") - {"degrees"}}, degrees="[1] AS d")


def test_missing_slot_value_is_refused():
    with pytest.raises(CypherTemplateError, match="no value"):
        query("schema/vector_index")


# The only string literals any statement may hold: property names and states the project itself
# defines (and the namespace of its procedures). Anything else would be a value that belongs in a parameter.
FIXED_LITERALS = {"cosine", "embedding", "complete", "ingesting", "deleting", "upsert", "standard", "stop", "", "seeder."}


def test_statements_take_values_as_parameters():
    # No string literal in a statement is built from user input: only fixed literals such as 'cosine'.
    for name in all_statements():
        text = query(name, **{slot: "X" for slot in slots(name)})
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))  # not comments
        for literal in re.findall(r"'([^']*)'", code):
            assert literal in FIXED_LITERALS, (name, literal)
