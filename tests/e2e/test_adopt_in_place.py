"""A graph already in Neo4j, adopted in place (``seeder-dgl adopt``), against the real server.

The user's graph has its own labels and properties, among them an ``id``, a ``name`` and an
``embedding`` of other meanings (seeder-dgl must not read or write them), several relationship
types, and a node of another graph linked to it. After adopt, extract, train and query, every
user property, label and relationship is as it was; a relationship the user adds is followed by
the next query with no re-adopt; adopting again takes in added, renamed and departed nodes; and
drop leaves the database exactly as the user left it.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from seeder_dgl.cli import app
from seeder_dgl.graphstore.live import LiveGraph
from tests.helpers.cli import run_ok as _ok
from tests.helpers.cli import runner
from tests.helpers.own_graph import company_graph, write_questions


def _record(driver, name: str):
    rows = driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m {.*} AS m", n=name).records
    return dict(rows[0]["m"]) if rows else None


def _build_user_graph(driver, tag: str, user: str, people: int = 30, seed: int = 4):
    """The company graph as a user would keep it: label ``user`` plus a type label, ``uid`` and
    ``title``, and ``id``/``name``/``embedding`` properties that mean something else."""
    graph = company_graph(seed=seed, people=people)
    rows = [{"uid": n["id"], "title": n["name"], "kind": n["type"].capitalize(), "id": 1000 + i,
             "name": f"internal-{i}", "embedding": [1.0, float(i), 3.0]} for i, n in enumerate(graph.nodes)]
    for kind in sorted({r["kind"] for r in rows}):
        driver.execute_query(f"UNWIND $rows AS r CREATE (n:{user}:{kind}) SET n = r, n.owner = $tag REMOVE n.kind",
                             rows=[r for r in rows if r["kind"] == kind], tag=tag)
    uid = {n["name"]: n["id"] for n in graph.nodes}
    for h, r, t in graph.triples:
        rel = r.upper().replace(" ", "_")
        driver.execute_query(f"MATCH (a:{user} {{uid: $a}}), (b:{user} {{uid: $b}}) "
                             f"CREATE (a)-[:{rel} {{since: 2020}}]->(b)", a=uid[h], b=uid[t])
    # A node of another graph of the user's, linked to this one: never adopted, never traversed.
    driver.execute_query(f"MATCH (a:{user} {{uid: $a}}) CREATE (a)-[:LINKS_TO]->(:{user}Other {{owner: $tag, id: 1}})",
                         a=graph.nodes[0]["id"], tag=tag)
    return graph, uid


def _raw(driver, tag: str):
    """Every node the test made (by its owner property, whatever its labels) and every relationship
    touching them, with all labels and properties, in a stable order."""
    nodes = driver.execute_query("MATCH (n) WHERE n.owner = $tag RETURN labels(n) AS l, properties(n) AS p",
                                 tag=tag).records
    rels = driver.execute_query("MATCH (a)-[r]->(b) WHERE a.owner = $tag OR b.owner = $tag "
                                "RETURN a.uid AS a, type(r) AS t, b.uid AS b, properties(r) AS p", tag=tag).records
    def key(node):  # by the user's id first: adding properties must not reorder the nodes
        return str(node[1].get("uid")), json.dumps(node, sort_keys=True, default=str)

    return (sorted(([sorted(r["l"]), dict(r["p"])] for r in nodes), key=key),
            sorted(([r["a"], r["t"], r["b"], dict(r["p"])] for r in rels), key=lambda r: json.dumps(r, default=str)))


def _stripped(snapshot, seeder_label: str):
    """The snapshot without seeder-dgl's label and its <label>_* properties: the user's view."""
    nodes, rels = snapshot
    prefix = seeder_label + "_"
    return ([[[l for l in labels if l != seeder_label], {k: v for k, v in p.items() if not k.startswith(prefix)}]
             for labels, p in nodes], rels)


LEASE_CONSTRAINT = "seeder_lease_name"
"""seeder-dgl's own, for every dataset of the database (graphstore/lease.py): it exists while any
seeder-dgl writer has run since the last dataset went, and goes with the last dataset's drop."""


def _schema_objects(driver) -> set[str]:
    """The database's constraints and indexes, but for the lease constraint (checked apart)."""
    constraints = driver.execute_query("SHOW CONSTRAINTS YIELD name RETURN collect(name) AS c").records[0]["c"]
    indexes = driver.execute_query("SHOW INDEXES YIELD name RETURN collect(name) AS c").records[0]["c"]
    return (set(constraints) | set(indexes)) - {LEASE_CONSTRAINT}


def _lease_constraint_matches_the_datasets_left(driver) -> bool:
    names = driver.execute_query("SHOW CONSTRAINTS YIELD name RETURN collect(name) AS c").records[0]["c"]
    datasets = driver.execute_query("MATCH (m:SeederDataset) RETURN count(m) AS c").records[0]["c"]
    return datasets > 0 or LEASE_CONSTRAINT not in names


def test_a_graph_is_adopted_in_place_used_live_and_dropped_without_trace(own_env, neo4j_driver, dataset_label,
                                                                        monkeypatch):
    tag, user, name = dataset_label, "U" + dataset_label[1:], dataset_label.lower()
    schema_before = _schema_objects(neo4j_driver)
    graph, uid = _build_user_graph(neo4j_driver, tag, user)
    write_questions(graph, own_env / "q")
    before = _raw(neo4j_driver, tag)
    seeder = f"KG_{name}"
    expected = before
    try:
        for args, message in (
            (["adopt", name, "--label", "Nobody", "--id-property", "uid", "--name-property", "title"],
             "no node in Neo4j has the label 'Nobody'"),
            (["adopt", name, "--label", user, "--id-property", "nope", "--name-property", "title"],
             "have no property 'nope'"),
            (["adopt", name, "--label", user, "--id-property", "uid", "--name-property", "title",
              "--text-property", "missing"], "no :" + user + " node has the property 'missing'"),
            (["adopt", name, "--label", user, "--id-property", "owner", "--name-property", "title"],
             "--id-property must be unique"),
            (["adopt", name], "give --label, --id-property and --name-property"),
            (["adopt", name, "--label", user, "--id-property", "uid", "--name-property", "title",
              "--embedding-property", "embedding"], "holds lists of 3 numbers but the model gives 384-d vectors"),
        ):
            result = runner.invoke(app, args)
            assert result.exit_code == 1 and message in " ".join(result.output.split()), result.output
        assert _raw(neo4j_driver, tag) == before and _record(neo4j_driver, name) is None

        out = _ok("adopt", name, "--label", user, "--id-property", "uid", "--name-property", "title",
                  "--questions", str(own_env / "q" / "questions.csv"))
        assert f"{len(graph.nodes)} :{user} nodes carry {seeder}" in out
        record = _record(neo4j_driver, name)
        assert record["label"] == seeder and record["status"] == "complete"
        assert record["num_nodes"] == len(graph.nodes) and record["num_relationships"] == len(graph.triples)
        assert sorted(record["relation_types"]) == ["BORN_IN", "HEADQUARTERED_IN", "INDUSTRY", "LOCATED_IN",
                                                    "WORKS_AT"]
        # Only seeder-dgl's label and its own <label>_* properties were added; the user's are as they were.
        after = _raw(neo4j_driver, tag)
        assert _stripped(after, seeder) == before
        owned = {f"{seeder}_{p}" for p in ("id", "embedding", "sketch", "sketch_error", "type", "digest")}
        for (labels, props), (old_labels, old_props) in zip(after[0], before[0]):
            if user in labels:
                assert set(labels) - set(old_labels) == {seeder} and set(props) - set(old_props) == owned
                assert [props[k] for k in ("id", "name", "embedding")] == [old_props[k] for k in
                                                                           ("id", "name", "embedding")]
            else:
                assert (labels, props) == (old_labels, old_props)  # the other graph's node
        ids = sorted(p[f"{seeder}_id"] for labels, p in after[0] if user in labels)
        assert ids == list(range(len(graph.nodes)))
        kinds = neo4j_driver.execute_query(f"MATCH (n:{seeder}) RETURN DISTINCT n.{seeder}_type AS t").records
        assert sorted(r["t"] for r in kinds) == ["City", "Company", "Country", "Industry", "Person"]

        # The changes of a live graph go to the user's graph itself.
        (own_env / "n.jsonl").write_text(json.dumps({"id": 99999, "name": "x", "type": "t"}) + "\n")
        result = runner.invoke(app, ["upsert", name, "--nodes", str(own_env / "n.jsonl")])
        assert result.exit_code == 1 and f"run `seeder-dgl adopt {name}`" in " ".join(result.output.split())
        result = runner.invoke(app, ["adopt", name, "--label", user, "--id-property", "uid", "--name-property",
                                     "title", "--text-property", "note"])
        assert result.exit_code == 1 and "adopt with --reset" in " ".join(result.output.split()), result.output

        _ok("extract", name)
        _ok("train", name, "--epochs", "3")
        _ok("eval", name, "--split", "test", "--methods", "khop,seeder")
        assert (own_env / "runs" / name / f"eval-{name}-test-tuned" / "results.json").exists()
        assert "complete" in _ok("status")
        person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
        employer = next(t for h, r, t in graph.triples if h == person and r == "works at")
        for engine in ("cypher", "procedure"):
            monkeypatch.setenv("SEEDER_KHOP", engine)
            answer = json.loads(_ok("query", name, f"Where does {person} work?", "--format", "json", "--k", "5"))
            assert employer in [n["name"] for n in answer["nodes"]], engine
            assert answer["triples"] and all(t["relation"] in ("works_at", "born_in", "headquartered_in", "industry",
                                                                 "located_in") for t in answer["triples"])
        statement = _ok("query", name, f"Where does {person} work?", "--format", "cypher", "--method", "khop")
        assert f"n.{seeder}_id IN" in statement
        assert _stripped(_raw(neo4j_driver, tag), seeder) == before  # the user's graph, untouched

        # A relationship the user adds between adopted nodes is followed at once, by both engines.
        other = next(c for c in sorted({t for _, r, t in graph.triples if r == "works at"}) if c != employer)
        ids_of = {r["uid"]: r["i"] for r in neo4j_driver.execute_query(
            f"MATCH (n:{seeder}) RETURN n.uid AS uid, n.{seeder}_id AS i").records}
        p_id, c_id = ids_of[uid[person]], ids_of[uid[other]]
        q = np.random.default_rng(0).normal(size=record["dimension"]).astype(np.float32)
        for engine in ("cypher", "procedure"):
            live = LiveGraph(neo4j_driver, name, khop=engine)
            assert c_id not in live.khop_filter(q, [(p_id, 0.5)], [50]).node_ids.tolist()
        neo4j_driver.execute_query(f"MATCH (a:{user} {{uid: $a}}), (b:{user} {{uid: $b}}) CREATE (a)-[:WORKS_AT]->(b)",
                                   a=uid[person], b=uid[other])
        for engine in ("cypher", "procedure"):
            live = LiveGraph(neo4j_driver, name, khop=engine)
            sub = live.khop_filter(q, [(p_id, 0.5)], [50])
            assert c_id in sub.node_ids.tolist(), engine
            local = sub.node_ids.tolist().index(c_id)
            assert local in sub.dst[sub.src == 0].tolist()  # the new relationship is in the subgraph
            assert all(i in ids_of.values() for i in sub.node_ids.tolist())  # never the other graph's node

        # Adopting again takes in what the user changed: a new node, a renamed one, one that left.
        neo4j_driver.execute_query(f"MATCH (c:{user} {{uid: $c}}) CREATE (:{user}:Person {{uid: 'person-new', "
                                   "title: 'Zora Quill', owner: $tag, id: 7, name: 'n', embedding: [0.5]})"
                                   "-[:WORKS_AT {since: 2024}]->(c)", c=uid[employer], tag=tag)
        neo4j_driver.execute_query(f"MATCH (n:{user} {{uid: $u}}) SET n.title = 'Renamed Person'", u=uid[person])
        leaver = next(n["id"] for n in graph.nodes if n["type"] == "person" and n["name"] != person)
        neo4j_driver.execute_query(f"MATCH (n:{user} {{uid: $u}}) REMOVE n:{user}", u=leaver)
        out = _ok("adopt", name)
        assert "(1 new, 1 embedded again, 1 released)" in out
        record = _record(neo4j_driver, name)
        assert record["num_nodes"] == len(graph.nodes)  # one in, one out
        new = neo4j_driver.execute_query(f"MATCH (n:{seeder} {{uid: 'person-new'}}) RETURN n.{seeder}_id AS i")
        assert new.records[0]["i"] == len(graph.nodes)  # after the largest id
        gone = neo4j_driver.execute_query("MATCH (n {uid: $u}) RETURN labels(n) AS l, keys(n) AS k", u=leaver)
        assert seeder not in gone.records[0]["l"] and not [k for k in gone.records[0]["k"] if k.startswith(seeder)]
        answer = json.loads(_ok("query", name, "Where does Zora Quill work?", "--format", "json", "--k", "5",
                                "--method", "khop"))
        assert "Zora Quill" in [n["name"] for n in answer["nodes"]]
        expected = _stripped(_raw(neo4j_driver, tag), seeder)  # the user's graph as the user changed it
        assert _ok("adopt", name).count("(0 new, 0 embedded again, 0 released)") == 1  # nothing more to do
    finally:
        runner.invoke(app, ["drop", name, "--yes"])
    try:
        assert _raw(neo4j_driver, tag) == expected  # exactly the user's graph: no label or property of ours
        assert _record(neo4j_driver, name) is None
        assert neo4j_driver.execute_query(f"MATCH (n:{seeder}) RETURN count(n) AS c").records[0]["c"] == 0
        assert _schema_objects(neo4j_driver) == schema_before
        assert _lease_constraint_matches_the_datasets_left(neo4j_driver)  # nothing of ours once none is left
        assert not (own_env / "cache" / name).exists()
    finally:
        neo4j_driver.execute_query("MATCH (n) WHERE n.owner = $tag DETACH DELETE n", tag=tag)


def test_relationship_types_limit_what_is_followed_and_an_old_copy_is_replaced(own_env, neo4j_driver, dataset_label):
    """--relationship-types: only those types are traversed, exported and counted. A dataset that
    is a copy (what older versions of adopt wrote) is replaced only with --reset, and ingest does not
    overwrite a graph adopted in place."""
    from seeder_dgl.graphstore.export import export_graph

    tag, user, name = dataset_label, "U" + dataset_label[1:], dataset_label.lower()
    graph, uid = _build_user_graph(neo4j_driver, tag, user, people=12, seed=6)
    folder = own_env / "copy"
    folder.mkdir()
    (folder / "triples.tsv").write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in graph.triples))
    try:
        _ok("ingest", name, "--source", str(folder))
        result = runner.invoke(app, ["adopt", name, "--label", user, "--id-property", "uid", "--name-property", "title"])
        assert result.exit_code == 1 and "adopt with --reset" in " ".join(result.output.split())
        _ok("adopt", name, "--label", user, "--id-property", "uid", "--name-property", "title",
            "--relationship-types", "WORKS_AT,HEADQUARTERED_IN", "--reset")
        record = _record(neo4j_driver, name)
        works = sum(1 for _, r, _ in graph.triples if r in ("works at", "headquartered in"))
        assert record["num_relationships"] == works and record["num_nodes"] == len(graph.nodes)
        assert sorted(record["relation_types"]) == ["HEADQUARTERED_IN", "WORKS_AT"]
        export = export_graph(neo4j_driver, name, None, progress=False)
        assert export.src.shape[0] == works and set(export.rel.tolist()) == {0, 1}
        person = next(h for h, r, _ in graph.triples if r == "born in")
        p_id = neo4j_driver.execute_query(f"MATCH (n:{user} {{uid: $u}}) RETURN n.KG_{name}_id AS i",
                                          u=uid[person]).records[0]["i"]
        employer = next(t for h, r, t in graph.triples if h == person and r == "works at")
        q = np.random.default_rng(1).normal(size=record["dimension"]).astype(np.float32)
        for engine in ("cypher", "procedure"):
            sub = LiveGraph(neo4j_driver, name, khop=engine).khop_filter(q, [(p_id, 0.5)], [100])
            names = set(neo4j_driver.execute_query(f"MATCH (n:KG_{name}) WHERE n.KG_{name}_id IN $ids "
                                                   "RETURN collect(n.title) AS t", ids=sub.node_ids.tolist())
                        .records[0]["t"])
            assert names == {person, employer}, engine  # not the city of BORN_IN
        result = runner.invoke(app, ["ingest", name, "--source", str(folder)])
        assert result.exit_code == 1 and "adopted in place" in " ".join(result.output.split())
    finally:
        runner.invoke(app, ["drop", name, "--yes"])
        neo4j_driver.execute_query("MATCH (n) WHERE n.owner = $tag DETACH DELETE n", tag=tag)
    assert neo4j_driver.execute_query(f"MATCH (n:KG_{name}) RETURN count(n) AS c").records[0]["c"] == 0


@pytest.mark.parametrize("engine", ["cypher", "procedure"])
def test_khop_on_a_graph_adopted_in_place_equals_the_reference(neo4j_driver, dataset_label, engine, request):
    """The adopted dataset's K-hop (its own id, embedding and sketch properties, the user's
    relationships) selects what the in-memory reference selects on its export."""
    from seeder_dgl.graphstore.adopt import AdoptSource, InPlaceAdopter
    from seeder_dgl.retrieval.pipeline import MemoryGraph
    from seeder_dgl.graphstore.cypher import query
    from seeder_dgl.graphstore.export import export_graph
    from seeder_dgl.graphstore.writer import GraphWriter
    from tests.helpers.graphs import random_embeddings, random_kg

    if engine == "procedure":
        request.getfixturevalue("seeder_procedures")
    user = "U" + dataset_label[1:]
    kg = random_kg(dataset_label, 600, 3000, seed=21)
    emb = random_embeddings(600, seed=21)
    neo4j_driver.execute_query(f"UNWIND range(0, $n - 1) AS i CREATE (:{user} {{key: 'k' + toString(i), "
                               "label: 'node ' + toString(i), vec: $emb[i], id: -i, embedding: [1.0]})",
                               n=600, emb=emb.tolist())
    rel_names = [f"R{i}" for i in range(len(kg.relation_names))]
    for r, rel in enumerate(rel_names):
        pick = kg.edge_rel == r
        neo4j_driver.execute_query(f"UNWIND $pairs AS p MATCH (a:{user} {{key: 'k' + toString(p[0])}}), "
                                   f"(b:{user} {{key: 'k' + toString(p[1])}}) CREATE (a)-[:{rel}]->(b)",
                                   pairs=np.stack([kg.edge_src[pick], kg.edge_dst[pick]], 1).tolist())
    rel_emb = random_embeddings(len(rel_names), seed=22)
    try:
        InPlaceAdopter(neo4j_driver, dataset_label, batch=128).adopt(
            AdoptSource(user, "key", "label", embedding_property="vec"),
            lambda texts: pytest.fail("every node has a usable embedding"),
            lambda names: rel_emb[[rel_names.index(n) for n in names]], "test-model", emb.shape[1])
        live = LiveGraph(neo4j_driver, dataset_label, khop=engine)
        # The hop's lookups by id go through the adopted dataset's own uniqueness constraint, as an
        # ingested dataset's do (cypher/retrieval/khop_hop.cypher).
        plan = neo4j_driver.execute_query("EXPLAIN " + query("retrieval/khop_hop", **live.schema.identifiers())
                                          ).summary.plan
        operators, todo = [], [plan]
        while todo:
            step = todo.pop()
            operators.append(f"{step['operatorType']} {step['args'].get('Details', '')}")
            todo += step.get("children", [])
        assert any(o.startswith("NodeUniqueIndexSeek") for o in operators), operators
        memory = MemoryGraph.from_export(export_graph(neo4j_driver, dataset_label, None, progress=False), live)
        assert memory.arrays.num_nodes == 600
        for i in range(3):
            q = random_embeddings(1, seed=500 + i)[0]
            seeds = memory.dense_seeds(q, 3)
            assert [s for s, _ in live.dense_seeds(q, 3, exact=True)] == [s for s, _ in seeds]
            sub = live.khop_filter(q, seeds, [20, 40])
            ref = memory.khop_filter(q, seeds, [20, 40])
            assert sorted(sub.node_ids.tolist()) == sorted(ref.node_ids.tolist())
            np.testing.assert_allclose(np.sort(sub.exact_score), np.sort(ref.exact_score), atol=1e-6)
            feats, _, names = live.node_features(sub.node_ids)
            np.testing.assert_allclose(feats, memory.node_features(sub.node_ids)[0], atol=1e-7)
            assert all(n.startswith("node ") for n in names)
    finally:
        GraphWriter(neo4j_driver, dataset_label).drop()
        left = neo4j_driver.execute_query(f"MATCH (n:{user}) RETURN [k IN keys(n) WHERE k STARTS WITH 'KG_'] AS k, "
                                          "labels(n) AS l").records
        neo4j_driver.execute_query(f"MATCH (n:{user}) DETACH DELETE n")
    assert all(not r["k"] and r["l"] == [user] for r in left)


def test_an_adoption_cut_off_part_way_continues_where_it_stopped(neo4j_driver, dataset_label):
    """Each batch commits with its ids: a run that fails after some batches leaves those nodes
    adopted, and the next run adopts the rest, with every id once."""
    from seeder_dgl.graphstore.adopt import AdoptSource, InPlaceAdopter
    from seeder_dgl.graphstore.writer import GraphWriter
    from tests.helpers.graphs import random_embeddings

    user = "U" + dataset_label[1:]
    neo4j_driver.execute_query(f"UNWIND range(0, 99) AS i CREATE (:{user} {{k: i, title: 'node ' + toString(i)}})")
    neo4j_driver.execute_query(f"MATCH (a:{user}), (b:{user}) WHERE b.k = a.k + 1 CREATE (a)-[:NEXT]->(b)")
    source = AdoptSource(user, "k", "title")
    calls = []

    def encode(texts):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt  # as Ctrl-C in the middle of encoding the third batch
        return random_embeddings(len(texts), seed=len(calls))

    relations = lambda names: random_embeddings(len(names), seed=9)  # noqa: E731
    try:
        with pytest.raises(KeyboardInterrupt):
            InPlaceAdopter(neo4j_driver, dataset_label, batch=30).adopt(source, encode, relations, "m", 16)
        label = f"KG_{dataset_label}"
        done = neo4j_driver.execute_query(f"MATCH (n:{label}) RETURN count(n) AS c").records[0]["c"]
        assert done == 60 and _record(neo4j_driver, dataset_label)["status"] != "complete"
        summary = InPlaceAdopter(neo4j_driver, dataset_label, batch=30).adopt(
            source, lambda texts: random_embeddings(len(texts), seed=7), relations, "m", 16)
        assert (summary.added, summary.nodes, summary.relationships) == (40, 100, 99)
        ids = neo4j_driver.execute_query(f"MATCH (n:{label}) RETURN collect(n.{label}_id) AS i").records[0]["i"]
        assert sorted(ids) == list(range(100)) and _record(neo4j_driver, dataset_label)["status"] == "complete"
    finally:
        GraphWriter(neo4j_driver, dataset_label).drop()
        neo4j_driver.execute_query(f"MATCH (n:{user}) DETACH DELETE n")
