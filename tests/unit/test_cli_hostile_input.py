"""Whatever a user types, the command line answers with a one-line error (exit 1) or a usage
message (exit 2), never a traceback. Neo4j is pointed at a closed port, so input that passes
validation ends at the one-line "cannot reach Neo4j" error: no test here needs a server, and no
command here can touch a database."""
from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from seeder_dgl.cli import app

runner = CliRunner()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends


@pytest.fixture(autouse=True)
def no_server(monkeypatch, tmp_path):
    monkeypatch.setenv("NEO4J_URI", f"bolt://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("SEEDER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SEEDER_RUNS", str(tmp_path / "runs"))


HOSTILE_TEXT = st.one_of(
    st.sampled_from(["", " ", "../../x", "a/b", "a\\b", "!!!", "x" * 300, "metaqa\n", "KG_x`) DETACH DELETE n //",
                     "$name", "{{dataset}}", "\x00", "名前", "-1", "1e9", "None", "--help"]),
    st.text(min_size=0, max_size=40),
)
NUMBERS = st.one_of(st.integers(-10**20, 10**20).map(str), st.sampled_from(["2.5", "abc", "", "-0", "1e3", "0x10"]))
BUDGETS = st.one_of(st.sampled_from(["50,97", "-5,-5", "0", "a,b", "", "1,,2", "99999999999999999999", "50;97"]),
                    st.text(alphabet="0123456789,- ", max_size=12))


def _assert_clean(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code in (1, 2), f"{args!r}: exit {result.exit_code}\n{result.output}"
    assert isinstance(result.exception, SystemExit), f"{args!r} raised {result.exception!r}"
    assert "Traceback" not in result.output, f"{args!r}:\n{result.output}"


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HOSTILE_TEXT, question=HOSTILE_TEXT, k=NUMBERS, seeds=NUMBERS, budgets=BUDGETS,
       method=st.sampled_from(["seeder", "khop", "dense", "ppr", "bogus", ""]),
       fmt=st.sampled_from(["json", "table", "triples", "cypher", "xml"]))
def test_query_never_shows_a_traceback(name, question, k, seeds, budgets, method, fmt):
    _assert_clean(["query", name, question, "--k", k, "--seeds", seeds, "--budgets", budgets,
                   "--method", method, "--format", fmt])


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["drop", "extract", "train", "eval", "tune", "status", "upsert", "ingest", "adopt"]),
       name=HOSTILE_TEXT, value=HOSTILE_TEXT)
def test_every_command_refuses_hostile_names_and_values_in_one_line(command, name, value, tmp_path):
    args = {
        "drop": ["drop", name, "--yes"],
        "extract": ["extract", name, "--split", value],
        "train": ["train", name, "--epochs", value],
        "eval": ["eval", name, "--split", value],
        "tune": ["tune", name, "--questions", str(tmp_path / "missing.csv")],
        "status": ["status"],
        "upsert": ["upsert", name, "--nodes", str(tmp_path / "missing.jsonl")],
        "ingest": ["ingest", name, "--source", str(tmp_path / "missing")],
        "adopt": ["adopt", name, "--label", value, "--id-property", "id", "--name-property", "name"],
    }[command]
    _assert_clean(args)


def test_ctrl_c_says_how_to_continue(monkeypatch):
    """Ctrl-C: exit 130 and one line; `train` continues only with --resume, so it says so."""
    import seeder_dgl.training.command as training_command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(training_command, "run_training", interrupted)
    result = runner.invoke(app, ["train", "metaqa"])
    assert result.exit_code == 130
    assert "interrupted" in result.output and "--resume" in result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1
    monkeypatch.setattr("seeder_dgl.cli.neo4j_commands._local_server", interrupted)
    result = runner.invoke(app, ["neo4j", "status"])
    assert result.exit_code == 130 and "run the same command again to continue" in result.output


@pytest.mark.parametrize("args, says", [
    (["train", "metaqa", "--lr", "nan"], "lr must be a finite number of at least 0"),
    (["train", "metaqa", "--lr", "-1e-3"], "lr must be a finite number of at least 0"),
    (["train", "metaqa", "--lr", "inf"], "lr must be a finite number of at least 0"),
    (["train", "metaqa", "--batch-size", "0"], "--batch-size"),
    (["train", "metaqa", "--threads", "-4"], "--threads"),
    (["train", "metaqa", "--epochs", "0"], "--epochs"),
    (["extract", "metaqa", "--limit", "-5"], "--limit"),
    (["eval", "metaqa", "--limit", "0"], "--limit"),
    (["eval", "metaqa", "--sample", "-1"], "--sample"),
    (["query", "metaqa", "who", "--k", "0"], "k must be at least 1"),
    # A graph adopted under a built-in name would be read with that dataset's questions and profile.
    (["adopt", "metaqa", "--label", "Movie", "--id-property", "id", "--name-property", "name"],
     "'metaqa' is the name of a built-in dataset"),
])
def test_bad_numbers_and_names_are_refused_before_any_work(args, says):
    result = runner.invoke(app, args)
    assert result.exit_code in (1, 2) and says in result.output, result.output
    assert "Traceback" not in result.output and "cannot reach Neo4j" not in result.output


@pytest.mark.parametrize("command", [["train", "metaqa"], ["eval", "metaqa"]])
def test_an_output_folder_that_is_a_file_is_refused_in_one_line(command, tmp_path):
    existing = tmp_path / "results.txt"
    existing.write_text("keep me")
    for out in (existing, existing / "inside"):
        result = runner.invoke(app, [*command, "--out", str(out)])
        assert result.exit_code == 1 and "is a file, not a folder" in result.output, result.output
        assert "Traceback" not in result.output
    assert existing.read_text() == "keep me"


def test_an_interrupt_that_surfaces_as_another_error_still_says_interrupted(monkeypatch):
    """Ctrl-C while the driver reads a result: its cleanup raises BufferError with the interrupt as
    its context; the command reports the interrupt, not the BufferError's traceback."""
    import seeder_dgl.training.command as training_command

    def interrupted_inside_the_driver(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise BufferError("Existing exports of data: object cannot be re-sized")

    monkeypatch.setattr(training_command, "run_training", interrupted_inside_the_driver)
    result = runner.invoke(app, ["train", "metaqa"])
    assert result.exit_code == 130 and "interrupted" in result.output and "--resume" in result.output
    assert "BufferError" not in result.output and "Traceback" not in result.output
