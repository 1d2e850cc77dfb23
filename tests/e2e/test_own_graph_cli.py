"""A graph of the user's own, end to end through the command line against the real Neo4j:
files in a folder -> ingest -> extract (tunes first) -> train -> eval -> query -> drop, with no
flags beyond the folder; dataset names that differ only in case stay apart. A graph already in
Neo4j, adopted in place: tests/e2e/test_adopt_in_place.py."""
from __future__ import annotations

import json

import pytest

from tests.helpers.own_graph import company_graph, write_questions, write_tables, write_triples
from seeder_dgl.cli import app
from seeder_dgl.graphstore.writer import GraphWriter

from tests.helpers.cli import runner
from tests.helpers.cli import run_ok as _ok


def _count(driver, label: str) -> tuple[int, int]:
    nodes = driver.execute_query(f"MATCH (n:{label}) RETURN count(n) AS c").records[0]["c"]
    rels = driver.execute_query(f"MATCH (:{label})-[r]-() RETURN count(r) AS c").records[0]["c"]
    return nodes, rels


def _record(driver, name: str):
    rows = driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m {.*} AS m", n=name).records
    return dict(rows[0]["m"]) if rows else None


def test_triples_folder_to_a_trained_retriever_and_back_out(own_env, neo4j_driver, dataset_label):
    name = dataset_label.lower()
    graph = company_graph(seed=1, people=40)
    folder = own_env / "mykg"
    write_triples(graph, folder)
    write_questions(graph, folder)
    try:
        out = _ok("ingest", name, "--source", str(folder))
        assert "train" in out and "entity" not in out.split("Questions")[0]
        record = _record(neo4j_driver, name)
        label = record["label"]
        assert label == f"KG_{name}" and record["node_type_names"] == ["entity"]

        _ok("extract", name)  # chooses the retrieval settings first
        record = _record(neo4j_driver, name)
        tuned = json.loads(record["retrieval"])
        assert tuned["seeding"] in ("dense", "fulltext", "hybrid") and tuned["subgraph_hit_any"] > 0.9
        # the entity linker, fitted on the training questions (topics from the answer paths: the
        # questions mark none) and a typed variant of each, is stored with the dataset
        linker = json.loads(record["entity_linker"])
        assert linker["stats"]["fitted"] and linker["stats"]["topic_from"] == "answer paths"
        assert linker["stats"]["typed_variants"] > 0 and linker["stats"]["topic_in_candidates"] > 0.9
        assert (own_env / "cache" / name / "subgraphs" / "tuned-train" / "manifest.json").exists()

        _ok("train", name)
        run = own_env / "runs" / name / "tuned-full"
        config = json.loads((run / "config.json").read_text())
        assert config["config"]["node_types"] and config["config"]["epochs"] >= 4

        _ok("eval", name, "--split", "test")
        results = json.loads((own_env / "runs" / name / f"eval-{name}-test-tuned" / "results.json").read_text())
        methods = results["methods"]
        seeder, khop = methods["seeder"]["summary"], methods["khop"]["summary"]
        assert seeder["hit@1"] > khop["hit@1"] + 0.2 and seeder["hit@5"] >= 0.8

        # the same questions as people type them, beside the written ones, with a funnel per kind
        out = _ok("eval", name, "--split", "test", "--methods", "seeder", "--perturb", "lower,typo", "--diagnose",
                  "--out", str(own_env / "typed"))
        assert "questions as people type them" in " ".join(out.split())
        typed = json.loads((own_env / "typed" / "typed.json").read_text())
        assert list(typed["results"]) == ["as written", "lower", "typo"]
        written = typed["results"]["as written"]["seeder"]["overall"]["hit@1"]
        assert written == pytest.approx(seeder["hit@1"], abs=1e-9)  # the same questions, the same scores
        for kind in ("lower", "typo"):
            assert typed["results"][kind]["seeder"]["overall"]["hit@1"] >= written - 0.15, kind
            funnel = json.loads((own_env / "typed" / f"funnel-seeder-{kind}.json").read_text())
            assert funnel["stages"][0] == "seeded" and funnel["overall"]["seeded"] >= funnel["overall"]["hit@1"]
        assert typed["examples"]["lower"][0] == typed["examples"]["lower"][0].lower()
        bad = runner.invoke(app, ["eval", name, "--perturb", "upper"])
        assert bad.exit_code == 1 and "unknown perturbation 'upper'" in bad.output and "Traceback" not in bad.output

        person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
        employer = next(t for h, r, t in graph.triples if h == person and r == "works at")
        answer = json.loads(_ok("query", name, f"Where does {person} work?", "--format", "json", "--k", "5"))
        assert employer in [n["name"] for n in answer["nodes"]]
        # as a person types it: lower case, a letter of the surname dropped, no question mark
        first, last = person.split(" ", 1)
        typed = f"where does {first.lower()} {last.lower()[:2] + last.lower()[3:]} work"
        answer = json.loads(_ok("query", name, typed, "--format", "json", "--k", "5"))
        assert employer in [n["name"] for n in answer["nodes"]], typed

        # another graph under the same name (runs are kept by drop): the old policy is refused, not
        # served on a graph it never saw
        _ok("drop", name, "--yes")
        other = own_env / "other"
        write_triples(company_graph(seed=9, people=30), other)
        write_questions(company_graph(seed=9, people=30), other)
        _ok("ingest", name, "--source", str(other))
        refused = runner.invoke(app, ["query", name, f"Where does {person} work?", "--method", "seeder",
                                      "--checkpoint", str(run / "best.pt")])
        assert refused.exit_code == 1 and "another graph named" in refused.output, refused.output
        assert "Traceback" not in refused.output and f"seeder-dgl train {name}" in refused.output
    finally:
        runner.invoke(app, ["drop", name, "--yes"])
    assert _record(neo4j_driver, name) is None and _count(neo4j_driver, label) == (0, 0)
    assert not (own_env / "cache" / name).exists()
    constraints = neo4j_driver.execute_query("SHOW CONSTRAINTS YIELD name RETURN collect(name) AS c").records[0]["c"]
    indexes = neo4j_driver.execute_query("SHOW INDEXES YIELD name RETURN collect(name) AS c").records[0]["c"]
    assert not [c for c in constraints + indexes if c.startswith(label + "_")]


def test_tables_with_string_ids_answers_by_id_and_names_differing_in_case(own_env, neo4j_driver, dataset_label):
    graph = company_graph(seed=2, people=20)
    folder = own_env / "tables"
    person = graph.nodes[0]
    company = next(t for h, r, t in graph.triples if h == person["name"] and r == "works at")
    company_id = next(n["id"] for n in graph.nodes if n["name"] == company)
    about = f"{company}, a company founded in 1987"
    for node in graph.nodes:  # a text column: what an LLM reads about the node beyond its name
        node["text"] = about if node["id"] == company_id else node["name"]
    write_tables(graph, folder, "jsonl")
    (folder / "questions.jsonl").write_text(json.dumps({"question": f"Where does {person['name']} work?",
                                                       "answers": [company_id], "split": "test"}) + "\n" +
                                            json.dumps({"question": "Who founded Atlantis?", "answers": ["Poseidon"],
                                                        "split": "test"}) + "\n")
    lower, upper = dataset_label.lower(), "Q" + dataset_label.lower()[1:]
    upper_lower = upper.lower()
    names = (lower, upper, upper_lower)
    try:
        out = _ok("ingest", lower, "--source", str(folder))
        assert "1 answer/topic names match no node" in out
        types = _record(neo4j_driver, lower)["node_type_names"]
        assert sorted(types) == ["city", "company", "country", "industry", "person"]
        keys = neo4j_driver.execute_query(f"MATCH (n:KG_{lower}) WHERE n.key = $k RETURN n.name AS name",
                                          k=company_id).records
        assert [r["name"] for r in keys] == [company]

        answer = json.loads(_ok("query", lower, f"Where does {person['name']} work?", "--method", "khop",
                                "--format", "json"))
        found = {n["name"]: n for n in answer["nodes"]}
        assert found[company]["text"] == about and found[person["name"]]["text"] == person["name"]
        assert all({"head_id", "tail_id"} <= set(t) for t in answer["triples"]) and answer["triples"]

        # questions matched by the dataset's own ids; the unknown answer is reported, not guessed
        out = _ok("eval", lower, "--split", "test", "--methods", "khop")
        assert "Poseidon" in out and "1 of 2 questions" in out

        # two names that differ only in case are two datasets; dropping one keeps the other
        write_triples(graph, own_env / "t1")
        _ok("ingest", upper, "--source", str(own_env / "t1"))
        _ok("ingest", upper_lower, "--source", str(own_env / "t1"))
        labels = {n: _record(neo4j_driver, n)["label"] for n in (upper, upper_lower)}
        assert labels[upper] != labels[upper_lower]
        before = _count(neo4j_driver, labels[upper_lower])
        _ok("ingest", upper, "--source", str(own_env / "t1"), "--reset")
        _ok("drop", upper, "--yes")
        assert _record(neo4j_driver, upper) is None and _count(neo4j_driver, labels[upper]) == (0, 0)
        assert _count(neo4j_driver, labels[upper_lower]) == before and before[0] > 0
        assert _record(neo4j_driver, upper_lower)["status"] == "complete"
    finally:
        for n in names:
            runner.invoke(app, ["drop", n, "--yes"])


def test_bad_input_is_one_line(own_env, neo4j_driver):
    bad = own_env / "bad"
    bad.mkdir()
    (bad / "nodes.csv").write_text("id,name\n1,a\n1,b\n")
    (bad / "edges.csv").write_text("source,relation,target\n1,r,1\n")
    for args, message in (
        (["ingest", "x1", "--source", str(bad)], "row 2: id '1' repeats row 1"),
        (["ingest", "../../x", "--source", str(bad)], "cannot name a dataset"),
        (["ingest", "x2"], "pass --source"),
        (["extract", "never_ingested"], "unknown dataset 'never_ingested'"),
        (["drop", "never_ingested", "--yes"], "nothing to drop"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, result.output
        assert message in " ".join(result.output.split()) and "Traceback" not in result.output
    assert GraphWriter(neo4j_driver, "x1").record() is None


@pytest.mark.parametrize("layout", ["triples-csv-header", "triples-pipe-txt", "tables-csv", "tables-tsv",
                                    "tables-parquet"])
def test_the_four_commands_on_every_input_format(own_env, neo4j_driver, dataset_label, layout):
    graph = company_graph(seed=5, people=12)
    folder = own_env / layout
    if layout == "triples-csv-header":
        write_triples(graph, folder, sep=",", header=True, suffix=".csv", stem="kg")
    elif layout == "triples-pipe-txt":
        write_triples(graph, folder, sep="|", header=False, suffix=".txt", stem="kb")
    else:
        write_tables(graph, folder, layout.split("-")[1])
    write_questions(graph, folder, "jsonl" if layout.endswith("txt") else "csv")
    name = dataset_label.lower()
    try:
        _ok("ingest", name, "--source", str(folder))
        _ok("extract", name)
        _ok("train", name, "--epochs", "1")
        _ok("eval", name, "--split", "test", "--methods", "khop,seeder")
        results = json.loads((own_env / "runs" / name / f"eval-{name}-test-tuned" / "results.json").read_text())
        assert results["methods"]["seeder"]["summary"]["num_queries"] == round(0.2 * len(graph.questions))
        answer = json.loads(_ok("query", name, "Who works at Acme Robotics?", "--format", "json", "--k", "3"))
        assert len(answer["nodes"]) == 3
    finally:
        runner.invoke(app, ["drop", name, "--yes"])
