"""The package as a user installs it: a wheel built from the source, installed non-editable into a
fresh virtual environment, run from a folder that is not the checkout. Its Cypher statements must
come from the installed package, and a graph must go in and a question come out.

The fresh environment borrows the pinned dependencies of the test environment (a ``.pth`` line
to its site-packages) instead of downloading them: no network in tests. The checkout's editable
install is not visible there (its import hook is set up only by a ``.pth`` file inside a real
site directory), which the test asserts.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.own_graph import company_graph, write_triples

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "seeder_dgl", "loaders", "cypher", "neo4j/pom.xml")


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; returns its bin folder."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for name in SOURCES:
        src, dst = REPO / name, source / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():  # symlinks=False: seeder_dgl/cypher (a link to cypher/) is copied as files
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(src, dst)
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
          str(source)])
    (wheel,) = wheels.glob("seeder_dgl-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)])
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (Path(purelib) / "_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    return venv / "bin"


def test_wheel_carries_the_cypher_statements_and_runs_from_anywhere(installed, tmp_path, neo4j_env):
    python = installed / "python"
    where = _run([str(python), "-c",
                  "import seeder_dgl.paths as p, seeder_dgl.graphstore.cypher as c, seeder_dgl.graphstore.procedures as j; "
                  "import loaders.synonyms as s; "
                  "print(p.PACKAGE_DIR); print(len(c.all_statements())); print(p.source_checkout()); "
                  "print(j.sources_hash()); print(len(s.synonym_table()))"],
                 cwd=tmp_path).stdout.split()
    package_dir, statements, checkout, procedures = Path(where[0]), int(where[1]), where[2], where[3]
    assert int(where[4]) > 40_000  # the relation prior's WordNet synonyms ship with the loaders
    assert "site-packages" in package_dir.parts and REPO not in package_dir.parents
    assert statements == len(list((REPO / "cypher").rglob("*.cypher"))) > 30
    assert (package_dir / "neo4j" / "pom.xml").is_file() and checkout == "None"
    from seeder_dgl.graphstore.procedures import sources_hash

    assert procedures == sources_hash()  # the procedures' sources ship whole: the same jar gets built

    graph = company_graph(seed=3, people=12)
    write_triples(graph, tmp_path / "graph")
    env = dict(os.environ, SEEDER_HOME=str(tmp_path / "home"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("SEEDER_CACHE", None), env.pop("SEEDER_RUNS", None), env.pop("SEEDER_EMBEDDINGS", None)
    cli = str(installed / "seeder-dgl")
    name = "wheel" + os.urandom(3).hex()
    try:
        _run([cli, "ingest", name, "--source", str(tmp_path / "graph")], cwd=tmp_path, env=env)
        person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
        employer = next(t for h, r, t in graph.triples if h == person and r == "works at")
        out = _run([cli, "query", name, f"Where does {person} work?", "--method", "khop", "--format", "json",
                    "--k", "10"], cwd=tmp_path, env=env).stdout
        assert employer in [n["name"] for n in json.loads(out)["nodes"]]
        assert (tmp_path / "home" / ".cache").is_dir()  # the project root is SEEDER_HOME, not the checkout
    finally:
        subprocess.run([cli, "drop", name, "--yes"], cwd=tmp_path, env=env, capture_output=True, timeout=300)
