"""seeder-dgl's Neo4j procedures (``neo4j/procedures/``, Java): built here, found on the server there.

Through Cypher, K-hop-with-filtering costs one query per hop, and Cypher evaluates every
candidate neighbour in its expression engine. ``seeder.khop`` runs all hops in one call over the
same stored data (embeddings, int8 sketches) with the in-memory reference's float64 numbers;
``seeder.exactSeeds`` scans the stored embeddings exactly; ``seeder.nodeFeatures`` returns a
subgraph's embeddings as float32 bytes instead of float lists. ``LiveGraph`` uses them when the
server has them, else the Cypher statements (``SEEDER_KHOP``: ``auto``, ``procedure`` or ``cypher``).

The jar is built with Maven once per version of the Java sources and of Neo4j (whose API jars it
compiles against: Java 17 bytecode for 5.26, Java 21 for the calendar line) and kept in
``<SEEDER_NEO4J_HOME>/plugins/<hash of the sources>-<Neo4j version>/``, alone in that folder, so the folder serves
as the local server's plugins directory (``LocalNeo4j`` points its config there) and a changed
source gets a new folder instead of two versions of the same procedures side by side.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path

from neo4j import READ_ACCESS, Driver
from neo4j.exceptions import DriverError, Neo4jError

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import describe_neo4j_error
from seeder_dgl.graphstore.cypher import query
from seeder_dgl.graphstore.versions import NEO4J_VERSION, required_java
from seeder_dgl.paths import NEO4J_PROCEDURES
from seeder_dgl.settings import check_khop, settings

JAR_NAME = "seeder-dgl-procedures.jar"
PROCEDURE_NAMES = frozenset({"seeder.khop", "seeder.exactSeeds", "seeder.nodeFeatures"})
INSTALL_HINT = ("build the jar with `seeder-dgl neo4j plugin`, copy it into the server's plugins/ folder and "
                "restart the server (`seeder-dgl neo4j start` installs it in the local server itself)")


class ProceduresError(SeederError):
    """The procedures could not be built, or were asked for where the server has none."""


def sources_hash() -> str:
    """16 hex digits of SHA-256 over the Maven file and the Java sources: the jar's cache key."""
    files = [NEO4J_PROCEDURES / "pom.xml", *(NEO4J_PROCEDURES / "src").rglob("*.java")]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(NEO4J_PROCEDURES).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_jar(cache: Path, neo4j_version: str | None = None, java: str | None = None) -> Path:
    """The jar of the current sources for ``neo4j_version`` (default: the 5.26 LTS release), built
    into ``cache/<hash>-<version>/`` unless it is there already. ``java``: the Java whose JDK runs
    Maven (the calendar line's API jars need a JDK 21 or newer to compile against).

    Maven runs offline first (``-o``: seconds, no network once its plugins are in ~/.m2), then
    online, which fetches the compiler and jar plugins from Maven Central the first time.
    """
    version = neo4j_version or NEO4J_VERSION
    folder = cache / f"{sources_hash()}-{version}"
    jar = folder / JAR_NAME
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if not mvn:
        raise ProceduresError("Maven was not found, so the seeder-dgl procedures cannot be built: install it "
                              "(Debian: apt-get install maven)")
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    env = dict(os.environ)
    if java:  # the JDK beside that java runs Maven's compiler
        env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
    try:
        built = staging / "build" / "plugins" / JAR_NAME
        reason = ""
        for offline in (True, False):
            cmd = [mvn, "-q", "-B", *(["-o"] if offline else []), "-f", str(NEO4J_PROCEDURES / "pom.xml"),
                   "package", f"-Dseeder.build={staging / 'build'}", f"-Dneo4j.version={version}",
                   f"-Dmaven.compiler.release={required_java(version)}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode == 0 and built.is_file():
                break
            errors = [line.strip() for line in (proc.stdout + proc.stderr).splitlines() if "ERROR" in line]
            reason = errors[0] if errors else f"mvn exited {proc.returncode}"
        else:
            raise ProceduresError(f"could not build the seeder-dgl procedures with Maven ({reason[:200]}): they need "
                                  f"a JDK {required_java(version)} (Debian: apt-get install openjdk-17-jdk-headless for 5.26) and, "
                                  "the first time, "
                                  "Maven Central")
        (staging / "jar").mkdir()
        os.replace(built, staging / "jar" / JAR_NAME)
        try:
            os.replace(staging / "jar", folder)  # the folder appears whole or not at all
        except OSError:
            if not jar.is_file():  # not another build that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return jar


def khop_setting(value: str | None = None) -> str:
    """``value``, else ``SEEDER_KHOP``, else ``auto``: which K-hop implementation LiveGraph uses."""
    return check_khop(value) if value is not None else settings().khop


# Whether each driver's server has the procedures: asked once per driver, as a server gets a
# plugin only on a restart. Weak keys: a closed and dropped driver leaves nothing behind.
_INSTALLED: "weakref.WeakKeyDictionary[Driver, bool]" = weakref.WeakKeyDictionary()
_INSTALLED_LOCK = threading.Lock()


def server_has_procedures(driver: Driver, database: str | None = None) -> bool:
    """True when the server behind ``driver`` lists every seeder.* procedure this version calls."""
    with _INSTALLED_LOCK:
        known = _INSTALLED.get(driver)
    if known is not None:
        return known
    try:
        with driver.session(database=database, default_access_mode=READ_ACCESS) as session:
            rows = list(session.run(query("procedure/installed")))
    except (Neo4jError, DriverError, OSError) as exc:
        raise SeederError(describe_neo4j_error(exc, "listing the server's procedures")) from exc
    found = PROCEDURE_NAMES <= {name for row in rows for name in row["names"]}
    with _INSTALLED_LOCK:
        _INSTALLED[driver] = found
    return found


def khop_engine(driver: Driver, database: str | None = None, setting: str | None = None) -> str:
    """``procedure`` or ``cypher`` for this driver's server under ``setting`` (see ``khop_setting``)."""
    choice = khop_setting(setting)
    if choice == "cypher":
        return "cypher"
    if server_has_procedures(driver, database):
        return "procedure"
    if choice == "procedure":
        raise ProceduresError(f"K-hop through the seeder-dgl procedures was asked for (SEEDER_KHOP=procedure), but "
                              f"the Neo4j server has none: {INSTALL_HINT}; or set SEEDER_KHOP=auto")
    return "cypher"
