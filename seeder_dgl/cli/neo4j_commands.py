"""`seeder-dgl neo4j start | plugin | stop | status`: the project's local Neo4j server."""
from __future__ import annotations

from typing import Optional

import typer

from seeder_dgl.cli.base import console, err_console, neo4j_app, one_line_errors


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
def neo4j_start(timeout: float = typer.Option(180.0, help="Seconds to wait for Bolt to answer."),
                version: Optional[str] = typer.Option(
                    None, "--version", help="Neo4j release: 5.26.30 (default, LTS, Java 17+), 2026.08.1 (the calendar "
                    "line, Java 21+), or the aliases lts / calendar (SEEDER_NEO4J_VERSION). An instance keeps the "
                    "version its store was made with.")):
    """Fetch Neo4j Community from Maven Central (first time only) and start it on 127.0.0.1."""
    from seeder_dgl.graphstore.versions import check_version

    settings, server = _local_server()
    if server is None:
        console.print(f"NEO4J_URI is set ({settings.uri}): using that server, starting nothing.")
        return
    if version is not None:
        server.settings.version = check_version(version)
    server.preflight()
    if not server.jars_present():
        with console.status(f"Fetching Neo4j {server.settings.version} jars from Maven Central (first run only)..."):
            server.fetch()
    with console.status(f"Starting Neo4j on {server.settings.uri}..."):
        pid, started = server.start(timeout=timeout)
    verb = "started" if started else "already running"
    console.print(f"Neo4j {server.settings.version} {verb}: pid {pid}, {server.settings.uri}, "
                  f"data in {server.settings.data_dir}")
    if server.procedures_problem:
        err_console.print(f"[yellow]warning:[/] {server.procedures_problem}; K-hop runs through Cypher",
                          highlight=False, soft_wrap=True)


@neo4j_app.command("plugin")
@one_line_errors
def neo4j_plugin(version: Optional[str] = typer.Option(
        None, "--version", help="The Neo4j release the jar is for (5.26.x or the calendar line; default "
        "SEEDER_NEO4J_VERSION, else 5.26.30).")):
    """Build seeder-dgl's Neo4j procedures (once per version) and print the jar's path.

    `neo4j start` installs them in the local server itself. For a server of your own, copy the jar
    into its plugins/ folder and restart it: K-hop then runs inside the server (SEEDER_KHOP).
    """
    from seeder_dgl.graphstore.procedures import build_jar
    from seeder_dgl.graphstore.server import ServerSettings, java_for
    from seeder_dgl.graphstore.versions import check_version

    settings = ServerSettings.from_env()
    target = check_version(version) if version is not None else settings.version
    with err_console.status(f"Building the seeder-dgl procedures for Neo4j {target} with Maven..."):
        jar = build_jar(settings.plugins_cache, target, java_for(target))
    typer.echo(str(jar))


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
    """Say whether the server answers, its version and edition, and whether it has seeder-dgl's procedures."""
    from seeder_dgl.graphstore.connection import open_driver, server_components
    from seeder_dgl.graphstore.procedures import server_has_procedures
    from seeder_dgl.graphstore.versions import version_supported

    settings, server = _local_server()
    if server is not None and not server.is_running():
        console.print(f"No local Neo4j server is running (would listen on {server.settings.uri}).")
        raise typer.Exit(3)
    with open_driver(settings) as driver:
        info = server_components(driver)
        procedures = "with" if server_has_procedures(driver, settings.database) else "without"
    pid = f", pid {server.pid()}" if server is not None else ""
    console.print(f"Neo4j {info['versions'][0]} {info['edition']} answers at {settings.uri}{pid}, "
                  f"{procedures} seeder-dgl's procedures")
    if not version_supported(info["versions"][0]):
        err_console.print(f"[yellow]warning:[/] seeder-dgl needs Neo4j 5.26 or newer (5.26 LTS or the calendar line "
                          f"2025.x and later); this server is {info['versions'][0]}", highlight=False)
