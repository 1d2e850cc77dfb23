"""Property-based: whatever bytes or rows a user's files hold, the loaders either read them or fail
with a one-line DataError, never another exception."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaders.files import load_tables, load_triples
from loaders.kg import DataError
from loaders.questions import NodeResolver, load_question_table

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
cell = st.one_of(st.text(max_size=12), st.integers(min_value=-2**70, max_value=2**70), st.floats(), st.booleans(),
                 st.none(), st.lists(st.floats(allow_nan=True), max_size=3))


def _one_line(exc: DataError) -> None:
    assert "\n" not in str(exc) and str(exc)


@FUZZ
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".tsv", ".csv", ".txt"]))
def test_any_bytes_as_a_triples_file(tmp_path, data, suffix):
    path = tmp_path / f"kb{suffix}"
    path.write_bytes(data)
    try:
        kg = load_triples(path, "g").kg
    except DataError as exc:
        _one_line(exc)
    else:
        kg.validate()
        assert kg.num_edges > 0


@FUZZ
@given(nodes=st.lists(st.dictionaries(st.sampled_from(["id", "name", "type", "text", "embedding", "x"]), cell),
                      max_size=6),
       edges=st.lists(st.dictionaries(st.sampled_from(["source", "relation", "target"]), cell), max_size=6))
def test_any_rows_as_node_and_edge_tables(tmp_path, nodes, edges):
    (tmp_path / "nodes.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in nodes))
    (tmp_path / "edges.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in edges))
    try:
        loaded = load_tables(tmp_path / "nodes.jsonl", tmp_path / "edges.jsonl", "g")
    except DataError as exc:
        _one_line(exc)
    else:
        loaded.kg.validate()
        assert len(loaded.kg.node_keys) == len(set(loaded.kg.node_keys))


@FUZZ
@given(rows=st.lists(st.dictionaries(st.sampled_from(["question", "answers", "split", "topic", "hops"]), cell),
                     max_size=6),
       text=st.text(max_size=200))
def test_any_rows_as_a_question_file(tmp_path, rows, text):
    resolver = NodeResolver.from_nodes([0, 1], ["a", "b"], ["k0", ""])
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    (tmp_path / "q.csv").write_text(text)
    for path in (tmp_path / "q.jsonl", tmp_path / "q.csv"):
        try:
            qa = load_question_table(path, resolver, "g")
        except DataError as exc:
            _one_line(exc)
        else:
            assert sorted(qa.splits["train"] + qa.splits["val"] + qa.splits["test"]) == sorted(qa.splits["all"])
            assert all(set(q.answers) <= {0, 1} for q in qa.queries.values())
