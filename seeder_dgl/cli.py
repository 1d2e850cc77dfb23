"""The `seeder-dgl` command line.

Every command that fails for a reason the user can fix prints one line (``error: ...``) and
exits 1; tracebacks are for bugs only.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable

import typer
from rich.console import Console

from seeder_dgl.errors import SeederError

app = typer.Typer(
    name="seeder-dgl",
    help="SeedER retrieval on knowledge graphs kept in Neo4j: ingest, extract, train, query, evaluate.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
neo4j_app = typer.Typer(help="Manage the project's local Neo4j 5.26 Community server.", no_args_is_help=True)
app.add_typer(neo4j_app, name="neo4j")

console = Console()
err_console = Console(stderr=True)


def one_line_errors(func: Callable) -> Callable:
    """Turn the project's user-facing errors into one red line and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except SeederError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]: what was committed to Neo4j or disk is kept; "
                              "run the same command again to continue")
            raise typer.Exit(130)

    return wrapper


# ---- neo4j ------------------------------------------------------------------------------------
def _local_server():
    from seeder_dgl.graphstore.connection import Neo4jSettings
    from seeder_dgl.graphstore.server import LocalNeo4j

    settings = Neo4jSettings.from_env()
    if settings.external:
        return settings, None
    return settings, LocalNeo4j()


@neo4j_app.command("start")
@one_line_errors
def neo4j_start(timeout: float = typer.Option(180.0, help="Seconds to wait for Bolt to answer.")):
    """Fetch Neo4j 5.26 Community from Maven Central (first time only) and start it on 127.0.0.1."""
    settings, server = _local_server()
    if server is None:
        console.print(f"NEO4J_URI is set ({settings.uri}): using that server, starting nothing.")
        return
    server.preflight()
    if not server.jars_present():
        with console.status("Fetching Neo4j jars from Maven Central (first run only)..."):
            server.fetch()
    with console.status(f"Starting Neo4j on {server.settings.uri}..."):
        pid, started = server.start(timeout=timeout)
    verb = "started" if started else "already running"
    console.print(f"Neo4j {verb}: pid {pid}, {server.settings.uri}, data in {server.settings.data_dir}")


@neo4j_app.command("stop")
@one_line_errors
def neo4j_stop():
    """Stop the local server started by `seeder-dgl neo4j start`."""
    settings, server = _local_server()
    if server is None:
        console.print(f"NEO4J_URI is set ({settings.uri}): that server is not managed here; nothing stopped.")
        return
    if server.stop():
        console.print("Neo4j stopped.")
    else:
        console.print("No local Neo4j server is running.")


@neo4j_app.command("status")
@one_line_errors
def neo4j_status():
    """Say whether the server answers, and its version and edition."""
    from seeder_dgl.graphstore.connection import open_driver, server_components

    settings, server = _local_server()
    if server is not None and not server.is_running():
        console.print(f"No local Neo4j server is running (would listen on {server.settings.uri}).")
        raise typer.Exit(3)
    with open_driver(settings) as driver:
        info = server_components(driver)
    pid = f", pid {server.pid()}" if server is not None else ""
    console.print(f"Neo4j {info['versions'][0]} {info['edition']} answers at {settings.uri}{pid}")


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
