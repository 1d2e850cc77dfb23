"""Where seeder-dgl keeps its files, decided in one place.

The package's own files (the Cypher statements and the Neo4j server's Maven file) ship inside the
package, so an installed wheel needs no source tree. What a user's work produces (embedding and
subgraph caches, checkpoints, the local Neo4j server's data, benchmark results) lives under the
*project root*:

1. ``$SEEDER_HOME`` when set;
2. else the source checkout the package runs from (an editable install: ``pip install -e .``);
3. else the current directory (an installed wheel run from a project folder).

``SEEDER_CACHE``, ``SEEDER_RUNS``, ``SEEDER_EMBEDDINGS`` and ``SEEDER_NEO4J_HOME`` still move
each part on its own.
"""
from __future__ import annotations

from pathlib import Path

from seeder_dgl.settings import settings

PACKAGE_DIR = Path(__file__).resolve().parent
CYPHER_DIR = PACKAGE_DIR / "cypher"
"""Every Cypher statement (``cypher/`` at the top of the checkout; package data in a wheel)."""
NEO4J_POM = PACKAGE_DIR / "neo4j" / "pom.xml"
"""The Maven file that names the Neo4j 5.26 server jars (``neo4j/pom.xml`` in the checkout)."""
NEO4J_PROCEDURES = PACKAGE_DIR / "neo4j" / "procedures"
"""The Java sources and Maven file of seeder-dgl's Neo4j procedures (``neo4j/procedures/``)."""


def source_checkout() -> Path | None:
    """The repository this package runs from, or None for an installed wheel."""
    candidate = PACKAGE_DIR.parent
    if (candidate / "pyproject.toml").is_file() and (candidate / "cypher").is_dir():
        return candidate
    return None


def project_root() -> Path:
    """The folder that holds ``.cache/``, ``runs/``, ``.neo4j/`` and ``benchmarks/results/``."""
    home = settings().home
    if home:
        return home.resolve()
    return source_checkout() or Path.cwd().resolve()


def shared_data_dir() -> Path:
    """``../shared/data`` beside the project root: the default place of MetaQA and STaRK question files."""
    return project_root().parent / "shared" / "data"


def results_dir() -> Path:
    """Where benchmark and evaluation results of the built-in datasets are written."""
    return project_root() / "benchmarks" / "results"
