"""Which Neo4j to talk to, and a driver with errors a user can act on.

``NEO4J_URI`` set: that server (Docker, remote, Aura) is used and nothing is started.
Unset: the project's local server (``seeder-dgl neo4j start``) on ``bolt://127.0.0.1:$SEEDER_NEO4J_PORT``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neo4j import AsyncDriver, AsyncGraphDatabase, Driver, GraphDatabase
from neo4j.exceptions import AuthError, ClientError, DriverError, Neo4jError, ServiceUnavailable

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.cypher import query
from seeder_dgl.settings import settings


class Neo4jUnavailable(SeederError):
    """The database cannot be reached or refused us."""


def default_database() -> str | None:
    """``NEO4J_DATABASE``, the database every command and ``Retriever`` reads and writes when none
    is given (None: the server's default database)."""
    return settings().neo4j_database


@dataclass(frozen=True)
class Neo4jSettings:
    uri: str
    user: str
    password: str
    database: str | None = None
    external: bool = False
    """True when NEO4J_URI names the server: the project must not start or stop one."""

    @classmethod
    def from_env(cls) -> "Neo4jSettings":
        env = settings()
        return cls(
            uri=env.neo4j_uri or f"bolt://127.0.0.1:{env.neo4j_port}",
            user=env.neo4j_user,
            password=env.neo4j_password,
            database=env.neo4j_database,
            external=bool(env.neo4j_uri),
        )


# Sessions that run the statements matching nodes by internal id (id(), deprecated in Neo4j 5 in
# favour of elementId() because ids are reused after deletions): those statements use them only
# within one statement or one ingest run, where reuse cannot happen, and they are 15-40% faster.
# The server's deprecation notice would otherwise be logged on every query of a user's driver, as
# would "unknown property key" for a dataset record written before a property existed (the
# procedure statements read the record's sketch_version, which older records lack).
ID_FUNCTION_SESSION = {"notifications_disabled_classifications": ["DEPRECATION", "UNRECOGNIZED"]}


def open_driver(settings: Neo4jSettings | None = None, verify: bool = True) -> Driver:
    """A driver that has answered once, or a one-line ``Neo4jUnavailable``."""
    s = settings or Neo4jSettings.from_env()
    try:
        # Schema and label notifications (e.g. "label not in the database yet") are noise for a tool.
        driver = GraphDatabase.driver(s.uri, auth=(s.user, s.password), connection_timeout=10,
                                      notifications_min_severity="OFF")
    except (ValueError, DriverError) as exc:
        raise Neo4jUnavailable(f"bad NEO4J_URI {s.uri!r}: {exc}") from exc
    if verify:
        try:
            driver.verify_connectivity()
        except AuthError as exc:
            driver.close()
            raise Neo4jUnavailable(
                f"Neo4j at {s.uri} refused user {s.user!r}: set NEO4J_USER/NEO4J_PASSWORD to its credentials"
            ) from exc
        except (ServiceUnavailable, DriverError, OSError) as exc:
            driver.close()
            hint = ("check that the server is running and reachable from here" if s.external
                    else "start it with `seeder-dgl neo4j start`, or set NEO4J_URI to a running server")
            raise Neo4jUnavailable(f"cannot reach Neo4j at {s.uri}: {hint}") from exc
    return driver


def open_async_driver(settings: Neo4jSettings | None = None) -> AsyncDriver:
    """An ``AsyncDriver`` to the same server as ``open_driver`` (not verified: it is opened beside a
    driver that was, and its first read reports any failure as a statement's error)."""
    s = settings or Neo4jSettings.from_env()
    return AsyncGraphDatabase.driver(s.uri, auth=(s.user, s.password), connection_timeout=10,
                                     notifications_min_severity="OFF")


def describe_neo4j_error(exc: Exception, what: str) -> str:
    """One line for a failed statement: the server's own reason, without the Java stack."""
    if isinstance(exc, ServiceUnavailable):
        return f"{what}: the connection to Neo4j was lost; check the server and run the command again"
    if isinstance(exc, Neo4jError):
        message = (exc.message or str(exc)).strip().splitlines()[0]
        if "MemoryPoolOutOfMemoryError" in (exc.code or ""):
            return (f"{what}: Neo4j ran out of transaction memory ({message[:200]}): run fewer queries at "
                    "once, or raise the limit it names (SEEDER_NEO4J_TX_MEMORY sets db.memory.transaction.max; "
                    "the pool for all transactions is 70% of SEEDER_NEO4J_HEAP)")
        if (exc.code or "").endswith("DatabaseNotFound"):
            return (f"{what}: {message[:200]}: set NEO4J_DATABASE to a database of this server, or unset it "
                    "for the server's default")
        return f"{what}: {exc.code}: {message[:300]}"
    return f"{what}: {exc}"


def server_components(driver: Driver, database: str | None = None) -> dict[str, Any]:
    """Name, versions and edition as ``CALL dbms.components()`` reports them."""
    records, _, _ = driver.execute_query(query("admin/components"), database_=database)
    row = records[0]
    return {"name": row["name"], "versions": list(row["versions"]), "edition": row["edition"]}


__all__ = ["Neo4jSettings", "Neo4jUnavailable", "open_driver", "open_async_driver", "describe_neo4j_error",
           "server_components", "ClientError"]
