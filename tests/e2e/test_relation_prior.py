"""The learned relation prior end to end: `tune` fits it on a graph of one's own and stores it in
the dataset's record; `extract` grows the subgraphs with it when chosen; a live query follows it."""
from __future__ import annotations

import json

import numpy as np

from seeder_dgl.cli import app
from seeder_dgl.retrieval.relation_prior import RelationPrior
from tests.helpers.cli import runner
from tests.helpers.cli import run_ok as _ok
from tests.helpers.own_graph import company_graph, write_questions, write_tables, write_triples


def _record(driver, name: str) -> dict:
    return dict(driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m {.*} AS m", n=name).records[0]["m"])


def test_tune_fits_a_prior_that_follows_the_asked_relation(own_env, neo4j_driver, dataset_label):
    name = dataset_label.lower()
    graph = company_graph(seed=3, people=100)  # 312 questions: enough training ones for a prior
    folder = own_env / "kg"
    write_triples(graph, folder)
    write_questions(graph, folder)
    try:
        _ok("ingest", name, "--source", str(folder))
        out = _ok("tune", name)
        assert "+prior" in out  # the prior's coverage row is shown beside the others

        record = _record(neo4j_driver, name)
        prior = RelationPrior.from_json(record["relation_prior"])
        assert prior.relation_types == list(record["relation_types"]) and prior.stats["questions"] >= 100
        from seeder_dgl.embeddings import TextEncoder
        from seeder_dgl.datasets import resolve_model

        encoder = TextEncoder(resolve_model(record["model"]))
        person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
        assert prior.input == "tokens"  # it reads the question with the linked name masked, word by word
        bound = prior.bind_encoder(encoder)

        def scores(question):
            return bound.question_scores(question, encoder.encode([question], show_progress=False)[0], [person])

        works, born = scores(f"Where does {person} work?"), scores(f"In which country was {person} born?")
        column = {t: i for i, t in enumerate(record["relation_names"])}
        assert works[0, column["works at"]] > 0.5 > works[0, column["born in"]]
        assert born[0, column["born in"]] > 0.5 > born[0, column["works at"]]
        assert born[1, column["located in"]] > 0.5  # the second step of the 2-hop question
        # It keeps the words of its templates, and reads a question word typed with a typo as one of them.
        assert {"where", "does", "work", "country", "born"} <= set(prior.words.counts)
        np.testing.assert_allclose(scores(f"Where does {person} wrok?"), works, atol=1e-12)
        np.testing.assert_allclose(scores(f"In which contry was {person} bron?"), born, atol=1e-12)

        tuned = json.loads(record["retrieval"])
        _ok("extract", name)
        manifest = json.loads((own_env / "cache" / name / "subgraphs" / "tuned-train" / "manifest.json").read_text())
        assert manifest["settings"].get("relation_prior") == (prior.fingerprint if tuned["relation_prior"] else None)
        answer = json.loads(_ok("query", name, f"Where does {person} work?", "--method", "khop",
                                "--format", "json", "--k", "5"))
        employer = next(t for h, r, t in graph.triples if h == person and r == "works at")
        assert employer in [n["name"] for n in answer["nodes"]]

        if tuned["relation_prior"]:
            # A damaged record gives a one-line error naming the way out, and that way works.
            neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $n}) SET m.relation_prior = '{oops'", n=name)
            result = runner.invoke(app, ["query", name, "Where does anyone work?", "--method", "khop"])
            assert result.exit_code != 0 and "--refit-prior" in result.output
            assert "Traceback" not in result.output
            _ok("extract", name, "--refit-prior", "--overwrite")
            again = RelationPrior.from_json(_record(neo4j_driver, name)["relation_prior"])
            np.testing.assert_allclose(again.weight, prior.weight, atol=1e-9)  # same questions, same seed
    finally:
        runner.invoke(app, ["drop", name, "--yes"])


def test_on_a_graph_with_node_types_the_prior_learns_which_type_a_question_asks_for(own_env, neo4j_driver,
                                                                                      dataset_label):
    # Nodes with types (a node table): `tune` fits the prior with its answer-type head and stores it.
    name = dataset_label.lower()
    graph = company_graph(seed=4, people=100)
    folder = own_env / "typed"
    write_tables(graph, folder, "csv")
    write_questions(graph, folder)
    try:
        _ok("ingest", name, "--source", str(folder))
        _ok("tune", name)
        record = _record(neo4j_driver, name)
        prior = RelationPrior.from_json(record["relation_prior"])
        assert set(prior.answer_type_names) == {"person", "company", "city", "country", "industry"}
        assert prior.stats["answer_types"]["train_top1"] > 0.95
        from seeder_dgl.datasets import resolve_model
        from seeder_dgl.embeddings import TextEncoder

        bound = prior.bind_encoder(TextEncoder(resolve_model(record["model"])))
        person = next(n["name"] for n in graph.nodes if n["type"] == "person")
        company = next(n["name"] for n in graph.nodes if n["type"] == "company")

        def asks_for(question, topic):
            p = bound.question_answer_types(question, np.zeros(1), [topic])
            return prior.answer_type_names[int(np.argmax(p))]

        assert asks_for(f"Where does {person} work?", person) == "company"
        assert asks_for(f"In which country was {person} born?", person) == "country"
        assert asks_for(f"Who works at {company}?", company) == "person"
    finally:
        runner.invoke(app, ["drop", name, "--yes"])
