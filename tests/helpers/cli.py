"""Running the command line in tests (the ``own_env`` fixture in tests/conftest.py gives each test
its own cache and run folders on the test server)."""
from __future__ import annotations

from typer.testing import CliRunner

from seeder_dgl.cli import app

runner = CliRunner()


def run_ok(*args: str) -> str:
    """Run ``seeder-dgl ARGS``; its output (lines unwrapped unless --format asks for a format)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.output if "--format" in args else " ".join(result.output.split())  # rich wraps lines
