"""The project's own local Neo4j server: Community from Maven Central, either the 5.26 LTS line (Java
17+, the default) or the current calendar line (2025.x/2026.x, Java 21+).

`seeder-dgl neo4j start [--version V]` drives ``LocalNeo4j``. The jars of each version are fetched
once with Maven (``neo4j/pom.xml``, ``-Dneo4j.version=V``) into ``<home>/lib-<V>``; the server runs
``org.neo4j.server.CommunityEntryPoint`` in its own process session, so it outlives the command
that started it, and is stopped through its pid file. Each start also installs seeder-dgl's own
procedures (``neo4j/procedures/``, built with Maven once per version of their sources; see
``graphstore.procedures``), so K-hop runs inside the server.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from neo4j import GraphDatabase
from neo4j.exceptions import DriverError, Neo4jError

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.procedures import ProceduresError, build_jar
from seeder_dgl.graphstore.versions import NEO4J_VERSION, check_version, parse_version, required_java
from seeder_dgl.paths import NEO4J_POM, project_root
from seeder_dgl.settings import settings

POM = NEO4J_POM
VERSION_FILE = "neo4j-version"
"""In the instance folder: the version whose store the data folder holds (a newer server would
upgrade it for good, an older one cannot read it, so a start with another version is refused)."""

ENTRY_POINT = "org.neo4j.server.CommunityEntryPoint"
"""5.26's server class; the calendar line renamed it (``Neo4jCommunity``): ``entry_point`` reads the
one the server jar declares as its ``org.neo4j.server.startup.EntryPoint`` service."""
ENTRY_POINT_SERVICE = "META-INF/services/org.neo4j.server.startup.EntryPoint"
ADMIN_TOOL = "org.neo4j.cli.AdminTool"


class Neo4jServerError(SeederError):
    """The local server could not be fetched, started or stopped."""


def default_home() -> Path:
    """Where jars, config, data and logs of the local server live (``SEEDER_NEO4J_HOME``)."""
    return (settings().neo4j_home or project_root() / ".neo4j").resolve()


@dataclass
class ServerSettings:
    """How the local server is laid out and sized. Defaults suit a 2-core, 24 GB machine."""

    home: Path
    """Holds lib/ (jars, shared by every instance) and the instance folder."""
    instance: str = "default"
    """Name of the data/config/log folder under ``home``: tests use their own."""
    port: int = 7687
    """Bolt port on 127.0.0.1."""
    user: str = "neo4j"
    password: str = "seeder-dgl"
    heap: str = "2g"
    """JVM heap (-Xms/-Xmx). Ingest batches and vector queries live here."""
    pagecache: str = "2g"
    """Page cache: a Prime-scale graph with 384-d vectors is about 1.5 GB on disk."""
    vector_buffer_mb: int = 50
    """Heap (MB) a vector index may fill while it is built before writing a segment
    (``SEEDER_NEO4J_VECTOR_BUFFER_MB``). Neo4j's own 50 MB: a Prime-scale index (129k x 384-d)
    built in 100 s here as 6 segments, and in 131-159 s as 1-3 segments with 128-1024 MB, for
    queries about 5 ms faster; MetaQA's 43k vectors make 2 segments."""
    tx_memory: str | None = None
    """Most heap one transaction may use (``db.memory.transaction.max``, e.g. ``256m``;
    ``SEEDER_NEO4J_TX_MEMORY``). Unset, only Neo4j's pool for all transactions (70% of the heap)
    applies. The tests set it, so a statement whose memory grows out of proportion fails there."""
    version: str = NEO4J_VERSION
    """Which Neo4j release runs (``SEEDER_NEO4J_VERSION``, ``neo4j start --version``)."""
    track_changes: bool = True
    """Let ``seeder.trackChanges`` out of the procedure sandbox
    (``dbms.security.procedures.unrestricted``): K-hop then walks an in-memory copy of a dataset's
    relationships between writes. False gives the server every self-managed one has by default,
    where K-hop walks the store (the tests check both)."""

    @classmethod
    def from_env(cls, home: Path | None = None, instance: str = "default") -> "ServerSettings":
        """The local server of ``seeder_dgl.settings``; a bad setting is a one-line Neo4jServerError."""
        try:
            env = settings()
            home = home or default_home()
        except SeederError as exc:
            raise Neo4jServerError(str(exc)) from None
        return cls(
            home=home,
            instance=instance,
            port=env.neo4j_port,
            user=env.neo4j_user,
            password=env.neo4j_password,
            heap=env.neo4j_heap,
            pagecache=env.neo4j_pagecache,
            vector_buffer_mb=env.neo4j_vector_buffer_mb,
            tx_memory=env.neo4j_tx_memory,
            version=check_version(env.neo4j_version or NEO4J_VERSION),
        )

    @property
    def uri(self) -> str:
        return f"bolt://127.0.0.1:{self.port}"

    @property
    def lib_dir(self) -> Path:
        """The jars of this version (shared by every instance)."""
        return self.home / f"lib-{self.version}"

    @property
    def plugins_cache(self) -> Path:
        """The built procedure jars, one folder per version of their sources and of Neo4j (shared like lib/)."""
        return self.home / "plugins"

    @property
    def instance_dir(self) -> Path:
        return self.home / self.instance

    @property
    def conf_dir(self) -> Path:
        return self.instance_dir / "conf"

    @property
    def data_dir(self) -> Path:
        return self.instance_dir / "data"

    @property
    def logs_dir(self) -> Path:
        return self.instance_dir / "logs"

    @property
    def pid_file(self) -> Path:
        return self.instance_dir / "neo4j.pid"


def _java_major(java: str) -> int:
    """``openjdk version "17.0.15" 2025-04-15`` -> 17, ``"25" 2025-09-16`` -> 25, ``"1.8.0_402"`` -> 8."""
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return 0
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


JVM_DIR = Path("/usr/lib/jvm")
"""Where Debian and Temurin packages put their JDKs: searched for a Java the version needs."""


def _java_candidates() -> list[str]:
    """JAVA_HOME's java, the one on PATH, then every JDK or JRE under ``JVM_DIR``."""
    found = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        found.append(str(Path(java_home) / "bin" / "java"))
    if shutil.which("java"):
        found.append(shutil.which("java"))
    found += [str(p) for p in sorted(JVM_DIR.glob("*/bin/java"))]
    unique = []
    for java in found:
        if java not in unique:
            unique.append(java)
    return unique


def _java(minimum: int = 17) -> str:
    """The first Java of at least ``minimum`` among ``_java_candidates``."""
    candidates = _java_candidates()
    if not candidates:
        raise Neo4jServerError(
            f"Java {minimum} was not found: install it (Debian: apt-get install openjdk-17-jre-headless) "
            "or set NEO4J_URI to a running Neo4j"
        )
    majors = {java: _java_major(java) for java in candidates}
    for java, major in majors.items():
        if major >= minimum:
            return java
    seen = ", ".join(f"Java {m} at {j}" for j, m in majors.items())
    raise Neo4jServerError(f"this Neo4j needs Java {minimum} or newer, found {seen}: install one and set "
                           "JAVA_HOME to it, or set NEO4J_URI to a running Neo4j")


def java_for(version: str) -> str:
    """A Java that runs (and a JDK beside it that builds procedures for) Neo4j ``version``."""
    return _java(required_java(version))


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _bolt_answers(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return True


class LocalNeo4j:
    """Fetch, configure, start, stop and inspect one local Neo4j instance."""

    def __init__(self, settings: ServerSettings | None = None):
        self.settings = settings or ServerSettings.from_env()
        self.procedures_problem: str | None = None
        """Why the last start runs without seeder-dgl's procedures (K-hop then runs through Cypher)."""

    # ---- jars -------------------------------------------------------------------------------
    def jars_present(self) -> bool:
        lib, version = self.settings.lib_dir, self.settings.version
        return (lib / f"neo4j-{version}.jar").exists() and (lib / ".complete").exists()

    def _adopt_unversioned_lib(self) -> None:
        """Jars fetched before versions had folders of their own lie in ``lib/``: renamed, not fetched again."""
        old = self.settings.home / "lib"
        try:
            if (old / ".complete").read_text().strip() == self.settings.version:
                os.replace(old, self.settings.lib_dir)
        except OSError:
            pass

    def fetch(self, quiet: bool = True) -> Path:
        """Copy Neo4j and its dependencies from Maven Central into ``lib/`` (once)."""
        if self.jars_present():
            return self.settings.lib_dir
        self._adopt_unversioned_lib()
        if self.jars_present():
            return self.settings.lib_dir
        mvn = shutil.which("mvn")
        if not mvn:
            raise Neo4jServerError(
                "Maven was not found, so the Neo4j jars cannot be fetched: install it "
                "(Debian: apt-get install maven) or set NEO4J_URI to a running Neo4j"
            )
        lib, version = self.settings.lib_dir, self.settings.version
        staging = lib.with_name(lib.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [mvn, "-B", "-f", str(POM), "dependency:copy-dependencies", f"-Dneo4j.version={version}",
               f"-DoutputDirectory={staging}", "-Dmdep.useRepositoryLayout=false"]
        if quiet:
            cmd.insert(1, "-q")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not (staging / f"neo4j-{version}.jar").exists():
            detail = [line for line in (proc.stdout + proc.stderr).splitlines() if "ERROR" in line]
            reason = detail[0].strip() if detail else f"mvn exited {proc.returncode}"
            shutil.rmtree(staging, ignore_errors=True)
            raise Neo4jServerError(
                f"could not fetch Neo4j {version} from Maven Central ({reason[:200]}); "
                "check the network or proxy, or set NEO4J_URI to a running Neo4j"
            )
        (staging / ".complete").write_text(version)
        shutil.rmtree(lib, ignore_errors=True)
        os.replace(staging, lib)  # the folder appears whole or not at all
        return lib

    def entry_point(self) -> str:
        """The class that starts this version's Community server, as its jar declares it."""
        jar = self.settings.lib_dir / f"neo4j-{self.settings.version}.jar"
        try:
            with zipfile.ZipFile(jar) as archive:
                declared = archive.read(ENTRY_POINT_SERVICE).decode().split()
        except (OSError, KeyError, zipfile.BadZipFile):
            return ENTRY_POINT
        return declared[0] if declared else ENTRY_POINT

    # ---- procedures -------------------------------------------------------------------------
    def install_procedures(self, java: str | None = None) -> Path | None:
        """The plugins folder holding the procedure jar of the current sources, built when missing;
        None, with the reason in ``procedures_problem``, when it cannot be built. A server without
        the procedures still serves every command (K-hop runs through Cypher), so that is no
        reason to refuse a start."""
        try:
            jar = build_jar(self.settings.plugins_cache, self.settings.version,
                            java or java_for(self.settings.version))
        except ProceduresError as exc:
            self.procedures_problem = str(exc)
            return None
        self.procedures_problem = None
        return jar.parent

    # ---- config -----------------------------------------------------------------------------
    def write_config(self, plugins: Path | None = None) -> None:
        """neo4j.conf of the instance; ``plugins``: the folder whose jars the server loads."""
        s = self.settings
        for folder in (s.conf_dir, s.data_dir, s.logs_dir):
            folder.mkdir(parents=True, exist_ok=True)
        conf = "\n".join([
            "# Written by seeder-dgl; edit SEEDER_NEO4J_* variables instead of this file.",
            "server.default_listen_address=127.0.0.1",
            f"server.bolt.listen_address=127.0.0.1:{s.port}",
            f"server.bolt.advertised_address=127.0.0.1:{s.port}",
            "server.http.enabled=false",
            "server.https.enabled=false",
            f"server.directories.data={s.data_dir}",
            f"server.directories.logs={s.logs_dir}",
            f"server.memory.pagecache.size={s.pagecache}",
            "dbms.security.auth_enabled=true",
            # No call home, no network: this machine has none and users may not want one.
            "dbms.usage_report.enabled=false",
            # Keep transaction logs small: the project re-ingests instead of restoring.
            "db.tx_log.rotation.retention_policy=2 files",
            # A query searches the HNSW graph of every Lucene segment of a vector index, so fewer,
            # larger segments answer faster but take longer to build (see vector_buffer_mb).
            f"internal.dbms.index.vector.population_ram_buffer_size={s.vector_buffer_mb}",
            *([f"db.memory.transaction.max={s.tx_memory}"] if s.tx_memory else []),
            *([f"server.directories.plugins={plugins}"] if plugins else []),
            # seeder.trackChanges registers a transaction listener, which needs a component the
            # server keeps from sandboxed procedures: with it, K-hop walks an in-memory copy of a
            # dataset's relationships between writes (neo4j/procedures/.../Changes.java).
            *(["dbms.security.procedures.unrestricted=seeder.trackChanges"] if plugins and s.track_changes else []),
            "",
        ])
        tmp = s.conf_dir / "neo4j.conf.tmp"
        tmp.write_text(conf)
        os.replace(tmp, s.conf_dir / "neo4j.conf")

    def _set_initial_password(self, java: str) -> None:
        s = self.settings
        if (s.data_dir / "dbms").exists():
            return  # the auth store exists: the password was set on first start
        env = dict(os.environ, NEO4J_HOME=str(s.instance_dir), NEO4J_CONF=str(s.conf_dir))
        proc = subprocess.run(
            [java, "-cp", f"{s.lib_dir}/*", ADMIN_TOOL, "dbms", "set-initial-password", s.password],
            capture_output=True, text=True, env=env,
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise Neo4jServerError(f"could not set the initial Neo4j password: {tail[0][:200]}")

    # ---- lifecycle --------------------------------------------------------------------------
    def pid(self) -> int | None:
        try:
            pid = int(self.settings.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def store_version(self) -> str | None:
        """The version whose store the instance's data folder holds (None: no store yet). A data folder
        written before versions were recorded is 5.26's, the only version then."""
        s = self.settings
        try:
            return s.instance_dir.joinpath(VERSION_FILE).read_text().strip()
        except OSError:
            return NEO4J_VERSION if (s.data_dir / "databases").exists() else None

    def preflight(self) -> str:
        """Check what a start needs before fetching anything: a Java for this version, a store of the
        same version, and a free port. Returns java."""
        s = self.settings
        java = java_for(s.version)
        held = self.store_version()
        if held is not None and held != s.version:
            raise Neo4jServerError(
                f"the instance {s.instance_dir} holds a Neo4j {held} store, and Neo4j {s.version} would "
                f"{'upgrade it for good' if parse_version(s.version) > parse_version(held) else 'not read it'}: "
                f"start it with --version {held}, or give the new version its own SEEDER_NEO4J_HOME")
        if self.pid() is None and _port_in_use(self.settings.port):
            raise Neo4jServerError(
                f"port {self.settings.port} on 127.0.0.1 is already in use by another process: stop it, "
                "or pick another port with SEEDER_NEO4J_PORT"
            )
        return java

    def start(self, timeout: float = 180.0) -> tuple[int, bool]:
        """Start the server unless it runs already. Returns (pid, started_now)."""
        s = self.settings
        running = self.pid()
        if running is not None:
            if not self._wait_for_bolt(running, timeout):
                raise Neo4jServerError(f"Neo4j (pid {running}) runs but Bolt does not answer on {s.uri}; "
                                       f"see {s.logs_dir / 'neo4j.log'}")
            return running, False
        if s.pid_file.exists():
            s.pid_file.unlink()  # stale: the process is gone
        java = self.preflight()
        self.fetch()
        self.write_config(self.install_procedures(java))
        self._set_initial_password(java)
        version_file = s.instance_dir / VERSION_FILE
        if not version_file.exists():
            version_file.with_suffix(".tmp").write_text(s.version)
            os.replace(version_file.with_suffix(".tmp"), version_file)
        cmd = [
            java, f"-Xms{s.heap}", f"-Xmx{s.heap}", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
            # Lucene's vector search uses the incubating Vector API when it is there.
            "--add-modules=jdk.incubator.vector",
            "-Dfile.encoding=UTF-8",
            "-cp", f"{s.lib_dir}/*", self.entry_point(),
            f"--home-dir={s.instance_dir}", f"--config-dir={s.conf_dir}",
        ]
        console = open(s.logs_dir / "console.log", "ab")
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=s.instance_dir, start_new_session=True)
        console.close()
        tmp = s.pid_file.with_suffix(".tmp")
        tmp.write_text(str(proc.pid))
        os.replace(tmp, s.pid_file)
        if not self._wait_for_bolt(proc.pid, timeout, proc):
            self.stop(quiet=True)
            raise Neo4jServerError(
                f"Neo4j did not start within {timeout:.0f} s: {self._log_tail()} "
                f"(full log: {s.logs_dir / 'neo4j.log'})"
            )
        return proc.pid, True

    def _wait_for_bolt(self, pid: int, timeout: float, proc: subprocess.Popen | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            if proc is None and not pid_alive(pid):
                return False
            if _bolt_answers(self.settings.port) and self._bolt_ready():
                return True
            time.sleep(0.5)
        return False

    def _bolt_ready(self) -> bool:
        """Bolt accepting TCP is not enough: the default database must be online."""
        s = self.settings
        try:
            with GraphDatabase.driver(s.uri, auth=(s.user, s.password), connection_timeout=2) as driver:
                driver.execute_query("RETURN 1")
            return True
        except (Neo4jError, DriverError, OSError):
            return False

    def _log_tail(self) -> str:
        for name in ("console.log", "neo4j.log"):
            path = self.settings.logs_dir / name
            if path.exists():
                lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
                errors = [ln for ln in lines if "ERROR" in ln or "Exception" in ln]
                if errors or lines:
                    return (errors or lines)[-1].strip()[:300]
        return "no log output"

    def stop(self, timeout: float = 60.0, quiet: bool = False) -> bool:
        """Stop the server by pid (SIGTERM, then SIGKILL). Returns False when none was running."""
        pid = self.pid()
        if pid is None:
            self.settings.pid_file.unlink(missing_ok=True)
            return False
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.3)
        if pid_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            time.sleep(0.5)
        self.settings.pid_file.unlink(missing_ok=True)
        return True
