"""A graph of the user's own from files: triples and tables in every supported format, questions
by name or id, dataset names and labels, and the one-line errors for bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.own_graph import company_graph, write_questions, write_tables, write_triples
from loaders.files import find_graph_files, load_graph_files, load_tables, load_triples
from loaders.kg import DataError, KnowledgeGraph
from loaders.questions import NodeResolver, default_splits, load_question_table
from seeder_dgl.errors import SeederError, check_dataset_name
from seeder_dgl.evaluation.tune import CANDIDATES, choose
from seeder_dgl.graphstore.writer import dataset_label
from seeder_dgl.training.config import auto_epochs

GRAPH = company_graph(seed=3, people=30)


def _edges(kg: KnowledgeGraph) -> set[tuple[str, str, str]]:
    return {(kg.node_names[s], kg.relation_names[r], kg.node_names[d])
            for s, d, r in zip(kg.edge_src.tolist(), kg.edge_dst.tolist(), kg.edge_rel.tolist())}


@pytest.mark.parametrize("sep,suffix,header", [("\t", ".tsv", False), ("|", ".txt", True), (",", ".csv", True),
                                               (",", ".csv", False), ("\t", ".txt", True)])
def test_triples_files_in_every_separator_give_the_same_graph(tmp_path, sep, suffix, header):
    write_triples(GRAPH, tmp_path, sep=sep, header=header, suffix=suffix)
    files = find_graph_files(tmp_path)
    assert files.kind == "triples"
    kg = load_graph_files(files, "g").kg
    assert _edges(kg) == set(GRAPH.triples)
    assert kg.num_nodes == len({h for h, _, _ in GRAPH.triples} | {t for _, _, t in GRAPH.triples})
    assert kg.node_type_names == ["entity"] and kg.node_keys is None
    assert "head" not in kg.node_names and "subject" not in kg.node_names


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_node_and_edge_tables_keep_ids_and_types(tmp_path, fmt):
    write_tables(GRAPH, tmp_path, fmt)
    files = find_graph_files(tmp_path)
    assert files.kind == "tables"
    loaded = load_graph_files(files, "g")
    kg = loaded.kg
    assert kg.node_keys == [n["id"] for n in GRAPH.nodes]
    assert [kg.node_type_names[t] for t in kg.node_type] == [n["type"] for n in GRAPH.nodes]
    assert _edges(kg) == set(GRAPH.triples)
    assert loaded.embeddings is None and loaded.notes == []


def test_integer_ids_text_and_embedding_columns(tmp_path):
    rows = [{"ID": 10, "Title": "alpha", "description": "the first", "vector": [1.0, 0.0]},
            {"ID": 7, "Title": "beta", "vector": "[0.0, 1.0]"},
            {"ID": 3, "Title": "gamma", "color": "red"}]
    (tmp_path / "nodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "edges.csv").write_text("src,predicate,dst\n10,likes,7\n7,likes,3\n10,likes,7\n")
    loaded = load_tables(tmp_path / "nodes.jsonl", tmp_path / "edges.csv", "g")
    kg = loaded.kg
    assert kg.node_keys == ["10", "7", "3"] and kg.node_names == ["alpha", "beta", "gamma"]
    assert kg.node_texts == ["the first", "beta", "gamma"]
    assert kg.edge_src.tolist() == [0, 1] and kg.edge_dst.tolist() == [1, 2]
    np.testing.assert_allclose(loaded.embeddings[:2], [[1, 0], [0, 1]])
    assert np.isnan(loaded.embeddings[2]).all()
    assert any("color" in n for n in loaded.notes) and any("repeated" in n for n in loaded.notes)


@pytest.mark.parametrize("fmt", ["jsonl", "json"])
def test_ids_past_two_to_the_53_stay_exact_in_json(tmp_path, fmt):
    """A column of ints beside a float (or a null name) must not become float64: 2**53 + 1 would
    turn into 2**53, and two nodes into one."""
    big = 2 ** 53
    rows = [{"id": big + 1, "name": "a"}, {"id": big, "name": None}, {"id": 2.0, "name": "c"},
            {"id": 18446744073709551615, "name": "d"}]
    text = ("".join(json.dumps(r) + "\n" for r in rows) if fmt == "jsonl" else json.dumps(rows))
    (tmp_path / f"nodes.{fmt}").write_text(text)
    (tmp_path / "edges.jsonl").write_text(json.dumps({"source": big + 1, "relation": "r", "target": big}) + "\n"
                                          + json.dumps({"source": 2.0, "relation": "r", "target": 18446744073709551615}))
    kg = load_tables(tmp_path / f"nodes.{fmt}", tmp_path / "edges.jsonl", "g").kg
    assert kg.node_keys == [str(big + 1), str(big), "2", "18446744073709551615"]
    assert kg.edge_src.tolist() == [0, 2] and kg.edge_dst.tolist() == [1, 3]


@pytest.mark.parametrize("nodes,edges,message", [
    ("id,name\n1,a\n1,b\n", "source,relation,target\n1,r,1\n", "row 2: id '1' repeats row 1"),
    ("id,name\n1,a\n2,b\n", "source,relation,target\n1,r,9\n", "row 1: target '9' is not a node id"),
    ("name,kind\na,x\n", "source,relation,target\n1,r,1\n", "no 'id' column"),
    ("id,name\n1,a\n2,b\n", "weight\n1\n", "no 'source' or 'target' column"),
    ("id,name\n1,a\n2,b\n", "source,relation,target\n1,,2\n", "row 1: empty relation"),
    ("id,name,embedding\n1,a,0.1 0.2\n2,b,0.1 x\n", "source,relation,target\n1,r,2\n", "row 2: the embedding"),
    ("id,name,embedding\n1,a,0.1 0.2\n2,b,0.3\n", "source,relation,target\n1,r,2\n", "row 2: the embedding has 1"),
])
def test_bad_tables_are_one_line_errors_naming_file_and_row(tmp_path, nodes, edges, message):
    (tmp_path / "nodes.csv").write_text(nodes)
    (tmp_path / "edges.csv").write_text(edges)
    with pytest.raises(DataError) as err:
        load_tables(tmp_path / "nodes.csv", tmp_path / "edges.csv", "g")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert ".csv" in str(err.value)


def test_triples_bom_binary_ragged_and_empty_fields(tmp_path):
    bom = tmp_path / "bom.tsv"
    bom.write_bytes("\ufeffa\tr\tb\nb\tr\tc\n".encode("utf-8"))
    assert load_triples(bom, "g").kg.node_names == ["a", "b", "c"]
    binary = tmp_path / "kb.tsv"
    binary.write_bytes(b"\x00\x01\x02PK\x03\x04")
    with pytest.raises(DataError, match="binary file"):
        load_triples(binary, "g")
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("a|r|b\nb|r\n")
    with pytest.raises(DataError, match="line 1: expected head, relation, tail"):
        load_triples(ragged, "g")
    empty = tmp_path / "empty.tsv"
    empty.write_text("a\tr\tb\n\tr\tc\n")
    with pytest.raises(DataError, match="line 2: empty head"):
        load_triples(empty, "g")
    latin = tmp_path / "latin.tsv"
    latin.write_bytes("caf\xe9\tr\tb\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        load_triples(latin, "g")


def test_finding_files_in_a_folder(tmp_path):
    write_triples(GRAPH, tmp_path / "one", stem="my graph")
    write_questions(GRAPH, tmp_path / "one", "jsonl")
    found = find_graph_files(tmp_path / "one")
    assert found.paths["triples"].name == "my graph.tsv" and found.questions.name == "questions.jsonl"
    write_triples(GRAPH, tmp_path / "two", stem="a")
    write_triples(GRAPH, tmp_path / "two", stem="b")
    with pytest.raises(DataError, match="several possible triples files"):
        find_graph_files(tmp_path / "two")
    with pytest.raises(DataError, match="does not exist"):
        find_graph_files(tmp_path / "missing")
    (tmp_path / "three").mkdir()
    (tmp_path / "three" / "nodes.csv").write_text("id,name\n1,a\n")
    with pytest.raises(DataError, match="no edges table"):
        find_graph_files(tmp_path / "three")


def _resolver(kg: KnowledgeGraph) -> NodeResolver:
    return NodeResolver.from_nodes(range(kg.num_nodes), kg.node_names, kg.node_keys)


def test_questions_by_name_or_id_with_and_without_splits(tmp_path):
    write_tables(GRAPH, tmp_path, "csv")
    kg = load_graph_files(find_graph_files(tmp_path), "g").kg
    ids = {n: i for i, n in enumerate(kg.node_names)}
    path = tmp_path / "q.jsonl"
    rows = [{"question": "Where is Acme Robotics based?", "answers": ["Lisbon"], "split": "train"},
            {"question": "Which city is [Porto] in?", "answers": "city-6", "split": "validation"},  # an id
            {"question": "Who?", "answers": ["  lisbon ", "Atlantis"], "split": "test"},  # case, unknown
            {"question": "x", "answers": json.dumps(["Osaka", "Lyon"]), "split": "dev"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    qa = load_question_table(path, _resolver(kg), "g")
    q = qa.queries
    assert q[0].answers == [ids["Lisbon"]] and q[1].answers == [kg.node_keys.index("city-6")]
    assert q[1].topic == [ids["Porto"]] and q[1].text == "Which city is Porto in?"
    assert q[2].answers == [ids["Lisbon"]] and qa.unknown_names == ["Atlantis"]
    assert sorted(q[3].answers) == sorted([ids["Osaka"], ids["Lyon"]])
    assert qa.splits["train"] == [0] and qa.splits["val"] == [1, 3] and qa.splits["test"] == [2]

    write_questions(GRAPH, tmp_path, "csv")
    plain = load_question_table(tmp_path / "questions.csv", _resolver(kg), "g")
    sizes = {k: len(v) for k, v in plain.splits.items()}
    n = len(GRAPH.questions)
    assert sizes["all"] == n and abs(sizes["train"] - 0.7 * n) <= 1 and abs(sizes["test"] - 0.2 * n) <= 1
    again = load_question_table(tmp_path / "questions.csv", _resolver(kg), "g")
    assert again.splits == plain.splits  # fixed seed
    assert all(qq.answers for qq in plain.queries.values())


@pytest.mark.parametrize("text,message", [
    ("question,answers\nwho?,\n", "row 1: no answers"),
    ("question,answers,split\nwho?,a,holdout\n", "split 'holdout' is not train, val or test"),
    ("query_text,gold\nwho?,a\n", "no 'question' column"),
    ("question,answers\n,a\n", "row 1: empty question"),
])
def test_bad_question_files_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "questions.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        load_question_table(path, NodeResolver.from_nodes([0], ["a"]), "g")


def test_default_split_is_seeded_and_covers_val_and_test():
    assert default_splits(50) == default_splits(50)
    small = default_splits(3)
    assert sorted(small) == ["test", "train", "val"]


def test_dataset_names_and_labels():
    for bad in ("", "../../x", "a/b", "!!!", "-x", "x" * 49, 7, "tiny\n", "tiny\r\n", " tiny", "embeddings",
                "Embeddings"):
        with pytest.raises(SeederError, match="cannot name a dataset") as info:
            check_dataset_name(bad)
        assert "\n" not in str(info.value).replace(repr(bad), "")
    labels = {name: dataset_label(name) for name in ("probe1", "Probe1", "my-kg", "my_kg", "2024-kg")}
    assert len(set(labels.values())) == len(labels)  # one label per exact name
    assert labels["probe1"] == "KG_probe1" and labels["Probe1"] == "KG_Probe1"
    assert all(label.startswith("KG_") for label in labels.values())


def test_relation_names_that_clean_to_one_type_stay_distinct():
    kg = KnowledgeGraph("g", ["a", "b"], ["a", "b"], np.zeros(2, np.int64), ["entity"], np.array([0, 0, 0]),
                        np.array([1, 1, 1]), np.array([0, 1, 2]), ["directed by", "directed_by", "!!!"])
    types = kg.relation_types()
    assert types[:2] == ["DIRECTED_BY", "DIRECTED_BY_2"] and len(set(types)) == 3 and types[2].startswith("T_")


def test_tune_prefers_the_smaller_subgraph_within_tolerance():
    def row(setting, hit, nodes):
        return {"setting": setting.name, "group": "all", "subgraph_hit_any": hit, "mean_nodes": nodes,
                "seeds": setting.seeds, "budgets": list(setting.budgets), "mode": setting.mode}

    rows = [row(CANDIDATES[0], 0.90, 140), row(CANDIDATES[1], 0.985, 60), row(CANDIDATES[4], 0.99, 300)]
    assert choose(rows)["setting"] == CANDIDATES[1].name
    rows[1]["subgraph_hit_any"] = 0.95
    assert choose(rows)["setting"] == CANDIDATES[4].name


def test_tune_keeps_the_relation_prior_within_tolerance():
    from seeder_dgl.evaluation.tune import choose_with_prior

    def row(name, hit, nodes, prior=False):
        return {"setting": name, "group": "all", "subgraph_hit_any": hit, "mean_nodes": nodes, "relation_prior": prior}

    rows = [row(CANDIDATES[0].name, 0.90, 140), row(CANDIDATES[4].name, 0.928, 73)]
    assert choose_with_prior(rows, [row("x +prior", 0.919, 74, True)])["relation_prior"]  # within 0.01
    assert choose_with_prior(rows, [row("x +prior", 0.91, 74, True)])["setting"] == CANDIDATES[4].name
    assert choose_with_prior(rows, [row("x +prior", 0.95, 90, True)])["relation_prior"]  # better outright


def test_auto_epochs_scale_with_the_question_count():
    assert auto_epochs(31_000) == 4 and auto_epochs(100) == 40 and auto_epochs(3000) == 20


def test_headerless_tables_and_edges_without_relations(tmp_path):
    (tmp_path / "entities.tsv").write_text("m.01\tParis\tcity\nm.02\tFrance\tcountry\n")
    (tmp_path / "triples.tsv").write_text("m.01\tlocation.capital_of\tm.02\n")
    files = find_graph_files(tmp_path)
    loaded = load_graph_files(files, "g")
    kg = loaded.kg
    assert files.kind == "tables" and kg.node_keys == ["m.01", "m.02"] and kg.node_names == ["Paris", "France"]
    assert kg.node_type_names == ["city", "country"] and kg.relation_names == ["location.capital_of"]
    assert any("no header row" in n for n in loaded.notes)
    (tmp_path / "triples.tsv").write_text("source\ttarget\nm.01\tm.02\n")
    assert load_graph_files(files, "g").kg.relation_names == ["related_to"]
