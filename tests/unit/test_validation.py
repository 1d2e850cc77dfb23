"""Argument and row validation shared by the CLI and the Python API: every bad value is one
ValidationError (a SeederError and a ValueError) with a message that says what to pass."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.upsert import UpsertError, parse_edges, parse_nodes, read_jsonl
from seeder_dgl.validation import (
    MAX_NODE_ID, ValidationError, check_budgets, check_k, check_node_id, check_question, check_seeds)


@pytest.mark.parametrize("call,value,message", [
    (check_k, 2.5, "whole number"), (check_k, 0, "at least 1"), (check_k, True, "whole number"),
    (check_k, 10**9, "at most"), (check_seeds, -2, "at least 1"), (check_budgets, (-5, -5), "at least 0"),
    (check_budgets, "50,x", "whole number"), (check_budgets, (0, 0), "positive budget"), (check_budgets, 50, "per hop"),
    (check_question, 123, "must be text"), (check_question, "   ", "empty"), (check_node_id, -5, "at least 0"),
    (check_node_id, 2**63 - 1, "at most"), (check_node_id, 111.9, "whole number"), (check_node_id, "7x", "whole number"),
])
def test_bad_values_are_one_line_validation_errors(call, value, message):
    with pytest.raises(ValidationError, match=message) as err:
        call(value)
    assert isinstance(err.value, SeederError) and isinstance(err.value, ValueError) and "\n" not in str(err.value)


def test_good_values_are_normalised():
    assert check_k("3") == 3 and check_k(4.0) == 4 and check_seeds(1) == 1
    assert check_budgets("50, 97") == (50, 97) and check_budgets([15, 110, 374]) == (15, 110, 374)
    assert check_question("  who?  ") == "who?" and check_node_id(MAX_NODE_ID) == MAX_NODE_ID


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                 st.lists(st.integers(), max_size=3)))
def test_any_value_either_passes_or_is_a_validation_error(value):
    for check in (check_k, check_seeds, check_budgets, check_question, check_node_id):
        try:
            check(value)
        except ValidationError:
            pass


@pytest.mark.parametrize("row,message", [
    ({"id": True, "name": "x"}, "'id' True is a boolean, not an id"),
    ({"id": 111.9, "name": "x"}, "'id' 111.9 is not a whole number or a string"),
    ({"id": 5, "name": None}, "'name' must be non-empty text"),
    ({"id": [1], "name": "x"}, "'id' is a list, not an id"),
    ({"id": "  ", "name": "x"}, "empty 'id'"),
    ({"name": "x"}, "empty 'id'"),
    ({"id": 5, "name": "x", "type": ""}, "'type' must be non-empty text"),
])
def test_upsert_node_rows_are_validated(row, message):
    with pytest.raises(UpsertError, match=message):
        parse_nodes([row])


def test_upsert_rows_parse_and_bad_files_are_one_line(tmp_path):
    # Ids as given: text stays text (a node table's ids), numbers stay exact numbers, past 2^53 too;
    # which a dataset wants is decided against its record (tests/e2e/test_live_graph.py).
    nodes = parse_nodes([{"id": "7", "name": "Tenet", "type": "movie"}, {"id": 8.0, "name": "x", "text": "t"},
                         {"id": 2**63 + 1, "name": "big"}])
    assert [(n.id, n.name, n.text) for n in nodes] == [("7", "Tenet", "Tenet"), (8, "x", "t"), (2**63 + 1, "big", "big")]
    with pytest.raises(UpsertError, match="one row per node"):
        parse_nodes([{"id": 1, "name": "a"}, {"id": 1, "name": "b"}])
    with pytest.raises(UpsertError, match="one row per node"):  # 7 and '7' name one node, as in ingest
        parse_nodes([{"id": 7, "name": "a"}, {"id": "7", "name": "b"}])
    assert parse_edges([{"source": 1, "target": "2", "relation": "r"}])[0].target == "2"
    with pytest.raises(UpsertError, match="'relation'"):
        parse_edges([{"source": 1, "target": 2, "relation": ""}])
    binary = tmp_path / "nodes.jsonl"
    binary.write_bytes(b"\x00\xff\x10")
    with pytest.raises(SeederError, match="binary"):
        read_jsonl(binary)


@pytest.mark.parametrize("kwargs,message", [({"seeds": -2}, "at least 1"), ({"budgets": (-5, -5)}, "at least 0"),
                                            ({"budgets": "50,97x"}, "whole number")])
def test_the_retriever_checks_its_settings_before_connecting(kwargs, message):
    from seeder_dgl.api import Retriever

    with pytest.raises(ValidationError, match=message):
        Retriever("any_dataset", driver=object(), **kwargs)  # no connection is opened


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                           | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=5)
ROWS = st.lists(st.dictionaries(st.sampled_from(["id", "name", "type", "text", "embedding", "source", "target",
                                                 "relation", "other"]), JSON_VALUES, max_size=6), max_size=5)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(rows=ROWS)
def test_any_upsert_rows_parse_or_are_one_line_upsert_errors(rows):
    for parse in (parse_nodes, parse_edges):
        try:
            parsed = parse([dict(r) for r in rows])
        except UpsertError as exc:
            assert "\n" not in str(exc)
        else:
            assert len(parsed) == len(rows)
            for row in parsed:  # what passes is what the database may store
                for field in ("id", "source", "target"):
                    value = getattr(row, field, 0)
                    assert isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_NODE_ID


@settings(max_examples=150, deadline=None, derandomize=True)
@given(name=st.text(max_size=60), method=st.text(max_size=10), seeds=JSON_VALUES, budgets=JSON_VALUES)
def test_the_retriever_refuses_any_bad_setting_with_a_seeder_error_before_connecting(name, method, seeds, budgets):
    from seeder_dgl.api import Retriever

    class NoDriver:
        def __getattr__(self, attribute):
            raise AssertionError("a connection was used before the settings were checked")

    try:
        Retriever(name, method=method or "x", seeds=seeds, budgets=budgets, driver=NoDriver())
    except SeederError as exc:
        assert "\n" not in str(exc)
    except AssertionError as exc:  # every check passed: the Retriever then reaches for the database
        assert "connection was used" in str(exc)
