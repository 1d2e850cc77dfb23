"""`seeder-dgl query --format cypher` / `Retrieval.to_cypher()`: the statement a person pastes into
Neo4j Browser reads only, and only validated values (a checked label, integer ids) are written into it."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, strategies as st
from typer.testing import CliRunner

from seeder_dgl.api import Retrieval, RetrievedNode, subgraph_cypher
from seeder_dgl.cli import app
from seeder_dgl.errors import SeederError

WRITE_WORDS = ("CREATE", "MERGE", "SET", "DELETE", "DETACH", "REMOVE", "CALL", "FOREACH", "LOAD", "DROP",
               "ALTER", "GRANT", "DENY", "REVOKE", "USE", "TERMINATE", "START", "STOP")
CLAUSES = ("MATCH", "WHERE", "OPTIONAL MATCH", "RETURN")


def _code(statement: str) -> str:
    """The statement without its comment lines and without backtick-quoted names."""
    code = "\n".join(line for line in statement.splitlines() if not line.lstrip().startswith("//"))
    return re.sub(r"`[^`]*`", "``", code)


def test_the_statement_only_matches_and_returns():
    statement = subgraph_cypher("KG_movies", [3, 17, 42])
    code = _code(statement)
    for word in WRITE_WORDS:
        assert not re.search(rf"\b{word}\b", code, re.IGNORECASE), word
    # every line is one of the four read clauses, in this order
    starts = [next(c for c in sorted(CLAUSES, key=len, reverse=True) if line.startswith(c + " "))
              for line in code.splitlines()]
    assert starts == ["MATCH", "WHERE", "OPTIONAL MATCH", "WHERE", "RETURN"]
    assert "$" not in code and "'" not in code and '"' not in code  # no parameters, no string literals
    assert code.count("[3, 17, 42]") == 2 and statement.count("(n:`KG_movies`)") == 1
    assert statement.count("(m:`KG_movies`)") == 1
    assert code.rstrip().endswith("RETURN n, r, m")


@given(st.lists(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1), max_size=30))
def test_any_64_bit_ids_are_written_as_numbers(ids):
    statement = subgraph_cypher("Metaqa", ids)
    lists = re.findall(r"IN \[([^\]]*)\]", statement)
    assert len(lists) == 2 and lists[0] == lists[1]
    assert [int(x) for x in lists[0].split(", ") if x] == ids


def test_numpy_integer_ids_are_accepted():
    assert subgraph_cypher("Metaqa", np.array([5, 6], dtype=np.int64)) == subgraph_cypher("Metaqa", [5, 6])


@pytest.mark.parametrize("label", ["", "1abc", "a b", "x`y", "KG_x\n", "Movie) DETACH DELETE (n", "Ünïcode",
                                   "a" * 65, None, 42])
def test_unsafe_labels_are_refused(label):
    with pytest.raises(SeederError, match="not a dataset label"):
        subgraph_cypher(label, [1])


@pytest.mark.parametrize("node_id", ["1", "1] DETACH DELETE n //", 1.0, True, np.bool_(True), None, 2 ** 63,
                                     -(2 ** 63) - 1])
def test_ids_that_are_not_64_bit_integers_are_refused(node_id):
    with pytest.raises(SeederError, match="node id"):
        subgraph_cypher("Metaqa", [1, node_id])


def test_retrieval_to_cypher_uses_its_label_and_nodes_in_rank_order():
    nodes = [RetrievedNode(9, "movie", "Heat", 0.9), RetrievedNode(2, "person", "Al Pacino", 0.5)]
    result = Retrieval("who starred in Heat", "khop", nodes, 0.01, 12, [(9, "Heat", "starred_actors", 2, "Al Pacino")],
                       label="KG_films")
    assert result.to_cypher() == subgraph_cypher("KG_films", [9, 2])
    assert result.triples() == ["Heat -[starred_actors]-> Al Pacino"]
    assert result.to_dict()["triples"] == [{"head": "Heat", "relation": "starred_actors", "tail": "Al Pacino",
                                            "head_id": 9, "tail_id": 2}]  # ids tell same-named nodes apart
    assert "WHERE n.id IN [9, 2]" in result.to_cypher()
    with pytest.raises(SeederError, match="does not know its dataset's Neo4j label"):
        Retrieval("q", "khop", nodes, 0.01, 12).to_cypher()


def test_an_unknown_format_is_refused_before_any_connection(tmp_path, monkeypatch):
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path))
    monkeypatch.setenv("NEO4J_URI", "bolt://127.0.0.1:1")  # nothing listens: the check comes first
    result = CliRunner().invoke(app, ["query", "films", "who directed Heat", "--format", "xml"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--format is table, json, triples or cypher" in " ".join(result.output.split())


def test_no_spliced_identifier_may_end_in_a_newline():
    """The shared check behind every label and type the project splices into Cypher."""
    from loaders.kg import is_identifier
    from seeder_dgl.graphstore.cypher import CypherTemplateError, query

    assert is_identifier("KG_x") and not is_identifier("KG_x\n") and not is_identifier(None)
    with pytest.raises(CypherTemplateError):
        query("retrieval/triples", dataset="KG_x\n")
