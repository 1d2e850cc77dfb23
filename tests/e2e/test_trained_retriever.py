"""A trained retriever end to end against the real Neo4j: `train` writes retriever.json beside best.pt
and points the dataset's record at its run (`eval` follows it too); after the record's relation prior is fitted anew
(`extract --refit-prior`), `query` and `eval` still retrieve with the prior the policy was trained
with, `train` refuses subgraphs grown with another prior than the record's, a relation type upserted
since is taken in (the policy's unknown-relation slot), and a run folder without the file is
refused as before."""
from __future__ import annotations

import csv
import json

from seeder_dgl.api import Retriever
from seeder_dgl.cli import app
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.training.artifact import ARTIFACT, read_trained_retriever
from tests.helpers.cli import run_ok as _ok
from tests.helpers.cli import runner
from tests.e2e.test_relation_prior import _record
from tests.helpers.own_graph import graph_folder


def _fingerprint(prior_json: str) -> str:
    return RelationPrior.from_json(prior_json).fingerprint


def test_a_trained_retriever_keeps_what_it_was_trained_with(own_env, neo4j_driver, dataset_label):
    name = dataset_label.lower()
    folder = own_env / "kg"
    graph = graph_folder(folder, seed=3, people=100)  # 312 questions: enough training ones for a prior
    person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
    employer = next(t for h, r, t in graph.triples if h == person and r == "works at")
    question = f"Where does {person} work?"
    try:
        _ok("ingest", name, "--source", str(folder))
        _ok("extract", name)  # tunes first: the settings, the entity linker and the relation prior
        tuned = json.loads(_record(neo4j_driver, name)["retrieval"])
        assert tuned["relation_prior"] and tuned["seeding"] != "dense"  # what this graph's tune chooses

        # A run written elsewhere (`train --out`) becomes the one the record points to, and `eval`
        # scores the retriever `query` serves, not the profile's folder (empty at this point).
        elsewhere = own_env / "elsewhere"
        _ok("train", name, "--epochs", "1", "--out", str(elsewhere))
        assert (elsewhere / ARTIFACT).is_file() and not (own_env / "runs" / name / "tuned-full").exists()
        _ok("eval", name, "--split", "test", "--methods", "seeder", "--limit", "5")
        scored = json.loads((own_env / "runs" / name / f"eval-{name}-test-tuned" / "results.json").read_text())
        assert str(elsewhere / "best.pt") in json.dumps(scored["methods"]["seeder"])

        _ok("train", name, "--epochs", "2")

        run = own_env / "runs" / name / "tuned-full"
        trained = read_trained_retriever(run)
        record = _record(neo4j_driver, name)
        assert (record["active_run"], record["active_run_profile"]) == (f"{name}/tuned-full", "tuned")
        assert trained.relation_prior == record["relation_prior"] and trained.follows_prior
        assert trained.entity_linker == record["entity_linker"]
        assert (trained.seeds, list(trained.budgets), trained.seeding) == (tuned["seeds"], tuned["budgets"],
                                                                          tuned["seeding"])
        first = json.loads(_ok("query", name, question, "--format", "json", "--k", "5"))
        assert employer in [n["name"] for n in first["nodes"]]

        # The record's prior and linker fitted anew, on other questions (a third left out): the
        # validation subgraphs follow them, the training ones and the trained retriever do not.
        fewer = folder / "fewer.csv"
        with open(fewer, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["question", "answers"])
            writer.writerows([q["question"], "|".join(q["answers"])] for i, q in enumerate(graph.questions) if i % 3)
        _ok("extract", name, "--refit-prior", "--overwrite", "--split", "val", "--questions", str(fewer))
        refit = _record(neo4j_driver, name)["relation_prior"]
        assert _fingerprint(refit) != _fingerprint(trained.relation_prior)

        again = json.loads(_ok("query", name, question, "--format", "json", "--k", "5"))
        assert again["nodes"] == first["nodes"]  # the same retriever, not refused
        with Retriever(name) as retriever:
            assert retriever.settings_for("seeder").relation_prior.fingerprint == \
                _fingerprint(trained.relation_prior)  # its own
            assert retriever.settings_for("khop").relation_prior.fingerprint == _fingerprint(refit)  # the record's
        _ok("eval", name, "--split", "test", "--methods", "seeder,khop", "--limit", "20")  # not refused either
        results = json.loads((own_env / "runs" / name / f"eval-{name}-test-tuned" / "results.json").read_text())
        assert "seeder" in results["methods"] and not results["meta"]["notes"]

        # Training on subgraphs grown with the earlier prior is refused in one line, saying what to run.
        refused = runner.invoke(app, ["train", name, "--epochs", "1"])
        assert refused.exit_code == 1 and "Traceback" not in refused.output
        assert f"seeder-dgl extract {name} --profile tuned --overwrite" in " ".join(refused.output.split())

        # A relation type upserted since training: the policy's unknown-relation slot takes it.
        ids = [n["id"] for n in first["nodes"][:2]]
        edges = own_env / "edges.jsonl"
        edges.write_text(json.dumps({"source": ids[0], "target": ids[1], "relation": "mentored by"}) + "\n")
        _ok("upsert", name, "--edges", str(edges))
        assert "MENTORED_BY" in _record(neo4j_driver, name)["relation_types"]
        answer = json.loads(_ok("query", name, question, "--format", "json", "--k", "5"))
        assert employer in [n["name"] for n in answer["nodes"]]

        # A run folder from before trained retrievers: the record's prior, refused when it changed.
        (run / ARTIFACT).unlink()
        old = runner.invoke(app, ["query", name, question])
        assert old.exit_code == 1 and "has a new one" in old.output and "Traceback" not in old.output
    finally:
        runner.invoke(app, ["drop", name, "--yes"])
