"""Nothing seeder-dgl does not own is written to or removed: nodes that already carry a dataset's
label, a cache folder of the same name as a dataset but not its, files of one's own in a dataset's
cache folder. Against the real server, through the CLI."""
from __future__ import annotations

from typer.testing import CliRunner

from seeder_dgl.cli import app
from seeder_dgl.graphstore.writer import dataset_label as label_for
from tests.helpers.own_graph import company_graph, write_triples

runner = CliRunner()


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_nodes_already_carrying_the_label_are_neither_written_to_nor_dropped(own_env, neo4j_driver, dataset_label):
    name = dataset_label.lower()
    label = label_for(name)
    neo4j_driver.execute_query(f"UNWIND range(1, 3) AS i CREATE (:{label}:Mine {{id: i, name: 'mine ' + i}})")
    try:
        write_triples(company_graph(seed=1, people=6), own_env / "graph")
        for reset in ([], ["--reset"]):
            refused = runner.invoke(app, ["ingest", name, "--source", str(own_env / "graph"), *reset])
            assert refused.exit_code == 1 and "Traceback" not in refused.output
            line = _lines(refused.output)[-1]
            assert line.startswith("error: ") and "\n" not in refused.stderr.strip(), refused.output
            assert f"3 nodes already carry the label {label}" in line and "--name" in line
        dropped = runner.invoke(app, ["drop", name, "--yes"])
        assert dropped.exit_code == 1 and "nothing to drop" in dropped.output
        kept = neo4j_driver.execute_query(f"MATCH (n:{label}) RETURN n.name AS name, labels(n) AS labels "
                                          "ORDER BY name").records
        assert [(r["name"], sorted(r["labels"])) for r in kept] == [
            (f"mine {i}", sorted([label, "Mine"])) for i in (1, 2, 3)]  # untouched, nothing added
        assert not neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $name}) RETURN m",
                                              name=name).records
    finally:
        neo4j_driver.execute_query(f"MATCH (n:{label}) DETACH DELETE n")


def test_a_name_of_the_caches_own_folders_is_refused_and_the_folder_kept(own_env):
    shared = own_env / "cache" / "embeddings"
    shared.mkdir(parents=True)
    (shared / "vectors.npz").write_bytes(b"not a dataset's")
    for command in (["drop", "embeddings", "--yes"], ["ingest", "embeddings", "--source", str(own_env)],
                    ["drop", "tiny\n", "--yes"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1 and "cannot name a dataset" in result.output, result.output
    assert (shared / "vectors.npz").read_bytes() == b"not a dataset's"


def test_drop_removes_only_seeder_dgls_files_from_the_datasets_cache_folder(own_env, neo4j_driver, dataset_label):
    name = dataset_label.lower()
    write_triples(company_graph(seed=2, people=6), own_env / "graph")
    ingested = runner.invoke(app, ["ingest", name, "--source", str(own_env / "graph")])
    assert ingested.exit_code == 0, ingested.output
    folder = own_env / "cache" / name
    assert (folder / "ingest.json").is_file()
    (folder / "my-notes.txt").write_text("mine")
    declined = runner.invoke(app, ["drop", name], input="n\n")  # asked, and the answer is no
    assert declined.exit_code == 1 and "Remove dataset" in declined.output, declined.output
    assert (folder / "ingest.json").is_file()
    assert neo4j_driver.execute_query(f"MATCH (n:{label_for(name)}) RETURN n LIMIT 1").records
    dropped = runner.invoke(app, ["drop", name], input="y\n")
    assert dropped.exit_code == 0, dropped.output
    assert sorted(p.name for p in folder.iterdir()) == ["my-notes.txt"]
    assert "my-notes.txt" in dropped.output.replace("\n", " ")
    assert not neo4j_driver.execute_query(f"MATCH (n:{label_for(name)}) RETURN n LIMIT 1").records


def test_neo4j_database_is_the_database_every_command_uses(own_env, neo4j_env, monkeypatch):
    """NEO4J_DATABASE: a database that does not exist is a one-line error from every command that
    reads or writes (they would otherwise have used the default database without a word)."""
    monkeypatch.setenv("NEO4J_DATABASE", "nosuchdb")
    write_triples(company_graph(seed=3, people=4), own_env / "graph")
    for command in (["status"], ["query", "anything", "who works at Acme Robotics?"],
                    ["ingest", "nosuchdbtest", "--source", str(own_env / "graph")], ["drop", "anything", "--yes"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1 and "Traceback" not in result.output, (command, result.output)
        error = _lines(result.output)[-1]  # after any notes on the files read
        assert error.startswith("error: ") and "nosuchdb" in error and "NEO4J_DATABASE" in error, result.output
    monkeypatch.setenv("NEO4J_DATABASE", "neo4j")  # the default database, named
    listed = runner.invoke(app, ["status"])
    assert listed.exit_code == 0, listed.output
